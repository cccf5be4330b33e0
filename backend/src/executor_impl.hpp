#pragma once
// Private to the executor's files: the state of one rank's Executor. Every plan runs one rank
// program (DESIGN §4, "A split in the plan and the graph"; an FSDP plan is its one-stage, T = 1
// case): this rank's tensor-parallel slice of its stage's units, its TP group, its
// data-parallel domain with the domain's sharding, and the graph's order. The interpreter
// (executor.cpp) walks the graph's ops over it; executor_groups.cpp makes the communicators;
// executor_comm.cpp runs the collectives and transfers; executor_report.cpp turns the last
// step's measurements into the RunResult; executor_checkpoint.cpp saves and restores the state.
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/sharded_state.hpp"
#include "emulation.hpp"
#include "optimizer.hpp"

namespace cephalo::backend {

// One unit's flat buffer inside a collective's buffer, as the graph's segments lay it out: a
// tied head's phases of an FSDP plan gather and reduce [unit 0 | head].
struct PhaseSegment {
  int unit = -1;
  std::int64_t offset = 0;  // elements into the collective's buffer
  std::int64_t numel = 0;
  traces::CollectiveVariant variant = traces::CollectiveVariant::Even;
};

// Sends of a boundary's activation (forward) or its gradient (backward) for one micro-batch.
inline std::array<int, 3> send_key(bool forward, int boundary, int micro_batch) {
  return {forward ? 1 : 0, boundary, micro_batch};
}

inline const PhaseSegment* find_segment(const std::vector<PhaseSegment>& segments, int unit) {
  for (const auto& seg : segments)
    if (seg.unit == unit) return &seg;
  return nullptr;
}

// A buffer whose last use was enqueued on a stream: freed once `done` has completed.
struct Retired {
  Buffer buffer;
  std::shared_ptr<Event> done;
};

struct Executor::Impl {
  const Scenario& scenario;
  const Plan& plan;
  const traces::TrainingGraph& graph;
  const GptModel& model;
  Device& dev;
  Communicator& comm;
  ExecutorOptions opt;
  int rank = 0;
  int ranks = 1;
  int units = 0;
  std::int64_t rows_per_sample = 0;
  ElemType compute_type = ElemType::F32;  // gathered parameters, activations, input gradients
  ElemType reduce_type = ElemType::F32;   // unit gradients, reduce-scatter, gradient shard
  std::unique_ptr<ShardedState> state;

  // ---- where this rank sits and whom it talks to (executor_groups.cpp) ----
  struct CrossPieceRun {
    std::int64_t offset = 0;  // into this rank's gradient shard of the unit
    std::int64_t count = 0;
    Communicator* comm = nullptr;
  };
  RankPlace place;
  std::unique_ptr<Communicator> tp;  // the TP group (made before the model: Executor ctor)
  // The data-parallel group of this rank's domain layout: its gathers and reduce-scatters
  // (the world itself when the group is the world).
  Communicator* dp = nullptr;
  std::vector<std::unique_ptr<Communicator>> owned;
  std::vector<std::vector<CrossPieceRun>> pieces;      // per unit: cross-group all-reduces
  std::map<std::pair<int, int>, Communicator*> links;  // (from, to): two ranks, `from` is 0
  std::map<std::pair<int, int>, Communicator*> tied;   // (first stage's, last stage's rank)

  // ---- the samples this rank reads (set_up_samples) ----
  std::vector<int> mb_sizes;           // per micro-batch of this rank
  std::vector<std::int64_t> mb_first;  // per micro-batch: its first sample in the global batch
  // Pipeline micro-batches (the graph's m > 0): per stage, the samples before each replica's
  // share of a micro-batch (the transfers' rows follow from them).
  std::vector<std::vector<std::int64_t>> replica_offsets;
  // One part of a transfer in this rank's buffers: the rows of `samples` samples, `at` samples
  // into its micro-batch `mb` (a sub-step of the pipeline micro-batch). Both sides cut the
  // transfer at both sides' sub-step boundaries, so each part is one message.
  struct TransferPart {
    int mb = 0;
    std::int64_t at = 0, samples = 0;
  };
  std::vector<TransferPart> transfer_parts(const traces::Op& op) const;

  // ---- read from the graph once (read_program) ----
  // Per op of the program: the segments its collective moves (gathers, reduce-scatters).
  std::vector<std::vector<PhaseSegment>> op_segments;
  // Per unit: the program indices of the reduce-scatters that move it, ascending; per phase:
  // the program index of its reduce-scatter.
  std::vector<std::vector<std::size_t>> reducers;
  std::map<int, std::size_t> phase_reducer;
  // Resident compute-type parameters (a domain sharded `optimizer` or `none`), per unit: kept
  // or not, refreshed by a gather of the program's step pass (with its variant) or cast from
  // the master shard.
  std::vector<Buffer> resident;
  std::vector<bool> resident_kept, resident_gathered;
  std::vector<traces::CollectiveVariant> resident_variant;
  bool resident_stale = true;  // refreshed before the next step (after init, a resume)

  LossScaler scaler;
  FailureInjection failure;
  SlowdownEmulator slowdown;
  bool last_skipped = false;
  double last_loss_scale = 1.0;
  int step_now = 0;  // the step being run, for the messages of its checks

  // ---- per-step state ----
  struct Gathered {
    int phase = -1;  // the gather's phase
    Buffer buffer;
    const std::vector<PhaseSegment>* segments = nullptr;
  };
  std::vector<Buffer> tokens, targets;  // per micro-batch, I32 [rows]
  std::deque<Gathered> gathered;        // live gathered parameters, in issue order
  std::map<std::size_t, Buffer> grads;  // per reduce-scatter (program index): its full gradient
  // Per boundary b (the input of unit b; b = units is the head's output side) and micro-batch:
  // act[b][mb] the activation, dact[b][mb] its gradient.
  std::vector<std::vector<Buffer>> act, dact;
  std::vector<std::vector<Buffer>> offloaded;  // [unit][mb]: host copy (offload: host)
  // [unit][mb]: a layer's saved activations, from its recompute (or, when the graph does not
  // recompute the unit, from its forward) to its backward.
  std::vector<std::vector<LayerActivations>> saved;
  std::vector<HeadActivations> head;             // per micro-batch, recompute to backward
  std::map<std::array<int, 3>, int> sends_left;  // (forward?, boundary, mb): this step's
  std::vector<std::vector<TpCall>> tp_calls;     // per op of the program
  std::vector<int> tp_source;  // per op: the compute op whose calls a TP op reports, or -1
  std::deque<Retired> retired;
  std::vector<std::shared_ptr<Event>> start_ev, end_ev;  // per op of this rank's program
  double loss_sum = 0;

  // Last step's measurements.
  std::vector<std::int64_t> last_start, last_end;  // per global op id; -1 = not this rank's
  std::vector<double> last_bytes;                  // per global op id: allocated after issue
  std::vector<double> issued_bytes;                // this step, per op of the program
  double last_iteration_s = 0;
  std::size_t last_peak = 0;

  Impl(const Scenario& s, const Plan& p, const traces::TrainingGraph& g, const GptModel& mdl,
       Device& d, Communicator& c, const ExecutorOptions& o,
       std::unique_ptr<Communicator> tp_comm = nullptr);

  std::int64_t rows(int mb) const {
    return mb_sizes[static_cast<std::size_t>(mb)] * rows_per_sample;
  }
  Buffer f32(std::int64_t n) { return dev.allocate(static_cast<std::size_t>(n), ElemType::F32); }
  Buffer activation(std::int64_t n) {
    return dev.allocate(static_cast<std::size_t>(n), compute_type);
  }
  Buffer gradient(std::int64_t n) { return dev.allocate(static_cast<std::size_t>(n), reduce_type); }

  void retire(Buffer b, Stream& s);
  void reap();

  // Set-up.
  void set_up_groups();
  void set_up_samples();
  void read_program();

  // Per step.
  void prepare_data(int step);
  void begin_step();
  void refresh_resident();
  // Unit u's parameters for the program's op: its phase's gather, else the oldest live gather
  // holding it, else the resident copy, else the master shard (a rank that holds all of it).
  TensorRef params(const traces::Op& op, int u);
  std::deque<Gathered>::iterator find_gathered(int phase, int u);
  // Unit u's gradient for program op i: the buffer of the reduce-scatter of the op's gradient
  // phase (graph.gradient_phase) when that moves u, else of the next reduce-scatter that moves
  // u, else (none follows: a domain sharded `none`) the rank's gradient shard.
  TensorRef grads_of(std::size_t i, const traces::Op& op, int u);
  void run_compute(std::size_t i, const traces::Op& op);
  void optimizer_step();
  void run_comm(std::size_t i, const traces::Op& op);
  void run_transfer(const traces::Op& op);
  void run_copy(const traces::Op& op);
  void release_gathered(const traces::Op& op, Stream& s);
  double step(int step_index);

  // Collectives over a group: unit u's shards gathered into `full` (a shard of another type is
  // cast first), a full gradient reduced onto the owners and added into the gradient shard.
  void gather_shard(Stream& s, Communicator& group, int u, traces::CollectiveVariant v,
                    bool gradients, TensorRef full);
  void reduce_shard(Stream& s, Communicator& group, int u, traces::CollectiveVariant v,
                    TensorRef full);

  // The single-rank unit u of the last step, assembled from every rank that owns a piece
  // (collective): 0 parameters, 1 Adam m, 2 Adam v, 3 reduced gradients (fp32).
  std::vector<float> assemble_unit(int u, int which);
  // The ranks' ranges (ranks + 1 bounds) of the single-rank unit u a checkpoint records in
  // slices, or empty when the unit is assembled and written whole (executor_checkpoint.cpp).
  std::vector<std::int64_t> checkpoint_slices(int u) const;
  // The lowest rank whose copy of unit u a checkpoint records when the unit is written whole.
  int checkpoint_writer(int u) const;
};

// The TP group's communicator of `rank` (a split of `comm`, collective on every rank; none when
// every rank's degree is 1) and the model slice it runs.
TensorParallel tensor_parallel_of(const traces::TrainingGraph& graph, const GptConfig& config,
                                  Communicator& comm, std::unique_ptr<Communicator>& tp_comm);

}  // namespace cephalo::backend

#pragma once
// Private to the executor's files: the state of one rank's Executor. The interpreter
// (executor.cpp) walks the graph's ops over it; executor_report.cpp turns its last step's
// measurements into the RunResult; executor_checkpoint.cpp saves and restores its shards.
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

// One unit's flat buffer inside a phase's gathered parameters (and gradient), as the graph's
// collective segments lay it out: a tied head's phases are [unit 0 | head].
struct PhaseSegment {
  int unit = -1;
  std::int64_t offset = 0;  // elements into the phase's buffer
  std::int64_t numel = 0;
  traces::CollectiveVariant variant = traces::CollectiveVariant::Even;
};

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
  // Sharding (executor_sharding.cpp): the all-gathers and reduce-scatters run over this rank's
  // group (`comm` itself under full sharding); under hybrid sharding, per unit, the pieces of
  // its slice that the cross-group reduction all-reduces, each on the communicator of the
  // piece's owners.
  struct CrossPieceRun {
    std::int64_t offset = 0;  // into this rank's gradient shard of the unit
    std::int64_t count = 0;
    Communicator* comm = nullptr;
  };
  int group = 0;
  Communicator* group_comm = nullptr;
  std::vector<std::unique_ptr<Communicator>> sub_comms;
  std::vector<std::vector<CrossPieceRun>> cross_pieces;  // per unit
  // A split plan (executor_split.cpp; DESIGN §4, "A split in the plan and the graph"): this
  // rank's place, its groups' communicators, and the per-step buffers of its pipeline stage.
  // Parameters and gradients are kept per unit (a unit is gathered once and kept to its last
  // backward), activations per boundary: act[b][mb] enters unit b, dact[b][mb] is its gradient.
  struct Split {
    RankPlace place;
    std::unique_ptr<Communicator> tp;  // the TP group (made before the model: Executor ctor)
    Communicator* dp = nullptr;        // this rank's data-parallel group
    std::vector<std::unique_ptr<Communicator>> owned;
    std::map<std::pair<int, int>, Communicator*> links;      // (from, to): two ranks, `from` is 0
    std::map<std::pair<int, int>, Communicator*> tied;       // (first stage's, last stage's rank)
    std::vector<traces::CollectiveVariant> gather_variant;   // per unit, in this rank's group
    std::vector<std::vector<CrossPieceRun>> pieces;          // per unit: cross-group all-reduces
    std::vector<std::vector<std::int64_t>> replica_offsets;  // per stage: samples before each
    std::int64_t samples_per_micro_batch = 0;                // global batch / m
    std::vector<Buffer> resident;           // per unit: compute-type parameters (optimizer, none)
    bool resident_stale = true;             // refreshed before the next step (after init, a resume)
    std::map<int, Buffer> gathered, grads;  // per unit (full / hybrid), per unit
    std::vector<std::vector<Buffer>> act, dact;
    std::vector<HeadActivations> head;             // per micro-batch, recompute to backward
    std::map<std::array<int, 3>, int> sends_left;  // (forward?, boundary, mb): this step's
    std::vector<std::vector<TpCall>> tp_calls;     // per op of the program
    std::vector<int> tp_source;  // per op: the compute op whose calls a TP op reports, or -1
  };
  bool split = false;
  Split sp;

  LossScaler scaler;
  FailureInjection failure;
  SlowdownEmulator slowdown;
  bool last_skipped = false;
  double last_loss_scale = 1.0;
  int step_now = 0;  // the step being run, for the messages of its checks

  // Per-step state.
  std::vector<Buffer> tokens, targets;  // per micro-batch, I32 [rows]
  std::vector<int> mb_sizes;
  // Read from the graph once: per phase, the units its collectives move (buffer order); per
  // unit, the collective variant its slices take.
  std::vector<std::vector<PhaseSegment>> phase_segments;
  std::vector<traces::CollectiveVariant> unit_variant;
  std::map<int, Buffer> gathered;              // phase -> its segments' parameters, gathered
  std::map<int, Buffer> phase_grad;            // phase -> its segments' full gradients
  std::vector<std::vector<Buffer>> boundary;   // [unit][mb]: input activation of unit
  std::vector<std::vector<Buffer>> offloaded;  // [unit][mb]: host copy (offload: host)
  std::vector<Buffer> dgrad;                   // [mb]: gradient w.r.t. current unit input
  // [unit][mb]: a layer's saved activations, from its recompute (or, when the graph does not
  // recompute the unit, from its forward) to its backward.
  std::vector<std::vector<LayerActivations>> saved;
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
  void read_graph_decisions();
  void setup_sharding();
  void run_cross_reduction(const traces::Op& op);
  const std::vector<PhaseSegment>& segments_of(int phase) const;
  std::int64_t phase_numel(int phase) const;
  const PhaseSegment* find_segment(int phase, int unit) const;
  void gather_unit(Stream& s, int u, bool gradients, TensorRef full);
  void reduce_unit(Stream& s, int u, TensorRef full);
  // The two above over a given group and variant (the FSDP path passes its own).
  void gather_shard(Stream& s, Communicator& group, int u, traces::CollectiveVariant v,
                    bool gradients, TensorRef full);
  void reduce_shard(Stream& s, Communicator& group, int u, traces::CollectiveVariant v,
                    TensorRef full);
  TensorRef unit_params(int phase, int u);
  TensorRef unit_grads(int phase, int u);
  // The gradient buffer a backward phase accumulates into (the graph's gradient_phase).
  Buffer& phase_gradient(int phase);
  TensorRef embedding_params_for_head(int phase);
  TensorRef embedding_grads_for_head(int phase);
  void prepare_data(int step);
  void ensure_phase_grads(const traces::Op& op);
  void run_compute(const traces::Op& op);
  void optimizer_step();
  void run_comm(const traces::Op& op);
  void run_copy(const traces::Op& op);
  void begin_step(int step_index);
  double step(int step_index);

  // ---- split plans (executor_split.cpp) ----
  void setup_split();
  void split_prepare_data(int step);
  void split_begin_step();
  void refresh_resident();
  TensorRef split_params(int u);
  TensorRef split_grads(int u);
  void run_split_compute(const traces::Op& op);
  void run_split_transfer(const traces::Op& op);
  void run_split_comm(const traces::Op& op);
  void split_optimizer_step();
  // The single-rank unit u of the last step, assembled from every rank that owns a piece
  // (collective): 0 parameters, 1 Adam m, 2 Adam v, 3 reduced gradients (fp32).
  std::vector<float> assemble_unit(int u, int which);
  // The lowest rank whose copy of unit u a checkpoint of a split run records.
  int checkpoint_writer(int u) const;
};

// The TP group's communicator of `rank` under a split graph (a split of `comm`, collective on
// every rank) and the model slice it runs; the whole model without a split.
TensorParallel tensor_parallel_of(const traces::TrainingGraph& graph, const GptConfig& config,
                                  Communicator& comm, std::unique_ptr<Communicator>& tp_comm);

}  // namespace cephalo::backend

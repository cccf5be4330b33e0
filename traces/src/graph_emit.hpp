#pragma once
// The one per-rank emitter of the graph builder (private to traces/). An *order* says what a
// rank runs, as a RankProgram: its compute items in issue order (unit, pass, micro-batch, the
// gather each waits for, whether it frees the gathered buffer, the gradient buffer it feeds and
// the reductions that follow it, the pipeline transfers around it) and its data-parallel
// gathers with their gates. The emitter turns any program into ops, waits and memory the same
// way: the FSDP plan's phase order (layered / standard / no_sync, graph_rank_program.cpp) is a
// one-stage order; a pipeline schedule's step order (graph_pipeline_program.cpp) is another.
#include <cstdint>
#include <span>
#include <vector>

#include "cephalo/traces/training_graph.hpp"
#include "graph_ops.hpp"

namespace cephalo::traces {

// A data-parallel gather of the rank's domain: `phase` is the DomainCollectives phase whose
// gather it is; issued once mark `gate` has been emitted (-1: at the start).
struct GatherItem {
  int phase = 0;
  int gate = -1;
};

// A reduction after a compute item. ReduceScatter: the domain phase `phase`'s reduce-scatter
// of the gradient buffer `buffer`; CrossGroup: unit `unit`'s cross-group reduction; Tied: the
// tied embedding's all-reduce between the first and last stage (links). Each waits for the
// last backward into `wait_buffer` (-1: nothing beyond its stream's order).
struct ReductionItem {
  enum class Kind : std::uint8_t { ReduceScatter, CrossGroup, Tied };
  Kind kind = Kind::ReduceScatter;
  int phase = 0;
  int unit = 0;
  int buffer = -1;
  int wait_buffer = -1;
};

// One compute item: a forward, or a backward (preceded by its Recompute when the unit has one,
// schedule::has_recompute_op) of `unit` for micro-batch `micro_batch` of `size` samples in
// phase `phase`. Its pipeline transfers move pipeline micro-batch `transfer_micro_batch`, of
// which the rank holds `transfer_size` samples (a split rank's sub-steps: its share of the
// pipeline micro-batch cut into several items; -1 / 0: the item's own micro-batch and size).
// `compute` false: the rank computes nothing here (an FSDP phase it has no micro-batch for); the
// item's op is then its gather. The item's *main op* is its Forward or Backward op (else the
// gather).
struct ComputeItem {
  int unit = 0;
  bool forward = true;
  bool compute = true;
  int micro_batch = 0;
  int size = 0;
  int phase = 0;
  int waits_gather = -1;        // index into the gathers: the item's first op waits for it
  int grad_buffer = -1;         // backward: the gradient buffer it accumulates into
  double grad_bytes = 0;        // that buffer's size, allocated by its first backward (transient)
  bool frees_gathered = false;  // the main op releases the gathered buffer ...
  double gathered_bytes = 0;    // ... of this size
  int mark = -1;                // the main op becomes mark `mark` (a gather's gate)
  int recv_boundary = -1;  // pipeline receives before the item (forward: input; backward: grad)
  int send_boundary = -1;  // pipeline sends after it
  int transfer_micro_batch = -1;
  int transfer_size = 0;
  std::uint32_t reductions_begin = 0, reductions_count = 0;  // into RankProgram::reductions
  // The job's deferred output-layer weight gradient (pipeline::deferred_wgrad_micro_batches): a
  // head backward that leaves its weight-gradient GEMM to the flush (`defers_wgrad`), or that
  // GEMM itself, a WeightGradient op after the rank's last backward (`flush_wgrad`).
  bool defers_wgrad = false;
  bool flush_wgrad = false;
};

inline int transfer_micro_batch(const ComputeItem& item) {
  return item.transfer_micro_batch >= 0 ? item.transfer_micro_batch : item.micro_batch;
}
inline int transfer_size(const ComputeItem& item) {
  return item.transfer_size > 0 ? item.transfer_size : item.size;
}

// What one rank runs, in issue order.
struct RankProgram {
  int rank = 0;
  int position = 0;  // in its data-parallel domain's layout
  int group = 0;     // its sharding group in that layout
  int micro_batches = 0;
  int tensor_parallel = 1;
  std::vector<GatherItem> gathers;
  std::vector<ComputeItem> items;
  std::vector<ReductionItem> reductions;
  // After the optimizer step: gathers of the updated parameters (ZeRO-1), by domain phase.
  std::vector<int> step_gathers;
  int marks = 0;         // how many marks the items set
  int grad_buffers = 0;  // how many gradient buffers the items name
  void clear();
};

// What a pipeline order needs besides the data-parallel domain: the tensor-parallel, transfer
// and tied-embedding collectives (made by their first member, found by the others).
class StageLinks {
 public:
  struct Transfer {
    std::int32_t collective = -1;
    double bytes = 0;
  };
  virtual ~StageLinks() = default;
  // The transfers `rank` sends (or receives) across `boundary` in direction `forward` for one
  // micro-batch, in the boundary's order.
  virtual std::vector<Transfer> transfers(int rank, int boundary, bool forward, int micro_batch,
                                          bool sends) = 0;
  // What a rank holds of one boundary activation (or gradient) of `rows` samples.
  virtual double boundary_bytes(std::int64_t rows) const = 0;
  // The rank's next tensor-parallel collective (every member of a TP group emits the same
  // sequence); `issued_by` is the compute op whose math issues it (Collective::issued_by).
  virtual std::int32_t tensor_parallel(int rank, OpKind kind, OpKind issued_by, int unit, Pass pass,
                                       int calls, double element_bytes, double elements) = 0;
  // The tied embedding's all-reduce of `rank`'s slice with its twin at the other end.
  virtual std::int32_t tied(int rank) = 0;
};

// What every rank's emission shares in one build.
struct EmitContext {
  const Job& job;
  const ActivationCheckpointing& checkpointing;
  int units = 0;
  bool sequence_parallel = false;
  bool offload = false;               // layer inputs to host between forward and recompute
  int copy_lookahead = 1;             // 2 with prefetch: H2D copies run one backward ahead
  bool cast_send = false;             // the gather sends a cast copy of the shard
  bool transient_gradients = true;    // the unsharded gradient lives until its reduction
  std::span<const char> gpu_runtime;  // per rank
  StageLinks* links = nullptr;        // null: one stage, T = 1, no transfers
};

class RankEmitter {
 public:
  explicit RankEmitter(const EmitContext& context) : c_(context) {}
  // Appends the program's ops to `g`, joining `domain`'s collectives at the program's position.
  void emit(TrainingGraph& g, const DomainCollectives& domain, const ShardLayout& layout,
            const RankProgram& program);

 private:
  OpId append(Op op, std::span<const OpId> deps);
  OpId append(Op op, std::initializer_list<OpId> deps) {
    return append(op, std::span<const OpId>(deps.begin(), deps.size()));
  }
  OpId append_domain(Op op, std::initializer_list<OpId> deps);
  // An op of a link collective (TP, transfer, tied): appended and recorded as the rank's member.
  OpId append_linked(Op op, std::span<const OpId> deps);
  void issue_gathers(int mark);
  void emit_item(const ComputeItem& item);
  OpId emit_compute(const ComputeItem& item, OpKind kind, std::vector<OpId>& deps);
  void emit_tensor_parallel(const ComputeItem& item, OpKind kind, int phase);
  void emit_recvs(const ComputeItem& item);
  void emit_sends(const ComputeItem& item, OpId main);
  void emit_reduction(const ReductionItem& r);

  const EmitContext& c_;
  // Per program.
  TrainingGraph* g_ = nullptr;
  const DomainCollectives* dp_ = nullptr;
  const RankProgram* prog_ = nullptr;
  std::vector<OpId> gather_op_, mark_op_;
  std::size_t next_gather_ = 0;
  std::vector<OpId> pending_;         // receives the next compute op waits for
  std::vector<OpId> deps_;            // what the current item's first op waits for (reused)
  std::vector<OpId> d2h_;             // per unit × micro-batch
  std::vector<OpId> backward_steps_;  // B ops in order, for the H2D look-ahead
  std::vector<char> grad_held_;       // per gradient buffer
  std::vector<OpId> grad_last_;       // per gradient buffer: its latest backward
  OpId last_compute_ = kNoOp;         // the last op on the compute stream
  OpId last_reduction_ = kNoOp;
};

}  // namespace cephalo::traces

#pragma once
// The TrainingGraph (DESIGN §4): one training iteration of a Plan as a DAG of ops, the single
// schedule that both the simulator (sim/) and the execution backend (backend/) consume.
//
// Shape of the data (chosen so a 1024-GPU graph with millions of ops stays flat and fast):
//  * ops are numbered rank by rank, and within a rank in *issue order*: the order a host thread
//    would enqueue them onto the rank's streams. `program(rank)` is therefore a contiguous span
//    of ops whose ids are consecutive; walking it op by op and honouring `waits_on(op)` is a
//    valid execution on one rank.
//  * every op runs on one of four in-order streams (compute, comm, d2h, h2d); the order of ops
//    on a stream is the issue order restricted to that stream (`stream_program(rank, stream)`),
//    so "previous op on the same stream" is an implicit dependency and is not listed.
//  * `waits_on(op)` lists the explicit same-rank cross-stream dependencies (all with smaller
//    ids). Cross-rank coupling happens only through collectives: every participant has its own
//    op instance carrying the same `collective` id; a collective starts when all its
//    participants have reached it.
//  * `boost_graph()` is the whole DAG as a Boost.Graph compressed-sparse-row graph with every
//    edge made explicit: stream order, cross-stream waits, and cross-rank collective edges
//    (from the lowest-ranked participant to each other participant: a rendezvous link, drawn
//    in one direction so the graph stays acyclic).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/shard_layout.hpp"

namespace cephalo::traces {

using OpId = std::uint32_t;
constexpr OpId kNoOp = 0xffffffffu;

enum class OpKind : std::uint8_t {
  Forward,         // a unit's forward for one micro-batch (no autograd state kept: checkpointed)
  Backward,        // a unit's backward for one micro-batch (accumulates the unsharded gradient)
  Recompute,       // re-run of the forward with autograd state, right before the backward
  OptimizerStep,   // AdamW over the rank's owned shard of every unit
  AllGather,       // gather a unit's parameters (even shards)
  AllGatherV,      // same with uneven shards
  ReduceScatter,   // reduce a unit's gradient onto the owners' shards (even)
  ReduceScatterV,  // same with uneven shards
  AllReduce,       // hybrid sharding: a unit's cross-group gradient reduction (one in-place
                   // all-reduce per piece over its owners; ShardLayout::pieces)
  CopyD2H,         // layer-boundary activation to pinned host memory (offload: host)
  CopyH2D,         // and back before the recompute
  // Under a model split (DESIGN §4, "A split in the plan and the graph"):
  TpAllReduce,      // a compute op's tensor-parallel all-reduces over its TP group (Collective::
                    // calls of them), on the compute stream after the op
  TpGatherScatter,  // the same under sequence parallelism: each call an all-gather and a
                    // reduce-scatter of the buffer
  Send,             // a pipeline transfer's sending side (send stream): activations forward,
                    // their gradient backward, to the neighbouring virtual stage
  Recv,             // its receiving side (recv stream); the consuming step waits on it
  TiedAllReduce,    // a tied word embedding's gradient, first stage with last stage, rank by rank
  WeightGradient,   // the output layer's weight-gradient GEMM of one micro-batch, deferred out of
                    // its head backward into the pipeline flush (the job's
                    // defer_embedding_wgrad_compute; pipeline::deferred_wgrad_micro_batches)
};
constexpr int kNumOpKinds = 17;

enum class Stream : std::uint8_t { Compute = 0, Comm = 1, D2H = 2, H2D = 3, Send = 4, Recv = 5 };
constexpr int kNumStreams = 6;

std::string to_string(OpKind kind);    // "forward", "all_gather_v", "copy_d2h", ...
std::string short_name(OpKind kind);   // "F", "B", "RC", "OPT", "AG", "AGv", "RS", "RSv", ...
std::string to_string(Stream stream);  // "compute", "comm", "d2h", "h2d", "send", "recv"
// Every op whose participants meet (a Collective): the data-parallel collectives, the tensor-
// parallel ones, both sides of a pipeline transfer and the tied all-reduce.
bool is_collective(OpKind kind);
// A data-parallel domain's gathers, reductions and cross-group all-reduces (AllGather[V],
// ReduceScatter[V], AllReduce): a split's only collectives between pipeline lanes.
bool is_data_parallel(OpKind kind);
bool is_tensor_parallel(OpKind kind);    // TpAllReduce, TpGatherScatter
bool is_pipeline_transfer(OpKind kind);  // Send, Recv
bool is_compute(OpKind kind);
bool is_copy(OpKind kind);
Stream stream_of(OpKind kind);

// What a collective runs, decided once by the graph builder from the integer element counts it
// moves (`shard_offsets`) and the plan's `uneven_collective`: Even when every member moves the
// same number of elements (MPI_Allgather / ncclAllGather and the reduce-scatter twins), else
// the uneven variant: Grouped (all-gather-v / reduce-scatter-v: one broadcast / reduce per
// owner) or Padded (every shard padded to the largest around the even collective), the plan's
// or, under `auto`, the cheaper one by the comm model (costmodels::uneven_variant), one per
// collective. Equal shares with a unit size not divisible by the rank count are therefore
// uneven: that is what the backend runs, and what the simulator prices.
enum class CollectiveVariant : std::uint8_t { Even = 0, Grouped = 1, Padded = 2 };
std::string to_string(CollectiveVariant variant);  // "even", "grouped", "padded"

// Element ranges of one unit's flat buffer owned by each rank, for shares summing to 1: rank r
// owns [off[r], off[r+1]) with off[r+1] = round(numel × Σ_{i<=r} share_i) (clamped to be
// monotone; the last ends at numel). The one rounding rule for the graph, the executor's
// sharded state and checkpoints.
std::vector<std::int64_t> shard_offsets(std::int64_t numel, const std::vector<double>& shares);

// Direction of the pass an op belongs to.
enum class Pass : std::uint8_t { Forward = 0, Backward = 1, Step = 2 };

struct Op {
  OpId id = kNoOp;
  OpKind kind = OpKind::Forward;
  Stream stream = Stream::Compute;
  Pass pass = Pass::Forward;
  // The op whose end releases the phase's gathered parameters (the phase's last compute op, or
  // its gather when the rank runs no compute in the phase). Its mem_free includes them. (Here,
  // in the padding after `pass`, so an Op stays 88 bytes.)
  bool frees_gathered = false;
  std::int32_t rank = 0;
  std::int32_t unit = -1;             // 0 embedding, 1..L layers, L+1 head; -1 for the optimizer
  std::int32_t micro_batch = -1;      // index within the rank's micro-batches; -1 if none
  std::int32_t micro_batch_size = 0;  // samples; 0 if none
  std::int32_t collective = -1;       // index into collectives(); -1 for non-collectives
  std::int32_t phase = -1;            // index of the (unit, pass, round) phase this op serves
  double flops = 0;                   // compute ops: FLOPs of the op (model FLOPs; RC = forward)
  double bytes = 0;                   // collectives: full buffer; copies: bytes moved
  double shard_bytes = 0;             // collectives: this rank's shard (differs for -v variants)
  double shard_parameters = 0;        // optimizer: parameters owned by the rank
  double mem_alloc = 0;               // device bytes allocated when the op starts
  double mem_free = 0;                // device bytes released when the op ends
  std::uint32_t deps_begin = 0;       // into the waits-on array (use TrainingGraph::waits_on)
  std::uint32_t deps_count = 0;
};

// One collective: the same operation seen from every participant.
struct Collective {
  std::int32_t id = -1;
  OpKind kind = OpKind::AllGather;
  // The sharding group whose ranks it spans (all-gathers, reduce-scatters; 0 under full
  // sharding), or -1 for the cross-group reduction (AllReduce), whose members are all ranks
  // and whose pieces are the layout's pieces of its unit.
  std::int32_t group = 0;
  std::int32_t unit = -1;
  Pass pass = Pass::Forward;
  std::int32_t phase = -1;
  // Resolved once (see CollectiveVariant): Even iff every segment is Even. The op kinds agree
  // (AllGatherV / ReduceScatterV iff not Even).
  CollectiveVariant variant = CollectiveVariant::Even;
  double element_bytes = 0;  // bytes per element moved (compute dtype; reduce dtype)
  double total_bytes = 0;    // gathered / reduced buffer = Σ segment numel × element_bytes
                             // (TP: one call's buffer; Send: the transfer)
  std::int32_t calls = 1;    // TP collectives: calls of the compute op's math
  // TP collectives: the compute op (Forward, Recompute, Backward) whose math issues the calls,
  // i.e. whose GEMMs a job's TP communication overlap runs them under (costmodels/
  // tensor_parallel.hpp, tp_overlap_exposed_seconds).
  OpKind issued_by = OpKind::Forward;
  std::uint32_t members_begin = 0;  // into the members arrays (use TrainingGraph::members)
  std::uint32_t members_count = 0;
  std::uint32_t segments_begin = 0;  // into the segments array (use TrainingGraph::segments)
  std::uint32_t segments_count = 0;
};

// Members are listed in group order (the group's slice order); for the cross-group reduction,
// in rank order.
struct CollectiveMember {
  std::int32_t rank = 0;
  OpId op = kNoOp;
  std::int64_t elements = 0;  // Σ over the segments of the rank's slice of each
  double shard_bytes = 0;     // elements × element_bytes
};

// One unit's flat buffer inside a collective, in buffer order. A phase of unit u moves unit u;
// the phase of a head tied to the embedding moves unit 0 first and then the head
// (costmodels::phase_parameters), as two calls of the backend's communicator, each with its own
// variant. Member r's slice of the segment is `graph.slice(unit, r)`.
struct CollectiveSegment {
  std::int32_t unit = -1;
  std::int64_t numel = 0;  // elements of the unit's flat buffer
  CollectiveVariant variant = CollectiveVariant::Even;
};

// Model-level quantities the builder derives from the Job, kept so consumers do not have to
// recompute them.
struct GraphSummary {
  int num_ranks = 0;
  int num_units = 0;  // layers + 2
  int sequence_length = 0;
  int global_batch = 0;
  double model_flops_per_iteration = 0;  // Σ forward+backward FLOPs over all samples (no recompute)
  Accumulation accumulation = Accumulation::Layered;
  ActivationCheckpointing activation_checkpointing;
  Offload offload = Offload::None;
  bool prefetch = true;
  // Under a model split (DESIGN §4, "A split in the plan and the graph"); the defaults describe
  // an FSDP plan.
  bool split = false;
  int pipeline_stages = 1;
  int virtual_stages = 1;          // V per stage (interleaved), else 1
  int pipeline_micro_batches = 0;  // m (0 without a split)
  bool sequence_parallel = false;
  ShardingKind stage_sharding = ShardingKind::Full;
};

// Per-unit sizes used to fill ops (exposed for tests and the backend).
struct UnitSizes {
  std::int64_t numel = 0;     // elements of the unit's flat buffer (= parameters)
  double parameters = 0;      // the unit's own
  double gathered_bytes = 0;  // what a phase of the unit gathers, in the compute dtype: its
                              // parameters, and for a tied head the embedding unit's too
  double gradient_bytes = 0;  // what a phase reduce-scatters, same parameters × reduce dtype
};

class TrainingGraph {
 public:
  TrainingGraph();
  ~TrainingGraph();
  TrainingGraph(TrainingGraph&&) noexcept;
  TrainingGraph& operator=(TrainingGraph&&) noexcept;

  const GraphSummary& summary() const { return summary_; }
  int num_ranks() const { return summary_.num_ranks; }
  std::size_t num_ops() const { return ops_.size(); }

  const std::vector<Op>& ops() const { return ops_; }
  const Op& op(OpId id) const { return ops_[id]; }
  // Ops of one rank in issue order (consecutive ids).
  std::span<const Op> program(int rank) const;
  // Ids of one rank's ops on one stream, in stream order.
  std::span<const OpId> stream_program(int rank, Stream stream) const;
  // Same-rank cross-stream dependencies of an op (each with a smaller id).
  std::span<const OpId> waits_on(OpId id) const;
  // Ops that wait on `id` (reverse of waits_on; same rank, other streams).
  std::span<const OpId> waited_by(OpId id) const;

  const std::vector<Collective>& collectives() const { return collectives_; }
  std::span<const CollectiveMember> members(const Collective& c) const;
  std::span<const CollectiveSegment> segments(const Collective& c) const;

  // Sharding of every unit's flat buffer: the plan's groups, each rank's slice inside its
  // group's copy (shard_offsets of the unit's numel over the group's shares) and, under hybrid
  // sharding, the cross-group pieces. `slice(u, r)` is rank r's range. Each data-parallel
  // domain has its own layout over its own ranks (numbered 0.. in replica order,
  // `layout_position`), holding the numel of the domain's tensor-parallel slice of the stage's
  // units (0 for the others): use layout_of(rank). An FSDP plan has one domain, every rank at
  // its own position: layout() is its layout (under a split, stage 0's first domain's).
  const ShardLayout& layout() const { return domain_layouts_.front(); }
  const ShardLayout& layout_of(int rank) const {
    return domain_layouts_[static_cast<std::size_t>(domain_of_[static_cast<std::size_t>(rank)])];
  }
  int layout_position(int rank) const { return domain_position_[static_cast<std::size_t>(rank)]; }
  // The global ranks of layout_of(rank), in its order (the FSDP plan: every rank).
  std::span<const int> layout_ranks(int rank) const;
  UnitSlice slice(int unit, int rank) const {
    return layout_of(rank).slice(unit, layout_position(rank));
  }
  // Where the rank sits (stage, replica, TP rank and degree); an FSDP plan's one stage: stage
  // 0, replica = rank, TP rank 0 of 1.
  const RankPlace& place(int rank) const { return places_[static_cast<std::size_t>(rank)]; }
  // Whether the rank holds unit u (its stage's chunks); an FSDP plan's ranks hold every unit.
  bool holds(int rank, int unit) const {
    return unit_stage_[static_cast<std::size_t>(unit)] ==
           places_[static_cast<std::size_t>(rank)].stage;
  }

  // Device bytes held for the whole iteration (sharded training state of the rank's slices:
  // master parameters, gradient shard, Adam moments).
  double static_bytes(int rank) const { return static_bytes_[rank]; }
  const UnitSizes& unit_sizes(int unit) const { return unit_sizes_[unit]; }
  // The backward phase whose reduce-scatter reduces the gradient a backward phase accumulates
  // into: the phase itself, except under no_sync accumulation, where every round's backward of
  // a unit accumulates into the unit's buffer of the last round (whose reduce-scatter is the
  // only one). -1 for forward phases.
  std::int32_t gradient_phase(int phase) const { return gradient_phase_[phase]; }
  // Whether unit u's backward is preceded by a Recompute op (Plan::activation_checkpointing);
  // when not, a layer's forward keeps its saved activations for its backward.
  bool recomputes(int unit) const { return recomputes_[unit] != 0; }
  // Whether unit u's Recompute op reruns only its attention core (selective recompute): the
  // layer's forward keeps its saved activations but the attention kernel's own state.
  bool recomputes_attention_core(int unit) const;

  // "F u3 mb1 r0", "AGv u3 r2", "OPT r1": stable, human-readable.
  std::string op_name(OpId id) const;

  // The DAG with all edges explicit (see the file comment). Built on first use.
  struct BoostGraph;
  const BoostGraph& boost_graph() const;
  std::size_t boost_num_edges() const;
  // A topological order of all ops computed with boost::topological_sort; throws
  // std::logic_error if the graph has a cycle (it never should).
  std::vector<OpId> topological_order() const;

  friend class GraphBuilder;  // the one builder of every plan's graph

 private:
  // Once every rank's ops exist: the stream programs (issue order kept) and the reverse of
  // waits_on. The builder finishes with it.
  void index_streams();
  // Appends `op` as `rank`'s next op on its kind's stream and returns its id. Its waits-on list
  // names each of `deps` once, leaving out kNoOp and ops of its own stream (stream order is
  // implicit). The one way the builder adds an op.
  OpId append_op(Op op, int rank, std::span<const OpId> deps);
  GraphSummary summary_;
  std::vector<Op> ops_;
  std::vector<OpId> deps_;                   // flat waits-on lists
  std::vector<std::uint32_t> succ_offsets_;  // CSR of waited_by, size ops+1
  std::vector<OpId> succs_;
  std::vector<std::uint32_t> rank_offsets_;    // size ranks+1
  std::vector<std::uint32_t> stream_offsets_;  // size ranks*kNumStreams+1, into stream_ops_
  std::vector<OpId> stream_ops_;
  std::vector<Collective> collectives_;
  std::vector<CollectiveMember> members_;
  std::vector<CollectiveSegment> segments_;
  std::vector<double> static_bytes_;
  std::vector<UnitSizes> unit_sizes_;
  std::vector<std::int32_t> gradient_phase_;  // per phase
  std::vector<std::uint8_t> recomputes_;      // per unit
  // Per rank its place and domain; per domain its layout and ranks (an FSDP plan: one).
  std::vector<RankPlace> places_;
  std::vector<std::int32_t> domain_of_, domain_position_;
  std::vector<ShardLayout> domain_layouts_;
  std::vector<std::vector<int>> domain_ranks_;
  std::vector<int> unit_stage_;  // per unit: the stage holding it
  mutable std::unique_ptr<BoostGraph> boost_;
  friend class DataParallelCollectives;  // the domains' data-parallel collectives
  friend class RankEmitter;              // every rank's ops, whichever order
};

// Builds the graph of one iteration of `plan` on `scenario` (the plan must already have been
// validated against the scenario). Schedules, per DESIGN §1 and the module README:
//  * layered accumulation: per unit, gather once, run all micro-batches, (forward); in reverse
//    unit order gather once, recompute+backward every micro-batch in reverse, reduce-scatter
//    once; then the optimizer step. Exactly 2 all-gathers and 1 reduce-scatter per unit.
//  * standard accumulation: micro-batch-major; every micro-batch round gathers and
//    reduce-scatters every unit. Ranks with fewer micro-batches join the remaining rounds'
//    collectives with no compute (their gradient contribution is zero).
//  * no_sync accumulation: the rounds of standard, every round gathers every unit, but only
//    the last round reduce-scatters: each unit's unsharded gradient buffer lives from the
//    rank's first backward of the unit to that reduce-scatter.
//  * activation checkpointing (Plan::activation_checkpointing): a checkpointed unit's forward
//    frees its working set and its backward is preceded by a Recompute op that allocates it
//    again; any other unit's forward keeps its working set until its backward (no Recompute).
//  * prefetch: the gather of phase p may start when phase p-2's compute is done (one unit
//    ahead); without it, when phase p-1's compute is done (no overlap with compute).
//  * offload host: each micro-batch's layer input is copied to host after the unit consumed
//    it and copied back before the recompute (one copy ahead with prefetch).
//  * hybrid sharding: every all-gather and reduce-scatter spans one group (a collective per
//    group and phase); after the reduce-scatter that last touches a unit's gradient in the
//    step, one AllReduce op per rank reduces the unit across groups (on the comm stream, in
//    place on the gradient shard), and the optimizer step waits for it.
//  * uneven_collective auto: `comm` prices both variants of each uneven collective and the
//    cheaper is recorded (null: the scenario's own comm model, costmodels::make_comm_model, made
//    only when an uneven collective needs it). Pass the model the graph will be simulated with.
TrainingGraph build_training_graph(const Plan& plan, const Scenario& scenario,
                                   const costmodels::CommModel* comm = nullptr);
// The same graph restricted to `ranks` (ascending, non-empty): only they have ops and are
// collective members; sharding, collective variants and static bytes are the whole plan's and
// the other ranks' programs are empty (sim/'s class replay builds one rank per class).
TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks,
                                            const costmodels::CommModel* comm = nullptr);
// The same for an FSDP plan whose layout the caller has built already: `layout` must be
// shard_layout_of(plan, scenario) (sim/'s class replay forms its classes from it first, and at
// 100k ranks cutting the state twice per replay was a tenth of a candidate's replay).
TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks, ShardLayout layout,
                                            const costmodels::CommModel* comm = nullptr);

}  // namespace cephalo::traces

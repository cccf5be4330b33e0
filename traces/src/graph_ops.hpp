#pragma once
// What the two orders of the graph builder (graph_builder.hpp) make the same way (private to
// traces/): the FSDP phase order and a split's pipeline order both build a plan's graph from
// these, so an FSDP plan and its one-stage split agree on each by construction
// (tests/sim/one_stage_split_test.cpp holds the whole graphs equal):
//  * which ranks get ops (`only`) and the plan's rank count against the cluster's;
//  * the summary fields every graph carries, which units recompute, which ranks run a GPU
//    runtime;
//  * every compute op's FLOPs and activation bytes (compute_op);
//  * a data-parallel domain's collectives (a group's gather or reduce-scatter, the cross-group
//    reduction) and the variant of an uneven one (the plan's, or the comm model's);
//  * the memory a gather, a reduce-scatter and the optimizer step allocate and free.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

// An op of phase p for micro-batch m (size `size`): the fields every per-micro-batch op has.
Op micro_batch_op(OpKind kind, Pass pass, int unit, int p, int m, int size);

// What a rank's compute ops depend on besides the unit and the micro-batch: the job, the plan's
// checkpointing, the model's unit count, the rank's tensor-parallel degree (1: an FSDP plan),
// sequence parallelism and whether it runs a GPU runtime.
struct ComputeContext {
  const Job& job;
  const ActivationCheckpointing& checkpointing;
  int units = 0;
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  bool gpu_runtime = true;
};
// A compute op (Forward; Recompute or Backward, both of the backward pass) of `unit` for
// micro-batch m of `size` samples in phase p: its FLOPs (the unit's, 1/T of them on a TP rank
// but the embedding's; a selective recompute the attention core's alone) and the activations it
// allocates and frees (costmodels::split_compute_op_bytes, the one per-op rule). The builder
// adds what its data-parallel sharding holds (the gathered parameters, the unsharded gradient).
Op compute_op(const ComputeContext& context, OpKind kind, int unit, int p, int m, int size);

// The ranks that get ops: every rank when `only` is empty, else `only` (ascending, each a rank
// of the plan; std::logic_error otherwise). Throws Error when the plan's rank count is not the
// cluster's.
std::vector<int> ranks_to_build(const Plan& plan, const Scenario& scenario,
                                std::span<const int> only);

// Per rank: 1 when it runs on a GPU runtime (not a CPU device), read once from the cluster
// (Cluster::ranks() per op or per rank would make a large graph's build quadratic).
std::vector<char> gpu_runtime_ranks(const Scenario& scenario);

// The summary fields of any plan's graph (ranks, units, sequence, global batch, the schedule
// choices, model FLOPs); the builder adds a split's own. Refuses (Error) a host offload that
// the plan's checkpointing contradicts: parse_plan refuses it, a plan built in code must not
// slip past.
GraphSummary plan_summary(const Plan& plan, const Scenario& scenario, int units);
// Per unit: 1 when its backward is preceded by a recompute (schedule::recomputes).
std::vector<std::uint8_t> recomputed_units(const Plan& plan, int units);

// The variant of an uneven gather (and of its reduce-scatter): the plan's `uneven_collective`,
// or under auto the cheaper of grouped and padded by the comm model on the all-gather of these
// shards (costmodels::uneven_variant); the scenario's own comm model when none is given, made
// on first use.
class UnevenVariants {
 public:
  UnevenVariants(const Plan& plan, const Scenario& scenario, const costmodels::CommModel* comm)
      : plan_(plan), scenario_(scenario), comm_(comm) {}
  CollectiveVariant choose(std::vector<int> ranks, std::vector<double> shard_bytes);
  // How unit u's gathers and reduce-scatters run in group `group` of a domain (`ranks`: the
  // global rank at each position of `layout`): Even when every member owns as many elements,
  // else choose() on the unit's all-gather over the group. Once per layout, group and unit
  // size (a group's slices follow from the count and the shares: the layers of a 96-layer
  // model cost one decision). One variant per unit, whatever the direction or the phase: the
  // executor runs each unit's segments one way.
  CollectiveVariant of(const ShardLayout& layout, std::span<const int> ranks, int unit, int group);

 private:
  const Plan& plan_;
  const Scenario& scenario_;
  const costmodels::CommModel* comm_ = nullptr;
  std::shared_ptr<const costmodels::CommModel> owned_comm_;
  // The decisions per layout, group and unit size; and per layout a flat table by group and
  // unit in front of it (every collective asks: a map lookup each made the phases of a hybrid
  // plan of 12k groups a map walk per collective).
  std::map<std::tuple<const ShardLayout*, int, std::int64_t>, CollectiveVariant> memo_;
  struct Table {
    const ShardLayout* layout = nullptr;
    std::vector<signed char> variant;  // per group × unit: the CollectiveVariant, -1 unknown
  };
  std::vector<Table> tables_;
};

// One data-parallel domain as its collectives see it: its layout and the global rank at each of
// the layout's positions (an FSDP plan's: every rank, position = rank).
struct DomainRanks {
  const ShardLayout& layout;
  std::span<const int> ranks;
};
// Appends a domain's collectives to a graph (a friend of TrainingGraph); members' op ids are set
// by the builder as the members' ops are emitted.
class DataParallelCollectives {
 public:
  // A gather (`gather`) or reduce-scatter of `units` (buffer order: a tied head's phase moves
  // unit 0, then itself) over group `group` of the domain; its members the group's built
  // positions `members`, in group order, each moving Σ of its slices. Elements in the compute
  // dtype for a gather, the reduce dtype for a reduce-scatter.
  static std::int32_t add_group(TrainingGraph& g, const Precision& precision,
                                UnevenVariants& variants, const DomainRanks& domain, int group,
                                std::span<const int> units, bool gather, Pass pass, int unit,
                                int phase, std::span<const int> members);
  // The cross-group reduction of `unit` (group -1, kind AllReduce, in the reduce dtype): the
  // built positions `members` in position order, each its slice; the layout's pieces say which
  // ranks reduce what (collective_request.hpp).
  static std::int32_t add_cross_reduction(TrainingGraph& g, const Precision& precision,
                                          const DomainRanks& domain, int unit, int phase,
                                          std::span<const int> members);
  // Records `op` as the op of member `member` (an index into the graph's member list).
  static void join(TrainingGraph& g, std::uint32_t member, OpId op);
};
// One phase of a data-parallel domain as its collectives see it: the units it moves (buffer
// order: a tied FSDP head's phase moves unit 0, then itself), its own unit, pass and phase
// number, whether it gathers the units' parameters and whether it reduces their gradients (a
// unit's gradient is complete after the last phase that reduces it).
struct DomainPhase {
  std::vector<int> units;
  int unit = 0;
  Pass pass = Pass::Forward;
  int phase = 0;
  bool gathers = false;
  bool reduces = false;
};
// Every data-parallel collective of one domain (through DataParallelCollectives), made at once in
// one id order: phase by phase, per group its gather (when the phase gathers) then its
// reduce-scatter (when it reduces and the groups reduce: not when every rank is its own group);
// then, when the layout has several groups, each unit's cross-group reduction after the last phase
// that reduces it (phases in order, units ascending within one). An FSDP plan's domain is every
// rank and its phases the rounds' (a backward phase gathers again); a split stage's domain its TP
// slice's ranks, its phases forward u (gathers) and backward u (reduces): the stage's units stay
// gathered from their first forward to their last backward. Members are the built ranks (group
// collectives: the group's, in group order; the cross reduction: the domain's, in position order)
// and join() records a member's op in O(1) by its slot. A group none of whose ranks is built
// gets no collectives (a graph of some ranks holds only what they join; a reader wanting a
// group's collectives builds one of its ranks, and prices it over the layout's full group).
class DomainCollectives {
 public:
  DomainCollectives() = default;
  // `built`: per global rank, whether it gets ops. `group_reduces`: false when every rank is
  // its own group (a replica per rank: the cross reduction is the only reduction).
  DomainCollectives(TrainingGraph& g, const Precision& precision, UnevenVariants& variants,
                    const DomainRanks& domain, std::span<const char> built,
                    std::span<const DomainPhase> phases, bool group_reduces);
  // Collective ids: -1 when the phase has none.
  std::int32_t gather(int phase, int group) const { return at(gathers_, phase, group); }
  std::int32_t reduce_scatter(int phase, int group) const {
    return at(reduce_scatters_, phase, group);
  }
  std::int32_t cross(int unit) const {
    return cross_.empty() ? -1 : cross_[static_cast<std::size_t>(unit)];
  }
  // Units whose cross-group reduction follows phase `phase`'s reductions, ascending.
  const std::vector<int>& finished_at(int phase) const {
    return finished_at_[static_cast<std::size_t>(phase)];
  }
  // The member at domain position `position` of collective `c` (one of this domain's): its
  // shard bytes, and the op by which it joins.
  double shard_bytes(const TrainingGraph& g, std::int32_t c, int position) const;
  // That member's op of collective `c`: the collective's kind, pass, unit, phase and bytes, and
  // the member's shard bytes (the builder sets its memory and may set another pass).
  Op op(const TrainingGraph& g, std::int32_t c, int position) const;
  void join(TrainingGraph& g, std::int32_t c, int position, OpId op) const;

 private:
  int slot(const Collective& c, int position) const;
  std::int32_t at(const std::vector<std::int32_t>& table, int phase, int group) const {
    return table[static_cast<std::size_t>(phase) * static_cast<std::size_t>(groups_) +
                 static_cast<std::size_t>(group)];
  }
  int groups_ = 1;
  std::vector<std::int32_t> gathers_, reduce_scatters_;  // per phase × group
  std::vector<std::int32_t> cross_;                      // per unit (-1: none)
  std::vector<std::vector<int>> finished_at_;            // per phase
  std::vector<int> group_slot_, cross_slot_;             // per position: slot among members
};

// A data-parallel collective's op kind: gather or reduce-scatter, even or -v.
OpKind data_parallel_kind(bool gather, CollectiveVariant variant);

// Whether a gather sends a cast copy of the shard: master weights wider or narrower than the
// compute dtype (tf32 computes on fp32 storage: no copy).
bool casts_gather_send(const Precision& precision);
// A gather's memory (its `bytes` and `shard_bytes` set): the gathered buffer, held until the op
// marked `frees_gathered` ends, and the cast send shard, freed when the gather ends.
void set_gather_memory(Op& gather, bool cast_send);
// A reduce-scatter's memory: the unsharded gradient buffer (allocated here when no backward
// into it ran on this rank: it contributes zeros) and the received shard, both freed by its end.
void set_reduce_scatter_memory(Op& reduce_scatter, bool gradient_held);
// The AdamW step over what position `position` of `layout` owns (about 12 FLOPs a parameter),
// with the transient fp32 copy of the largest unit's gradient shard when the reduce dtype is
// 16-bit or fp16 loss scaling unscales it.
Op optimizer_step_op(const Job& job, const ShardLayout& layout, int position, int units);

}  // namespace cephalo::traces

#pragma once
// The rules of a training schedule, in one place: what a plan's activation checkpointing,
// gradient accumulation, sharding and offload make one iteration do. The graph builder
// (traces/), the memory model (costmodels/), the planner and the backend read them from here,
// so a rule is never restated (core/README.md, "The schedule").
//
//   schedule::recomputes(plan.activation_checkpointing, u, units)   // a Recompute before B?
//   schedule::unit_collectives(plan.accumulation, rounds)           // AG / RS per unit
//   schedule::state_bytes_per_parameter(job.precision)              // 16 B for fp32 + AdamW
//   schedule::offload_conflict(plan.offload, plan.activation_checkpointing)
//   schedule::gather_gates(schedule::gather_rules(framework, prefetch), phases)
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::schedule {

// ---- activation checkpointing -------------------------------------------------------------

// Whether unit u (0 = embedding, 1..L = layers, units − 1 = head) is recomputed right before its
// backward (a Recompute op): a checkpointed layer; the embedding unless checkpointing is none
// (its recompute is empty: its backward needs only the token ids); the head always (the fused
// head never keeps its vocabulary-sized logits, so its backward recomputes them).
bool recomputes(const ActivationCheckpointing& checkpointing, int unit, int num_units);
// Whether layer l (1..L) keeps only its input in the forward (checkpointed), or its forward's
// saved activations until its backward (memory model: kept_activations).
bool keeps_only_input(const ActivationCheckpointing& checkpointing, int layer);
// How many of the L layers are checkpointed.
int checkpointed_layers(const ActivationCheckpointing& checkpointing, int num_layers);
// Whether unit u's Recompute op reruns only its attention core (scores, softmax, dropout and
// scores x V, or flash attention's one kernel) from the q, k, v its forward kept: every layer
// under selective recompute (Korthikanti et al., 2022). Such a layer keeps its forward's saved
// activations but the attention kernel's own saved state, which the recompute restores.
bool recomputes_attention_core(const ActivationCheckpointing& checkpointing, int unit,
                               int num_units);
// Whether unit u has a Recompute op before its backward at all (recomputes or
// recomputes_attention_core).
bool has_recompute_op(const ActivationCheckpointing& checkpointing, int unit, int num_units);
// Why `model` cannot run `checkpointing`, or nothing when it can: selective recompute reruns
// the attention core, so the model's layers must have one (attention heads).
std::optional<std::string> attention_core_refusal(const ModelSpec& model,
                                                  const ActivationCheckpointing& checkpointing);

// ---- gradient accumulation ----------------------------------------------------------------

// Rounds of the iteration: layered runs every micro-batch of a unit before the next unit (one
// round); standard and no_sync run the whole model once per micro-batch, as many rounds as
// the most micro-batches any rank with samples has (at least 1).
int rounds(Accumulation accumulation, int max_micro_batches);
// Whether round k (0-based, of `rounds`) reduce-scatters every unit's gradient: standard every
// round, no_sync only the last (its unsharded gradients accumulate until then), layered its one.
bool reduces_in_round(Accumulation accumulation, int round, int rounds);

// Collectives per unit per iteration over its sharding group: every round gathers the unit once
// for its forward and once again for its backward (the gathered parameters are freed between),
// and reduce-scatters it when reduces_in_round says so.
struct UnitCollectives {
  int forward_gathers = 0;
  int backward_gathers = 0;
  int reduce_scatters = 0;
  bool operator==(const UnitCollectives&) const = default;
};
UnitCollectives unit_collectives(Accumulation accumulation, int rounds);

// ---- sharding -----------------------------------------------------------------------------

// The collectives a sharding implies for each unit: its gathers and reduce-scatters span one
// sharding group (the whole world under full sharding); hybrid sharding adds, once per unit
// and iteration after its last reduce-scatter, one all-reduce across the groups (over each
// piece's owners, one per group) when there is more than one group.
struct ShardingCollectives {
  bool group_collectives = true;    // all-gather / reduce-scatter within each group
  int cross_group_all_reduces = 0;  // per unit per iteration
};
ShardingCollectives sharding_collectives(const Sharding& sharding);

// ---- the framework's parameter gathers ----------------------------------------------------

// When a sharding runtime issues each phase's parameter gather (costmodels/README.md,
// "Frameworks", which cites each rule's source). A phase's gather is issued once the compute of
// its gate phase is done; gate −1 issues it before the first phase. Every runtime frees a
// phase's gathered parameters when the phase's compute is done.
struct GatherRules {
  // Gate = phase − lookahead: 2 runs the gathers one phase ahead of the compute, 1 issues a
  // gather only when its phase is next.
  int forward_lookahead = 2;
  int backward_lookahead = 2;
  // DeepSpeed ZeRO-3's prefetch bucket (stage3_prefetch_bucket_size, elements): at the start of
  // each phase the runtime gathers that phase unless already issued, then issues the phases
  // after the furthest one issued while what it issued at this step is below the bucket (and
  // the live cap allows), so a phase crossing the bucket is issued whole. 0: the lookahead
  // rules.
  double prefetch_bucket_elements = 0;
  // ZeRO-3's stage3_max_live_parameters: no prefetch while the gathered and in-flight
  // elements would pass it.
  double max_live_elements = 0;
  bool operator==(const GatherRules&) const = default;
};
// `prefetch` is the plan's: false issues every gather only when its phase is next.
GatherRules gather_rules(Framework framework, bool prefetch);

// One phase as the gather rules see it: the elements it gathers and whether it is a backward.
struct GatherPhase {
  double elements = 0;
  bool backward = false;
};
// Per phase, the phase after whose compute its gather is issued (−1: at the start). Each gate
// is below its phase and the gates never decrease, so the gathers stay in phase order.
std::vector<int> gather_gates(const GatherRules& rules, std::span<const GatherPhase> phases);
// The most phases' gathered parameters alive at once on a rank whose every phase gathers
// `phase_elements`, over `phases` phases (the memory model's gathered term): the phase
// computing and the gathers issued ahead of it.
int most_live_gathers(const GatherRules& rules, double phase_elements, int phases);

// What the framework's schedule does, for `describe` and reports: "gathers one unit ahead",
// "gathers ahead up to a 5e+07-element prefetch bucket (1e+09 live)", and for a replicating
// framework "; one replica of the state per rank".
std::string describe_schedule(Framework framework, bool prefetch = true);

// Whether the framework keeps a full replica of the training state on every rank (DDP): its
// plan shards in groups of one rank each (hybrid sharding whose every rank owns all of every
// unit), so a unit's gradient reduction is one all-reduce across the replicas.
bool replicates_state(Framework framework);

// ---- training state -----------------------------------------------------------------------

// Bytes of sharded training state per parameter owned: the master weight (params dtype), its
// gradient shard (reduce dtype) and AdamW's two fp32 moments (16 B for fp32 / fp32).
double state_bytes_per_parameter(const Precision& precision);

// ---- offload ------------------------------------------------------------------------------

// Why `offload` cannot run with `checkpointing`, or nothing when it can: host offload moves the
// checkpointed layer inputs to host memory between forward and recompute, and layers without
// checkpointing keep their activations on the device, so it needs every layer checkpointed.
std::optional<std::string> offload_conflict(Offload offload,
                                            const ActivationCheckpointing& checkpointing);

}  // namespace cephalo::schedule

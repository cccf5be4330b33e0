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
#include <optional>
#include <string>

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

#pragma once
// How a Plan shards the training state (the plan key "sharding"; scenarios/README.md).
//
//   "sharding": "full"                                   (default) one group of every rank:
//                                                        each rank owns its state_share of
//                                                        every unit, Σ shares = 1.
//   "sharding": {"kind": "hybrid", "groups": [[0,1,2,3],[4,5,6,7]]}
//   (a group may be written {"ranks": [first, last]}: the ranks first..last)
//                                                        hybrid sharding (HSDP): the ranks are
//                                                        partitioned into groups; each group
//                                                        holds one full copy of the state, cut
//                                                        by its members' shares (Σ = 1 within
//                                                        every group; a group lists its ranks
//                                                        in ascending order, its slices follow
//                                                        that order).
//
// Per-unit all-gathers and reduce-scatters run inside a group; once per step, each element's
// gradient is then all-reduced over the ranks of the other groups that own it (the pieces are
// the intersections of the groups' slices: traces/README.md "Hybrid sharding").
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/json_reader.hpp"

namespace cephalo {

// How the ranks of one data-parallel group hold their training state: the one kind every plan
// uses (an FSDP plan's "sharding", a split's "model_split.sharding").
// Full: FSDP / ZeRO-3, parameters, gradients and optimizer state sharded over the group.
// Hybrid: sharded over the group's ranks on one node, replicated across nodes (HSDP).
// Optimizer: ZeRO-1 / Megatron's distributed optimizer: parameters and gradients replicated,
// the optimizer state (and the master weights) sharded; gradients reduce-scattered, updated
// parameters all-gathered once per iteration. None: DDP, everything replicated, gradients
// all-reduced. An FSDP plan's layout (Sharding below) is Full or Hybrid with its groups; a
// replicating framework's is Hybrid with one rank per group.
enum class ShardingKind { Full, Hybrid, Optimizer, None };
std::string to_string(ShardingKind kind);
// The inverse of to_string ("full", "hybrid", "optimizer", "none"); empty for anything else.
std::optional<ShardingKind> parse_sharding_kind(std::string_view text);

struct Sharding {
  ShardingKind kind = ShardingKind::Full;  // Full or Hybrid
  std::vector<std::vector<int>> groups;    // Hybrid: as listed (validated partition); Full: empty

  bool hybrid() const { return kind == ShardingKind::Hybrid; }
  bool operator==(const Sharding&) const = default;
};

// The groups every consumer uses: the plan's groups, or for full sharding one group of ranks
// 0..num_ranks-1.
std::vector<std::vector<int>> shard_groups(const Sharding& sharding, int num_ranks);

// Hybrid sharding with one group per rank: every rank holds a full replica of the state (the
// layout of a replicating framework, schedule::replicates_state).
Sharding replica_sharding(int num_ranks);

// Reads the value of the "sharding" key (shape only: a string "full" or the hybrid object with
// non-empty integer groups). check_sharding validates it against the ranks.
Sharding parse_sharding(JsonReader reader);

// The groups partition ranks 0..shares.size()-1 (no rank twice, none missing, no empty group)
// and the shares of every group sum to 1 within kShareSumTolerance. Throws ValidationError at
// `sharding` (the key's reader) naming the group, or at `ranks` for a group's share sum.
void check_sharding(const Sharding& sharding, const std::vector<double>& shares,
                    const JsonReader& sharding_reader, const JsonReader& ranks_reader);

// "full" or the hybrid object; with `ranges` a group of consecutive ranks is written
// {"ranks": [first, last]} (the compact plan form), otherwise as its list of ranks.
Json to_json(const Sharding& sharding, bool ranges = false);
// "full", "hybrid (2 groups: 4+4 ranks)", or above 8 groups by runs of equal sizes
// "hybrid (3125 groups: 3125 x 32 ranks)".
std::string describe(const Sharding& sharding);

}  // namespace cephalo

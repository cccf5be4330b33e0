#pragma once
// The resolved sharding of a plan (core/sharding.hpp) over the units' flat buffers: which rank
// owns which element range, inside which group, and — under hybrid sharding — the pieces of
// every unit that the cross-group reduction all-reduces. Built once by the graph builder and
// carried by the TrainingGraph, so the simulator, the cost models and the backend read the same
// slices and never re-derive them.
//
// Semantics (traces/README.md "Hybrid sharding"):
//  * every group holds one full copy of each unit: rank r at position i of its group owns
//    [off[i], off[i+1]) with off = shard_offsets(numel, shares of the group's ranks in order);
//  * a piece is a maximal element range owned by the same rank in every group: the intersection
//    of one slice of each group. The pieces of a unit tile it; piece p is owned by exactly one
//    rank per group (`owners(p)`, in group order). Under full sharding there is one group and no
//    piece (nothing is reduced across groups).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cephalo/core/sharding.hpp"

namespace cephalo::traces {

// A rank's element range of a unit's flat buffer.
struct UnitSlice {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

struct CrossPiece {
  std::int64_t offset = 0;  // element range of the unit's flat buffer
  std::int64_t count = 0;
  std::uint32_t owners_begin = 0;  // into the owners array (ShardLayout::owners)
};

class ShardLayout {
 public:
  ShardLayout() = default;
  // `shares` per rank (summing to 1 within every group), `unit_numel` per unit.
  ShardLayout(const Sharding& sharding, const std::vector<double>& shares,
              const std::vector<std::int64_t>& unit_numel);

  int num_ranks() const { return static_cast<int>(group_of_.size()); }
  int num_units() const { return static_cast<int>(numel_.size()); }
  int num_groups() const { return static_cast<int>(group_begin_.size()) - 1; }
  bool hybrid() const { return num_groups() > 1; }

  // Ranks of group g in slice order (ascending).
  std::span<const int> group(int g) const;
  int group_of(int rank) const { return group_of_[static_cast<std::size_t>(rank)]; }
  int position(int rank) const { return position_[static_cast<std::size_t>(rank)]; }

  std::int64_t numel(int unit) const { return numel_[static_cast<std::size_t>(unit)]; }
  // Rank r's slice of unit u (inside its group's copy).
  UnitSlice slice(int unit, int rank) const;
  // Elements each member of group g owns of unit u, in group order (the -v collectives' counts).
  std::vector<std::int64_t> group_counts(int unit, int g) const;
  // Σ over units of the rank's slice (its sharded training state, in elements).
  std::int64_t owned_elements(int rank) const;

  // The cross-group pieces of unit u in offset order (empty under full sharding).
  std::span<const CrossPiece> pieces(int unit) const;
  // The piece's owners: num_groups() ranks, one per group, in group order.
  std::span<const int> owners(const CrossPiece& piece) const;

  // The state as one partition in rank order (num_ranks + 1 bounds): every rank's slice under
  // full sharding; under hybrid, group 0's slices at its ranks and empty slices elsewhere (a
  // checkpoint records one copy of the state: group 0's).
  std::vector<std::int64_t> checkpoint_offsets(int unit) const;

 private:
  std::vector<int> group_ranks_;            // concatenated groups
  std::vector<std::uint32_t> group_begin_;  // groups + 1
  std::vector<int> group_of_, position_;    // per rank
  std::vector<std::int64_t> numel_;         // per unit
  std::vector<std::uint32_t> row_of_;       // per unit: its row (units of one count share one)
  std::vector<std::int64_t> bounds_;        // rows × stride_: each group's shard_offsets in turn
  std::size_t stride_ = 0;                  // ranks + groups
  std::vector<std::int64_t> owned_;         // per rank: Σ over units of its slice
  std::vector<CrossPiece> pieces_;          // all rows, row-major
  std::vector<std::uint32_t> piece_begin_;  // rows + 1
  std::vector<int> owners_;
};

}  // namespace cephalo::traces

namespace cephalo {
struct Plan;
struct Scenario;
}  // namespace cephalo

namespace cephalo::traces {

// The layout the graph builder gives an FSDP plan's one data-parallel domain (every rank's
// share, each unit's parameters rounded, the plan's groups), without building a graph: the
// builder's own code (GraphBuilder::domain_layout, graph_builder.cpp), so the two never differ.
// Under a split: stage 0's first domain's (TrainingGraph::layout()).
ShardLayout shard_layout_of(const Plan& plan, const Scenario& scenario);

// Hybrid sharding: every group must be able to hold one full copy of the sharded training
// state (master parameters, gradient, Adam m and v) in its devices' usable memory, before any
// activation; a group that cannot is a bad plan, not an OOM to simulate. Throws
// ValidationError at "sharding.groups[g]" of `plan_file` naming the group's ranks, the state's
// bytes and the group's usable bytes. Nothing to check under full sharding (the simulator's
// OOM verdict covers it).
void check_groups_hold_state(const Plan& plan, const Scenario& scenario,
                             const std::string& plan_file);

// Every check a plan for this scenario must pass before anything reads it: validate_plan_for
// (the plan's own consistency and its fit to the cluster) and then check_groups_hold_state.
// The one entry point for the CLI, Python and the planner's replays, so none skips a check.
void check_plan_for(const Plan& plan, const Scenario& scenario, const std::string& plan_file);

// A plan file for this scenario: read (load_plan), `scenario` cut to the nodes the plan runs on
// (scenario_for_plan, core/plan_nodes.hpp) and the plan checked for it (check_plan_for),
// messages naming the file.
Plan load_plan_for(Scenario& scenario, const std::string& plan_file);

}  // namespace cephalo::traces

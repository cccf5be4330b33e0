#pragma once
// The planner's choice of how the state is sharded (plan key "sharding", core/sharding.hpp):
// full sharding, or hybrid sharding with groups of k consecutive nodes (every node a group is
// k = 1). The strategy's plan (batches, micro-batches) is the starting point; for each grouping
// the shares are re-cut inside every group so that the group holds one full copy of the state
// within its devices' memory (shares ∝ the memory each rank has left after everything but the
// state), micro-batches are split further where a group cannot hold it otherwise, and every
// candidate is replayed on the simulator. The fastest candidate that fits wins; the note says
// what each candidate took and why the others lost.
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_result.hpp"
#include "replay_outcome.hpp"

namespace cephalo::planner {

struct ShardingCandidate {
  std::string label;  // "full", "hybrid: 1 node per group (6 groups)"
  Sharding sharding;
  int nodes_per_group = 0;  // 0 for full
};

// The groupings `mode` allows: "full" (just full), "hybrid" (groups of `group_nodes` nodes,
// default 1), "auto" (full and every k = 1 .. nodes-1, or just k = group_nodes when given).
std::vector<ShardingCandidate> sharding_candidates(const Scenario& scenario,
                                                   const std::string& mode, int group_nodes);

// `plan` (full sharding) re-cut for `sharding`: shares inside every group ∝ the rank's memory
// left after its non-state memory (its micro-batches halved, at most 6 times, while the group
// cannot hold the state). Returns false with `why` when some group cannot hold one copy.
bool apply_grouping(const Scenario& scenario, Plan& plan, const Sharding& sharding,
                    std::string* why);

// make_plan's step after the strategy when options.sharding is not "full": replaces res.plan by
// the best simulated candidate, sets res.simulated_iteration_s and explains the choice in
// res.note. InfeasibleError when no candidate fits. Replays go through `replays` when given
// (make_plan's, so its final replay of the chosen plan is not repeated).
void choose_sharding(const Scenario& scenario, const costmodels::CostModels& models,
                     const PlannerOptions& options, PlanResult& res,
                     ReplayCache* replays = nullptr);

// The planner's prediction of a hybrid plan's communication per iteration: the slowest group's
// gathers and reduce-scatters plus the cross-group reductions (the same requests the simulator
// prices, from the plan's graph).
double hybrid_comm_seconds(const Scenario& scenario, const costmodels::CostModels& models,
                           const Plan& plan);

}  // namespace cephalo::planner

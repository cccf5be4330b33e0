#pragma once
// Simulator in the loop: `search` takes the plans of `optimal` (both offload modes), of the
// other strategies, and neighbours of the best one (a sample moved between ranks, the other
// uneven-collective variant, the micro-batch split), simulates each on the discrete-event
// simulator, hill-climbs from the best, and returns the plan with the best simulated
// throughput that the simulator does not find out of memory. Because the other strategies'
// plans are candidates, `search` is never worse in simulation than any of them that fits.
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_result.hpp"
#include "replay_outcome.hpp"

namespace cephalo::planner {

PlanResult search_plan(const Scenario& scenario, const costmodels::CostModels& models,
                       const PlannerOptions& options);

}  // namespace cephalo::planner

#pragma once
// Simulator in the loop: `search` takes the plans of `optimal` (both offload modes), of the
// other strategies, and neighbours of the best one (a sample moved between ranks, the other
// uneven-collective variant, the micro-batch split), simulates each on the discrete-event
// simulator, hill-climbs from the best, and returns the plan with the best simulated
// throughput that the simulator does not find out of memory. Because the other strategies'
// plans are candidates, `search` is never worse in simulation than any of them that fits.
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"

namespace cephalo::planner {

struct PlanResult;
struct PlannerOptions;

struct SimOutcome {
  double iteration_s = 0;
  double samples_per_s = 0;
  bool oom = false;
  std::string oom_detail;  // "rank 2, op F u3 mb1 r2, 23.1 GiB > 22.0 GiB"
  int oom_rank = -1;
  std::vector<double> peak_bytes;      // per rank
  std::vector<double> capacity_bytes;  // per rank, what the simulator judged against
};

// Builds the TrainingGraph of `plan` and replays it.
SimOutcome simulate_plan(const Scenario& scenario, const costmodels::CostModels& models,
                         const Plan& plan);

PlanResult search_plan(const Scenario& scenario, const costmodels::CostModels& models,
                       const PlannerOptions& options);

}  // namespace cephalo::planner

#pragma once
// One plan replayed on the discrete-event simulator, reduced to what the planner judges by
// (time, OOM verdict, per-rank peaks). Used by `optimal` (memory check, candidate replays),
// `search` and the sweeps.
#include <map>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"

namespace cephalo::planner {

struct SimOutcome {
  double iteration_s = 0;
  double samples_per_s = 0;
  bool oom = false;
  std::string oom_detail;  // "rank 2, op F u3 mb1 r2, 23.1 GiB > 22.0 GiB"
  int oom_rank = -1;
  std::vector<double> peak_bytes;      // per rank
  std::vector<double> capacity_bytes;  // per rank, what the simulator judged against
};

// Builds the TrainingGraph of `plan` and replays it (sim::simulate_plan, the one replay), with
// its arguments in sim's order. `most_replayed_ranks` > 0: a plan whose replay would build more
// ranks (too few alike to replay by class) throws sim::ReplayTooLarge, nothing built.
SimOutcome replay_outcome(const Plan& plan, const Scenario& scenario,
                          const costmodels::CostModels& models, int most_replayed_ranks = 0);

// replay_outcome memoised by plan: the replay is deterministic, so a plan replayed before (the
// same schedule, sharding and every rank's batch, micro-batch split and share) is answered from
// the first replay. `optimal`'s refinements often arrive at a plan already replayed (the
// slowest-step or phase-weighted solution equal to the model optimum); at 100k ranks a replay
// costs ~0.5 s and the key a few ms.
class ReplayCache {
 public:
  // A plan replayed before is answered whatever `most_replayed_ranks`; a new one is replayed
  // under it (replay_outcome).
  const SimOutcome& outcome(const Plan& plan, const Scenario& scenario,
                            const costmodels::CostModels& models, int most_replayed_ranks = 0);
  int replays() const { return static_cast<int>(done_.size()); }
  int hits() const { return hits_; }

 private:
  std::map<std::string, SimOutcome> done_;
  int hits_ = 0;
};

}  // namespace cephalo::planner

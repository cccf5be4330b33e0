#pragma once
// The 3D search's split made into the plan that runs it and replayed by the simulator: what
// `cephalo plan --parallelism 3d` prints and writes (-o: a Plan with its "model_split", which
// `simulate`, `run` and `predict 3d --split` read), and what `--parallelism auto` compares with
// the FSDP plan, both sides on the simulator's scale (planner/README.md, "3D plans: search").
//
//   PlanResult r = plan_split(scenario, options, models);  // search, plan, replay
//   r.simulated_iteration_s;  // what `cephalo simulate` of plan_record(r) reports
//   r.split->search;          // the search that chose it (plan_result.hpp, SplitDetail)
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_result.hpp"
#include "cephalo/planner/split_search.hpp"
#include "cephalo/traces/report.hpp"

namespace cephalo::planner {

// The plan of each of the search's finalists (the estimate's best few; none listed: the
// search's split) as even_split_plan with the estimate's replica samples and shares and
// checkpointing from `recompute`, replayed: the fastest in simulation that fits. Never a plan
// its replay finds out of memory: when none fits, InfeasibleError naming the closest and its
// shortfall. The result is of the split family: its prediction the replay's time, its model
// time the estimate's, its note the finalists' replays, its runner-up the fastest other
// finalist that fits (as runner_up_text writes it; empty when there was none).
PlanResult plan_for_split(const Scenario& scenario, const SplitSearchResult& search,
                          const costmodels::CostModels& models);
// search_split, then plan_for_split.
PlanResult plan_split(const Scenario& scenario, const SplitSearchOptions& options,
                      const costmodels::CostModels& models);

// A split plan's record (plan_record's for the split family): the Plan with its "model_split"
// and "predicted" holding the estimate, the replay's time and the search's counts.
Json split_plan_record(const PlanResult& result, PlanForm form = PlanForm::Auto);
// A split plan's text (render_plan's for the split family): the search's table
// (render_split_search), then the replay: its iteration time against the estimate's, the
// bubble and exposed communication per stage.
std::string render_split_plan(const PlanResult& result);

// `plan --parallelism auto`: the one decision between the families, over what each produced:
// its plan or, when it has none, why (`*_refusal`). The faster of the two, both replayed by the
// simulator (never slower than either), and one line on why the other lost, naming what costs
// it the most: the FSDP plan's exposed communication (its gathers and reductions of the sharded
// state), the split's pipeline bubble and its tensor-parallel and transfer time. A side without
// a plan loses to one with a plan; a side that runs out of memory in the replay loses to one
// that does not; when neither fits, FSDP is chosen (its table says where memory runs out); when
// neither has a plan the request is infeasible (InfeasibleError naming both reasons).
struct FamilyChoice {
  bool fsdp = true;
  std::string why;
};
FamilyChoice choose_family(const Scenario& scenario, const std::optional<PlanResult>& fsdp,
                           const std::string& fsdp_refusal, const std::optional<PlanResult>& split,
                           const std::string& split_refusal, const costmodels::CostModels& models);

}  // namespace cephalo::planner

// One plan replayed on the simulator; see simulate_plan.hpp.
#include "cephalo/planner/simulate_plan.hpp"

#include "cephalo/core/units.hpp"
#include "cephalo/sim/class_replay.hpp"

namespace cephalo::planner {

SimOutcome simulate_plan(const Scenario& s, const costmodels::CostModels& models,
                         const Plan& plan) {
  validate_plan_for(plan, s, "<planner>");
  traces::check_groups_hold_state(plan, s, "<planner>");
  // One representative per class of identical ranks where that applies (equal to the full
  // replay; sim/class_replay.hpp), so candidate replays of 100k-rank plans stay cheap.
  const auto result = sim::simulate_plan(plan, s, *models.compute, *models.comm);
  SimOutcome out;
  out.iteration_s = result.report.iteration_time_s;
  out.samples_per_s = result.report.samples_per_s;
  out.oom = result.report.oom;
  for (const auto& r : result.report.ranks) {
    out.peak_bytes.push_back(r.peak_memory_bytes);
    out.capacity_bytes.push_back(r.capacity_bytes);
  }
  if (result.report.oom_detail) {
    const auto& d = *result.report.oom_detail;
    out.oom_rank = d.rank;
    out.oom_detail = "rank " + std::to_string(d.rank) + ", op " + d.op_name + ", " +
                     format_bytes(d.bytes) + " > " + format_bytes(d.capacity_bytes);
  }
  return out;
}

}  // namespace cephalo::planner

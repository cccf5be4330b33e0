// `even`: stock FSDP — equal batches (the remainder to the first ranks), equal shares, the
// largest micro-batch the memory model allows with that share.
#include "plan_support.hpp"
#include "strategy_functions.hpp"

namespace cephalo::planner::detail {

PlanResult plan_even(const Scenario& s, const costmodels::CostModels&, const PlannerOptions& opt) {
  check_batch(s, "even");
  PlanResult res;
  res.plan = empty_plan(s, "even");
  set_even_batches(res.plan, s.job.global_batch);
  apply_schedule_options(res.plan, opt);
  fill_equal_shares(s, res.plan, "even", opt);
  return res;
}

}  // namespace cephalo::planner::detail

// `proportional`: batches in proportion to each device's samples/s at a reference micro-batch
// (the compute model), largest-remainder rounding, equal shares.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "plan_support.hpp"
#include "strategy_functions.hpp"

namespace cephalo::planner::detail {

PlanResult plan_proportional(const Scenario& s, const costmodels::CostModels& models,
                             const PlannerOptions& opt) {
  check_batch(s, "proportional");
  ScenarioModel sm(s, models);
  PlanResult res;
  res.plan = empty_plan(s, "proportional");
  const int n = static_cast<int>(res.plan.ranks.size());
  const int B = s.job.global_batch;
  // Speed: samples per second at the even per-rank batch as one micro-batch (capped at 16).
  const int ref = std::clamp(B / n, 1, 16);
  std::vector<double> speed(n);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    speed[i] = ref / sm.table(sm.devices[i]).micro_batch(ref);
    total += speed[i];
  }
  // Largest remainder, at least one sample each.
  std::vector<int> b(n);
  std::vector<std::pair<double, int>> rest;
  int assigned = 0;
  for (int i = 0; i < n; ++i) {
    const double exact = 1 + (B - n) * speed[i] / total;
    b[i] = static_cast<int>(std::floor(exact));
    rest.emplace_back(exact - b[i], i);
    assigned += b[i];
  }
  std::sort(rest.begin(), rest.end(), [](auto& x, auto& y) { return x.first > y.first; });
  for (int k = 0; assigned < B; ++k, ++assigned) ++b[rest[k % n].second];
  for (int i = 0; i < n; ++i) res.plan.ranks[i].batch = b[i];
  apply_schedule_options(res.plan, opt);
  fill_equal_shares(s, res.plan, "proportional", opt);
  return res;
}

}  // namespace cephalo::planner::detail

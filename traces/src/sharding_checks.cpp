#include <algorithm>

#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo::traces {

void check_groups_hold_state(const Plan& plan, const Scenario& scenario,
                             const std::string& plan_file) {
  if (!plan.sharding.hybrid()) return;
  const Precision& prec = scenario.job.precision;
  const double per_parameter = schedule::state_bytes_per_parameter(prec);
  const double parameters = costmodels::total_parameters(scenario.job.model);
  const double state = parameters * per_parameter;
  const auto& devices = scenario.cluster.ranks();
  // A device's usable bytes once per slot kind (RankDevice::slot_kind), not from each rank's
  // own slot (100k places at 100k ranks, on every check of every grouping).
  std::vector<double> usable_of_kind;
  auto usable_of = [&](const RankDevice& d) {
    const auto k = static_cast<std::size_t>(d.slot_kind);
    if (k >= usable_of_kind.size()) usable_of_kind.resize(k + 1, -1.0);
    if (usable_of_kind[k] < 0) usable_of_kind[k] = usable_capacity_bytes(d.slot->spec);
    return usable_of_kind[k];
  };
  for (std::size_t g = 0; g < plan.sharding.groups.size(); ++g) {
    const auto& group = plan.sharding.groups[g];
    double usable = 0;
    std::string ranks;
    for (std::size_t i = 0; i < group.size(); ++i) {
      const int r = group[i];
      if (r < 0 || r >= static_cast<int>(devices.size())) continue;  // validate_plan_for's
      usable += usable_of(devices[static_cast<std::size_t>(r)]);
      if (i < 8) {
        if (i) ranks += ", ";
        ranks += std::to_string(r);
      } else if (i == 8) {
        ranks += ", ...";
      }
    }
    if (state > usable)
      throw ValidationError(
          plan_file, "sharding.groups[" + std::to_string(g) + "]",
          "group " + std::to_string(g) + " (ranks [" + ranks + "], " +
              std::to_string(group.size()) + " devices) with " + format_bytes(usable) +
              " of usable device memory in total",
          "a group that can hold one full copy of the training state: " + format_bytes(state) +
              " (" + format_quantity(parameters, Quantity::Dimensionless) + " parameters × " +
              format_quantity(per_parameter, Quantity::Dimensionless) +
              " B: master weights, gradient, Adam m and v), before activations; use larger "
              "groups or full sharding");
  }
}

Plan load_plan_for(Scenario& scenario, const std::string& plan_file) {
  Plan plan = load_plan(plan_file, &scenario);
  scenario = scenario_for_plan(scenario, plan, plan_file);
  check_plan_for(plan, scenario, plan_file);
  return plan;
}

void check_plan_for(const Plan& plan, const Scenario& scenario, const std::string& plan_file) {
  validate_plan_for(plan, scenario, plan_file);
  const Framework framework = scenario.job.implementation.framework;
  // A split plan's data-parallel sharding is its model_split's (the FSDP plans' sharding key
  // does not apply): a replicating framework runs none.
  if (plan.has_split()) {
    if (schedule::replicates_state(framework) && plan.model_split.sharding != ShardingKind::None)
      throw ValidationError(plan_file, "model_split.sharding", to_string(plan.model_split.sharding),
                            "none for framework " + to_string(framework) +
                                " (it keeps a full replica of each stage's training state on "
                                "every rank of the stage's data-parallel group)");
  } else if (schedule::replicates_state(framework)) {
    const auto& groups = plan.sharding.groups;
    const auto wide = std::find_if(groups.begin(), groups.end(),
                                   [](const std::vector<int>& g) { return g.size() != 1; });
    if (!plan.sharding.hybrid() || wide != groups.end())
      throw ValidationError(
          plan_file,
          plan.sharding.hybrid() ? "sharding.groups[" + std::to_string(wide - groups.begin()) + "]"
                                 : std::string("sharding"),
          describe(plan.sharding),
          "one group per rank for framework " + to_string(scenario.job.implementation.framework) +
              " (it keeps a full replica of the training state on every rank): "
              "{\"kind\": \"hybrid\", \"groups\": [[0], [1], ...]}; `cephalo plan` makes it");
  }
  check_groups_hold_state(plan, scenario, plan_file);
}

}  // namespace cephalo::traces

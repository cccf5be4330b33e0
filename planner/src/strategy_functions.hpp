#pragma once
// The strategies' functions (internal): one per file src/strategy_<name>.cpp, listed in the
// table of strategies.cpp. `search` calls the others directly for its seed plans.
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_result.hpp"

namespace cephalo::planner::detail {

PlanResult plan_even(const Scenario& s, const costmodels::CostModels& models,
                     const PlannerOptions& options);
PlanResult plan_proportional(const Scenario& s, const costmodels::CostModels& models,
                             const PlannerOptions& options);
PlanResult plan_cephalo(const Scenario& s, const costmodels::CostModels& models,
                        const PlannerOptions& options);
PlanResult plan_optimal(const Scenario& s, const costmodels::CostModels& models,
                        const PlannerOptions& options);
PlanResult plan_search(const Scenario& s, const costmodels::CostModels& models,
                       const PlannerOptions& options);

}  // namespace cephalo::planner::detail

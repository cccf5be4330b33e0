#pragma once
// Leaving GPUs out (plan_request.hpp, PlanResult::faster_without): the cluster without its
// slowest node classes, planned with the same request and weighed against the answer.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"
#include "cephalo/planner/plan_request.hpp"

namespace cephalo::planner::detail {

// The answer's simulated iteration time; infinity when its plan does not fit.
double answer_iteration_s(const PlanResult& answer);
// Plans each subset candidate with `plan` (answer_plan with use_all set) and fills
// answer.subsets and, when one is at least kIdleGain faster, answer.faster_without; returns
// that subset's answer (planned on core's with_nodes cut; its plan's "nodes" not yet set).
// `split_estimate_s`: the estimate of the best split of every GPU (infinity: none), each
// subset's split search's ceiling (PlanRequest::split_ceiling_s): a subset none of whose splits
// is estimated below it is weighed by its FSDP plan alone, or not planned when the request
// fixes splits.
std::optional<PlanResult> weigh_subsets(
    const Scenario& scenario, const PlanRequest& request, PlanResult& answer,
    double split_estimate_s,
    const std::function<PlanResult(const Scenario&, const PlanRequest&)>& plan);

// The candidates: the scenario's nodes grouped by their GPU types, fastest class first (by the
// slowest GPU's peak at the job's compute dtype); candidate k keeps the first C - k classes.
struct NodeClass {
  std::string gpus;        // the node's GPU types, "A100-80GB" or "A100-80GB+L4"
  double peak_flops = 0;   // its slowest GPU's dense peak at the job's compute dtype
  std::vector<int> nodes;  // indices in the cluster
};
std::vector<NodeClass> node_classes(const Scenario& scenario);

}  // namespace cephalo::planner::detail

#pragma once
// What sweep.cpp and sweep_spec.cpp share (internal to the planner).
#include <string>
#include <vector>

#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/sweep.hpp"

namespace cephalo::planner::detail {

// "a, b, c": the names a refusal lists.
std::string join_names(const std::vector<std::string>& names);
// What `cephalo plan` is asked for each row of the sweep: the spec's keys as its flags, the
// split search bounded to kSweepSplitFinalists replays.
PlanRequest plan_request(const SweepSpec& spec);

}  // namespace cephalo::planner::detail

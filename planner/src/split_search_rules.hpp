#pragma once
// The 3D search's rules that look at the request and the cluster before any candidate is
// priced (split_search.cpp runs them): internal to the planner.
#include "cephalo/core/scenario.hpp"
#include "cephalo/planner/split_search.hpp"

namespace cephalo::planner::split_detail {

// A cluster of CPU devices is one only the execution backend runs: a split planned for it must
// be one `cephalo run` runs (core's backend_split_refusal).
bool backend_only(const Cluster& cluster);

// The fixed dimensions against each other and the scenario, before any search: a value no
// split can have is named with its rule (ValidationError: a bad command line, exit 2), rather
// than left for the search to find nothing.
void check_fixed_dimensions(const Scenario& scenario, const SplitSearchOptions& o);

// How far a priced candidate is over memory: its stages' worst total / capacity (the search
// names the closest refused candidate when none fits).
double overshoot(const SplitEstimate& e);

}  // namespace cephalo::planner::split_detail

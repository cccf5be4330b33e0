#pragma once
// check_model_split's context for a scenario, apart from model_split.hpp so that a caller that
// checks many splits of one scenario (the planner's split estimator) can hold it: the rank →
// node table it views is O(ranks) to build, and check_model_split_for builds it per call.
#include <span>
#include <string>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo {

// The cluster's rank → node table: rank r lives on node rank_nodes(cluster)[r] (node-major
// ranks, as plans number them).
std::vector<int> rank_nodes(const Cluster& cluster);

// What check_model_split reads of a scenario: its model's layers, heads, key/value heads, tied
// embeddings and MLP width, with `node_of_rank` (rank_nodes of its cluster; viewed, so it must
// outlive the context); messages name `file` and `json_path`. check_model_split_for is
// check_model_split over this context.
SplitContext split_context_for(const Scenario& scenario, std::span<const int> node_of_rank,
                               const std::string& file,
                               const std::string& json_path = "model_split");

}  // namespace cephalo

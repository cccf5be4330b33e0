#pragma once
// What a command that reads a scenario says about it before its work, one line each as the CLI
// prints it on stderr: the one list that `cephalo plan`, `simulate`, `predict 3d` and
// `calibrate stack` print and the Python module raises as warnings (python/README.md), so that
// neither side can say less than the other.
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

// "warning: " + each prediction warning (prediction_warnings: a dtype priced on a slower
// pipeline, the stack calibration's notes), then "note: " + each cluster note (cluster_notes: a
// NIC whose bandwidth is read as the node's total).
std::vector<std::string> scenario_notices(const Scenario& scenario);
// The cluster's notes alone ("note: " + each), for a command that prices only the network
// (`predict collective`): a dtype or stack warning says nothing about a collective.
std::vector<std::string> cluster_notices(const Cluster& cluster);

}  // namespace cephalo::costmodels

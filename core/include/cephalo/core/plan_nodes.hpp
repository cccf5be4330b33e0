#pragma once
// The nodes a plan runs on (DESIGN §4, plan key "nodes"; scenarios/README.md): a plan may use
// some of its scenario's nodes and leave the others idle. Every reader joins a plan to its
// scenario once, through scenario_for_plan, into the scenario of the used nodes only; from
// there on nothing knows about the others: the plan's rank r is the r-th GPU of the used nodes
// (node-major, as Cluster::ranks() numbers them) and a row's "node" is the used node's position
// in the plan's list.
//
//   Plan plan = load_plan(file);
//   const Scenario used = scenario_for_plan(scenario, plan, file);  // every check, every reader
//   ... simulate / run / compare `plan` on `used` ...
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo {

struct Plan;

// The scenario with only `nodes` (indices into scenario.cluster.nodes, ascending, no repeats),
// everything else as it was; the cut is recorded in cluster.used_nodes and cluster.idle (what
// reports print). Indices are not checked here: scenario_for_plan checks a file's.
Scenario with_nodes(const Scenario& scenario, const std::vector<int>& nodes);

// The scenario `plan` runs on: `scenario` itself when the plan has no "nodes", else
// with_nodes(scenario, plan.nodes) after checking every index is one of the scenario's nodes
// (ValidationError at `plan_file`, "nodes[i]", naming the value and the node count).
Scenario scenario_for_plan(const Scenario& scenario, const Plan& plan,
                           const std::string& plan_file);

// The "nodes" value: an array of node indices and [first, last] ranges (both included), in
// ascending order without overlap, at least one node. Refusals name the element, its value and
// the rule. Bounded by kMaxDevices nodes before anything is expanded.
std::vector<int> parse_plan_nodes(JsonReader reader);
// The value written: runs of three or more consecutive nodes as [first, last], others as
// numbers ([0, 1] stays [0, 1]; 1,000 nodes in one run are [[0, 999]]).
Json plan_nodes_json(const std::vector<int>& nodes);
// "0-1, 4, 7-9": node indices as ranges (messages and tables).
std::string format_index_ranges(const std::vector<int>& indices);

// "8x A100-80GB + 16x L4": the GPUs of `nodes` by type, in order of first appearance.
std::string gpu_counts(const std::vector<const Node*>& nodes);

// One line for reports of a cut cluster: "idle: 16x L4 (nodes l4-0, ..., 6 nodes of the
// scenario's 8, not in the plan's \"nodes\")"; empty for a whole cluster.
std::string idle_line(const Cluster& cluster);

}  // namespace cephalo

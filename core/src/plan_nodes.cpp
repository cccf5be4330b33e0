// The nodes a plan runs on: see plan_nodes.hpp.
#include "cephalo/core/plan_nodes.hpp"

#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo {

Scenario with_nodes(const Scenario& scenario, const std::vector<int>& nodes) {
  Scenario sub = scenario;
  const std::vector<Node>& all = scenario.cluster.nodes;
  // Indices into the file's cluster, also when `scenario` was cut already.
  const std::vector<int>& before = scenario.cluster.used_nodes;
  sub.cluster.nodes.clear();
  sub.cluster.used_nodes.clear();
  sub.cluster.nodes.reserve(nodes.size());
  std::size_t next = 0;
  for (int n : nodes) {
    const auto i = static_cast<std::size_t>(n);
    for (; next < i; ++next) sub.cluster.idle.push_back(all[next]);
    sub.cluster.nodes.push_back(all[i]);
    sub.cluster.used_nodes.push_back(before.empty() ? n : before[i]);
    next = i + 1;
  }
  for (; next < all.size(); ++next) sub.cluster.idle.push_back(all[next]);
  return sub;
}

Scenario scenario_for_plan(const Scenario& scenario, const Plan& plan,
                           const std::string& plan_file) {
  if (plan.nodes.empty()) return scenario;
  const int count = static_cast<int>(scenario.cluster.nodes.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i)
    if (plan.nodes[i] >= count)
      throw ValidationError(plan_file, "nodes", "node " + std::to_string(plan.nodes[i]),
                            "node indices from 0 to " + std::to_string(count - 1) + ": cluster \"" +
                                scenario.cluster.name + "\" of scenario \"" + scenario.name +
                                "\" has " + std::to_string(count) + " nodes");
  return with_nodes(scenario, plan.nodes);
}

std::vector<int> parse_plan_nodes(JsonReader reader) {
  const char* const rule =
      "node indices (integers from 0) and [first, last] ranges, in ascending order, each node "
      "once";
  if (!reader.is_array()) reader.fail(std::string("an array of ") + rule);
  if (reader.size() == 0)
    reader.fail_value("[]", "at least one node (leave \"nodes\" out to use every node)");
  // The count is bounded before anything is expanded: a range is two numbers in the file.
  std::int64_t total = 0;
  std::vector<std::pair<int, int>> runs;
  for (std::size_t i = 0; i < reader.size(); ++i) {
    JsonReader e = reader.element(i);
    int first = 0, last = 0;
    if (e.is_array()) {
      if (e.size() != 2) e.fail("a range [first, last] of two node indices");
      first = static_cast<int>(e.element(0).as_integer(0, kMaxDevices - 1));
      last = static_cast<int>(e.element(1).as_integer(0, kMaxDevices - 1));
      if (last < first)
        e.fail_value("[" + std::to_string(first) + ", " + std::to_string(last) + "]",
                     "a range [first, last] with first <= last");
    } else {
      first = last = static_cast<int>(e.as_integer(0, kMaxDevices - 1));
    }
    if (!runs.empty() && first <= runs.back().second)
      e.fail_value(
          first == last ? std::to_string(first)
                        : "[" + std::to_string(first) + ", " + std::to_string(last) + "]",
          std::string(rule) + " (it follows node " + std::to_string(runs.back().second) + ")");
    total += last - first + 1;
    if (total > kMaxDevices)
      e.fail("at most " + std::to_string(kMaxDevices) + " nodes in all (a cluster's bound)");
    runs.emplace_back(first, last);
  }
  std::vector<int> nodes;
  nodes.reserve(static_cast<std::size_t>(total));
  for (const auto& [first, last] : runs)
    for (int n = first; n <= last; ++n) nodes.push_back(n);
  return nodes;
}

Json plan_nodes_json(const std::vector<int>& nodes) {
  Json out = Json::array();
  for (std::size_t i = 0; i < nodes.size();) {
    std::size_t j = i;
    while (j + 1 < nodes.size() && nodes[j + 1] == nodes[j] + 1) ++j;
    if (j - i >= 2) {
      out.push_back(Json::array({nodes[i], nodes[j]}));
    } else {
      for (std::size_t k = i; k <= j; ++k) out.push_back(nodes[k]);
    }
    i = j + 1;
  }
  return out;
}

std::string format_index_ranges(const std::vector<int>& indices) {
  std::string out;
  for (std::size_t i = 0; i < indices.size();) {
    std::size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(indices[i]) +
           (j > i ? "-" + std::to_string(indices[j]) : std::string());
    i = j + 1;
  }
  return out;
}

std::string gpu_counts(const std::vector<const Node*>& nodes) {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const Node* n : nodes)
    for (const DeviceSlot& d : n->devices)
      if (count[d.spec.name]++ == 0) order.push_back(d.spec.name);
  std::string gpus;
  for (const auto& t : order)
    gpus += (gpus.empty() ? "" : " + ") + std::to_string(count[t]) + "x " + t;
  return gpus;
}

std::string idle_line(const Cluster& cluster) {
  if (cluster.idle.empty()) return "";
  std::vector<const Node*> idle;
  for (const Node& n : cluster.idle) idle.push_back(&n);
  const std::string gpus = gpu_counts(idle);
  std::string names;
  constexpr std::size_t kNamed = 4;
  for (std::size_t i = 0; i < cluster.idle.size() && i < kNamed; ++i)
    names += (i ? ", " : "") + cluster.idle[i].name;
  if (cluster.idle.size() > kNamed) names += ", ...";
  const std::size_t all = cluster.idle.size() + cluster.nodes.size();
  return "idle: " + (gpus.empty() ? std::string("no GPU") : gpus) + " (nodes " + names + ": " +
         std::to_string(cluster.idle.size()) + " of the scenario's " + std::to_string(all) +
         " nodes, not in the plan's \"nodes\")";
}

}  // namespace cephalo

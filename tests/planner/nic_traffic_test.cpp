// The per-NIC traffic of planner/README.md's hybrid-sharding demo, computed from the plans'
// TrainingGraphs (not by hand): for every collective that spans nodes, the bytes each node's NIC
// sends in one iteration under a node-major ring, (n−1)/n of the buffer per all-gather or
// reduce-scatter over n ranks, and for the cross-group reduction 2(k−1)/k of each piece over its
// k owners (one per group), a node's pieces sharing its NIC. Prints the table the README shows:
//
//   build/bin/planner_tests --gtest_filter='NicTraffic.*'
//
// and asserts what the README concludes from it: hybrid sharding per node sends less through
// every NIC than full sharding, and none of its gathers or reduce-scatters leaves a node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "sharding_choice.hpp"

namespace cephalo::planner {
namespace {

struct NicTraffic {
  std::vector<double> sent;      // per node: bytes per iteration
  double group_collectives = 0;  // of which all-gathers and reduce-scatters
};

NicTraffic nic_traffic(const Scenario& s, const Plan& plan) {
  const auto g = traces::build_training_graph(plan, s);
  const auto devices = s.cluster.ranks();
  NicTraffic t;
  t.sent.assign(s.cluster.nodes.size(), 0.0);
  const auto& layout = g.layout();
  for (const auto& c : g.collectives()) {
    if (c.group < 0) {  // cross-group reduction: one all-reduce per piece over its owners
      for (const auto& seg : g.segments(c))
        for (const auto& piece : layout.pieces(seg.unit)) {
          const auto owners = layout.owners(piece);
          const double k = static_cast<double>(owners.size());
          const double bytes = static_cast<double>(piece.count) * c.element_bytes;
          for (int r : owners)
            t.sent[static_cast<std::size_t>(devices[static_cast<std::size_t>(r)].node)] +=
                2 * (k - 1) / k * bytes;
        }
      continue;
    }
    const auto members = layout.group(c.group);
    std::vector<int> nodes;
    for (int r : members) nodes.push_back(devices[static_cast<std::size_t>(r)].node);
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    if (nodes.size() < 2) continue;  // stays on the node's own links
    const double n = static_cast<double>(members.size());
    for (int node : nodes) {
      t.sent[static_cast<std::size_t>(node)] += (n - 1) / n * c.total_bytes;
      t.group_collectives += (n - 1) / n * c.total_bytes;
    }
  }
  return t;
}

TEST(NicTraffic, HybridDemoSendsLessThroughEveryNic) {
  const std::string root = CEPHALO_SOURCE_DIR;
  const Scenario s = costmodels::load_scenario(root + "/scenarios/a100-l4-ethernet-gpt2.7b.json");
  const Plan full = load_plan(root + "/tests/golden/a100-l4-ethernet-gpt2.7b.plan.json");
  const Plan hybrid = load_plan(root + "/tests/golden/a100-l4-ethernet-gpt2.7b.hybrid.plan.json");
  ASSERT_FALSE(full.sharding.hybrid());
  ASSERT_TRUE(hybrid.sharding.hybrid());
  const NicTraffic a = nic_traffic(s, full), b = nic_traffic(s, hybrid);
  std::printf("bytes each node's NIC sends per iteration (GB)\n%-6s %8s %8s\n", "node", "full",
              "hybrid");
  for (std::size_t n = 0; n < a.sent.size(); ++n) {
    std::printf("%-6zu %8.2f %8.2f\n", n, a.sent[n] / 1e9, b.sent[n] / 1e9);
    EXPECT_LT(b.sent[n], a.sent[n]) << "node " << n;
  }
  EXPECT_EQ(b.group_collectives, 0.0);  // one node per group: gathers stay on the node
  EXPECT_GT(a.group_collectives, 0.0);
}

// The planner's hybrid estimate prices a group of every kind from a graph of the class
// representatives: the same figure as every group of the whole plan's graph priced over its
// members (the slowest group's gathers and reduce-scatters plus the cross reductions). The demo's
// hybrid plan has six one-node groups, four of them alike (the L4 nodes).
TEST(NicTraffic, HybridEstimateIsTheSlowestOfEveryGroup) {
  const std::string root = CEPHALO_SOURCE_DIR;
  const Scenario s = costmodels::load_scenario(root + "/scenarios/a100-l4-ethernet-gpt2.7b.json");
  const Plan hybrid = load_plan(root + "/tests/golden/a100-l4-ethernet-gpt2.7b.hybrid.plan.json");
  ASSERT_GT(hybrid.sharding.groups.size(), 2u);
  const auto models = costmodels::make_cost_models(s);
  const auto g = traces::build_training_graph(hybrid, s, models.comm.get());
  std::vector<double> per_group(hybrid.sharding.groups.size(), 0.0);
  double cross = 0;
  for (const auto& c : g.collectives()) {
    const double t = models.comm->collective(s.cluster, sim::full_collective_request(g, c)).seconds;
    (c.group < 0 ? cross : per_group[static_cast<std::size_t>(c.group)]) += t;
  }
  const double slowest = *std::max_element(per_group.begin(), per_group.end());
  EXPECT_GT(slowest, 0.0);
  EXPECT_GT(cross, 0.0);
  EXPECT_NEAR(hybrid_comm_seconds(s, models, hybrid), slowest + cross, 1e-12 * (slowest + cross));
}

}  // namespace
}  // namespace cephalo::planner

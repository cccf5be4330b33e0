// Plans of some nodes (core/plan_nodes.hpp, scenarios/README.md "Plans of some nodes"): the
// "nodes" key reads and writes its ranges, every bad list is refused naming the file, the key,
// the value and the rule, scenario_for_plan cuts the scenario so that rank r is the r-th GPU of
// the used nodes, and a plan checked against the wrong cluster is refused.
#include <gtest/gtest.h>

#include <string>

#include "../support/plan_refusal.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/costmodels/catalog.hpp"

using namespace cephalo;

namespace {

using test_support::expect_plan_refusal;
using test_support::parse_plan_json;

// Node 0: 2 A100-80GB; nodes 1, 2: 2 L4 each; node 3: 1 A100-80GB.
Scenario four_nodes() {
  const Json nic = {{"kind", "ethernet"}, {"bandwidth", "25Gbit/s"}, {"latency", "15us"}};
  const Json pcie = {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}};
  auto node = [&](const char* name, const char* gpu, int count) {
    return Json{{"name", name},
                {"gpus", {{{"type", gpu}, {"count", count}}}},
                {"intra_link", pcie},
                {"nic", nic}};
  };
  Json doc = {{"name", "four"},
              {"cluster",
               {{"name", "four"},
                {"nodes",
                 {node("a", "A100-80GB", 2), node("l0", "L4", 2), node("l1", "L4", 2),
                  node("b", "A100-80GB", 1)}}}},
              {"job", {{"model", "gpt-tiny"}, {"sequence_length", 64}, {"global_batch", 6}}}};
  JsonReader reader(doc, "four.json");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), ".");
}

// A plan of `rows` (node, gpu) with "nodes": `nodes`, one sample per rank but the first.
Json plan_json(const Json& nodes, const std::vector<std::pair<int, std::string>>& rows) {
  Json ranks = Json::array();
  const int n = static_cast<int>(rows.size());
  for (int r = 0; r < n; ++r) {
    const int batch = r == 0 ? 6 - (n - 1) : 1;
    ranks.push_back({{"rank", r},
                     {"node", rows[static_cast<std::size_t>(r)].first},
                     {"gpu", rows[static_cast<std::size_t>(r)].second},
                     {"batch", batch},
                     {"micro_batch", batch},
                     {"micro_batches", 1},
                     {"state_share", 1.0 / n}});
  }
  Json j = {{"version", 1}, {"scenario", "four"}, {"ranks", ranks}};
  if (!nodes.is_null()) j["nodes"] = nodes;
  return j;
}

// Nodes 0 and 3: the A100s, ranks 0-1 on node 0 and rank 2 on node 3 (its position 1).
Json a100_plan() {
  return plan_json(Json::array({0, 3}), {{0, "A100-80GB"}, {0, "A100-80GB"}, {1, "A100-80GB"}});
}

}  // namespace

TEST(PlanNodes, ReadsIndicesAndRangesAndWritesRunsAsRanges) {
  const Plan p = parse_plan_json(
      plan_json(Json::array({0, Json::array({1, 2})}),
                {{0, "A100-80GB"}, {0, "A100-80GB"}, {1, "L4"}, {1, "L4"}, {2, "L4"}}));
  EXPECT_EQ(p.nodes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan_nodes_json(p.nodes), Json::array({Json::array({0, 2})}));
  EXPECT_EQ(plan_nodes_json({0, 1, 5}), Json::array({0, 1, 5}));
  EXPECT_EQ(plan_nodes_json({0, 2, 3, 4, 9}), Json::array({0, Json::array({2, 4}), 9}));
  // Written and read back: the same nodes; absent stays absent.
  const Json written = to_json(p);
  EXPECT_EQ(written["nodes"], Json::array({Json::array({0, 2})}));
  EXPECT_EQ(parse_plan_json(written).nodes, p.nodes);
  EXPECT_FALSE(to_json(parse_plan_json(plan_json(nullptr, {{0, "A100-80GB"}}))).contains("nodes"));
  EXPECT_EQ(format_index_ranges({0, 1, 2, 5, 7, 8}), "0-2, 5, 7-8");
}

TEST(PlanNodes, BadListsAreRefusedNamingTheElementValueAndRule) {
  const std::vector<std::pair<int, std::string>> one = {{0, "A100-80GB"}};
  expect_plan_refusal(plan_json(Json::array(), one), {"nodes", "[]", "at least one node"});
  expect_plan_refusal(plan_json(Json::array({1, 1}), one),
                      {"nodes[1]", "1", "ascending order, each node once", "follows node 1"});
  expect_plan_refusal(plan_json(Json::array({2, 0}), one),
                      {"nodes[1]", "0", "ascending order", "follows node 2"});
  expect_plan_refusal(plan_json(Json::array({Json::array({0, 3}), 2}), one),
                      {"nodes[1]", "2", "follows node 3"});
  expect_plan_refusal(plan_json(Json::array({Json::array({3, 1})}), one),
                      {"nodes[0]", "[3, 1]", "first <= last"});
  expect_plan_refusal(plan_json(Json::array({Json::array({1, 2, 3})}), one),
                      {"nodes[0]", "[first, last]"});
  expect_plan_refusal(plan_json(Json::array({-1}), one), {"nodes[0]", "-1"});
  expect_plan_refusal(plan_json(Json::array({"a"}), one), {"nodes[0]"});
  expect_plan_refusal(plan_json(Json(0), one), {"nodes", "array"});
  // The count is bounded before the ranges are expanded.
  expect_plan_refusal(
      plan_json(Json::array({Json::array({0, kMaxDevices - 1}), kMaxDevices - 1}), one),
      {"nodes[1]"});
}

TEST(PlanNodes, TheCutScenarioNumbersRanksOverTheUsedNodes) {
  const Scenario s = four_nodes();
  const Plan p = parse_plan_json(a100_plan());
  const Scenario used = scenario_for_plan(s, p, "plan.json");
  ASSERT_EQ(used.cluster.nodes.size(), 2u);
  EXPECT_EQ(used.cluster.nodes[1].name, "b");
  EXPECT_EQ(used.cluster.used_nodes, (std::vector<int>{0, 3}));
  ASSERT_EQ(used.cluster.idle.size(), 2u);
  EXPECT_EQ(used.cluster.num_ranks(), 3);
  EXPECT_EQ(used.cluster.ranks()[2].node, 1);  // the r-th GPU of the used nodes
  EXPECT_EQ(used.name, s.name);
  EXPECT_NO_THROW(validate_plan_for(p, used, "plan.json"));
  const std::string idle = idle_line(used.cluster);
  EXPECT_NE(idle.find("idle: 4x L4 (nodes l0, l1: 2 of the scenario's 4 nodes"), std::string::npos)
      << idle;
  EXPECT_TRUE(idle_line(s.cluster).empty());
  // A plan without the key: the scenario itself.
  const Plan all = parse_plan_json(plan_json(nullptr, {{0, "A100-80GB"}}));
  EXPECT_EQ(scenario_for_plan(s, all, "plan.json").cluster.nodes.size(), 4u);
  // Cutting a cut scenario keeps the file's indices.
  EXPECT_EQ(with_nodes(used, {1}).cluster.used_nodes, std::vector<int>{3});
}

TEST(PlanNodes, PlansThatDoNotMatchTheirNodesAreRefused) {
  const Scenario s = four_nodes();
  auto refused = [&](const Json& j, std::initializer_list<std::string> fragments) {
    try {
      const Plan p = parse_plan_json(j);
      validate_plan_for(p, scenario_for_plan(s, p, "plan.json"), "plan.json");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const ValidationError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("plan.json"), std::string::npos) << what;
      for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << what;
    }
  };
  // Out of range: the index, the node count.
  refused(plan_json(Json::array({0, 4}), {{0, "A100-80GB"}}),
          {"nodes", "node 4", "0 to 3", "has 4 nodes"});
  // Rows for every GPU of the cluster under a cut: the count and the used nodes.
  refused(plan_json(Json::array({0, 3}),
                    {{0, "A100-80GB"}, {0, "A100-80GB"}, {1, "A100-80GB"}, {2, "L4"}}),
          {"ranks", "4 ranks", "3 ranks", "on the plan's \"nodes\" 0, 3 (2 of its 4 nodes)"});
  // A row on a node by its index in the whole cluster, not its position in the list.
  refused(plan_json(Json::array({0, 3}), {{0, "A100-80GB"}, {0, "A100-80GB"}, {3, "A100-80GB"}}),
          {"ranks[2].node", "3 for rank 2", "node 1"});
  // The GPUs of other nodes.
  refused(plan_json(Json::array({1}), {{0, "A100-80GB"}, {0, "A100-80GB"}}),
          {"ranks[0].gpu", "\"A100-80GB\"", "\"L4\""});
  // A plan of some nodes checked against the whole cluster (a reader that skipped the cut).
  const Plan p = parse_plan_json(a100_plan());
  try {
    validate_plan_for(p, s, "plan.json");
    ADD_FAILURE() << "accepted against the whole cluster";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("nodes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a scenario cut to these nodes"), std::string::npos)
        << e.what();
  }
}

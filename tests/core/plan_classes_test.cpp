// Plans by rank class (core/plan.hpp, scenarios/README.md "Plans by rank class"): the compact
// form reads back into the rows its per-rank form has, the writer chooses it above
// kCompactPlanAbove ranks, every refusal names the file, the class's JSON path and its ranks,
// and sizes are bounded before anything is expanded. Also the cluster's repeated nodes
// ("count" on a node) and the unit-pass bound over classes.
#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <random>
#include <string>

#include "../support/plan_refusal.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"

using namespace cephalo;

namespace {

using test_support::expect_plan_refusal;
Plan parse(const Json& j) { return test_support::parse_plan_json(j); }
void expect_refusal(const Json& j, std::initializer_list<std::string> fragments) {
  expect_plan_refusal(j, fragments);
}

// `nodes` nodes of `per_node` ranks; every `kinds`-th node another GPU type and batch.
Plan grid_plan(int nodes, int per_node, int kinds = 1) {
  Plan p;
  p.scenario = "s";
  const int n = nodes * per_node;
  for (int r = 0; r < n; ++r) {
    PlanRank pr;
    pr.rank = r;
    pr.node = r / per_node;
    const int kind = pr.node % kinds;
    pr.gpu = kind == 0 ? "a" : "b";
    pr.batch = 2 + kind;
    pr.micro_batch = 1;
    pr.micro_batches = pr.batch;
    pr.state_share = 1.0 / n;
    p.ranks.push_back(pr);
  }
  return p;
}

void expect_same_rows(const Plan& a, const Plan& b) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const auto& x = a.ranks[r];
    const auto& y = b.ranks[r];
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.node, y.node) << "rank " << r;
    EXPECT_EQ(x.gpu, y.gpu);
    EXPECT_EQ(x.batch, y.batch);
    EXPECT_EQ(x.micro_batch, y.micro_batch);
    EXPECT_EQ(x.micro_batches, y.micro_batches);
    EXPECT_EQ(x.state_share, y.state_share) << "rank " << r;  // the same double, bit for bit
  }
}

// A compact plan: one class of `count` ranks, 8 per node.
Json one_class(int count) {
  return {{"version", 1},
          {"rank_classes",
           {{{"ranks", {0, count - 1}},
             {"node", {{"first", 0}, {"ranks_per_node", 8}}},
             {"gpu", "a"},
             {"batch", 2},
             {"micro_batch", 2},
             {"micro_batches", 1},
             {"state_share", "even"}}}}};
}

TEST(PlanClasses, CompactFormReadsBackTheSameRows) {
  for (int kinds : {1, 2, 3}) {
    const Plan p = grid_plan(16, 8, kinds);
    const Json compact = to_json(p, PlanForm::Compact);
    ASSERT_TRUE(compact.contains("rank_classes"));
    EXPECT_FALSE(compact.contains("ranks"));
    // One class per node kind's run: uniform nodes are one class, alternating ones one per node.
    EXPECT_EQ(compact["rank_classes"].size(), kinds == 1 ? 1u : 16u);
    const Plan back = parse(compact);
    expect_same_rows(p, back);
    EXPECT_EQ(back.rank_classes.size(), compact["rank_classes"].size());
    expect_same_rows(p, parse(to_json(back, PlanForm::PerRank)));
  }
}

TEST(PlanClasses, RandomRowsRoundTrip) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    Plan p;
    const int n = 1 + static_cast<int>(rng() % 200);
    double left = 1;
    int node = 0, on_node = 0;
    for (int r = 0; r < n; ++r) {
      PlanRank pr;
      pr.rank = r;
      if (on_node == static_cast<int>(1 + rng() % 8) || rng() % 5 == 0) {
        ++node;
        on_node = 0;
      }
      ++on_node;
      pr.node = node;
      pr.gpu = rng() % 4 == 0 ? "b" : "a";
      pr.micro_batch = 1 + static_cast<int>(rng() % 2);
      pr.micro_batches = 1 + static_cast<int>(rng() % 2);
      pr.batch = pr.micro_batch * pr.micro_batches;
      pr.state_share = r + 1 == n ? left : (rng() % 2 ? 1.0 / n : 0.5 / n);
      left -= pr.state_share;
      p.ranks.push_back(pr);
    }
    expect_same_rows(p, parse(to_json(p, PlanForm::Compact)));
  }
}

TEST(PlanClasses, ASplitPlanReadsBackByClassAndItsErrorsNameTheClass) {
  // Two stages of two replicas (TP 1), 4 micro-batches of 2 samples: the split's checks read the
  // rows whichever form they were written in.
  Plan p;
  const Json split = {
      {"micro_batches", 4},
      {"stages",
       {{{"layers", {0, 2}}, {"ranks", {0, 1}}}, {{"layers", {2, 4}}, {"ranks", {2, 3}}}}}};
  JsonReader split_reader(split, "plan.json", "model_split");
  p.model_split = parse_model_split(split_reader);
  for (int r = 0; r < 4; ++r) p.ranks.push_back({r, 0, "x", 4, 1, 4, 0.5});
  const Json compact = to_json(p, PlanForm::Compact);
  ASSERT_EQ(compact["rank_classes"].size(), 1u);
  const Plan back = parse(compact);
  expect_same_rows(p, back);
  EXPECT_EQ(back.model_split, p.model_split);
  EXPECT_EQ(back.global_batch(), 8);
  // Every rank running another count than the split's: the split's count is the fault.
  Json all = compact;
  all["rank_classes"][0]["micro_batches"] = 2;
  all["rank_classes"][0]["batch"] = 2;
  expect_refusal(all, {"model_split.micro_batches", "the micro-batches every rank runs"});
  // Stage 0's class alone runs another count: that class is named, with its rank range.
  Json bad = compact;
  Json stage1 = bad["rank_classes"][0];
  stage1["ranks"] = {2, 3};
  bad["rank_classes"][0]["ranks"] = {0, 1};
  bad["rank_classes"][0]["micro_batches"] = 2;
  bad["rank_classes"][0]["batch"] = 2;
  bad["rank_classes"].push_back(stage1);
  expect_refusal(bad, {"rank_classes[0].micro_batches", "the split's 4 micro-batches"});
}

TEST(PlanClasses, AutoWritesCompactAboveTheThreshold) {
  const Plan small = grid_plan(kCompactPlanAbove / 8, 8);
  EXPECT_TRUE(to_json(small).contains("ranks"));
  const Plan large = grid_plan(kCompactPlanAbove / 8 + 1, 8);
  const Json j = to_json(large);
  ASSERT_TRUE(j.contains("rank_classes"));
  EXPECT_EQ(j["rank_classes"].size(), 1u);
  EXPECT_TRUE(to_json(large, PlanForm::PerRank).contains("ranks"));
}

TEST(PlanClasses, EvenShareAndNodeRules) {
  const Plan p = parse(one_class(24));
  ASSERT_EQ(p.ranks.size(), 24u);
  EXPECT_EQ(p.ranks[23].node, 2);
  EXPECT_EQ(p.ranks[8].node, 1);
  EXPECT_EQ(p.ranks[5].state_share, 1.0 / 24);
  EXPECT_EQ(p.global_batch(), 48);
  EXPECT_EQ(p.row_path(23), "rank_classes[0]");
  EXPECT_NE(p.row_label(23).find("ranks 0-23"), std::string::npos);
  Json single = one_class(4);
  single["rank_classes"][0]["node"] = 3;
  const Plan q = parse(single);
  EXPECT_EQ(q.ranks[3].node, 3);
}

TEST(PlanClasses, RefusesOverlapsGapsAndOutOfRangeCounts) {
  Json two = one_class(8);
  Json second = two["rank_classes"][0];
  second["ranks"] = {6, 15};
  second["node"] = {{"first", 1}, {"ranks_per_node", 8}};
  two["rank_classes"].push_back(second);
  expect_refusal(two,
                 {"rank_classes[1].ranks", "ranks 6-15", "overlaps rank_classes[0]", "ranks 0-7"});
  two["rank_classes"][1]["ranks"] = {10, 15};
  expect_refusal(two, {"rank_classes[1].ranks", "ranks 8-9 are in no class"});
  Json first_missing = one_class(8);
  first_missing["rank_classes"][0]["ranks"] = {1, 7};
  expect_refusal(first_missing, {"rank_classes[0].ranks", "rank 0 is in no class"});
  Json huge = one_class(8);
  huge["rank_classes"][0]["ranks"] = {0, 3000000000LL};  // past 2^31: refused, not expanded
  expect_refusal(huge, {"rank_classes[0].ranks[1]", "3000000000", "1048575"});
  Json backwards = one_class(8);
  backwards["rank_classes"][0]["ranks"] = {5, 2};
  expect_refusal(backwards, {"rank_classes[0].ranks", "last >= first"});
  Json far_node = one_class(1 << 20);
  far_node["rank_classes"][0]["node"] = {{"first", 1 << 19}, {"ranks_per_node", 1}};
  expect_refusal(far_node, {"rank_classes[0].node", "nodes up to 1048575"});
  Json both = one_class(8);
  both["ranks"] = Json::array();
  expect_refusal(both, {"rank_classes", "beside \"ranks\""});
  Json bad_share = one_class(8);
  bad_share["rank_classes"][0]["state_share"] = 0.2;
  expect_refusal(bad_share, {"at rank_classes:", "summing to 1.6", "summing to 1 (within 1e-9)"});
  Json word = one_class(8);
  word["rank_classes"][0]["state_share"] = "half";
  expect_refusal(word, {"rank_classes[0].state_share", "\"even\""});
  // The batch of a class counts once per rank: 2^20 ranks x 32 samples is past the bound.
  Json heavy = one_class(1 << 20);
  heavy["rank_classes"][0]["batch"] = 32;
  heavy["rank_classes"][0]["micro_batch"] = 32;
  expect_refusal(heavy, {"rank_classes[0].batch", "1048576"});
  Json hybrid = one_class(8);
  hybrid["sharding"] = {{"kind", "hybrid"}, {"groups", {{0, 1, 2, 3}, {4, 5, 6, 7}}}};
  expect_refusal(hybrid, {"rank_classes[0].state_share", "full sharding"});
}

// A scenario built by hand: `nodes` nodes of 8 devices "a" (core alone, no catalog).
Scenario grid_scenario(int nodes, int layers) {
  Scenario s;
  s.name = "s";
  s.cluster.name = "grid";
  DeviceSlot slot;
  slot.type = "a";
  slot.spec.name = "a";
  for (int n = 0; n < nodes; ++n) {
    Node node;
    node.name = "n" + std::to_string(n);
    node.intra_link.kind = "nvlink";
    node.devices.assign(8, slot);
    s.cluster.nodes.push_back(node);
  }
  s.job.model.num_layers = layers;
  s.job.global_batch = nodes * 8 * 2;
  return s;
}

void expect_invalid_for(const Plan& p, const Scenario& s,
                        std::initializer_list<std::string> fragments) {
  try {
    validate_plan_for(p, s, "plan.json");
    ADD_FAILURE() << "accepted; expected " << *fragments.begin();
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << what;
  }
}

TEST(PlanClasses, ACompactPlanForAnotherClusterNamesTheClass) {
  const Scenario s = grid_scenario(2, 4);
  Json j = one_class(16);
  j["scenario"] = "s";
  EXPECT_NO_THROW(validate_plan_for(parse(j), s, "plan.json"));
  j["rank_classes"][0]["ranks"] = {0, 23};
  j["rank_classes"][0]["batch"] = 1;
  j["rank_classes"][0]["micro_batch"] = 1;
  // The class whose range runs past the cluster is named, with its range and the cluster's size.
  expect_invalid_for(
      parse(j), s,
      {"rank_classes[0].ranks", "[0, 23]", "24 ranks", "ranks up to 15", "16 device(s)"});
  j = one_class(16);
  j["rank_classes"][0]["node"] = {{"first", 0}, {"ranks_per_node", 4}};
  expect_invalid_for(parse(j), s, {"rank_classes[0].node", "rank 4", "class of ranks 0-15"});
  Scenario other_job = s;
  other_job.job.global_batch = 64;
  expect_invalid_for(parse(one_class(16)), other_job,
                     {"rank_classes[*].batch", "summing to 32", "global batch 64"});
  j = one_class(16);
  j["rank_classes"][0]["gpu"] = "z";
  expect_invalid_for(parse(j), s, {"rank_classes[0].gpu", "class of ranks 0-15"});
}

TEST(PlanClasses, TheUnitPassBoundCountsClassesForFsdpPlans) {
  // 20,480 ranks x 1,002 units = 20.5M passes per rank, past 2^24; one class is 1,002.
  const Scenario s = grid_scenario(2560, 1000);
  const Plan p = parse(one_class(2560 * 8));
  EXPECT_GT(full_unit_passes(p, s), kMaxScheduledUnitPasses);
  EXPECT_EQ(class_unit_passes(p, s), 1002);
  EXPECT_NO_THROW(validate_plan_for(p, s, "plan.json"));
  // Every rank its own share: as many classes as ranks, refused with the count.
  Plan uneven = p;
  const int n = static_cast<int>(uneven.ranks.size());
  for (int r = 0; r < n; ++r)
    uneven.ranks[static_cast<std::size_t>(r)].state_share = (r % 2 ? 1.5 : 0.5) / n + r * 1e-15;
  expect_invalid_for(uneven, s, {"unit passes", "classes of ranks", "at most 16777216"});
}

// A lookup that knows one device, "x", so that clusters parse without the catalogs.
class OneDevice : public SpecLookup {
 public:
  std::optional<DeviceSpec> find_device(const std::string& name) const override {
    if (name != "x") return std::nullopt;
    DeviceSpec d;
    d.name = "x";
    d.memory_bytes = 1e9;
    d.pcie_generation = 4;
    d.pcie_lanes = 16;
    return d;
  }
  std::vector<std::string> device_names() const override { return {"x"}; }
  std::optional<ModelSpec> find_model(const std::string&) const override { return std::nullopt; }
  std::vector<std::string> model_names() const override { return {}; }
};

Cluster cluster_of(const Json& j) {
  JsonReader r(j, "cluster.json");
  return parse_cluster(r, OneDevice{});
}

Json repeated(std::int64_t count, int gpus) {
  const Json nic = {{"kind", "infiniband"}, {"bandwidth", "100Gbit/s"}, {"latency", "5us"}};
  return {{"name", "c"},
          {"nodes",
           {{{"name", "h"},
             {"count", count},
             {"gpus", {{{"type", "x"}, {"count", gpus}}}},
             {"nic", nic}},
            {{"gpus", {"x"}}, {"nic", nic}}}}};
}

TEST(ClusterNodeCount, RepeatsANodeAndBoundsTheTotalFirst) {
  const Cluster c = cluster_of(repeated(3, 8));
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.nodes[0].name, "h-0");
  EXPECT_EQ(c.nodes[2].name, "h-2");
  EXPECT_EQ(c.nodes[3].name, "node3");
  EXPECT_EQ(c.num_ranks(), 25);
  EXPECT_EQ(c.ranks()[17].node, 2);
  try {
    cluster_of(repeated(200000, 8));  // 1.6M devices: refused before any node is made
    ADD_FAILURE() << "accepted";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cluster.json"), std::string::npos) << what;
    EXPECT_NE(what.find("nodes[0].gpus[0]"), std::string::npos) << what;
    EXPECT_NE(what.find("repeated 200000 times"), std::string::npos) << what;
  }
  try {
    cluster_of(repeated(0, 8));
    ADD_FAILURE() << "accepted";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("nodes[0].count"), std::string::npos) << e.what();
  }
}

}  // namespace

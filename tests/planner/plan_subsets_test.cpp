// Leaving GPUs out (plan_request.hpp, PlanResult::faster_without): the cluster without its
// slowest GPU types is planned with the same request, and a faster subset is the answer (its
// plan's "nodes"), named with both times; `use_all` and the baseline strategies weigh none.
#include <gtest/gtest.h>

#include <limits>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/traces/summarize.hpp"
#include "plan_subsets.hpp"

namespace cephalo::planner {
namespace {

// One node of 8 A100-80GB on NVLink and one of 8 L4 on PCIe, 10 Gbit/s between them, LLaMA-7B
// at sequence 2048 and batch 128: the L4s' share of the work costs more over the slow link
// than their compute saves (the sweep scenarios/sweeps/llama7b-network.json shows the same).
Scenario slow_link_mix() {
  const Json nic = {
      {"kind", "ethernet"}, {"count", 1}, {"bandwidth", "10Gbit/s"}, {"latency", "15us"}};
  Json doc = {
      {"name", "a100-l4-10g"},
      {"cluster",
       {{"name", "a100-l4-10g"},
        {"nodes",
         {{{"name", "a100"},
           {"gpus", {{{"type", "A100-80GB"}, {"count", 8}}}},
           {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
           {"nic", nic}},
          {{"name", "l4-0"},
           {"gpus", {{{"type", "L4"}, {"count", 8}}}},
           {"intra_link", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
           {"nic", nic}}}}}},
      {"job", {{"model", "llama-7b"}, {"sequence_length", 2048}, {"global_batch", 128}}}};
  JsonReader reader(doc, "slow-link-mix");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), ".");
}

TEST(PlanSubsets, NodeClassesAreByGpuTypeFastestFirst) {
  const Scenario s = slow_link_mix();
  const auto classes = detail::node_classes(s);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].gpus, "A100-80GB");
  EXPECT_EQ(classes[0].nodes, std::vector<int>{0});
  EXPECT_EQ(classes[1].gpus, "L4");
  EXPECT_GT(classes[0].peak_flops, classes[1].peak_flops);
  EXPECT_EQ(with_nodes(s, {0}).cluster.num_ranks(), 8);
}

TEST(PlanSubsets, ASlowerWithEveryGpuPlanNamesTheNodesToLeaveIdle) {
  const Scenario s = slow_link_mix();
  PlanRequest r;
  r.parallelism = "fsdp";  // one family keeps the test fast; the rule is the same for both
  const PlanResult a = answer_plan(s, r);
  ASSERT_TRUE(a.faster_without.has_value()) << a.subsets;
  const IdleAdvice& w = *a.faster_without;
  EXPECT_EQ(w.nodes, std::vector<std::string>{"l4-0"});
  EXPECT_EQ(w.ranks, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(w.used_nodes, std::vector<int>{0});
  EXPECT_EQ(w.gpus, "8x L4");
  // The answer is the plan of the A100 node: its "nodes" say so, its rows are the A100s'.
  EXPECT_EQ(a.family(), PlanFamily::Fsdp);
  EXPECT_EQ(a.plan.nodes, std::vector<int>{0});
  EXPECT_EQ(a.plan.ranks.size(), 8u);
  // Both times are the simulator's: the A100 node's own plan's (the answer), and the plan of
  // every GPU (what --use-all answers).
  EXPECT_DOUBLE_EQ(w.without_s, detail::answer_iteration_s(a));
  PlanRequest alone = r;
  alone.use_all = true;
  const PlanResult a100 = answer_plan(with_nodes(s, {0}), alone);
  EXPECT_DOUBLE_EQ(w.without_s, detail::answer_iteration_s(a100));
  EXPECT_LT(w.without_s, w.with_all_s * (1 - kIdleGain));
  // Said in the summary, the log and the record.
  EXPECT_NE(plan_summary(a).find("left idle: 8x L4 (ranks 8-15, nodes l4-0)"), std::string::npos)
      << plan_summary(a);
  EXPECT_NE(plan_explanation(a).find("without 8x L4"), std::string::npos);
  const Json record = plan_record(a);
  EXPECT_EQ(record["predicted"]["faster_without"]["idle_ranks"].size(), 8u);
  EXPECT_EQ(record["nodes"], Json::array({0}));
  // The plan's identity covers its nodes: the same rows on other nodes are another run.
  Plan elsewhere = a.plan;
  elsewhere.nodes = {1};
  EXPECT_NE(traces::plan_hash(elsewhere), traces::plan_hash(a.plan));
  elsewhere.nodes.clear();
  EXPECT_NE(traces::plan_hash(elsewhere), traces::plan_hash(a.plan));

  // use_all weighs no subset.
  PlanRequest all = r;
  all.use_all = true;
  const PlanResult every = answer_plan(s, all);
  EXPECT_FALSE(every.faster_without.has_value());
  EXPECT_TRUE(every.subsets.empty());
  EXPECT_DOUBLE_EQ(detail::answer_iteration_s(every), w.with_all_s);
  EXPECT_EQ(every.family(), PlanFamily::Fsdp);
  EXPECT_TRUE(every.plan.nodes.empty());
  EXPECT_EQ(every.plan.ranks.size(), 16u);
}

TEST(PlanSubsets, BaselinesAndOneClassWeighNone) {
  const Scenario s = slow_link_mix();
  PlanRequest even;
  even.options.strategy = "even";
  even.given = {"strategy"};
  EXPECT_TRUE(answer_plan(s, even).subsets.empty());
  PlanRequest r;
  r.parallelism = "fsdp";
  EXPECT_TRUE(answer_plan(with_nodes(s, {0}), r).subsets.empty());  // one class
}

}  // namespace
}  // namespace cephalo::planner

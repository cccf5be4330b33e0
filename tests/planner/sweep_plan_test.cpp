// A sweep's rows are `cephalo plan`'s answers: each row is answer_plan of its mix on its
// network (the family it chose, tokens/s), the spec's "parallelism" filters the families as the
// flag does, and the network is a swept dimension whose price joins the GPUs'.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/sweep.hpp"

namespace cephalo::planner {
namespace {

class SweepPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cephalo-sweep-plan-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Up to 2 RTX A6000 + 2 L4 in 2-GPU PCIe nodes, GPT-1.3B at sequence 512, batch 16; two
  // network options: 10 Gbit/s free, 100 Gbit/s at $0.50 per node-hour.
  static Json spec_doc() {
    return Json::parse(R"({
      "name": "net",
      "pool": [{"gpu": "a6000", "max_count": 2, "step": 2}, {"gpu": "l4", "max_count": 2, "step": 2}],
      "node": {"gpus_per_node": 2, "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16}},
      "networks": [
        {"name": "10G", "nic": {"kind": "ethernet", "bandwidth": "10Gbit/s", "latency": "10us"}},
        {"name": "100G", "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"},
         "price_per_node_hour": 0.5}],
      "job": {"model": "gpt-1.3b", "sequence_length": 512, "global_batch": 16}})");
  }
  std::filesystem::path write(const Json& doc) const {
    const auto file = dir_ / "spec.json";
    std::ofstream(file) << doc.dump();
    return file;
  }
  // The refusal's text, or "" when the spec loads.
  std::string refusal(const Json& doc) const {
    try {
      load_sweep_spec(write(doc));
    } catch (const ValidationError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(SweepPlan, TheNetworkIsSweptWithItsPrice) {
  const SweepSpec spec = load_sweep_spec(write(spec_doc()));
  ASSERT_EQ(spec.networks.size(), 2u);
  const std::vector<int> both{2, 2};  // 4 GPUs in two 2-GPU nodes
  EXPECT_EQ(mix_nodes(spec, both), 2);
  const double gpus = 2 * spec.pool[0].price_per_hour + 2 * spec.pool[1].price_per_hour;
  EXPECT_DOUBLE_EQ(mix_cost_per_hour(spec, both, 0), gpus);
  EXPECT_DOUBLE_EQ(mix_cost_per_hour(spec, both, 1), gpus + 2 * 0.5);
  // Every mix once per network, the network fastest.
  const auto points = sweep_points(spec, enumerate_mixes(spec));
  ASSERT_EQ(points.size(), 6u);  // 3 mixes x 2 networks
  EXPECT_EQ(points[0].network, 0);
  EXPECT_EQ(points[1].network, 1);
  EXPECT_EQ(points[0].counts, points[1].counts);
  // Each mix's nodes carry their option's NIC.
  EXPECT_DOUBLE_EQ(mix_scenario(spec, both, 0).cluster.nodes[0].nic.bandwidth, 10e9 / 8);
  EXPECT_DOUBLE_EQ(mix_scenario(spec, both, 1).cluster.nodes[1].nic.bandwidth, 100e9 / 8);

  // Priced per GPU-hour instead, and a budget that only the free network meets for 4 GPUs.
  Json doc = spec_doc();
  doc["networks"][1].erase("price_per_node_hour");
  doc["networks"][1]["price_per_gpu_hour"] = 0.25;
  doc["constraints"] = {{"max_cost_per_hour", gpus + 0.5}};
  const SweepSpec per_gpu = load_sweep_spec(write(doc));
  EXPECT_DOUBLE_EQ(mix_cost_per_hour(per_gpu, both, 1), gpus + 4 * 0.25);
  for (const auto& p : sweep_points(per_gpu, enumerate_mixes(per_gpu)))
    EXPECT_LE(mix_cost_per_hour(per_gpu, p.counts, p.network), gpus + 0.5 + 1e-9);
  EXPECT_EQ(sweep_points(per_gpu, {both}).size(), 1u);  // 100G is over the budget
}

TEST_F(SweepPlan, BadNetworkOptionsAreRefusedNamingTheKey) {
  Json doc = spec_doc();
  doc["node"]["nic"] = doc["networks"][0]["nic"];
  EXPECT_NE(refusal(doc).find("node.nic"), std::string::npos) << refusal(doc);
  doc = spec_doc();
  doc["networks"][1]["price_per_gpu_hour"] = 0.1;  // beside price_per_node_hour
  EXPECT_NE(refusal(doc).find("networks[1].price_per_node_hour"), std::string::npos)
      << refusal(doc);
  doc = spec_doc();
  doc["networks"][1]["price_per_node_hour"] = -1;
  EXPECT_NE(refusal(doc).find("a price >= 0"), std::string::npos) << refusal(doc);
  doc = spec_doc();
  doc["networks"][1]["name"] = "10G";
  EXPECT_NE(refusal(doc).find("networks[1].name"), std::string::npos) << refusal(doc);
  doc = spec_doc();
  doc["networks"] = Json::array();
  EXPECT_NE(refusal(doc).find("networks"), std::string::npos) << refusal(doc);
  doc = spec_doc();
  doc["networks"][0]["nic"] = "fast";
  EXPECT_NE(refusal(doc).find("networks[0].nic"), std::string::npos) << refusal(doc);
}

TEST_F(SweepPlan, ParallelismIsAFilterAndContradictionsAreRefused) {
  Json doc = spec_doc();
  doc["parallelism"] = "2d";
  EXPECT_NE(refusal(doc).find("parallelism"), std::string::npos) << refusal(doc);
  // A strategy fixes FSDP plans, which parallelism 3d excludes: refused once, naming the file.
  doc["parallelism"] = "3d";
  doc["strategy"] = "optimal";
  const std::string why = refusal(doc);
  EXPECT_NE(why.find("spec.json"), std::string::npos) << why;
  EXPECT_NE(why.find("strategy"), std::string::npos) << why;
  // A split's sharding with FSDP plans only.
  doc = spec_doc();
  doc["parallelism"] = "fsdp";
  doc["sharding"] = "optimizer";
  EXPECT_NE(refusal(doc).find("sharding"), std::string::npos) << refusal(doc);
}

// Each row is the answer `cephalo plan` gives for its mix (one space, or the family the
// spec's parallelism keeps), with tokens/s and the family it chose.
TEST_F(SweepPlan, EachRowIsThePlanOfItsMix) {
  for (const char* parallelism : {"fsdp", "3d"}) {
    Json doc = spec_doc();
    doc["parallelism"] = parallelism;
    const SweepSpec spec = load_sweep_spec(write(doc));
    const std::vector<int> mix{2, 2};
    const SweepRow row = evaluate_mix(spec, mix, 1);
    ASSERT_TRUE(row.feasible) << parallelism << ": " << row.error;
    EXPECT_EQ(row.family, parallelism);
    EXPECT_EQ(row.network_name, "100G");
    PlanRequest r;
    r.parallelism = parallelism;
    r.split_finalists = kSweepSplitFinalists;
    r.split_max_stages = kSweepSplitMaxStages;
    const Scenario s = mix_scenario(spec, mix, 1);
    const PlanResult a = answer_plan(s, r);
    EXPECT_EQ(row.family, to_string(a.family()));
    const double iteration_s = a.predicted_iteration_s;  // either family: the replay's
    EXPECT_NEAR(row.samples_per_s, s.job.global_batch / iteration_s, 1e-9 * row.samples_per_s);
    EXPECT_NEAR(row.tokens_per_s, row.samples_per_s * 512, 1e-9 * row.tokens_per_s);
    EXPECT_NEAR(row.tokens_per_dollar, row.tokens_per_s * 3600 / row.cost_per_hour,
                1e-9 * row.tokens_per_dollar);
    EXPECT_EQ(row.plan.rfind("chosen: ", 0), 0u) << row.plan;
  }
}

// "split_search" lifts the sweep's bound on each row's split search: 8 finalists and 64 stages
// make the row `cephalo plan`'s own answer; the record writes what was used, and a value out of
// range is refused naming its path.
TEST_F(SweepPlan, TheSplitSearchBoundIsTheSpecsToSet) {
  Json doc = spec_doc();
  doc["parallelism"] = "3d";
  doc["split_search"] = {{"finalists", 8}, {"max_pipeline_stages", 64}};
  const SweepSpec spec = load_sweep_spec(write(doc));
  EXPECT_EQ(spec.split_finalists, 8);
  EXPECT_EQ(spec.split_max_stages, 64);
  const std::vector<int> mix{2, 2};
  const SweepRow row = evaluate_mix(spec, mix, 0);
  ASSERT_TRUE(row.feasible) << row.error;
  PlanRequest r;
  r.parallelism = "3d";  // plan's search: no bound set
  const Scenario s = mix_scenario(spec, mix, 0);
  const PlanResult a = answer_plan(s, r);
  ASSERT_EQ(a.family(), PlanFamily::Split);
  ASSERT_TRUE(a.simulated_iteration_s);
  EXPECT_NEAR(row.samples_per_s, s.job.global_batch / *a.simulated_iteration_s,
              1e-9 * row.samples_per_s);
  const Json record = sweep_json(spec, {row});
  EXPECT_EQ(record["split_search"]["finalists"], 8);
  EXPECT_EQ(record["split_search"]["max_pipeline_stages"], 64);
  EXPECT_EQ(sweep_json(load_sweep_spec(write(spec_doc())), {})["split_search"]["finalists"],
            kSweepSplitFinalists);

  doc["split_search"] = {{"finalists", 0}};
  EXPECT_NE(refusal(doc).find("split_search.finalists"), std::string::npos) << refusal(doc);
  doc["split_search"] = {{"stages", 4}};
  EXPECT_NE(refusal(doc).find("stages"), std::string::npos) << refusal(doc);
}

}  // namespace
}  // namespace cephalo::planner

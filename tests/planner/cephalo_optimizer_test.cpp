// The published Cephalo optimizer, reimplemented: the published GPT-2.7B example must come out
// exactly, and infeasible inputs must be refused instead of producing over-capacity plans.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cephalo/core/error.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"

namespace cephalo::planner {
namespace {

namespace fs = std::filesystem;

// The project's copy of the published profiles (scenarios/calibration/cephalo-profiles/);
// skipped with a message when it is not there.
fs::path profiles_dir() {
  return fs::path(CEPHALO_SOURCE_DIR) / "scenarios" / "calibration" / "cephalo-profiles";
}

nlohmann::json load(const std::string& name) {
  std::ifstream in(profiles_dir() / name);
  return nlohmann::json::parse(in);
}

CephaloInputs paper_example(int batch) {
  const auto lat = load("model_latencies.json");
  const auto mem = load("model_memory.json")["paper"]["deepspeedgpt_2.7b"];
  CephaloInputs in;
  for (std::string g : {"l4", "l4", "a6000", "p40"}) {
    const auto& r = lat["deepspeedgpt_2.7b"][g]["512"]["float16"];
    CephaloGpu gpu;
    gpu.name = g;
    gpu.capacity_gb = cephalo_published_capacity_gb(g);
    gpu.forward_slope = r[0][0];
    gpu.forward_intercept = r[0][1];
    gpu.backward_slope = r[1][0];
    gpu.backward_intercept = r[1][1];
    if (r.size() == 4) {
      gpu.forward_ms = r[2].get<std::vector<double>>();
      gpu.backward_ms = r[3].get<std::vector<double>>();
    }
    in.gpus.push_back(gpu);
  }
  in.compute_memory_gb = mem["profiled_compute_memory"]["float16"].get<std::vector<double>>();
  in.parameters = mem["parameters"].get<double>();
  in.global_batch = batch;
  return in;
}

class CephaloPaper : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(profiles_dir() / "model_latencies.json"))
      GTEST_SKIP() << "profiles not found under " << profiles_dir();
  }
};

TEST_F(CephaloPaper, ReproducesThePublishedGpt27bExample) {
  const auto sol = solve_cephalo(paper_example(64));
  EXPECT_EQ(sol.batch, (std::vector<int>{13, 12, 34, 5}));
  const std::vector<int> counts = sol.micro_batches;
  EXPECT_EQ(counts, (std::vector<int>{1, 2, 1, 1}));
  EXPECT_EQ(sol.micro_batch, (std::vector<int>{13, 6, 34, 5}));
  ASSERT_EQ(sol.shares.size(), 4u);
  for (double s : sol.shares) EXPECT_DOUBLE_EQ(s, 0.25);
  // The published file stores exactly these values.
  const auto published = load("example_plan_gpt_2.7b.json");
  EXPECT_EQ(published["uneven_batch_sizes"].get<std::vector<int>>(), sol.batch);
  EXPECT_EQ(published["uneven_microbatches"].get<std::vector<int>>(), counts);
  EXPECT_LT(sol.memory_gb, sol.memory_cap_gb);
  EXPECT_EQ(sol.max_micro_batch_even_share, (std::vector<int>{10, 10, 61, 10}));
}

TEST_F(CephaloPaper, CorrectedShareMemoryMovesStateOffTheFullL4) {
  CephaloOptions opt;
  opt.published_share_memory = false;
  const auto sol = solve_cephalo(paper_example(64), opt);
  // The first L4 runs one micro-batch of 13 samples: its real activation memory leaves no room
  // for a quarter of the state, so min_params moves some of it to the others.
  EXPECT_LT(sol.shares[0], 0.25);
  EXPECT_GT(sol.shares[2], 0.25);
  double sum = 0;
  for (double s : sol.shares) sum += s;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST_F(CephaloPaper, MinUtilKeepsSharesSummingToOne) {
  CephaloOptions opt;
  opt.share_objective = ShareObjective::MinUtil;
  const auto sol = solve_cephalo(paper_example(64), opt);
  double sum = 0;
  for (double s : sol.shares) sum += s;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST_F(CephaloPaper, RefusesWhenTheTotalMemoryCapIsExceeded) {
  auto in = paper_example(64);
  for (auto& g : in.gpus) g.capacity_gb = 16;  // 0.75·64 GB < 41 GB of state + activations
  try {
    solve_cephalo(in);
    FAIL() << "expected InfeasibleError";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("shortfall"), std::string::npos) << e.what();
  }
}

TEST_F(CephaloPaper, RefusesABatchSmallerThanTheGpuCount) {
  EXPECT_THROW(solve_cephalo(paper_example(3)), InfeasibleError);
}

TEST(CephaloOptimizer, MemoryCurveExtrapolatesFromTheLastPoints) {
  const std::vector<double> curve{1.0, 1.5, 2.0, 2.5};
  EXPECT_DOUBLE_EQ(cephalo_memory_gb(curve, 2, 2.0), 3.5);
  EXPECT_DOUBLE_EQ(cephalo_memory_gb(curve, 6, 0.0), 3.5);  // slope 0.5 beyond m = 4
}

TEST(CephaloOptimizer, PublishedCapacities) {
  EXPECT_DOUBLE_EQ(cephalo_published_capacity_gb("a6000"), 47.99);
  EXPECT_DOUBLE_EQ(cephalo_published_capacity_gb("h100-nvl"), 94);
  EXPECT_LT(cephalo_published_capacity_gb("b200"), 0);
}

}  // namespace
}  // namespace cephalo::planner

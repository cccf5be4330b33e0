// A written 3D plan whose ranks run their share of every micro-batch in sub-steps (DESIGN §4,
// "Ranks"): `simulate` replays it and `predict 3d` prices the sub-steps as the replay runs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::test_support::cephalo_command;
using cephalo::test_support::run_cephalo;
using cephalo::test_support::run_command;

const std::string kDefault = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";

TEST(SplitSubStepsCli, PredictPricesSubStepsAsSimulateReplaysThem) {
  const fs::path dir =
      fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_split_sub_steps");
  fs::create_directories(dir);
  const fs::path written = dir / "split.plan.json", stepped_file = dir / "stepped.plan.json";
  const std::string s = " --scenario " + kDefault;
  ASSERT_EQ(run_cephalo("plan --parallelism 3d" + s + " -o " + written.string()).exit_code, 0);
  // Every rank's share run in sub-steps of one sample.
  auto stepped = nlohmann::json::parse(std::ifstream(written));
  for (auto& r : stepped["ranks"]) {
    r["micro_batches"] = r["micro_batches"].get<int>() * r["micro_batch"].get<int>();
    r["micro_batch"] = 1;
  }
  ASSERT_GT(stepped["ranks"][0]["micro_batches"], stepped["model_split"]["micro_batches"]);
  std::ofstream(stepped_file) << stepped.dump();
  const auto json = [](const std::string& args) {
    return run_command(cephalo_command(args + " --json"));
  };
  const auto sim = json("simulate" + s + " --plan " + stepped_file.string());
  ASSERT_EQ(sim.code, 0) << sim.err;
  // As the replay runs it: per-unit DP collectives, a copy per receiving TP rank.
  const std::string as_replayed = " --dp-overlap per-unit --no-scatter-gather";
  const auto est = json("predict 3d" + s + " --split " + stepped_file.string() + as_replayed);
  ASSERT_EQ(est.code, 0) << est.err;
  const double replayed = nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>();
  const double priced = nlohmann::json::parse(est.out)["iteration_s"].get<double>();
  EXPECT_NEAR(priced, replayed, 0.02 * replayed);
  // Sub-steps of one sample are priced slower than the written plan's one step per share.
  const auto one = json("predict 3d" + s + " --split " + written.string() + as_replayed);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_GT(priced, nlohmann::json::parse(one.out)["iteration_s"].get<double>());
  // The written plan itself (one step per share) is estimated.
  EXPECT_EQ(run_cephalo("predict 3d" + s + " --split " + written.string()).exit_code, 0);
  fs::remove_all(dir);
}

}  // namespace

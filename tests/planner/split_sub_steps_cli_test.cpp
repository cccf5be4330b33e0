// A written 3D plan whose ranks run their share of every micro-batch in sub-steps (DESIGN §4,
// "Ranks"): `simulate` replays it, `predict 3d` (whose estimate prices a share as one step)
// refuses it naming the file, the rank's JSON path and the numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::test_support::run_cephalo;

const std::string kDefault = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";

TEST(SplitSubStepsCli, SimulateReplaysSubStepsAndTheEstimateRefusesThemNamingTheRank) {
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
  const auto sim = run_cephalo("simulate" + s + " --plan " + stepped_file.string());
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  const auto est = run_cephalo("predict 3d" + s + " --split " + stepped_file.string());
  EXPECT_EQ(est.exit_code, 1) << est.output;
  for (const std::string w :
       {"stepped.plan.json", "ranks[0].micro_batches", "sub-steps of 1", "simulate"})
    EXPECT_NE(est.output.find(w), std::string::npos) << w << "\n" << est.output;
  // The written plan itself (one step per share) is estimated.
  EXPECT_EQ(run_cephalo("predict 3d" + s + " --split " + written.string()).exit_code, 0);
  fs::remove_all(dir);
}

}  // namespace

// The ranks of one job agree on what they run before the first step (backend/run_identity.hpp).
// Each case starts the two ranks of one mpirun job with different arguments (mpirun's MPMD
// form, `-np 1 A : -np 1 B`): different plan files, --steps, --seed, and job files with another
// learning rate under one scenario name. Every rank must end within seconds with exit 4 and a
// message naming the field that differs and the rank, before any step is trained.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/mpi_cli.hpp"

namespace fs = std::filesystem;
using namespace cephalo::test_support;

namespace {

// One job of two ranks, rank 0 with `args0` and rank 1 with `args1` (after `cephalo run`).
Outcome mpmd(const std::string& args0, const std::string& args1, int timeout_s = 60) {
  const std::string prefix = std::string(CEPHALO_CLI) + " run ";
  return run_combined("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 " +
                      std::to_string(timeout_s) + " " + CEPHALO_MPIEXEC +
                      " --oversubscribe --allow-run-as-root -np 1 " + prefix + args0 + " : -np 1 " +
                      prefix + args1);
}

std::string base(const std::string& plan_name = "cpu-2rank-uneven") {
  return "--scenario " + scenario(2) + " --plan " + plan(plan_name);
}

void expect_refused(const Outcome& o, const std::string& field, const std::string& detail) {
  EXPECT_EQ(o.code, 4) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_NE(o.output.find("disagree on what they run"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(field + " differs on rank 1: rank 0 has"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(detail), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("loss"), std::string::npos) << "trained:\n" << o.output;
  EXPECT_EQ(o.output.find("free()"), std::string::npos) << o.output;
}

}  // namespace

TEST(MpiIdentity, SameArgumentsOnEveryRankRun) {
  // The control: the MPMD launch itself is fine when the ranks agree.
  auto o = mpmd(base() + " --steps 2", base() + " --steps 2");
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("step 1  loss"), std::string::npos) << o.output;
}

TEST(MpiIdentity, DifferentPlanFilesAreRefusedBeforeAnyCollective) {
  // Before: heap corruption (free(): invalid pointer, SIGABRT) or a hang in the first gather.
  auto o = mpmd(base("cpu-2rank-uneven") + " --steps 2", base("cpu-2rank-even") + " --steps 2");
  expect_refused(o, "plan", "cpu-2rank-even.json");
}

TEST(MpiIdentity, DifferentStepCountsAreRefused) {
  // Before: the rank with more steps waited forever.
  auto o = mpmd(base() + " --steps 2", base() + " --steps 3");
  expect_refused(o, "steps", "rank 1 has --steps 3");
}

TEST(MpiIdentity, DifferentSeedsAreRefused) {
  // Before: trained silently on two data streams.
  auto o = mpmd(base() + " --steps 2 --seed 1", base() + " --steps 2 --seed 2");
  expect_refused(o, "seed", "rank 1 has --seed 2");
}

TEST(MpiIdentity, AnotherLearningRateUnderTheSameScenarioNameIsRefused) {
  TempDir dir;
  // Both scenario files are named cpu-2rank and describe the same cluster; rank 1's job trains
  // with another learning rate.
  const std::string same = scenario_variant(dir.path, 2, "a", [](nlohmann::json&) {});
  const std::string other = scenario_variant(
      dir.path, 2, "b", [](nlohmann::json& job) { job["optimizer"]["learning_rate"] = 0.5; });
  auto o = mpmd("--scenario " + same + " --plan " + plan("cpu-2rank-uneven") + " --steps 2",
                "--scenario " + other + " --plan " + plan("cpu-2rank-uneven") + " --steps 2");
  expect_refused(o, "job", "learning rate 0.5");
}

TEST(MpiIdentity, ARankRefusingItsOwnInputsIsNamedAndEveryRankEnds) {
  // Rank 1's plan file does not exist: the job ends at once with rank 1's reason, not a hang
  // of rank 0 in the first collective.
  auto o = mpmd(base() + " --steps 2", "--scenario " + scenario(2) + " --plan /no/such/plan.json");
  EXPECT_EQ(o.code, 5) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 2: /no/such/plan.json"), std::string::npos) << o.output;
}

TEST(MpiIdentity, TheIdentityIsInTheRunResultAndEveryCheckpoint) {
  TempDir dir;
  const fs::path result = dir.path / "result.json", ckpt = dir.path / "ckpt";
  auto o = run_plan(2, "cpu-2rank-uneven",
                    "--steps 2 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 2" +
                        " --result " + result.string());
  ASSERT_EQ(o.code, 0) << o.output;
  const auto r = nlohmann::json::parse(std::ifstream(result));
  const auto m = nlohmann::json::parse(std::ifstream(ckpt / "step_00000002" / "manifest.json"));
  ASSERT_TRUE(r.contains("run_identity"));
  EXPECT_EQ(r["run_identity"].get<std::string>().size(), 16u);
  EXPECT_EQ(r["run_identity"], m["run"]["run_identity"]);
  for (const char* shard : {"rank_00000.bin", "rank_00001.bin"}) {
    std::ifstream in(ckpt / "step_00000002" / shard, std::ios::binary);
    std::string head(72, '\0');
    in.read(head.data(), 72);
    EXPECT_EQ(head.substr(0, 8), "CEPHSHRD") << shard;
    EXPECT_EQ(head.substr(40, 16), m["run"]["run_identity"].get<std::string>()) << shard;
  }
  // Another run (another seed, no checkpoints): another identity.
  const fs::path result2 = dir.path / "result2.json";
  ASSERT_EQ(run_plan(2, "cpu-2rank-uneven", "--steps 2 --seed 7 --result " + result2.string()).code,
            0);
  EXPECT_NE(nlohmann::json::parse(std::ifstream(result2))["run_identity"], r["run_identity"]);
}

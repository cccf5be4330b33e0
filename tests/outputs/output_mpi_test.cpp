// `cephalo run` under mpirun refuses a bad output before training with the same exit code (5)
// as a single process, on every rank (the 2-rank run used to exit 4 "rank 1 failed"
// after training where the 1-rank run exited 5).
#include <gtest/gtest.h>

#include "../support/mpi_cli.hpp"

namespace {

using namespace cephalo::test_support;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(OutputsMpi, ResultOntoThePlanIsRefusedOnEveryRankBeforeTraining) {
  TempDir dir;
  const fs::path p = dir.path / "plan.json";
  fs::copy_file(plan("cpu-2rank-uneven"), p);
  const std::string before = slurp(p);
  const auto r = mpirun(2, "--scenario " + scenario(2) + " --plan " + p.string() +
                               " --steps 3 --result " + p.string());
  EXPECT_EQ(r.code, 5) << r.output;
  EXPECT_NE(r.output.find("same file as the input"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("loss"), std::string::npos) << "trained before refusing:\n" << r.output;
  EXPECT_EQ(slurp(p), before);
}

TEST(OutputsMpi, MissingResultFolderGivesTheSameCodeOnOneRankAndTwo) {
  TempDir dir;
  const std::string result = " --steps 3 --result " + (dir.path / "missing" / "r.json").string();
  const auto one =
      mpirun(1, "--scenario " + scenario(1) + " --plan " + plan("cpu-1rank-full") + result);
  const auto two =
      mpirun(2, "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-uneven") + result);
  EXPECT_EQ(one.code, 5) << one.output;
  EXPECT_EQ(two.code, 5) << two.output;
  EXPECT_EQ(two.output.find("loss"), std::string::npos) << two.output;
}

}  // namespace

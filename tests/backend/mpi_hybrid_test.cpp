// Hybrid sharding on the CPU/MPI backend under real mpirun: 4 ranks in 2 groups with uneven
// shares inside each group and different slice boundaries between them (so the cross-group
// reduction runs over pieces that are intersections of the groups' slices) against
// single-rank full-batch training; and a checkpoint resumed under another grouping against an
// uninterrupted run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"

using namespace cephalo::test_support;

namespace {

struct Dump {
  std::vector<float> params, grads;
};

Dump run_one_step(int ranks, const std::string& plan_name) {
  TempDir dir;
  auto o = mpirun(ranks, "--scenario " + scenario(ranks) + " --plan " + plan(plan_name) +
                             " --steps 1 --dump-params " + (dir.path / "p.bin").string() +
                             " --dump-grads " + (dir.path / "g.bin").string());
  EXPECT_EQ(o.code, 0) << o.output;
  return {read_floats(dir.path / "p.bin"), read_floats(dir.path / "g.bin")};
}

}  // namespace

TEST(MpiHybrid, TwoGroupsWithDifferentBoundariesEqualSingleRankFullBatch) {
  const Dump ref = run_one_step(1, "cpu-1rank-full");
  for (const char* name : {"cpu-4rank-hybrid", "cpu-4rank-hybrid-regrouped"}) {
    const Dump h = run_one_step(4, name);
    ASSERT_EQ(h.grads.size(), ref.grads.size()) << name;
    ASSERT_EQ(h.params.size(), ref.params.size()) << name;
    // Reduced within each group, then across groups: the full-batch gradient.
    EXPECT_LT(worst_element_relative(h.grads, ref.grads), 1e-5) << name;
    EXPECT_LT(worst_unit_relative(h.grads, ref.grads), 1e-5) << name;
    EXPECT_LT(worst_unit_relative(h.params, ref.params), 1e-5) << name;
  }
  // The dumps are gathered over rank 0's group: without the cross-group reduction they would
  // hold only that group's samples' gradient (3 + 2 of 9 samples), far from the reference.
}

TEST(MpiHybrid, ResumeUnderAnotherGroupingMatchesUninterruptedRun) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  // Resume on the other grouping (1 + 3 ranks, other shares and micro-batches).
  std::vector<float> full;
  expect_resume_matches(dir.path, ckpt, {4, "cpu-4rank-hybrid"}, {4, "cpu-4rank-hybrid-regrouped"},
                        4, 2, &full);
  if (HasFatalFailure()) return;
  // And under full sharding on 3 ranks from the same hybrid checkpoint.
  auto third = run_and_dump(3, "cpu-3rank-uneven-layered", 4, dir.path / "resumed3.bin", ckpt);
  ASSERT_EQ(third.code, 0) << third.output;
  EXPECT_LT(worst_unit_relative(read_floats(dir.path / "resumed3.bin"), full), 1e-5);
}

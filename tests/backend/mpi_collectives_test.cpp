// The MPI communicator's bf16 / fp16 collectives across three real processes: runs
// mpi_collectives_check (which compares every result with fp32 references on every rank) under
// mpirun, and once with an injected mismatch to show that the check reports one.
#include <gtest/gtest.h>

#include <string>

#include "../support/run_command.hpp"

namespace {

using Outcome = cephalo::test_support::CombinedResult;

// `mpirun -np 3 mpi_collectives_check ARGS` (stdout and stderr together) under a hard timeout,
// so a hung collective fails the test instead of the CI.
Outcome run_check(const std::string& args) {
  // Appended piece by piece: GCC 12 at -O3 reports a false out-of-bounds memcpy in libstdc++
  // for a chain of `+` over these literal-built strings (tests/support/run_command.hpp).
  std::string line = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 120 ";
  line += CEPHALO_MPIEXEC;
  line += " --oversubscribe --allow-run-as-root -np 3 ";
  line += CEPHALO_MPI_COLLECTIVES_CHECK;
  line += ' ';
  line += args;
  return cephalo::test_support::run_combined(line);
}

TEST(MpiCollectives, Bf16AndF16AgreeWithFp32ReferencesOnThreeRanks) {
  const Outcome o = run_check("");
  EXPECT_EQ(o.code, 0) << o.output;
  // 2 types x (all_gather_v, all_gather, broadcast + 3 ops x 3 reductions) = 24 checks.
  for (const char* uneven : {"grouped", "padded"})
    EXPECT_NE(
        o.output.find(std::string("(") + uneven + " uneven): 24 checks on 3 ranks, all agree"),
        std::string::npos)
        << o.output;
}

TEST(MpiCollectives, AMismatchIsReported) {
  const Outcome o = run_check("--corrupt");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("rank 1: mismatch in all_gather_v bf16"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("1 mismatches"), std::string::npos) << o.output;
}

}  // namespace

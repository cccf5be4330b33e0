// The split model's pieces across real processes: runs mpi_split_check (tests/backend) under
// mpirun in each of its modes and reads its verdict; with --corrupt once per comparing mode, so
// a mismatch is shown to be reported (the checks can fail).
#include <gtest/gtest.h>

#include <string>

#include "../support/run_command.hpp"

namespace {

using Outcome = cephalo::test_support::CombinedResult;

// `mpirun -np N mpi_split_check ARGS` (stdout and stderr together) under a hard timeout, so a
// deadlocked transfer fails the test instead of hanging the suite (no bound on its speed).
Outcome run_check(int ranks, const std::string& args) {
  std::string line = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 240 ";
  line += CEPHALO_MPIEXEC;
  line += " --oversubscribe --allow-run-as-root -np ";
  line += std::to_string(ranks);
  line += ' ';
  line += CEPHALO_MPI_SPLIT_CHECK;
  line += ' ';
  line += args;
  return cephalo::test_support::run_combined(line);
}

void expect_all_agree(const Outcome& o, const std::string& mode, int ranks) {
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("mpi_split_check " + mode + ": "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(" checks on " + std::to_string(ranks) + " ranks, 0 mismatches"),
            std::string::npos)
      << o.output;
}

TEST(MpiSplit, TensorParallelLayerEmbeddingAndHeadEqualSingleRankOnTwoRanks) {
  expect_all_agree(run_check(2, "tp"), "tp", 2);
}

TEST(MpiSplit, TensorParallelOfFourWithUnevenVocabularyRowsEqualsSingleRank) {
  expect_all_agree(run_check(4, "tp"), "tp", 4);
}

TEST(MpiSplit, ATensorParallelMismatchIsReported) {
  const Outcome o = run_check(2, "tp --corrupt");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("rank 1: mismatch: "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(", 1 mismatches"), std::string::npos) << o.output;
}

TEST(MpiSplit, EveryRankSendingFirstOnTheSendStreamCompletes) {
  expect_all_agree(run_check(4, "p2p"), "p2p", 4);
}

TEST(MpiSplit, ATransferredMismatchIsReported) {
  const Outcome o = run_check(2, "p2p --corrupt");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("rank 1: mismatch: world fp32 message 0 from rank 0"), std::string::npos)
      << o.output;
}

TEST(MpiSplit, AReceiveLongerThanTheSendIsRefusedNamingBothCounts) {
  const Outcome o = run_check(2, "short");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("rank 1: error: mpi communicator: recv from rank 0: expected 10 "
                          "elements, the sender sent 8"),
            std::string::npos)
      << o.output;
}

TEST(MpiSplit, AReceiveShorterThanTheSendFailsWithMpisErrorAndTheCall) {
  const Outcome o = run_check(2, "truncate");
  EXPECT_EQ(o.code, 2) << o.output;
  // MPI's own error string after the call and its place (check_mpi).
  EXPECT_NE(o.output.find("rank 1: error: MPI_Test"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("mpi_communicator.cpp:"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("MPI_ERR_TRUNCATE"), std::string::npos) << o.output;
}

}  // namespace

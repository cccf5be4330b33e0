// A training run never reports success on state that is no longer finite: every path by which
// the loss, the gradients, the parameters, AdamW's moments or fp16's loss scale can stop being
// finite ends the run under mpirun, on every rank with one message naming the step and the
// quantity, exit 4 (a runtime failure) and no abort. Real runs of `cephalo run`; the non-finite
// values come from the hidden `--inject-failure RANK:STEP:HOW` hook (a learning rate within the
// job's bound, 10, leaves gpt-tiny's state finite, so no job setting reaches them quickly).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"

using namespace cephalo::test_support;

namespace {

std::size_t count(const std::string& text, const std::string& word) {
  std::size_t n = 0;
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// Every rank ended together with the one agreed message: exit 4, said once, no abort.
void expect_agreed_stop(const Outcome& o, const std::string& step, const std::string& quantity) {
  EXPECT_EQ(o.code, 4) << o.output;
  EXPECT_EQ(count(o.output, "error: " + step + ": "), 1u) << o.output;
  EXPECT_NE(o.output.find(quantity), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("the run stops rather than train on broken state"), std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("aborting all ranks"), std::string::npos) << o.output;
}

}  // namespace

TEST(MpiNonFinite, EachInjectedQuantityEndsTheRunNamingTheStepAndTheQuantity) {
  struct Case {
    std::string how, quantity;
  };
  for (const auto& c : std::vector<Case>{{"nan-loss", "the loss"},
                                         {"nan-gradients", "the gradients hold inf or NaN"},
                                         {"nan-parameters", "the parameters hold inf or NaN"},
                                         {"inf-moments", "AdamW second moments (v)"}}) {
    SCOPED_TRACE(c.how);
    // Rank 1 alone holds the value: rank 0 must stop too, with the same message.
    const auto o = run_plan(2, "cpu-2rank-uneven", "--steps 4 --inject-failure 1:1:" + c.how, 60);
    expect_agreed_stop(o, "step 1", c.quantity);
  }
}

namespace {

// Two ranks of cpu-2rank-uneven, the tiny job computing and reducing in these types.
Outcome run_in(const std::string& compute, const std::string& reduce, const std::string& args) {
  TempDir dir;
  const auto sc = scenario_variant(dir.path, 2, compute, [&](nlohmann::json& job) {
    job["precision"] = {{"params", "fp32"}, {"compute", compute}, {"reduce", reduce}};
  });
  return mpirun(2, "--scenario " + sc + " --plan " + plan("cpu-2rank-uneven") + " " + args, 60);
}

}  // namespace

TEST(MpiNonFinite, ABf16JobsNonFiniteGradientsEndTheRunBeforeTheUpdate) {
  // bf16 has fp32's range and no loss scaler: a non-finite gradient would be applied.
  const auto o = run_in("bf16", "bf16", "--steps 4 --inject-failure 0:2:nan-gradients");
  expect_agreed_stop(o, "step 2", "the gradients hold inf or NaN (before the update");
}

TEST(MpiNonFinite, AnFp16LossScaleThatCollapsesEndsTheRun) {
  // Step 1 overflows at scale 2 and is skipped (the scaler's job: scale 1); step 2 overflows
  // at scale 1, which no smaller scale can absorb.
  const auto o =
      run_in("fp16", "fp32", "--steps 5 --loss-scale 2 --inject-failure 0:1:nan-gradients");
  expect_agreed_stop(o, "step 2", "the fp16 loss scale collapsed");
}

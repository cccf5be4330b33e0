// Mixed precision through the executor, real multi-process runs of `cephalo run`: bf16 and
// fp16 compute with fp32 master weights against the fp32 single-rank step, fp16 dynamic loss
// scaling (skip on overflow, back off, train on), the memory the compute type saves, and the
// precisions the executor refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"
#include "../support/run_command.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace fs = std::filesystem;
using namespace cephalo::test_support;
using nlohmann::json;

namespace {

// The CPU test scenario on `ranks` ranks with the tiny job's precision replaced.
std::string scenario_in(const fs::path& dir, int ranks, const std::string& params,
                        const std::string& compute, const std::string& reduce) {
  return scenario_variant(dir, ranks, params + "-" + compute + "-" + reduce, [&](json& job) {
    job["precision"] = {{"params", params}, {"compute", compute}, {"reduce", reduce}};
  });
}

struct Dump {
  int code = -1;
  std::string output;
  std::vector<float> params, grads;
};

Dump one_step(const fs::path& dir, int ranks, const std::string& scenario_file,
              const std::string& plan_name, const std::string& extra = "") {
  // Built with append: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string here.
  std::string stem = std::to_string(ranks);
  stem.append(plan_name).append(".bin");
  const auto p = dir / std::string("p").append(stem);
  const auto g = dir / std::string("g").append(stem);
  auto o = mpirun(ranks, "--scenario " + scenario_file + " --plan " + plan(plan_name) +
                             " --steps 1 --dump-params " + p.string() + " --dump-grads " +
                             g.string() + " " + extra);
  Dump d{o.code, o.output, {}, {}};
  if (o.code == 0) {
    d.params = read_floats(p);
    d.grads = read_floats(g);
  }
  return d;
}

json run_json(int ranks, const std::string& scenario_file, const std::string& plan_name, int steps,
              const std::string& extra = "") {
  auto o = mpirun(ranks, "--scenario " + scenario_file + " --plan " + plan(plan_name) +
                             " --steps " + std::to_string(steps) + " --json " + extra);
  EXPECT_EQ(o.code, 0) << o.output;
  if (o.code != 0) return json::object();
  return json::parse(o.output.substr(o.output.find('{')));
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

TEST(MpiPrecision, Bf16UnevenStepTracksTheFp32SingleRankStep) {
  TempDir dir;
  const auto ref = one_step(dir.path, 1, scenario(1), "cpu-1rank-full");
  ASSERT_EQ(ref.code, 0) << ref.output;
  for (const std::string reduce : {"fp32", "bf16"}) {
    const auto bf = one_step(dir.path, 3, scenario_in(dir.path, 3, "fp32", "bf16", reduce),
                             "cpu-3rank-uneven-layered");
    ASSERT_EQ(bf.code, 0) << bf.output;
    ASSERT_EQ(bf.grads.size(), ref.grads.size());
    ASSERT_TRUE(all_finite(bf.grads) && all_finite(bf.params));
    const double gerr = worst_unit_relative(bf.grads, ref.grads);
    std::cout << "bf16 compute, " << reduce << " reduce: worst unit gradient error " << gerr
              << ", parameters " << worst_unit_relative(bf.params, ref.params) << "\n";
    // bf16 keeps 8 significant bits (relative rounding 2^-9): a few rounding steps per layer
    // stay within a few percent of the fp32 gradient per unit ...
    EXPECT_LT(gerr, 5e-2) << "reduce " << reduce;
    // ... and it really computed in bf16: fp32 agrees to 1e-5 (mpi_run_test), bf16 cannot.
    EXPECT_GT(gerr, 1e-4) << "reduce " << reduce;
    // fp32 master weights: the step moved them like the fp32 step did. Adam's first step is
    // ~lr * sign(g), so elements whose gradient is within bf16 rounding of zero move by 2 lr
    // the other way: a few percent of the unit norm, not the 1e-5 of fp32.
    EXPECT_LT(worst_unit_relative(bf.params, ref.params), 3e-2) << "reduce " << reduce;
  }
}

TEST(MpiPrecision, Bf16LossFallsLikeFp32) {
  TempDir dir;
  auto j = run_json(2, scenario_in(dir.path, 2, "fp32", "bf16", "fp32"), "cpu-2rank-uneven", 50);
  ASSERT_TRUE(j.contains("steps"));
  const auto& steps = j.at("steps");
  ASSERT_EQ(steps.size(), 50u);
  const double first = steps[0].at("loss").get<double>();
  double last5 = 0;
  for (std::size_t i = 45; i < 50; ++i) last5 += steps[i].at("loss").get<double>() / 5;
  EXPECT_NEAR(first, std::log(256.0), 0.2);
  EXPECT_LT(last5, first - 1.0) << "bf16 loss did not fall: " << first << " -> " << last5;
  for (const auto& s : steps) EXPECT_EQ(s.at("loss_scale").get<double>(), 1.0);
}

TEST(MpiPrecision, Fp16OverflowSkipsTheStepOnEveryRankAndBacksOff) {
  TempDir dir;
  const auto sc = scenario_in(dir.path, 2, "fp32", "fp16", "fp32");
  // 2^24 makes the first loss gradients overflow fp16 (max 65504): the scaler must skip and
  // halve until the gradients fit, then train.
  auto j = run_json(2, sc, "cpu-2rank-uneven", 40, "--loss-scale 16777216");
  ASSERT_TRUE(j.contains("steps"));
  const auto& steps = j.at("steps");
  ASSERT_EQ(steps.size(), 40u);
  EXPECT_TRUE(steps[0].at("update_skipped").get<bool>());
  EXPECT_EQ(steps[0].at("loss_scale").get<double>(), 16777216.0);
  int skipped = 0, applied = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const bool skip = steps[i].at("update_skipped").get<bool>();
    (skip ? skipped : applied)++;
    if (i + 1 < steps.size()) {
      const double now = steps[i].at("loss_scale").get<double>();
      const double next = steps[i + 1].at("loss_scale").get<double>();
      EXPECT_EQ(next, skip ? now / 2 : now) << "step " << i;  // growth only after 2000 steps
    }
  }
  std::cout << "fp16 from loss scale 2^24: " << skipped << " skipped, " << applied
            << " applied, final scale " << steps.back().at("loss_scale").get<double>() << "\n";
  EXPECT_GE(skipped, 1);
  EXPECT_GE(applied, 30) << "the scale never came down to a usable value";
  double last5 = 0;
  for (std::size_t i = 35; i < 40; ++i) last5 += steps[i].at("loss").get<double>() / 5;
  EXPECT_LT(last5, steps[0].at("loss").get<double>() - 0.8) << "fp16 did not train";
}

TEST(MpiPrecision, SkippedStepsLeaveTheMasterWeightsUntouched) {
  TempDir dir;
  // 1e30 overflows fp16 for ~80 halvings: every one of these steps is skipped.
  const auto p = dir.path / "p.bin";
  auto o = mpirun(3, "--scenario " + scenario_in(dir.path, 3, "fp32", "fp16", "fp32") + " --plan " +
                         plan("cpu-3rank-uneven-layered") +
                         " --steps 3 --loss-scale 1e30 --json --dump-params " + p.string());
  ASSERT_EQ(o.code, 0) << o.output;
  auto j = json::parse(o.output.substr(o.output.find('{')));
  double scale = 1e30;
  for (const auto& s : j.at("steps")) {
    EXPECT_TRUE(s.at("update_skipped").get<bool>());
    EXPECT_DOUBLE_EQ(s.at("loss_scale").get<double>(), scale);
    scale /= 2;
  }
  // Bitwise the initial weights (what every rank initialises from the model's seed).
  const auto cfg = cephalo::backend::GptConfig::from_spec(
      cephalo::costmodels::ModelCatalog::builtin().get("gpt-tiny"), 16);
  cephalo::backend::GptModel model(cfg);
  std::vector<float> initial;
  for (int u = 0; u < model.num_units(); ++u) {
    auto unit = model.initial_unit(u);
    initial.insert(initial.end(), unit.begin(), unit.end());
  }
  const auto params = read_floats(p);
  ASSERT_EQ(params.size(), initial.size());
  EXPECT_EQ(params, initial);
}

TEST(MpiPrecision, Fp16StepWithLossScaleTracksTheFp32Step) {
  TempDir dir;
  const auto ref = one_step(dir.path, 1, scenario(1), "cpu-1rank-full");
  ASSERT_EQ(ref.code, 0) << ref.output;
  // A scale that fits: the update is applied and the dumped gradient is unscaled.
  const auto h = one_step(dir.path, 3, scenario_in(dir.path, 3, "fp32", "fp16", "fp32"),
                          "cpu-3rank-uneven-standard", "--loss-scale 1024");
  ASSERT_EQ(h.code, 0) << h.output;
  ASSERT_TRUE(all_finite(h.grads));
  const double gerr = worst_unit_relative(h.grads, ref.grads);
  std::cout << "fp16 compute, loss scale 1024: worst unit gradient error " << gerr
            << ", parameters " << worst_unit_relative(h.params, ref.params) << "\n";
  EXPECT_LT(gerr, 1e-2);  // fp16: 11 significant bits
  EXPECT_GT(gerr, 1e-6);
  EXPECT_LT(worst_unit_relative(h.params, ref.params), 3e-2);
}

TEST(MpiPrecision, Bf16SavesTheMemoryTheModelSays) {
  TempDir dir;
  // Per rank, the smaller peak of two runs: a buffer whose free lands late (the comm thread's
  // timing) can only raise a peak, by up to a gathered unit on this tiny model.
  auto peak = [&](const std::string& compute) {
    std::vector<double> v;
    for (int run = 0; run < 2; ++run) {
      auto j = run_json(3, scenario_in(dir.path, 3, "fp32", compute, "fp32"),
                        "cpu-3rank-uneven-layered", 1);
      if (!j.contains("report")) return std::vector<double>{};
      const auto& ranks = j.at("report").at("ranks");
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const double p = ranks[r].at("peak_memory_bytes").get<double>();
        if (run == 0)
          v.push_back(p);
        else
          v[r] = std::min(v[r], p);
      }
    }
    return v;
  };
  auto f32 = peak("fp32"), b16 = peak("bf16");
  ASSERT_EQ(f32.size(), 3u);
  ASSERT_EQ(b16.size(), 3u);
  // What the memory model says bf16 saves (the simulator's peaks of the same plan).
  auto simulated = [&](const std::string& compute) {
    auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) +
                                                " simulate --json --scenario " +
                                                scenario_in(dir.path, 3, "fp32", compute, "fp32") +
                                                " --plan " + plan("cpu-3rank-uneven-layered"));
    EXPECT_EQ(r.code, 0) << r.err;
    const json result = json::parse(r.out);  // kept: a range-for over .at() of a temporary dangles
    std::vector<double> v;
    for (const auto& rank : result.at("ranks"))
      v.push_back(rank.at("peak_memory_bytes").get<double>());
    return v;
  };
  const auto sim32 = simulated("fp32"), sim16 = simulated("bf16");
  double saved = 0, predicted = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    std::cout << "rank " << r << " peak: fp32 " << f32[r] << " B, bf16 " << b16[r]
              << " B (simulated " << sim32[r] << " / " << sim16[r] << ")\n";
    // fp32 master state (params, gradient shard, Adam m, v) is the same in both.
    EXPECT_GT(b16[r], 0.3 * f32[r]) << "rank " << r;
    saved += f32[r] - b16[r];
    predicted += sim32[r] - sim16[r];
  }
  // Summed over ranks, the measured saving is the modelled one up to the noise it lives with:
  // a gathered buffer freed late on the comm thread raises a rank's peak. With prefetch two
  // gathered phases can be alive at once (the one in use and the next), so a late free moves
  // a rank's peak by at most two of the largest phase, gpt-tiny's head phase [embedding |
  // head] of (256 + 64) x 64 + 2 x 64 values, at 4 bytes (the fp32 run, lowering the saving,
  // or the bf16 run at 2, raising it). 3 ranks: 494,592 B, 68 % of the modelled saving.
  // Measured 2026-12-02: 695,680 and 670,592 B saved vs 726,604 B modelled on a quiet run
  // (-4.3 %, -7.7 %), 1,016,130 B under load 12 (+40 %: one phase late per rank is not the
  // bound). An executor that ignored the precision would save about nothing.
  const double late_free = 3 * 2 * 4.0 * ((256 + 64) * 64 + 2 * 64);
  std::cout << "bf16 saves " << saved << " B measured, " << predicted << " B simulated (bound "
            << late_free << " B)\n";
  EXPECT_NEAR(saved, predicted, late_free);
}

TEST(MpiPrecision, NonFp32MasterWeightsAreRefusedWithTheReason) {
  TempDir dir;
  auto o = mpirun(2, "--scenario " + scenario_in(dir.path, 2, "bf16", "bf16", "fp32") + " --plan " +
                         plan("cpu-2rank-uneven") + " --steps 1");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.output.find("fp32 master weights"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("precision.params = bf16"), std::string::npos) << o.output;
}

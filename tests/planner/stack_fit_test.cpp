// Stack calibration: the "cephalo-stack" file, the factors the cost models multiply, and
// `calibrate stack` recovering factors it did not see from the iteration they produce.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/stack_calibration.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/stack_fit.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo {
namespace {

namespace fs = std::filesystem;

fs::path tmp(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_stack");
  fs::create_directories(dir);
  return dir / name;
}

fs::path source_file(const char* relative) { return fs::path(CEPHALO_SOURCE_DIR) / relative; }

struct Case {
  Scenario scenario;
  Plan plan;
};

// The default scenario (4 GPUs of three types, GPT-2.7B) planned by `even`.
Case default_case() {
  Case c{costmodels::load_scenario(source_file("scenarios/default.json")), {}};
  planner::PlannerOptions o;
  o.strategy = "even";
  c.plan = planner::make_plan(c.scenario, o).plan;
  return c;
}

StackCalibration truth(double compute, double comm, double optimizer) {
  StackCalibration s;
  s.compute = {compute, true};
  s.comm = {comm, true};
  s.optimizer = {optimizer, true};
  s.fitted_on = {"gpt-2.7b",     "gpt",  {"P40"}, 4,     512, 64, "fp16",
                 "flash, fused", "auto", "",      "run", 1.0, 1.0};
  return s;
}

// What a run of the stack `stack` measures: the plan simulated with it, op by op.
traces::IterationReport measured_with(Case c, const StackCalibration& stack) {
  c.scenario.job.implementation.stack = stack;
  const auto models = costmodels::make_cost_models(c.scenario);
  sim::SimOptions options;
  options.record_ops = true;
  auto report =
      sim::replay_plan(c.plan, c.scenario, *models.compute, *models.comm, options).result.report;
  report.source = "cpu";  // as a RunResult says
  return report;
}

TEST(StackCalibrationFile, RoundTripsThroughItsJson) {
  StackCalibration s = truth(1.25, 0.8, 2.0);
  s.optimizer.identified = false;
  s.fitted_on = {"gpt-2.7b", "gpt", {"L4", "P40"},  4,      512,   64, "fp16", "flash, fused",
                 "auto",     "abc", "tokens_per_s", 1234.5, 1500.0};
  const Json j = to_json(s);
  JsonReader r(j, "s.json");
  EXPECT_EQ(parse_stack_calibration(r), s);
}

TEST(StackCalibrationFile, RefusesForeignAndCorruptFilesAtTheirPath) {
  Json good = to_json(truth(1.1, 1, 1));
  good["fitted_on"] = to_json(StackCalibration{})["fitted_on"];
  good["fitted_on"]["ranks"] = 1;
  good["fitted_on"]["sequence_length"] = 8;
  good["fitted_on"]["global_batch"] = 1;
  good["fitted_on"]["measured"] = "run";
  auto refused_at = [](const Json& j, const std::string& path) {
    JsonReader r(j, "stack.json");
    try {
      parse_stack_calibration(r);
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.file(), "stack.json");
      EXPECT_EQ(e.json_path(), path) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted " << j.dump();
  };
  {
    JsonReader r(good, "stack.json");
    EXPECT_NO_THROW(parse_stack_calibration(r));
  }
  Json foreign = good;
  foreign["format"] = "cephalo-profile";
  refused_at(foreign, "format");
  Json zero = good;
  zero["factors"]["compute"]["value"] = 0;
  refused_at(zero, "factors.compute.value");
  Json huge = good;
  huge["factors"]["comm"]["value"] = 100;
  refused_at(huge, "factors.comm.value");
  Json future = good;
  future["version"] = 2;
  refused_at(future, "version");
  Json missing = good;
  missing["factors"].erase("optimizer");
  refused_at(missing, "factors.optimizer");
  refused_at(Json::array(), "$");
}

TEST(StackCalibrationFile, AJobNamesItRelativeToTheJobFile) {
  const auto dir = tmp("job-dir");
  fs::create_directories(dir);
  std::ofstream(dir / "mine.stack.json") << to_json(truth(1.5, 1, 1)).dump();
  const Json job = {{"model", "gpt-2.7b"},
                    {"sequence_length", 512},
                    {"global_batch", 8},
                    {"implementation", {{"stack", "mine.stack.json"}}}};
  std::ofstream(dir / "job.json") << job.dump();
  const Job j = load_job(dir / "job.json", costmodels::CatalogLookup::builtin());
  ASSERT_TRUE(j.implementation.stack.has_value());
  EXPECT_EQ(j.implementation.stack->compute.value, 1.5);
  EXPECT_EQ(j.implementation.stack_file, (dir / "mine.stack.json").string());
  // The job's JSON carries the stack inline, and reads back to the same job.
  const Json written = to_json(j)["implementation"];
  ASSERT_TRUE(written.contains("stack"));
  JsonReader r(written, "<written>");
  EXPECT_EQ(parse_implementation(r).stack, j.implementation.stack);
}

TEST(StackCalibration, TheCostModelsMultiplyComputeCollectivesAndTheOptimizer) {
  Case c = default_case();
  const auto plain = costmodels::make_cost_models(c.scenario);
  c.scenario.job.implementation.stack = truth(1.5, 2.0, 3.0);
  const auto scaled = costmodels::make_cost_models(c.scenario);
  const auto& gpu = c.scenario.cluster.ranks()[0].slot->spec;
  const Job& job = c.scenario.job;
  for (auto phase : {costmodels::ComputePhase::Forward, costmodels::ComputePhase::Backward})
    EXPECT_DOUBLE_EQ(scaled.compute->unit_time(gpu, job, 1, phase, 2).seconds,
                     1.5 * plain.compute->unit_time(gpu, job, 1, phase, 2).seconds);
  EXPECT_DOUBLE_EQ(scaled.compute->optimizer_time(gpu, job, 1e6).seconds,
                   3.0 * plain.compute->optimizer_time(gpu, job, 1e6).seconds);
  costmodels::CollectiveRequest req;
  req.ranks = {0, 1, 2, 3};
  req.shard_bytes = {1e6, 1e6, 1e6, 1e6};
  const auto a = plain.comm->collective(c.scenario.cluster, req);
  const auto b = scaled.comm->collective(c.scenario.cluster, req);
  EXPECT_DOUBLE_EQ(b.seconds, 2.0 * a.seconds);
  EXPECT_DOUBLE_EQ(b.busbw, a.busbw / 2.0);
  EXPECT_DOUBLE_EQ(scaled.comm->copy_time(c.scenario.cluster, 0, 1e8),
                   plain.comm->copy_time(c.scenario.cluster, 0, 1e8));
}

TEST(StackFit, OneThroughputRecoversTheComputeFactorAndSaysTheRestIsNotIdentified) {
  const Case c = default_case();
  for (double f : {0.7, 1.0, 1.37}) {
    const auto run = measured_with(c, truth(f, 1, 1));
    planner::StackMeasurement m;
    m.tokens_per_s = run.tokens_per_s;
    const auto fit = planner::calibrate_stack(c.scenario, c.plan, m);
    EXPECT_NEAR(fit.stack.compute.value, f, 2e-3 * f);
    EXPECT_TRUE(fit.stack.compute.identified);
    EXPECT_FALSE(fit.stack.comm.identified);
    EXPECT_FALSE(fit.stack.optimizer.identified);
    EXPECT_EQ(fit.stack.comm.value, 1.0);
    EXPECT_NEAR(fit.fitted_iteration_s, fit.measured_iteration_s, 1e-3 * fit.measured_iteration_s);
    EXPECT_EQ(fit.stack.fitted_on.measured, "tokens_per_s");
    EXPECT_EQ(fit.stack.fitted_on.ranks, 4);
    EXPECT_EQ(fit.stack.fitted_on.plan_hash, traces::plan_hash(c.plan));
  }
}

TEST(StackFit, ARunWithOpRecordsRecoversEachFactor) {
  const Case c = default_case();
  const StackCalibration t = truth(1.3, 0.6, 2.0);
  const auto run = measured_with(c, t);
  planner::StackMeasurement m;
  m.run = &run;
  m.run_file = "run.json";
  const auto fit = planner::calibrate_stack(c.scenario, c.plan, m);
  EXPECT_NEAR(fit.stack.compute.value, 1.3, 0.01);
  EXPECT_NEAR(fit.stack.comm.value, 0.6, 0.03);
  EXPECT_NEAR(fit.stack.optimizer.value, 2.0, 0.01);
  EXPECT_TRUE(fit.stack.compute.identified && fit.stack.comm.identified &&
              fit.stack.optimizer.identified);
  EXPECT_NEAR(fit.fitted_iteration_s, run.iteration_time_s, 0.02 * run.iteration_time_s);
}

TEST(StackFit, RefusesWhatNoStackExplainsNamingTheBound) {
  const Case c = default_case();
  const auto run = measured_with(c, truth(1, 1, 1));
  auto refusal = [&](double tokens_per_s) {
    planner::StackMeasurement m;
    m.tokens_per_s = tokens_per_s;
    try {
      planner::calibrate_stack(c.scenario, c.plan, m);
    } catch (const InfeasibleError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // 100x faster than predicted exceeds the cluster's peak for the model's FLOPs.
  EXPECT_NE(refusal(100 * run.tokens_per_s).find("roofline"), std::string::npos);
  // 100x slower needs a compute factor past 10.
  EXPECT_NE(refusal(run.tokens_per_s / 100).find("slower than the plan simulated"),
            std::string::npos);
  // A run of another plan is refused at its plan hash.
  auto other = run;
  other.plan_hash = "0000";
  planner::StackMeasurement m;
  m.run = &other;
  m.run_file = "other.json";
  EXPECT_THROW(planner::calibrate_stack(c.scenario, c.plan, m), ValidationError);
}

TEST(StackFit, APredictionForAnotherJobSaysWhatDiffers) {
  Case c = default_case();
  const auto run = measured_with(c, truth(1.2, 1, 1));
  planner::StackMeasurement m;
  m.tokens_per_s = run.tokens_per_s;
  auto fit = planner::calibrate_stack(c.scenario, c.plan, m);
  c.scenario.job.implementation.stack = fit.stack;
  EXPECT_TRUE(stack_notes(c.scenario).empty());
  c.scenario.job.model.family = "llama";
  c.scenario.job.precision.compute = Dtype::BF16;
  c.scenario.job.global_batch *= 2;
  const auto notes = stack_notes(c.scenario);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("model family gpt, this job's is llama"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("precision fp16, this job's is bf16"), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find("global batch"), std::string::npos) << notes[2];
}

TEST(StackFit, ASweepSpecTakesTheStackForEveryMix) {
  auto spec = planner::load_sweep_spec(source_file("scenarios/sweeps/gpt2.7b-mixes.json"));
  const auto file = tmp("sweep.stack.json");
  std::ofstream(file) << to_json(truth(2.0, 1, 1)).dump();
  planner::set_stack(spec, file);
  EXPECT_EQ(spec.job["implementation"]["stack"], fs::absolute(file).string());
  const auto bad = tmp("not-a-stack.json");
  std::ofstream(bad) << R"({"format": "cephalo-profile"})";
  EXPECT_THROW(planner::set_stack(spec, bad), ValidationError);
}

struct Cli {
  int code = -1;
  std::string out, err;
};
Cli cli(const std::string& args) {
  auto r = test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.out, r.err};
}

TEST(CalibrateStackCli, FitsWritesAndIsReadBackBySimulate) {
  const std::string scenario = source_file("scenarios/default.json").string();
  const auto plan = tmp("even.plan.json");
  ASSERT_EQ(cli("plan --scenario " + scenario + " --strategy even -o " + plan.string()).code, 0);
  const auto sim0 = cli("simulate --scenario " + scenario + " --plan " + plan.string() + " --json");
  ASSERT_EQ(sim0.code, 0) << sim0.err;
  const double tokens = nlohmann::json::parse(sim0.out)["tokens_per_s"].get<double>();
  // A stack 20 % slower than modelled.
  const auto stack = tmp("mine.stack.json");
  const auto fit =
      cli("calibrate stack --scenario " + scenario + " --plan " + plan.string() +
          " --measured-tokens-per-s " + std::to_string(tokens / 1.2) + " -o " + stack.string());
  ASSERT_EQ(fit.code, 0) << fit.err;
  EXPECT_NE(fit.out.find("comm"), std::string::npos) << fit.out;
  EXPECT_NE(fit.out.find("not identified"), std::string::npos) << fit.out;
  const auto sim1 = cli("simulate --scenario " + scenario + " --plan " + plan.string() +
                        " --json --stack " + stack.string());
  ASSERT_EQ(sim1.code, 0) << sim1.err;
  EXPECT_NEAR(nlohmann::json::parse(sim1.out)["tokens_per_s"].get<double>(), tokens / 1.2,
              1e-3 * tokens);
  EXPECT_NE(sim1.err.find("stack " + stack.string()), std::string::npos) << sim1.err;
  // Refusals: two measurements (bad command line), a faster-than-roofline one (infeasible), a
  // foreign --stack file (invalid input naming it).
  EXPECT_EQ(cli("calibrate stack --scenario " + scenario + " --plan " + plan.string() +
                " --measured-tokens-per-s 5 --run x.json -o " + tmp("x.json").string())
                .code,
            2);
  const auto fast = cli("calibrate stack --scenario " + scenario + " --plan " + plan.string() +
                        " --measured-tokens-per-s " + std::to_string(tokens * 100) + " -o " +
                        tmp("fast.json").string());
  EXPECT_EQ(fast.code, 3) << fast.err;
  EXPECT_NE(fast.err.find("roofline"), std::string::npos) << fast.err;
  EXPECT_FALSE(fs::exists(tmp("fast.json")));
  const auto foreign = cli("simulate --scenario " + scenario + " --plan " + plan.string() +
                           " --stack " + plan.string());
  EXPECT_EQ(foreign.code, 1) << foreign.err;
  EXPECT_NE(foreign.err.find(plan.string()), std::string::npos) << foreign.err;
  EXPECT_NE(foreign.err.find("cephalo-stack"), std::string::npos) << foreign.err;
}

}  // namespace
}  // namespace cephalo

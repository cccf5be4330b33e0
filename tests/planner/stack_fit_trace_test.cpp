// `calibrate stack --trace`: factors recovered from a profiler trace built from the simulated
// class times times factors the test chose, and the command's refusals.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/stack_fit.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/trace_compare.hpp"

namespace cephalo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path src(const char* relative) { return fs::path(CEPHALO_SOURCE_DIR) / relative; }
fs::path tmp(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_trace");
  fs::create_directories(dir);
  return dir / name;
}

json range(const std::string& name, double ts_us, double dur_us) {
  return {{"ph", "X"}, {"name", name}, {"ts", ts_us}, {"dur", dur_us}, {"pid", 1}, {"tid", 1}};
}

// Three steps of the legacy profiler's form whose forward, backward and optimizer ranges last
// the simulated class times times `compute` and `optimizer`, with `outside` seconds of host
// work between the ranges.
json trace_with(const std::array<double, traces::kNumTraceClasses>& sim, double compute,
                double optimizer, double outside) {
  const double f = sim[0] * compute * 1e6, b = sim[1] * compute * 1e6, o = sim[2] * optimizer * 1e6;
  const double gap = outside * 1e6 / 3;
  const double step = f + b + o + 3 * gap;
  json ev = json::array();
  for (int s = 0; s < 3; ++s) {
    const double t = s * step;
    ev.push_back(range("ProfilerStep#" + std::to_string(s), t, step));
    ev.push_back(range("## forward ##", t + gap, f));
    ev.push_back(range("## backward ##", t + 2 * gap + f, b));
    ev.push_back(range("## optimizer ##", t + 3 * gap + f + b, o));
  }
  return ev;
}

struct OneRank {
  Scenario scenario = costmodels::load_scenario(src("scenarios/cpu-1rank.json"));
  Plan plan = traces::load_plan_for(scenario, src("scenarios/plans/cpu-1rank-full.json").string());
  std::array<double, traces::kNumTraceClasses> simulated() const {
    const auto models = costmodels::make_cost_models(scenario, "auto");
    sim::SimOptions o;
    o.record_ops = true;
    const auto r = sim::replay_plan(plan, scenario, *models.compute, *models.comm, o);
    return traces::simulated_class_seconds(*r.graph, r.result.report, 0);
  }
};

TEST(StackFitTrace, RecoversTheFactorsTheTraceWasBuiltWith) {
  const OneRank c;
  const auto sim = c.simulated();
  ASSERT_GT(sim[0], 0);
  ASSERT_GT(sim[1], 0);
  ASSERT_GT(sim[2], 0);
  EXPECT_EQ(sim[3], 0);  // one rank: no collective
  const double outside = 0.01 * (sim[0] + sim[1] + sim[2]);
  const auto trace =
      traces::parse_kineto_trace(trace_with(sim, 1.7, 0.6, outside).dump(), "t.json");
  planner::StackMeasurement m;
  m.trace = &trace;
  m.trace_step = "ProfilerStep#1";
  const auto fit = planner::calibrate_stack(c.scenario, c.plan, m);
  // The trace rounds to 1 ns (3 decimals of a microsecond).
  EXPECT_NEAR(fit.stack.compute.value, 1.7, 1e-4);
  EXPECT_NEAR(fit.stack.optimizer.value, 0.6, 1e-4);
  EXPECT_TRUE(fit.stack.compute.identified && fit.stack.optimizer.identified);
  EXPECT_FALSE(fit.stack.comm.identified);
  EXPECT_EQ(fit.stack.fitted_on.measured, "trace");
  // The stack predicts the step without the host work outside the classes, and says so.
  const double classified = 1.7 * (sim[0] + sim[1]) + 0.6 * sim[2];
  EXPECT_NEAR(fit.fitted_iteration_s, classified, 1e-3 * classified);
  EXPECT_NEAR(fit.measured_iteration_s, classified + outside, 1e-6 * classified);
  bool said = false;
  for (const auto& n : fit.notes) said = said || n.find("outside every class") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(StackFitTrace, ATraceOfAnotherDeviceOrModelIsRefused) {
  const OneRank c;
  // A GPU trace for the CPU rank.
  const auto gpu = traces::load_kineto_trace(src("tests/data/kineto/v100-resnet-rank0.json.gz"));
  planner::StackMeasurement m;
  m.trace = &gpu;
  try {
    planner::calibrate_stack(c.scenario, c.plan, m);
    ADD_FAILURE() << "a GPU trace fitted a CPU rank";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("a CPU run's trace"), std::string::npos) << e.what();
    EXPECT_NE(e.file().find("v100-resnet-rank0.json.gz"), std::string::npos);
  }
  // gpt-tiny has 2 layers: 5 layer norms per forward; a trace with 9 is another model's.
  auto ev = trace_with(c.simulated(), 1, 1, 0);
  const double f0 = ev[1]["ts"].get<double>();
  for (int k = 0; k < 9; ++k) ev.push_back(range("aten::layer_norm", f0 + 0.001 * k, 0.0005));
  const auto other = traces::parse_kineto_trace(ev.dump(), "other.json");
  m.trace = &other;
  m.trace_step = "0";
  try {
    planner::calibrate_stack(c.scenario, c.plan, m);
    ADD_FAILURE() << "a trace of another model fitted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "other.json");
    EXPECT_NE(std::string(e.what()).find("a multiple of 5"), std::string::npos) << e.what();
  }
}

TEST(CalibrateStackCli, TakesATraceAndRefusesBadOnesNamingTheFile) {
  const OneRank c;
  const auto trace = tmp("step.trace.json");
  std::ofstream(trace) << trace_with(c.simulated(), 2.0, 1.5, 0).dump();
  const std::string common = "calibrate stack --scenario " +
                             src("scenarios/cpu-1rank.json").string() + " --plan " +
                             src("scenarios/plans/cpu-1rank-full.json").string();
  const auto ok =
      test_support::run_command(std::string(CEPHALO_CLI) + " " + common + " --trace " +
                                trace.string() + " --step 2 --json -o " + tmp("s.json").string());
  ASSERT_EQ(ok.code, 0) << ok.err;
  const auto j = json::parse(ok.out);
  EXPECT_NEAR(j["stack"]["factors"]["compute"]["value"].get<double>(), 2.0, 1e-3);
  EXPECT_NEAR(j["stack"]["factors"]["optimizer"]["value"].get<double>(), 1.5, 1e-3);
  // Not gzip though named so: invalid input (1) naming the file.
  const auto fake = tmp("fake.json.gz");
  std::ofstream(fake) << "{}";
  const auto bad = test_support::run_command(std::string(CEPHALO_CLI) + " " + common + " --trace " +
                                             fake.string() + " -o " + tmp("b.json").string());
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_NE(bad.err.find(fake.string()), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("gzip"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(tmp("b.json")));
  // A step the trace does not have (a bad --step, exit 2); --step without --trace; two
  // measurements.
  const auto step =
      test_support::run_command(std::string(CEPHALO_CLI) + " " + common + " --trace " +
                                trace.string() + " --step 9 -o " + tmp("c.json").string());
  EXPECT_EQ(step.code, 2) << step.err;
  EXPECT_NE(step.err.find("at --step: got \"9\""), std::string::npos) << step.err;
  EXPECT_NE(step.err.find("ProfilerStep#0, ProfilerStep#1, ProfilerStep#2"), std::string::npos)
      << step.err;
  EXPECT_EQ(test_support::run_command(std::string(CEPHALO_CLI) + " " + common + " --step 1 -o " +
                                      tmp("d.json").string())
                .code,
            2);
  EXPECT_EQ(test_support::run_command(std::string(CEPHALO_CLI) + " " + common + " --trace " +
                                      trace.string() + " --run x.json -o " + tmp("e.json").string())
                .code,
            2);
}

TEST(CompareTraceCli, ComparesASimulationWithATraceStepPerClass) {
  const OneRank c;
  const auto sim_classes = c.simulated();
  const auto trace = tmp("cmp.trace.json");
  std::ofstream(trace) << trace_with(sim_classes, 2.0, 1.0, 0).dump();
  const std::string sp = " --scenario " + src("scenarios/cpu-1rank.json").string() + " --plan " +
                         src("scenarios/plans/cpu-1rank-full.json").string();
  const auto sim = tmp("sim.json");
  const auto s =
      test_support::run_command(std::string(CEPHALO_CLI) + " simulate" + sp + " --json --ops");
  ASSERT_EQ(s.code, 0) << s.err;
  std::ofstream(sim) << s.out;
  const auto r = test_support::run_command(std::string(CEPHALO_CLI) + " compare " + sim.string() +
                                           " " + trace.string() + sp + " --step 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["step"], "ProfilerStep#1");
  int rows = 0;
  for (const auto& row : j["classes"]) {
    const std::string cls = row["class"];
    const double want = cls == "forward"    ? sim_classes[0]
                        : cls == "backward" ? sim_classes[1]
                                            : sim_classes[2];
    EXPECT_NEAR(row["simulated_s"].get<double>(), want, 1e-9) << cls;
    // Measured: twice the simulated compute, the optimizer as simulated (µs with 3 decimals).
    EXPECT_NEAR(row["measured_s"].get<double>(), cls == "optimizer" ? want : 2 * want, 1e-8) << cls;
    ++rows;
  }
  EXPECT_EQ(rows, 3);
  // A merged timeline needs a RunResult; --step needs a trace.
  EXPECT_EQ(test_support::run_command(std::string(CEPHALO_CLI) + " compare " + sim.string() + " " +
                                      trace.string() + " --trace " + tmp("m.json").string())
                .code,
            2);
  EXPECT_EQ(test_support::run_command(std::string(CEPHALO_CLI) + " compare " + sim.string() + " " +
                                      sim.string() + " --step 1")
                .code,
            2);
}

}  // namespace
}  // namespace cephalo

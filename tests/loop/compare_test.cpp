// `cephalo compare` on hand-made results whose errors are known exactly: every simulated op
// lasts a fixed time per class, every "measured" op a different fixed time, so the per-class,
// end-to-end and memory errors can be computed by hand. Also the merged trace's structure and
// the errors for mismatched inputs.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/summarize.hpp"
#include "cephalo/traces/training_graph.hpp"

#include "../support/run_command.hpp"

namespace fs = std::filesystem;
using cephalo::Json;
using namespace cephalo::traces;

namespace {

const fs::path kSource = CEPHALO_SOURCE_DIR;
const fs::path kScenario = kSource / "tests/accuracy/scenarios/cpu2-gpt-small.json";
const fs::path kPlan = kSource / "tests/accuracy/plans/even-layered.json";

using Cli = cephalo::test_support::CommandResult;

Cli cli(const std::string& args) {
  return cephalo::test_support::run_command(cephalo::test_support::cephalo_command(args));
}

// Lays ops of each rank back to back on their stream with `dur(kind)` seconds each.
IterationReport fake_result(const TrainingGraph& g, const std::string& source,
                            double (*dur)(OpKind), double peak0, double peak1) {
  IterationReport r;
  r.source = source;
  double iteration = 0;
  for (int rank = 0; rank < g.num_ranks(); ++rank) {
    for (int s = 0; s < kNumStreams; ++s) {
      double t = 0;
      for (OpId id : g.stream_program(rank, static_cast<Stream>(s))) {
        double d = dur(g.op(id).kind);
        r.ops.push_back({id, t, t + d});
        t += d;
      }
      iteration = std::max(iteration, t);
    }
  }
  std::sort(r.ops.begin(), r.ops.end(),
            [](const OpTiming& a, const OpTiming& b) { return a.id < b.id; });
  r.iteration_time_s = iteration;
  r.samples_per_s = g.summary().global_batch / iteration;
  r.tokens_per_s = r.samples_per_s * g.summary().sequence_length;
  for (int rank = 0; rank < g.num_ranks(); ++rank) {
    RankReport k;
    k.rank = rank;
    k.gpu = "CPU-core";
    k.compute_s = iteration / 2;
    k.comm_s = iteration / 4;
    k.peak_memory_bytes = rank == 0 ? peak0 : peak1;
    k.capacity_bytes = 4e9;
    r.ranks.push_back(k);
  }
  return r;
}

double sim_dur(OpKind k) { return is_collective(k) ? 0.002 : 0.001; }
double run_dur(OpKind k) { return is_collective(k) ? 0.004 : 0.00125; }

class CompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_compare_test");
    fs::create_directories(dir_);
    auto scenario = cephalo::costmodels::load_scenario(kScenario);
    auto plan = cephalo::load_plan(kPlan);
    graph_ = build_training_graph(plan, scenario);
    sim_ = fake_result(graph_, "sim", sim_dur, 110e6, 90e6);
    run_ = fake_result(graph_, "cpu", run_dur, 100e6, 100e6);
    write(dir_ / "sim.json", to_json(sim_));
    Json run = to_json(run_);
    run["losses"] = {5.5, 5.4};  // RunResult extras are ignored by compare
    write(dir_ / "run.json", run);
  }
  static void write(const fs::path& p, const Json& j) {
    cephalo::write_file_atomically(p, j.dump(2));
  }
  std::string files() const {
    return (dir_ / "sim.json").string() + " " + (dir_ / "run.json").string();
  }
  std::string graph_args() const {
    return " --scenario " + kScenario.string() + " --plan " + kPlan.string();
  }
  fs::path dir_;
  TrainingGraph graph_;
  IterationReport sim_, run_;
};

TEST_F(CompareTest, EndToEndAndPerClassErrorsAreExact) {
  Cli c = cli("compare " + files() + graph_args() + " --json");
  ASSERT_EQ(c.code, 0) << c.err;
  Json j = Json::parse(c.out);
  const Json& it = j["end_to_end"][0];
  EXPECT_EQ(it["metric"], "iteration_time_s");
  EXPECT_NEAR(it["error"].get<double>(),
              (sim_.iteration_time_s - run_.iteration_time_s) / run_.iteration_time_s, 1e-12);
  EXPECT_NEAR(j["ranks"][0]["peak_memory_error"].get<double>(), 0.10, 1e-12);
  EXPECT_NEAR(j["ranks"][1]["peak_memory_error"].get<double>(), -0.10, 1e-12);
  EXPECT_NEAR(j["summary"]["max_abs_peak_memory_error"].get<double>(), 0.10, 1e-12);

  std::map<std::string, Json> classes;
  for (const Json& c2 : j["op_classes"]) classes[c2["class"]] = c2;
  ASSERT_TRUE(classes.count("forward"));
  ASSERT_TRUE(classes.count("backward"));
  ASSERT_TRUE(classes.count("recompute"));
  ASSERT_TRUE(classes.count("all-gather"));
  ASSERT_TRUE(classes.count("reduce-scatter"));
  ASSERT_TRUE(classes.count("optimizer"));
  // compute: 1 ms vs 1.25 ms = -20 %; collectives 2 ms vs 4 ms = -50 %.
  EXPECT_NEAR(classes["forward"]["error"].get<double>(), -0.20, 1e-9);
  EXPECT_NEAR(classes["optimizer"]["error"].get<double>(), -0.20, 1e-9);
  EXPECT_NEAR(classes["all-gather"]["error"].get<double>(), -0.50, 1e-9);
  EXPECT_NEAR(classes["reduce-scatter"]["error"].get<double>(), -0.50, 1e-9);
  // The largest per-op differences come first: collectives (2 ms vs 4 ms) beat compute.
  const Json& largest = j["largest_differences"];
  ASSERT_EQ(largest.size(), 5u);
  EXPECT_NEAR(largest[0]["measured_s"].get<double>() - largest[0]["simulated_s"].get<double>(),
              0.002, 1e-12);
  // Layered accumulation: 2 gathers per unit per rank (6 units, 2 ranks).
  EXPECT_EQ(classes["all-gather"]["simulated_ops"].get<int>(), 2 * 6 * 2);
  EXPECT_EQ(classes["forward"]["measured_ops"].get<int>(),
            classes["forward"]["simulated_ops"].get<int>());
}

TEST_F(CompareTest, HumanTablesNameEveryClass) {
  Cli c = cli("compare " + files() + graph_args());
  ASSERT_EQ(c.code, 0) << c.err;
  for (const char* word : {"iteration time", "samples/s", "peak mem", "forward", "backward",
                           "recompute", "all-gather", "reduce-scatter", "optimizer"})
    EXPECT_NE(c.out.find(word), std::string::npos) << word << "\n" << c.out;
}

// Both sides say which software stack they are: the simulation the scenario's job, the run the
// RunResult's record (the backend's); a difference is warned about, an old file says unknown.
TEST_F(CompareTest, PrintsTheImplementationOfBothSides) {
  const std::string sim_impl =
      cephalo::to_string(cephalo::costmodels::load_scenario(kScenario).job.implementation);
  IterationReport run = run_;
  run.implementation = sim_impl;
  write(dir_ / "run.json", to_json(run));
  Cli same = cli("compare " + files() + graph_args() + " --json");
  ASSERT_EQ(same.code, 0) << same.err;
  Json j = Json::parse(same.out);
  EXPECT_EQ(j["implementation"]["simulated"], sim_impl);
  EXPECT_EQ(j["implementation"]["measured"], sim_impl);
  EXPECT_EQ(same.err.find("implementation differs"), std::string::npos) << same.err;
  Cli table = cli("compare " + files() + graph_args());
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("implementation  simulated: " + sim_impl + "; measured: " + sim_impl),
            std::string::npos)
      << table.out;

  run.implementation = sim_impl == "flash, fused" ? "eager, unfused" : "flash, fused";
  write(dir_ / "run.json", to_json(run));
  Cli differs = cli("compare " + files() + graph_args() + " --json");
  ASSERT_EQ(differs.code, 0) << differs.err;
  EXPECT_NE(differs.err.find("implementation differs"), std::string::npos) << differs.err;
  EXPECT_EQ(Json::parse(differs.out)["implementation"]["measured"], run.implementation);

  write(dir_ / "run.json", to_json(run_));  // a RunResult without the record
  Cli old = cli("compare " + files() + " --json");
  ASSERT_EQ(old.code, 0) << old.err;
  Json o = Json::parse(old.out);
  EXPECT_NE(o["implementation"]["measured"].get<std::string>().find("unknown"), std::string::npos);
  EXPECT_NE(o["implementation"]["simulated"].get<std::string>().find("unknown"), std::string::npos);
}

TEST_F(CompareTest, WithoutGraphOnlyEndToEnd) {
  Cli c = cli("compare " + files() + " --json");
  ASSERT_EQ(c.code, 0) << c.err;
  Json j = Json::parse(c.out);
  EXPECT_TRUE(j["op_classes"].is_null());
  EXPECT_NE(j["op_classes_note"].get<std::string>().find("--scenario"), std::string::npos);
}

TEST_F(CompareTest, MergedTraceHasSideBySideLanes) {
  fs::path trace = dir_ / "merged.json";
  Cli c = cli("compare " + files() + graph_args() + " --trace " + trace.string());
  ASSERT_EQ(c.code, 0) << c.err;
  Json t = cephalo::read_json_file(trace);
  std::map<int, std::string> names;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
  std::size_t x_events = 0;
  for (const Json& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "X") {
      ++x_events;
      lanes[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
  }
  ASSERT_EQ(names.size(), 4u);
  EXPECT_NE(names[0].find("rank 0"), std::string::npos);
  EXPECT_NE(names[0].find("sim"), std::string::npos);
  EXPECT_NE(names[1].find("rank 0"), std::string::npos);
  EXPECT_NE(names[1].find("measured"), std::string::npos);
  EXPECT_NE(names[3].find("rank 1"), std::string::npos);
  EXPECT_EQ(x_events, 2 * graph_.num_ops());
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-9) << "overlap on pid " << lane.first;
  }
}

TEST_F(CompareTest, CollectivesCountFromTheLastArrival) {
  // Rank 0 reaches its second all-gather 3 ms before rank 1: the wait is not transfer time.
  IterationReport early = run_;
  for (auto& o : early.ops) {
    const Op& op = graph_.op(o.id);
    if (op.rank == 0 && is_collective(op.kind) && op.collective == 1) o.start_s -= 0.003;
  }
  write(dir_ / "early.json", to_json(early));
  Cli a = cli("compare " + files() + graph_args() + " --json");
  Cli b = cli("compare " + (dir_ / "sim.json").string() + " " + (dir_ / "early.json").string() +
              graph_args() + " --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  auto measured = [](const std::string& out, const std::string& cls) {
    const Json j = Json::parse(out);
    for (const Json& c : j["op_classes"])
      if (c["class"] == cls) return c["measured_s"].get<double>();
    return -1.0;
  };
  EXPECT_NEAR(measured(a.out, "all-gather"), measured(b.out, "all-gather"), 1e-9);
  EXPECT_GT(measured(a.out, "all-gather"), 0);
}

TEST_F(CompareTest, RankCountMismatchIsAnInputError) {
  IterationReport one = run_;
  one.ranks.pop_back();
  write(dir_ / "one.json", to_json(one));
  Cli c = cli("compare " + (dir_ / "sim.json").string() + " " + (dir_ / "one.json").string());
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("one.json"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("$.ranks"), std::string::npos) << c.err;
}

TEST_F(CompareTest, OpIdOutsideTheGraphIsAnInputError) {
  IterationReport bad = run_;
  bad.ops.back().id = 999999;
  write(dir_ / "bad.json", to_json(bad));
  Cli c = cli("compare " + (dir_ / "sim.json").string() + " " + (dir_ / "bad.json").string() +
              graph_args());
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("bad.json"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find(".id"), std::string::npos) << c.err;
}

// Records given the wrong way round, or one record twice, would compare nonsense: refused
// through the binary (traces/compare_test.cpp has the same checks without it).
TEST_F(CompareTest, SwappedArgumentsAndTheSameFileTwiceAreInputErrors) {
  Cli swapped = cli("compare " + (dir_ / "run.json").string() + " " + (dir_ / "sim.json").string());
  EXPECT_EQ(swapped.code, 1) << swapped.err;
  EXPECT_NE(swapped.err.find("swapped"), std::string::npos) << swapped.err;
  Cli same = cli("compare " + (dir_ / "sim.json").string() + " " + (dir_ / "sim.json").string());
  EXPECT_EQ(same.code, 1) << same.err;
  EXPECT_NE(same.err.find("same file"), std::string::npos) << same.err;
}

TEST_F(CompareTest, ARecordOfAnotherPlanIsAnInputError) {
  auto plan = cephalo::load_plan(kPlan);
  IterationReport sim = sim_, run = run_;
  sim.plan_hash = plan_hash(plan);
  run.plan_hash = plan_hash(plan);
  write(dir_ / "sim.json", to_json(sim));
  write(dir_ / "run.json", to_json(run));
  Cli ok = cli("compare " + files() + graph_args() + " --json");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
  run.plan_hash = "0123456789abcdef";
  write(dir_ / "run.json", to_json(run));
  Cli bad = cli("compare " + files() + graph_args() + " --json");
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_NE(bad.err.find("plan_hash"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("run.json"), std::string::npos) << bad.err;
}

TEST_F(CompareTest, MissingFileIsAnIoError) {
  Cli c = cli("compare " + (dir_ / "nope.json").string() + " " + (dir_ / "run.json").string());
  EXPECT_EQ(c.code, 5) << c.err;
  EXPECT_NE(c.err.find("nope.json"), std::string::npos) << c.err;
}

}  // namespace

// The graph needs both the scenario and the plan: one alone is a bad command line (exit 2)
// naming the pair, and --trace without them cannot merge the timelines (exit 3), writing
// nothing.
TEST_F(CompareTest, ScenarioWithoutPlanIsRefusedAndATraceNeedsTheGraph) {
  for (const std::string& half :
       {" --scenario " + kScenario.string(), " --plan " + kPlan.string()}) {
    Cli c = cli("compare " + files() + half + " --json");
    EXPECT_EQ(c.code, 2) << half << "\n" << c.err;
    EXPECT_NE(c.err.find("--scenario and --plan"), std::string::npos) << c.err;
    EXPECT_TRUE(c.out.empty()) << c.out;
  }
  const fs::path trace = dir_ / "no-graph.trace.json";
  Cli c = cli("compare " + files() + " --trace " + trace.string());
  EXPECT_EQ(c.code, 3) << c.err;
  EXPECT_NE(c.err.find("--trace"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(trace));
}

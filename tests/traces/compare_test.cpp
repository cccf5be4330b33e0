// traces::compare without the binary: records built by summarize() from hand-placed intervals
// (every simulated op of a class lasts one fixed time, every measured op another), so every
// error is known exactly; and the checks that refuse records that cannot be compared.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/summarize.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

namespace fs = std::filesystem;
using testing::tiny_plan;
using testing::tiny_scenario;

// Ops of each rank back to back on their stream, `collective_ns` / `other_ns` each.
IterationReport record(const TrainingGraph& g, const Scenario& s, const Plan& p,
                       const std::string& source, std::int64_t collective_ns, std::int64_t other_ns,
                       std::vector<double> peaks) {
  std::vector<std::int64_t> start(g.num_ops()), end(g.num_ops());
  for (int r = 0; r < g.num_ranks(); ++r)
    for (int k = 0; k < kNumStreams; ++k) {
      std::int64_t t = 0;
      for (OpId id : g.stream_program(r, static_cast<Stream>(k))) {
        start[id] = t;
        t += is_collective(g.op(id).kind) ? collective_ns : other_ns;
        end[id] = t;
      }
    }
  IterationMeasurements m;
  m.source = source;
  m.start_ns = start;
  m.end_ns = end;
  m.peak_memory_bytes = std::move(peaks);
  m.record_ops = true;
  return summarize(g, s, p, m);
}

class Compare : public ::testing::Test {
 protected:
  void SetUp() override {
    graph = build_training_graph(plan, scenario);
    sim = record(graph, scenario, plan, "sim", 2'000'000, 1'000'000, {110e6, 90e6});
    run = record(graph, scenario, plan, "cpu", 4'000'000, 1'250'000, {100e6, 100e6});
    ctx = {&graph, &plan, "plan.json"};
  }
  Scenario scenario = tiny_scenario(2, 2, 8);
  Plan plan = tiny_plan(scenario, 2);
  TrainingGraph graph;
  IterationReport sim, run;
  CompareContext ctx;
};

TEST_F(Compare, ErrorsPerClassRankAndEndToEndAreExact) {
  CompareReport c = compare(sim, "sim.json", run, "run.json", ctx);
  EXPECT_TRUE(c.warnings.empty());
  ASSERT_TRUE(c.have_ops);
  ASSERT_TRUE(c.iteration_time_error);
  EXPECT_NEAR(*c.iteration_time_error,
              (sim.iteration_time_s - run.iteration_time_s) / run.iteration_time_s, 1e-12);
  EXPECT_NEAR(*c.ranks[0].peak_memory_error, 0.10, 1e-12);
  EXPECT_NEAR(*c.ranks[1].peak_memory_error, -0.10, 1e-12);
  EXPECT_NEAR(c.max_abs_peak_memory_error, 0.10, 1e-12);
  std::map<CompareClass, ClassComparison> by;
  for (const auto& k : c.op_classes) by[k.op_class] = k;
  ASSERT_EQ(by.size(), 6u);  // F, B, RC, AG, RS, OPT (no copies, no all-reduce)
  EXPECT_NEAR(*by[CompareClass::Forward].error, -0.20, 1e-9);
  EXPECT_NEAR(*by[CompareClass::Optimizer].error, -0.20, 1e-9);
  EXPECT_NEAR(*by[CompareClass::AllGather].error, -0.50, 1e-9);
  EXPECT_NEAR(*by[CompareClass::ReduceScatter].error, -0.50, 1e-9);
  // 2 gathers per unit per rank: 4 units, 2 ranks.
  EXPECT_EQ(by[CompareClass::AllGather].simulated_ops, 2 * 4 * 2);
  EXPECT_EQ(by[CompareClass::Forward].measured_ops, by[CompareClass::Forward].simulated_ops);
  ASSERT_EQ(c.largest_differences.size(), 5u);
  EXPECT_NEAR(c.largest_differences[0].measured_s - c.largest_differences[0].simulated_s, 2e-3,
              1e-12);
  Json j = to_json(c, &graph);
  EXPECT_EQ(j["op_classes"].size(), 6u);
  EXPECT_NE(render_compare_table(c, &graph).find("reduce-scatter"), std::string::npos);
}

TEST_F(Compare, CollectivesCountFromTheLastArrival) {
  IterationReport early = run;
  for (auto& o : early.ops) {
    const Op& op = graph.op(o.id);
    if (op.rank == 0 && op.collective == 1) o.start_s -= 0.003;
  }
  auto gathers = [&](const IterationReport& r) {
    for (const auto& k : compare(sim, "a", r, "b", ctx).op_classes)
      if (k.op_class == CompareClass::AllGather) return k.measured_s;
    return -1.0;
  };
  EXPECT_NEAR(gathers(run), gathers(early), 1e-9);
  EXPECT_GT(gathers(run), 0);
}

TEST_F(Compare, SwappedArgumentsAreNamedAsSuch) {
  try {
    compare(run, "run.json", sim, "sim.json", ctx);
    FAIL() << "swapped arguments accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "run.json");
    EXPECT_EQ(e.json_path(), "$.source");
    EXPECT_NE(e.expected().find("swapped"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare(sim, "a.json", sim, "b.json", ctx), ValidationError);  // two SimResults
  EXPECT_THROW(compare(run, "a.json", run, "b.json", ctx), ValidationError);  // two RunResults
}

TEST_F(Compare, TheSameFileTwiceIsRefused) {
  fs::path f = fs::temp_directory_path() / (std::to_string(::getpid()) + "_compare_same.json");
  write_file_atomically(f, render_json(sim));
  try {
    compare(sim, f.string(), run, f.string(), ctx);
    FAIL() << "the same file twice accepted";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("same file"), std::string::npos) << e.what();
  }
  fs::remove(f);
}

TEST_F(Compare, BothRecordsMustDescribeThePlanGiven) {
  Plan other = plan;
  other.ranks[0].state_share = 0.75;
  other.ranks[1].state_share = 0.25;
  CompareContext wrong{&graph, &other, "other.json"};
  try {
    compare(sim, "sim.json", run, "run.json", wrong);
    FAIL() << "a record of another plan accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.json_path(), "$.plan_hash");
    EXPECT_NE(e.expected().find("other.json"), std::string::npos) << e.what();
  }
  // Without a plan the two records must still agree with each other.
  IterationReport moved = run;
  moved.plan_hash = plan_hash(other);
  EXPECT_THROW(compare(sim, "sim.json", moved, "run.json"), ValidationError);
  // A record written before plan hashes existed: a warning, not an error.
  IterationReport old = run;
  old.plan_hash.clear();
  CompareReport c = compare(sim, "sim.json", old, "run.json", ctx);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("run.json"), std::string::npos);
}

TEST_F(Compare, IterationTimesMustBePositive) {
  IterationReport zero = run;
  zero.iteration_time_s = 0;
  try {
    compare(sim, "sim.json", zero, "run.json", ctx);
    FAIL();
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "run.json");
    EXPECT_EQ(e.json_path(), "$.iteration_time_s");
  }
}

TEST_F(Compare, WithoutTheGraphOnlyEndToEndAndRanks) {
  CompareReport c = compare(sim, "sim.json", run, "run.json");
  EXPECT_FALSE(c.have_ops);
  EXPECT_NE(c.ops_note.find("--scenario"), std::string::npos);
  EXPECT_EQ(c.ranks.size(), 2u);
  EXPECT_TRUE(to_json(c)["op_classes"].is_null());
}

TEST_F(Compare, MergedTraceHasSideBySideLanes) {
  Json t = Json::parse(render_merged_trace(graph, sim, run, {"a, node 0", "b, node 0"}, "t"));
  std::map<int, std::string> names;
  std::size_t x = 0;
  for (const Json& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    x += e["ph"] == "X";
  }
  ASSERT_EQ(names.size(), 4u);
  EXPECT_NE(names[1].find("measured"), std::string::npos);
  EXPECT_NE(names[2].find("rank 1"), std::string::npos);
  EXPECT_EQ(x, 2 * graph.num_ops());
}

}  // namespace
}  // namespace cephalo::traces

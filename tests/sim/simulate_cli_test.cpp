// `cephalo simulate` end to end on the shipped default scenario and even plan: the command
// scripts/demo runs. Checks the JSON record, determinism across runs, and the structure of the
// Chrome trace Perfetto imports.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cephalo/core/json_reader.hpp"

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::Json;

struct Output {
  int code = -1;
  std::string out;
};

Output run(const std::string& args) {  // stdout only
  auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.out};
}

const std::string kSource = CEPHALO_SOURCE_DIR;
const std::string kArgs = "simulate --scenario " + kSource + "/scenarios/default.json --plan " +
                          kSource + "/scenarios/plans/default-even.json";

TEST(SimulateCli, JsonHasTheSimResultKeysAndIsByteIdenticalAcrossRuns) {
  Output a = run(kArgs + " --json --ops");
  Output b = run(kArgs + " --json --ops");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  Json j = Json::parse(a.out);
  for (const char* key : {"iteration_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "oom",
                          "events", "ranks", "ops"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (const char* key : {"rank", "gpu", "compute_s", "comm_s", "exposed_comm_s", "idle_s",
                          "peak_memory_bytes", "capacity_bytes"})
    EXPECT_TRUE(j["ranks"][0].contains(key)) << key;
  EXPECT_EQ(j["ranks"][3]["gpu"], "P40");
  EXPECT_GT(j["ops"].size(), 1000u);
}

TEST(SimulateCli, TableByDefault) {
  Output a = run(kArgs);
  ASSERT_EQ(a.code, 0);
  EXPECT_NE(a.out.find("iteration time"), std::string::npos);
  EXPECT_NE(a.out.find("RTX-A6000"), std::string::npos);
}

TEST(SimulateCli, TraceLoadsAsChromeTraceJson) {
  fs::path trace =
      fs::temp_directory_path() / ("cephalo-sim-trace-" + std::to_string(getpid()) + ".json");
  Output a = run(kArgs + " --trace " + trace.string());
  ASSERT_EQ(a.code, 0);
  std::ifstream in(trace);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(trace);
  Json t = Json::parse(text.str());
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::map<int, std::string> names;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::pair<int, int>, std::vector<std::pair<long long, long long>>> lanes;
  int counters = 0;
  for (const Json& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (ph == "C") ++counters;
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number());
      long long ts = std::llround(e["ts"].get<double>() * 1000);
      long long dur = std::llround(e["dur"].get<double>() * 1000);
      ASSERT_GE(dur, 0);
      lanes[{e["pid"], e["tid"]}].emplace_back(ts, ts + dur);
      EXPECT_TRUE(e["args"].contains("op") && e["args"].contains("bytes") &&
                  e["args"].contains("flops"));
    }
  }
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0], "rank 0 (L4, node 0)");
  EXPECT_EQ(names[2], "rank 2 (RTX-A6000, node 0)");
  EXPECT_EQ((threads[{0, 0}]), "compute");
  EXPECT_EQ((threads[{0, 1}]), "comm");
  EXPECT_GT(counters, 4);
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      ASSERT_LE(spans[i - 1].second, spans[i].first) << lane.first << "/" << lane.second;
  }
}

TEST(SimulateCli, BadPlanIsInvalidInput) {
  Output a = run("simulate --scenario " + kSource + "/scenarios/default.json --plan " + kSource +
                 "/tests/data/bad/shares_not_one.plan.json");
  EXPECT_EQ(a.code, 1);
  Output b =
      run("simulate --scenario " + kSource + "/scenarios/default.json --plan /nonexistent.json");
  EXPECT_EQ(b.code, 5);
}

}  // namespace

namespace {

TEST(SimulateCli, OverCapacityPlanReportsOomOnTheP40) {
  Output a = run("simulate --scenario " + kSource + "/scenarios/default.json --plan " + kSource +
                 "/tests/data/sim/default-p40-oom.plan.json --json");
  ASSERT_EQ(a.code, 0);
  Json j = Json::parse(a.out);
  ASSERT_TRUE(j["oom"].get<bool>());
  EXPECT_EQ(j["oom_detail"]["rank"], 3);
  EXPECT_NE(j["oom_detail"]["op_name"].get<std::string>().find(" r3"), std::string::npos);
  EXPECT_GT(j["oom_detail"]["bytes"].get<double>(),
            j["oom_detail"]["capacity_bytes"].get<double>());
}

// A plan with a model split (scenarios/plans/modern-mix-gpt2.7b-3d.json: TP 2 x 3 pipeline
// stages on A100, H100 and L4 nodes): the table has each rank's stage, bubble and exposed
// communication by kind, the record the same, and the trace a send and a receive lane with
// every rank named by its stage.
TEST(SimulateCli, ASplitPlanReportsStagesBubblesAndCommunicationByKind) {
  const std::string args = "simulate --scenario " + kSource +
                           "/scenarios/modern-mix-gpt2.7b.json --plan " + kSource +
                           "/scenarios/plans/modern-mix-gpt2.7b-3d.json";
  const Output table = run(args);
  ASSERT_EQ(table.code, 0) << table.out;
  for (const char* column : {"stage", "TP", "PP exposed", "DP exposed", "bubble"})
    EXPECT_NE(table.out.find(column), std::string::npos) << column << "\n" << table.out;
  EXPECT_NE(table.out.find("TP 2 x PP 3 (1F1B, 8 micro-batches)"), std::string::npos) << table.out;
  const Output json = run(args + " --json");
  ASSERT_EQ(json.code, 0) << json.out;
  const Json j = Json::parse(json.out);
  ASSERT_EQ(j["ranks"].size(), 10u);
  for (const auto& r : j["ranks"])
    for (const char* key : {"stage", "tp_comm_s", "pp_comm_s", "exposed_tp_s", "exposed_pp_s",
                            "exposed_dp_s", "bubble_s"})
      EXPECT_TRUE(r.contains(key)) << key;
  EXPECT_EQ(j["ranks"][0]["stage"], 0);
  EXPECT_EQ(j["ranks"][4]["stage"], 1);
  EXPECT_EQ(j["ranks"][9]["stage"], 2);
  // The L4 stage computes longest; the A100 and H100 stages wait for it.
  EXPECT_GT(j["ranks"][0]["bubble_s"].get<double>(), j["ranks"][9]["bubble_s"].get<double>());
  const fs::path trace = fs::temp_directory_path() / "cephalo-split-trace.json";
  ASSERT_EQ(run(args + " --trace " + trace.string()).code, 0);
  const Json t = Json::parse(std::ifstream(trace));
  std::map<std::string, int> lanes;
  bool stage_named = false;
  for (const auto& e : t["traceEvents"]) {
    if (e.value("name", "") == "thread_name") ++lanes[e["args"]["name"].get<std::string>()];
    if (e.value("name", "") == "process_name" &&
        e["args"]["name"].get<std::string>().find("stage 2") != std::string::npos)
      stage_named = true;
  }
  EXPECT_EQ(lanes["send"], 10);
  EXPECT_EQ(lanes["recv"], 10);
  EXPECT_TRUE(stage_named);
  fs::remove(trace);
}

}  // namespace

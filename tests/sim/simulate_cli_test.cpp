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
  for (const char* key : {"iteration_time_s", "samples_per_s", "tokens_per_s", "mfu", "oom",
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

}  // namespace

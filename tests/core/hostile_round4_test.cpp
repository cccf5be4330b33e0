// Hostile input, round four, through the built CLI: what a split plan, a split file, a sweep
// spec and the profiler's flags say is read or refused, never dropped unread (tests/README.md,
// "Hostile input, round four"). Each error names the file, JSON path, value and expectation, or
// the flag, value and rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"
#include "hostile_cli.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kCpu4 = kRoot + "/scenarios/cpu-4rank.json";
const std::string kMix = kRoot + "/scenarios/modern-mix-gpt2.7b.json";
const std::string kMixPlan = kRoot + "/scenarios/plans/modern-mix-gpt2.7b-3d.json";

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;

class HostileRoundFour : public cephalo::test_support::HostileCliTest {};

// cpu-4rank's 9 samples as one micro-batch per rank (3, 2, 2, 2), under `split`.
json cpu4_plan(const json& split) {
  json ranks = json::array();
  for (int r = 0; r < 4; ++r)
    ranks.push_back({{"rank", r},
                     {"node", 0},
                     {"gpu", "cpu"},
                     {"batch", r == 0 ? 3 : 2},
                     {"micro_batch", r == 0 ? 3 : 2},
                     {"micro_batches", 1},
                     {"state_share", 0.25}});
  json plan{{"version", 1}, {"scenario", "cpu-4rank"}, {"ranks", ranks}};
  if (!split.is_null()) plan["model_split"] = split;
  return plan;
}

double iteration_s(const std::string& args) {
  const auto r = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(args));
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  if (r.code != 0) return -1;
  const json j = json::parse(r.out);
  return j.contains("iteration_time_s") ? j["iteration_time_s"].get<double>()
                                        : j["iteration_s"].get<double>();
}

}  // namespace

TEST_F(HostileRoundFour, AWrittenDefaultSplitSaysWhatItsFsdpPlanRunsOrIsRefused) {
  // One stage of every rank at tensor_parallel 1 is the FSDP plan spelled out: what the FSDP
  // plan does not read (the split's micro-batches, schedule, stage) must agree with what it
  // runs, or it would be dropped unread.
  const std::string v = "validate --scenario " + kCpu4 + " ";
  const std::string mb5 = write("mb5.json", cpu4_plan({{"micro_batches", 5}}));
  const std::string il = write("il.json", cpu4_plan({{"schedule", "interleaved:2"}}));
  const std::string half =
      write("half.json", cpu4_plan({{"stages", {{{"layers", {0, 1}}, {"ranks", {0, 1, 2, 3}}}}}}));
  const std::string three =
      write("three.json", cpu4_plan({{"stages", {{{"layers", {0, 2}}, {"ranks", {0, 1, 2}}}}}}));
  const std::string none = write("none.json", cpu4_plan({{"stages", json::array()}}));
  json uneven = cpu4_plan({{"micro_batches", 3}});
  uneven["ranks"][0]["micro_batches"] = 3;
  uneven["ranks"][0]["micro_batch"] = 1;
  const std::string uneven_file = write("uneven.json", uneven);
  expect_cases({
      {v + mb5, 1, {"mb5.json", "model_split.micro_batches", "5", "every rank runs"}},
      {"simulate --scenario " + kCpu4 + " --plan " + mb5, 1, {"model_split.micro_batches"}},
      {v + il, 1, {"il.json", "model_split.schedule", "interleaved:2", "the FSDP plan"}},
      {v + half, 1, {"half.json", "model_split.stages", "layer 1 is in no stage"}},
      {v + three, 1, {"three.json", "model_split", "rank 3"}},
      {v + none, 1, {"none.json", "model_split.stages", "got []", "at least one stage"}},
      {v + uneven_file, 1, {"uneven.json", "model_split.micro_batches", "3"}},
  });
  // Written out consistently, the default split is its FSDP plan: the same replay (micro-batch
  // counts that differ by rank are the rows' when the split leaves its count at 1).
  uneven["model_split"] = {{"micro_batches", 1}, {"schedule", "1f1b"}};
  const std::string uneven_ok = write("uneven_ok.json", uneven);
  uneven.erase("model_split");
  const std::string uneven_fsdp = write("uneven_fsdp.json", uneven);
  EXPECT_EQ(iteration_s("simulate --json --scenario " + kCpu4 + " --plan " + uneven_ok),
            iteration_s("simulate --json --scenario " + kCpu4 + " --plan " + uneven_fsdp));
  const std::string fsdp = write("fsdp.json", cpu4_plan(nullptr));
  const std::string spelt =
      write("spelt.json", cpu4_plan({{"tensor_parallel", 1},
                                     {"micro_batches", 1},
                                     {"sharding", "full"},
                                     {"stages", {{{"layers", {0, 2}}, {"ranks", {0, 1, 2, 3}}}}}}));
  const double a = iteration_s("simulate --json --scenario " + kCpu4 + " --plan " + fsdp);
  const double b = iteration_s("simulate --json --scenario " + kCpu4 + " --plan " + spelt);
  EXPECT_GT(a, 0);
  EXPECT_EQ(a, b);
}

TEST_F(HostileRoundFour, PredictThreeDReadsAPlanFilesCheckpointingAndRefusesAContradiction) {
  json plan = json::parse(std::ifstream(kMixPlan));
  ASSERT_EQ(plan.at("activation_checkpointing"), "full");
  const std::string p3 = "predict 3d --json --scenario " + kMix + " --split ";
  const double own = iteration_s(p3 + kMixPlan);
  const double repeated = iteration_s(p3 + kMixPlan + " --activation-checkpointing full");
  plan["activation_checkpointing"] = "none";
  const std::string none = write("none.plan.json", plan);
  const double without = iteration_s(p3 + none);
  EXPECT_EQ(own, repeated);
  // Recomputing every layer costs time: the plan's "full" was priced, not the default none.
  EXPECT_GT(own, without * 1.05);
  // The same plan by class ("rank_classes") is a plan file too.
  json compact = json::parse(std::ifstream(kMixPlan));
  compact["rank_classes"] = json::array();
  for (json row : compact["ranks"]) {
    const int r = row["rank"].get<int>();
    row.erase("rank");
    row["ranks"] = {r, r};
    compact["rank_classes"].push_back(row);
  }
  compact.erase("ranks");
  const std::string by_class = write("compact.plan.json", compact);
  EXPECT_EQ(iteration_s(p3 + by_class), own);
  plan["activation_checkpointing"] = {{"every", 2}};
  const std::string every = write("every.plan.json", plan);
  expect_cases({
      {"predict 3d --scenario " + kMix + " --split " + kMixPlan +
           " --activation-checkpointing none",
       2,
       {"--activation-checkpointing", "none", "the plan's own \"full\"", kMixPlan}},
      {"predict 3d --scenario " + kMix + " --split " + by_class +
           " --activation-checkpointing none",
       2,
       {"--activation-checkpointing", "the plan's own \"full\"", "compact.plan.json"}},
      {"predict 3d --scenario " + kMix + " --split " + every,
       1,
       {"every.plan.json", "activation_checkpointing", "every:2", "\"selective\""}},
  });
}

TEST_F(HostileRoundFour, ASweepsNamesAreLabelsTheTableCanPrint) {
  json spec = json::parse(std::ifstream(kRoot + "/scenarios/sweeps/llama7b-network.json"));
  spec["job"] = kRoot + "/scenarios/jobs/llama-7b-s2048-b128.json";
  json empty = spec;
  empty["networks"][1]["name"] = "";
  json newline = spec;
  newline["networks"][2]["name"] = "100G\nfast";
  json blank = spec;
  blank["name"] = "   ";
  expect_cases({
      {"validate " + write("empty.sweep.json", empty),
       1,
       {"empty.sweep.json", "networks[1].name", "a name with a visible character"}},
      {"validate " + write("newline.sweep.json", newline),
       1,
       {"newline.sweep.json", "networks[2].name", "no control character"}},
      {"sweep --spec " + write("blank.sweep.json", blank),
       1,
       {"blank.sweep.json", "at name", "a name with a visible character"}},
  });
}

// The scenario's, the cluster's and a node's names label the rows of describe's and simulate's
// tables: the same name rule as a sweep's.
TEST_F(HostileRoundFour, AScenariosNamesAreLabelsTheTableCanPrint) {
  json base = json::parse(std::ifstream(kCpu4));
  base["job"] = kRoot + "/scenarios/jobs/gpt-tiny-cpu.json";
  json scenario = base;
  scenario["name"] = "";
  json cluster = base;
  cluster["cluster"]["name"] = "cpu\n4";
  json node = base;
  node["cluster"]["nodes"][0]["name"] = " ";
  expect_cases({
      {"validate " + write("scenario.json", scenario),
       1,
       {"scenario.json", "at name", "a name with a visible character"}},
      {"validate " + write("cluster.json", cluster),
       1,
       {"cluster.json", "cluster.name", "no control character"}},
      {"validate " + write("node.json", node),
       1,
       {"node.json", "cluster.nodes[0].name", "a name with a visible character"}},
  });
}

TEST_F(HostileRoundFour, ProfileRefusesASweepFileASingleProcessWouldNotWrite) {
  const std::string out = (dir_ / "p.json").string();
  expect_cases(
      {{"profile --model gpt-tiny --seq 16 --micro-batches 1 --repeats 1 --warmup 0 "
        "-o " +
            out + " --sweep-out " + (dir_ / "s.json").string(),
        2,
        {"--sweep-out", "s.json", "mpirun -np N"}}});
  EXPECT_FALSE(fs::exists(out)) << "refused before measuring";
}

TEST_F(HostileRoundFour, ASweepsOutputNameSaysItsFormatOrIsRefusedBeforeTheSweep) {
  // The name's ending picks CSV or JSON; "rows.txt" was written as JSON after the whole sweep.
  const std::string spec = kRoot + "/scenarios/sweeps/gpt2.7b-mixes.json";
  for (const std::string name : {"rows.txt", "rows", "rows.csv.bak"}) {
    const std::string out = (dir_ / name).string();
    expect_cases({{"sweep --quiet --spec " + spec + " -o " + out,
                   2,
                   {"--output", name, "ending in .csv or .json"}}});
    EXPECT_FALSE(fs::exists(out));
  }
}

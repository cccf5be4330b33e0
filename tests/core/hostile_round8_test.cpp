// Hostile input, round eight, through the built CLI: every refusal names a key the user's file
// has (a bare split's keys where it has them), a flag's value the data cannot satisfy is a usage
// error at the flag (a profiler trace's step), every argument is read or refused (describe's
// second one), and an environment variable that points nowhere useful is named
// (tests/README.md, "Hostile input, round eight").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"
#include "hostile_cli.hpp"

using nlohmann::json;

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kMix = kRoot + "/scenarios/modern-mix-gpt2.7b.json";
const std::string kMixSplitPlan = kRoot + "/scenarios/plans/modern-mix-gpt2.7b-3d.json";
const std::string kTrace = kRoot + "/tests/data/kineto/a100-80gb-adam-rank0.json.gz";
const std::string kOneRank = kRoot + "/scenarios/cpu-1rank.json";
const std::string kOneRankPlan = kRoot + "/scenarios/plans/cpu-1rank-full.json";

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;

class HostileRoundEight : public cephalo::test_support::HostileCliTest {};

}  // namespace

TEST_F(HostileRoundEight, ABareSplitsRefusalNamesAKeyItsFileHas) {
  // modern-mix: 10 ranks, global batch 32. Even replicas need micro_batches x replicas to divide
  // it; a split file without "stages" (or without the "model_split" wrapper) was blamed at
  // model_split.stages[0], a key the file did not have.
  json shipped = json::parse(std::ifstream(kMixSplitPlan)).at("model_split");
  shipped["micro_batches"] = 7;
  struct Row {
    const char* name;
    json split;
    std::string says;
  };
  const std::vector<Row> rows = {
      {"root-micro-batches",
       {{"micro_batches", 5}},
       "at micro_batches: got global batch 32 over 5"},
      {"wrapped-micro-batches",
       {{"model_split", {{"micro_batches", 5}}}},
       "at model_split.micro_batches: got global batch 32 over 5"},
      {"root-empty", json::object(), "at $: got global batch 32 over 1 micro-batches x 10"},
      {"wrapped-empty",
       {{"model_split", json::object()}},
       "at model_split: got global batch 32 over 1 micro-batches x 10"},
      {"root-tensor-parallel",
       {{"tensor_parallel", 2}},
       "at tensor_parallel: got global batch 32 over 1 micro-batches x 5 replicas"},
      {"root-stages", shipped, "at stages[0]: got global batch 32 over 7 micro-batches x 2"},
      {"wrapped-stages",
       {{"model_split", shipped}},
       "at model_split.stages[0]: got global batch 32 over 7 micro-batches x 2"},
  };
  std::vector<Case> cases;
  for (const auto& row : rows) {
    const std::string file = write(std::string(row.name) + ".json", row.split);
    // predict 3d prices it; validate with the scenario makes the same checks (an empty object
    // is no kind of file it can tell: refused as such below).
    std::vector<std::string> commands = {"predict 3d --scenario " + kMix + " --split " + file};
    if (!row.split.empty()) commands.push_back("validate " + file + " --scenario " + kMix);
    for (const auto& args : commands)
      cases.push_back({args, 1, {row.name, row.says, "(the job's global_batch)"}});
  }
  cases.push_back(
      {"validate " + write("empty.json", json::object()), 1, {"got {}; expected a scenario"}});
  // A stageless split says which stage it means: the cluster's ranks at the split's degree.
  cases.push_back(
      {"predict 3d --scenario " + kMix + " --split " + write("note.json", {{"micro_batches", 3}}),
       1,
       {"(no \"stages\": one stage of the cluster's 10 ranks at tensor_parallel 1)"}});
  // validate recognises a split file, which predict 3d reads (before: "expected a scenario ...").
  cases.push_back({"validate " + write("stageless.json", {{"tensor_parallel", 2}}),
                   0,
                   {"ok (split file, TP 2 x PP 1 over every rank"}});
  shipped["micro_batches"] = 8;
  const std::string good = write("good.json", shipped);
  cases.push_back({"validate " + good + " --scenario " + kMix,
                   0,
                   {"ok (split file, TP 2 x PP 3 (1F1B, 8 micro-batches) x DP 2/1/2, optimizer "
                    "sharding, matches scenario"}});
  cases.push_back({"validate " + write("typo.json", {{"model_split", json::object()}, {"rank", 1}}),
                   1,
                   {"rank"}});
  expect_cases(cases);
}

TEST_F(HostileRoundEight, AStepTheTraceLacksIsAUsageErrorAtTheFlag) {
  // Before: exit 1 blaming the trace's $.traceEvents, as if the trace were bad.
  const std::string sim = (dir_ / "sim.json").string();
  const auto s = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(
      "simulate --scenario " + kOneRank + " --plan " + kOneRankPlan + " --json --ops"));
  ASSERT_EQ(s.code, 0) << s.err;
  std::ofstream(sim) << s.out;
  const std::string steps = "expected one of the 5 steps of " + kTrace +
                            " (ProfilerStep#N or N): ProfilerStep#550, ProfilerStep#551";
  const std::string calibrate = "calibrate stack --scenario " + kOneRank + " --plan " +
                                kOneRankPlan + " -o " + (dir_ / "stack.json").string() +
                                " --trace " + kTrace + " --step ";
  std::vector<Case> cases;
  for (const char* step : {"99", "ProfilerStep#9", "550.0", "' 550'"}) {
    cases.push_back(
        {"compare " + sim + " " + kTrace + " --step " + step, 2, {"at --step: got", steps}});
    cases.push_back({calibrate + step, 2, {"at --step: got", steps}});
  }
  // calibrate stack --run of a simulation: compare's words ("as the second file; both files are
  // simulations") before, though the command has one file.
  cases.push_back({"calibrate stack --scenario " + kOneRank + " --plan " + kOneRankPlan + " -o " +
                       (dir_ / "stack.json").string() + " --run " + sim,
                   1,
                   {"at $.source: got \"sim\"", "--run takes a measured run, not a simulation"}});
  // The steps it has still select.
  cases.push_back({"compare " + sim + " " + kTrace + " --step 552", 0, {"ProfilerStep#552"}});
  expect_cases(cases);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "stack.json"));
}

TEST_F(HostileRoundEight, DescribeReadsEveryArgumentOrRefusesIt) {
  const std::string scenario = kRoot + "/scenarios/cpu-2rank.json";
  expect_cases({
      // A second argument only `model` reads: dropped unread before, exit 0.
      {"describe gpus H100", 2, {"at model: got \"H100\" after gpus", "only after `model`"}},
      {"describe models gpt-2.7b", 2, {"at model: got \"gpt-2.7b\" after models"}},
      {"describe " + scenario + " gpt-2.7b", 2, {"after " + scenario, "`SCENARIO` reads no other"}},
      // A mistyped word: "gpu: no such file", exit 5, before.
      {"describe gpu", 2, {"at what: got \"gpu\"", "gpus, models, model"}},
      {"describe model_", 2, {"at what: got \"model_\""}},
      // A model the catalog lacks: exit 1 "unknown model" before; predict layer --model's exit 2.
      {"describe model gpt-2.7", 2, {"got \"gpt-2.7\"", "closest"}},
      // profile --as selects from the catalog too: exit 1 "unknown GPU" before, measured first.
      {"profile --model gpt-tiny --seq 16 --as H1000", 2, {"--as", "got \"H1000\"", "closest"}},
      // Still: a missing file is a file error, the words work.
      {"describe nosuch.json", 5, {"nosuch.json"}},
      {"describe " + (dir_ / "nothere").string(), 5, {"nothere"}},
      {"describe gpus", 0, {"H100"}},
      {"describe model gpt-2.7b", 0, {"gpt-2.7b"}},
  });
}

TEST_F(HostileRoundEight, ADataFolderWithoutTheCatalogIsBlamedOnTheVariable) {
  // Before: "/etc/passwd/catalog/gpus.json: no such file", exit 5, naming a path the user
  // never typed and not the variable.
  const std::string file = write("file.json", json::object());
  std::filesystem::create_directories(dir_ / "empty");
  struct Row {
    std::string value, says;
  };
  for (const Row& row :
       std::vector<Row>{{file, "(not a folder)"},
                        {(dir_ / "missing").string(), "(no such folder)"},
                        {(dir_ / "empty").string(), "(a folder without catalog/gpus.json)"}}) {
    const auto o =
        cephalo::test_support::run_command("CEPHALO_DATA_DIR='" + row.value + "' " +
                                           cephalo::test_support::cephalo_command("describe gpus"));
    EXPECT_EQ(o.code, 1) << row.value << "\n" << o.err;
    for (const std::string& w :
         std::vector<std::string>{"environment: at CEPHALO_DATA_DIR: got \"" + row.value + "\"",
                                  row.says, "catalog/gpus.json"})
      EXPECT_NE(o.err.find(w), std::string::npos) << "missing: " << w << "\n" << o.err;
  }
  // The project's own folder, named explicitly, still works.
  const auto ok =
      cephalo::test_support::run_command("CEPHALO_DATA_DIR='" + kRoot + "/scenarios' " +
                                         cephalo::test_support::cephalo_command("describe gpus"));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(HostileRoundEight, ValidateReadsEveryFileACommandReads) {
  // Profiles (`profile -o`, a scenario's calibration), stacks (`calibrate stack -o`, --stack)
  // and results (`simulate --json`, what compare reads): "expected a scenario ..." before (a
  // result, which has "ranks", was read as a plan: "at version: got nothing").
  const auto s = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(
      "simulate --scenario " + kOneRank + " --plan " + kOneRankPlan + " --json"));
  ASSERT_EQ(s.code, 0) << s.err;
  const std::string sim = (dir_ / "sim.json").string();
  std::ofstream(sim) << s.out;
  const std::string profiles = kRoot + "/scenarios/calibration/cephalo-profiles/";
  expect_cases({
      {"validate " + sim, 0, {"ok (simulated result, 1 ranks, iteration"}},
      {"validate " + profiles + "model_latencies.json", 0, {"ok (layer profile)"}},
      {"validate " + profiles + "model_memory.json", 0, {"ok (memory profile)"}},
      {"validate " + kRoot + "/scenarios/calibration/published-3d/megatron-fp16.stack.json",
       0,
       {"ok (stack calibration, fitted on megatron-sc21-table1", "compute x0.893"}},
      {"validate " + write("misspelt.json", {{"format", "cephalo-profil"}}),
       1,
       {"at format: got \"cephalo-profil\"; expected \"cephalo-profile\""}},
      {"validate " + write("rowless.json", {{"format", "cephalo-profile"}, {"version", 1}}),
       1,
       {"at rows: got nothing (missing)"}},
      {"validate " + write("result.json", {{"source", "sim"}, {"iteration_time_s", -1}}),
       1,
       {"result.json"}},
  });
}

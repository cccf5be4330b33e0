// Hostile input, round seven, through the built CLI: a split plan's fault is blamed on its first
// cause (a stage's tensor-parallel degree, not the samples it regroups), and the notes a command
// prints about a scenario reach every command that prices what they are about
// (tests/README.md, "Hostile input, round seven").
#include <gtest/gtest.h>

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

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;

class HostileRoundSeven : public cephalo::test_support::HostileCliTest {};

}  // namespace

TEST_F(HostileRoundSeven, AStagesTensorParallelDegreeIsBlamedBeforeTheSamplesItRegroups) {
  // The shipped plan: TP 2 on its three stages (4, 2 and 4 ranks), each stage running 4 samples
  // of every micro-batch. One stage's degree changed regroups its ranks into other replicas, so
  // it runs another number of samples: before, every reader blamed that consequence ("at
  // model_split: got stage 1's replicas running 8 samples"), or the stage's rank list.
  const json shipped = json::parse(std::ifstream(kMixSplitPlan));
  ASSERT_EQ(shipped.at("model_split").at("tensor_parallel"), 2);
  struct Mutation {
    const char* name;
    void (*apply)(json& split);
    std::vector<std::string> says;
  };
  const std::vector<Mutation> mutations = {
      {"middle-tp1",
       [](json& s) { s["stages"][1]["tensor_parallel"] = 1; },
       {"at model_split.stages[1].tensor_parallel: got 1; expected 2, as 2 of the 3 stages have",
        "2 replica(s) running 8 samples"}},
      {"first-tp1",
       [](json& s) { s["stages"][0]["tensor_parallel"] = 1; },
       {"at model_split.stages[0].tensor_parallel: got 1; expected 2", "4 replica(s)"}},
      {"last-tp4",
       [](json& s) { s["stages"][2]["tensor_parallel"] = 4; },
       {"at model_split.stages[2].tensor_parallel: got 4; expected 2",
        "1 replica(s) running 2 samples"}},
      // The odd stage inherits the split's degree while the others name theirs.
      {"inherited-tp1",
       [](json& s) {
         s["tensor_parallel"] = 1;
         s["stages"][0]["tensor_parallel"] = 2;
         s["stages"][2]["tensor_parallel"] = 2;
       },
       {"at model_split.stages[1].tensor_parallel: got 1 (absent: the split's tensor_parallel); "
        "expected 2"}},
      // A degree its stage's rank count does not divide, where the split's degree does.
      {"middle-tp4",
       [](json& s) { s["stages"][1]["tensor_parallel"] = 4; },
       {"at model_split.stages[1].tensor_parallel: got 2 ranks with tensor_parallel 4"}},
  };
  std::vector<Case> cases;
  for (const auto& m : mutations) {
    json plan = shipped;
    m.apply(plan["model_split"]);
    const std::string file = write(std::string(m.name) + ".plan.json", plan);
    // Every reader of a split plan, with and without the scenario.
    for (const std::string& args : {"validate " + file, "validate " + file + " --scenario " + kMix,
                                    "simulate --scenario " + kMix + " --plan " + file,
                                    "predict 3d --scenario " + kMix + " --split " + file,
                                    "predict memory --scenario " + kMix + " --plan " + file}) {
      Case c{args, 1, m.says};
      c.says.push_back(m.name);
      cases.push_back(c);
    }
  }
  expect_cases(cases);
  // A fault of the rows themselves is still the rows': stage 0's replicas given another
  // micro-batch at the same degree (no other degree explains it).
  json rows = shipped;
  for (int r : {0, 1}) {
    auto& row = rows["ranks"][static_cast<std::size_t>(r)];
    row["micro_batch"] = 3;
    row["batch"] = 3 * row["micro_batches"].get<int>();
  }
  expect_cases({{"validate " + write("rows.plan.json", rows),
                 1,
                 {"at model_split: got stage 0's replicas running 5 samples", "as most stages'"}}});
}

TEST_F(HostileRoundSeven, TheNetworksNotesReachEveryCommandThatPricesTheNetwork) {
  // Every node's NIC without "count": its bandwidth is read as the node's total, which `plan`
  // and `simulate` said on stderr but `predict collective` (the command that prices nothing but
  // the network) did not, nor `describe --json` (its text did).
  json cluster = json::parse(std::ifstream(kRoot + "/scenarios/clusters/modern-mix.json"));
  for (auto& node : cluster["nodes"]) node["nic"].erase("count");
  const std::string cluster_file = write("cluster.json", cluster);
  const std::string scenario =
      write("nic-total.json", {{"name", "nic-total"},
                               {"cluster", cluster_file},
                               {"job", kRoot + "/scenarios/jobs/gpt-2.7b-s2048.json"}});
  const std::string note = "its bandwidth is read as the node's total";
  expect_cases({
      {"predict collective --scenario " + scenario + " --kind all-gather --bytes 1GiB", 0, {note}},
      {"predict collective --scenario " + scenario + " --kind all-gather --bytes 1GiB --json",
       0,
       {note}},
      {"describe " + scenario + " --json", 0, {"\"notes\"", note}},
      {"plan --scenario " + scenario + " --strategy even", 0, {note}},
  });
  // A scenario whose network says nothing has an empty list, not a missing key.
  const auto o = cephalo::test_support::run_cephalo("describe " + kMix + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("\"notes\": []"), std::string::npos) << o.output;
}

TEST_F(HostileRoundSeven, AStageCountNoLayoutHasNamesTheFlagAndTheLayouts) {
  // The default scenario is one node of three GPU types (2 L4, an RTX A6000, a P40): the search's
  // stages are runs of whole nodes (1 stage) or of one type each (3 or more), so 2 stages is no
  // layout it has. Before: "no 3D split of 4 ranks satisfies the fixed dimensions and the
  // divisibility rules", naming neither the flag nor why.
  const std::string def = kRoot + "/scenarios/default.json";
  expect_cases({
      {"plan --scenario " + def + " --parallelism 3d --pipeline-stages 2",
       3,
       {"(--pipeline-stages 2)", "runs of whole consecutive nodes (1 node(s) here)",
        "3 type(s) here: ", "L4 x2"}},
      {"plan --scenario " + def + " --parallelism 3d --pipeline-stages 2 --tensor-parallel 1",
       3,
       {"(--tensor-parallel 1, --pipeline-stages 2)"}},
  });
}

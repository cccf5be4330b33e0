// A plan with a "model_split" key (DESIGN §4, "A split in the plan and the graph"): it
// round-trips, its ranks are read per stage (the global batch is what every stage runs), and
// every refusal names the file, the JSON path and the numbers.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "../support/plan_refusal.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"

using namespace cephalo;

namespace {

// Two stages of two ranks each, TP 1, 4 micro-batches of 2 samples (global batch 8).
Json two_stage_plan() {
  Json ranks = Json::array();
  for (int r = 0; r < 4; ++r)
    ranks.push_back({{"rank", r},
                     {"node", 0},
                     {"gpu", "x"},
                     {"batch", 4},
                     {"micro_batch", 1},
                     {"micro_batches", 4},
                     {"state_share", 0.5}});
  return {{"version", 1},
          {"model_split",
           {{"micro_batches", 4},
            {"stages",
             {{{"layers", {0, 2}}, {"ranks", {0, 1}}}, {{"layers", {2, 4}}, {"ranks", {2, 3}}}}}}},
          {"ranks", ranks}};
}

using test_support::expect_plan_refusal;
Plan parse(const Json& j) { return test_support::parse_plan_json(j); }
void expect_refusal(const Json& j, std::initializer_list<std::string> fragments) {
  expect_plan_refusal(j, fragments);
}

TEST(SplitPlan, RoundTripsAndCountsTheSamplesEveryStageRuns) {
  const Plan p = parse(two_stage_plan());
  EXPECT_TRUE(p.has_split());
  EXPECT_EQ(p.global_batch(), 8);  // not Σ batch (16): each sample runs through both stages
  const Plan again = parse(to_json(p));
  EXPECT_EQ(again.model_split, p.model_split);
  EXPECT_EQ(again.global_batch(), 8);
  // Without a split the key is not written: FSDP plans read and write as before.
  Json plain = two_stage_plan();
  plain.erase("model_split");
  for (auto& r : plain["ranks"]) r["state_share"] = 0.25;
  EXPECT_FALSE(to_json(parse(plain)).contains("model_split"));
}

TEST(SplitPlan, RefusesWhatOnlyFsdpPlansHave) {
  Json j = two_stage_plan();
  j["sharding"] = {{"kind", "hybrid"}, {"groups", {{0, 1}, {2, 3}}}};
  expect_refusal(j, {"sharding", "model_split"});
  j = two_stage_plan();
  j["accumulation"] = "standard";
  expect_refusal(j, {"accumulation", "layered"});
  j = two_stage_plan();
  j["offload"] = "host";
  expect_refusal(j, {"offload", "none"});
}

TEST(SplitPlan, RefusesRanksThatDoNotRunTheSplitsMicroBatches) {
  Json j = two_stage_plan();
  j["ranks"][1]["micro_batches"] = 2;
  j["ranks"][1]["batch"] = 2;
  expect_refusal(j, {"ranks[1].micro_batches", "4 micro-batches"});
  // A stage whose replicas run another number of samples per micro-batch than stage 0's.
  j = two_stage_plan();
  j["ranks"][3]["micro_batch"] = 2;
  j["ranks"][3]["batch"] = 8;
  expect_refusal(j, {"model_split", "stage 1", "3 samples", "2, as stage 0"});
}

TEST(SplitPlan, RefusesTensorParallelRanksWithDifferentBatchesAndBadDomainShares) {
  Json j = two_stage_plan();
  j["model_split"]["tensor_parallel"] = 2;
  for (auto& r : j["ranks"]) {
    r["micro_batch"] = 2;
    r["batch"] = 8;
    r["state_share"] = 1.0;
  }
  EXPECT_EQ(parse(j).global_batch(), 8);
  Json bad = j;
  bad["ranks"][1]["micro_batch"] = 1;
  bad["ranks"][1]["batch"] = 4;
  expect_refusal(bad, {"ranks[1].micro_batch", "as rank 0 has"});
  bad = j;
  bad["ranks"][2]["state_share"] = 0.5;
  expect_refusal(bad, {"data-parallel domain 0", "ranks [2]"});
}

// A rank may run its share of every pipeline micro-batch as k sub-steps: m·k micro-batches of
// share / k samples (DESIGN §4, "With a non-default split").
TEST(SplitPlan, RanksMayRunTheirShareOfEveryMicroBatchInSubSteps) {
  Json j = two_stage_plan();
  for (auto& r : j["ranks"]) {
    r["micro_batch"] = 2;
    r["batch"] = 8;
  }
  j["ranks"][1]["micro_batch"] = 1;
  j["ranks"][1]["micro_batches"] = 8;
  const Plan p = parse(j);
  EXPECT_EQ(p.global_batch(), 16);
  EXPECT_EQ(p.ranks[1].sub_steps(4), 2);
  EXPECT_EQ(p.ranks[1].share_per_micro_batch(4), 2);
  EXPECT_EQ(p.ranks[0].sub_steps(4), 1);
  EXPECT_EQ(parse(to_json(p)).ranks[1].micro_batches, 8);
  // Not a multiple of the split's micro-batches.
  Json bad = j;
  bad["ranks"][1]["micro_batches"] = 6;
  bad["ranks"][1]["batch"] = 6;
  expect_refusal(bad,
                 {"ranks[1].micro_batches", "6 micro-batches of 1", "a multiple of the split's 4"});
  // Sub-steps of another size than the share / k: the stage runs another number of samples.
  bad = j;
  bad["ranks"][1]["micro_batch"] = 2;
  bad["ranks"][1]["batch"] = 16;
  expect_refusal(bad, {"model_split", "stage 1", "4 samples", "6, as stage 0"});
  // The ranks of a tensor-parallel group run the same sub-steps.
  Json tp = j;
  tp["model_split"]["tensor_parallel"] = 2;
  for (auto& r : tp["ranks"]) r["state_share"] = 1.0;
  expect_refusal(tp, {"ranks[1].micro_batch", "1", "2, as rank 0 has", "same sub-steps"});
  tp["ranks"][0]["micro_batch"] = 1;
  tp["ranks"][0]["micro_batches"] = 8;
  tp["ranks"][2]["micro_batches"] = 2;
  tp["ranks"][2]["micro_batch"] = 4;
  expect_refusal(tp, {"ranks[2].micro_batches", "a multiple of the split's 4"});
  tp["ranks"][2]["micro_batches"] = 8;
  tp["ranks"][2]["micro_batch"] = 1;
  expect_refusal(tp, {"ranks[3].micro_batch", "1, as rank 2 has"});
  tp["ranks"][3]["micro_batches"] = 8;
  tp["ranks"][3]["micro_batch"] = 1;
  EXPECT_EQ(parse(tp).global_batch(), 8);
  // Every rank in 2 sub-steps under the split's 4; without the split's count (1) the same rows
  // blame the missing key; stated, any count the rows' is a multiple of reads them as sub-steps.
  Json every = two_stage_plan();
  for (auto& r : every["ranks"]) {
    r["micro_batches"] = 8;
    r["batch"] = 8;
  }
  EXPECT_EQ(parse(every).ranks[2].sub_steps(4), 2);
  every["model_split"].erase("micro_batches");
  expect_refusal(every, {"model_split.micro_batches", "1 (absent)", "8, the micro-batches every"});
  every["model_split"]["micro_batches"] = 2;
  EXPECT_EQ(parse(every).ranks[2].sub_steps(2), 4);
}

TEST(SplitPlan, RefusesRankListsNamingTheStage) {
  Json j = two_stage_plan();
  j["model_split"]["stages"][1]["ranks"] = {2, 2};
  expect_refusal(j, {"model_split.stages[1].ranks[1]", "listed once"});
  j = two_stage_plan();
  j["model_split"]["stages"][1]["ranks"] = {2};
  expect_refusal(j, {"model_split.stages", "rank 3"});
}

TEST(SplitPlan, TheUnitPassBoundCountsEachRanksOwnStage) {
  // 4 layers over 2 stages of 2 ranks, 4 micro-batches: stage 0 holds the embedding and layers
  // 0-1 (3 units), stage 1 layers 2-3 and the head (3 units): 4 ranks x 3 x 4 = 48 passes, not
  // every rank's 6 units (96).
  Scenario s;
  s.job.model.num_layers = 4;
  const Plan p = parse(two_stage_plan());
  EXPECT_EQ(full_unit_passes(p, s), 48);
  Json one = two_stage_plan();
  one["model_split"]["stages"] = {{{"layers", {0, 4}}, {"ranks", {0, 1, 2, 3}}}};
  for (auto& r : one["ranks"]) r["state_share"] = 0.25;
  EXPECT_EQ(full_unit_passes(parse(one), s), 4 * 6 * 4);
  // A rank running its share in 2 sub-steps runs its units twice per micro-batch.
  Json sub = two_stage_plan();
  for (int r : {1, 3}) {
    sub["ranks"][r]["micro_batches"] = 8;
    sub["ranks"][r]["batch"] = 8;
  }
  for (int r : {0, 2}) {
    sub["ranks"][r]["micro_batch"] = 2;
    sub["ranks"][r]["batch"] = 8;
  }
  EXPECT_EQ(full_unit_passes(parse(sub), s), 2 * 3 * (4 + 8));
}

}  // namespace

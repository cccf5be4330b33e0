// One memory rule for a split (costmodels::split_rank_memory_terms): the planner's estimate of
// a candidate, predict_memory of the plan it writes and the replay's per-rank peak of that plan
// agree within 1 %, over shardings x schedules x T x sequence parallelism x attention kernel x
// activation checkpointing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "split_fixture.hpp"
#include "split_plan.hpp"

namespace cephalo {
namespace {

using K = pipeline::PipelineSchedule::Kind;
using CK = ActivationCheckpointing::Kind;

struct Shape {
  int stages = 1;
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  pipeline::PipelineSchedule schedule;
};

// `ranks` ranks over `stages` stages of equal layers (interleaved: V chunks per stage).
ModelSplit make_split(const Shape& shape, int ranks, int layers, ShardingKind sharding) {
  ModelSplit split;
  split.tensor_parallel = shape.tensor_parallel;
  split.sequence_parallel = shape.sequence_parallel;
  split.micro_batches = 4;
  split.schedule = shape.schedule;
  split.sharding = sharding;
  const int p = shape.stages, V = shape.schedule.virtual_stages;
  const int per_chunk = layers / (p * V), per_stage = ranks / p;
  for (int s = 0; s < p; ++s) {
    PipelineStage st;
    for (int c = 0; c < V; ++c) {
      const int k = c * p + s;
      st.chunks.push_back({k * per_chunk, (k + 1) * per_chunk});
    }
    for (int r = 0; r < per_stage; ++r) st.ranks.push_back(s * per_stage + r);
    split.stages.push_back(st);
  }
  return split;
}

TEST(SplitMemoryRule, EstimatePredictionAndReplayAgreeWithinOnePercent) {
  // Two nodes of four A100-80GB; a model whose activations and state dominate the reserves.
  Scenario base =
      test_support::split_scenario({{"A100-80GB", 4}, {"A100-80GB", 4}}, 8, 32, 1024, 16);
  const int layers = base.job.model.num_layers;
  std::vector<Shape> shapes;
  for (int t : {1, 2})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      shapes.push_back({1, t, sp, {K::OneFOneB, 1}});
      for (auto schedule :
           {pipeline::PipelineSchedule{K::GPipe, 1}, pipeline::PipelineSchedule{K::OneFOneB, 1},
            pipeline::PipelineSchedule{K::Interleaved, 2}})
        shapes.push_back({2, t, sp, schedule});
    }
  std::vector<ActivationCheckpointing> checkpointings = {
      {CK::None}, {CK::Full}, {CK::Every, 2}, {CK::Selective}};
  int compared = 0;
  double worst = 0;
  std::string worst_case;
  for (AttentionKernel attention : {AttentionKernel::Flash, AttentionKernel::Eager}) {
    Scenario s = base;
    s.job.implementation.attention = attention;
    const auto models = costmodels::make_cost_models(s, "roofline");
    planner::SplitEstimator estimator(s, models);
    for (const Shape& shape : shapes)
      for (ShardingKind sharding :
           {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None})
        for (const ActivationCheckpointing& ck : checkpointings) {
          const ModelSplit split = make_split(shape, 8, layers, sharding);
          planner::SplitOptions options;
          options.activation_checkpointing = ck;
          const auto estimate = estimator.estimate(split, options);
          Plan plan = even_split_plan(s, split);
          plan.activation_checkpointing = ck;
          const auto replay = sim::simulate_plan(plan, s, *models.compute, *models.comm);
          for (const auto& stage : estimate.stages) {
            const int rank = stage.memory.rank;
            const double estimated = stage.memory.total;
            const double predicted = costmodels::predict_memory(s, plan, rank).total;
            const double replayed =
                replay.report.ranks[static_cast<std::size_t>(rank)].peak_memory_bytes;
            const std::string what =
                std::string(attention == AttentionKernel::Flash ? "flash" : "eager") + " " +
                describe(split, 8) + " " + to_string(sharding) + " " + to_string(ck) + " stage " +
                std::to_string(stage.stage);
            EXPECT_NEAR(estimated / predicted, 1.0, 1e-9) << what;
            const double off = std::abs(predicted / replayed - 1.0);
            // A one-stage T = 1 fully sharded split is an FSDP plan: the FSDP closed form
            // (memory_model.hpp), whose bound against the replay is its own (SplitReplay).
            // Under an interleaved schedule the replay posts a stage's receives as soon as the
            // sender's chunk is done, ahead of the rank's own step, where the closed form
            // charges each at its step's start: a few boundaries more at the peak.
            const double bound = split.is_default()                      ? 0.06
                                 : shape.schedule.kind == K::Interleaved ? 0.02
                                                                         : 0.01;
            EXPECT_LE(off, bound) << what << ": predicted " << predicted << ", replay " << replayed;
            if (!split.is_default() && off > worst) {
              worst = off;
              worst_case = what;
            }
            ++compared;
          }
        }
  }
  EXPECT_GT(compared, 500);
  std::cout << compared << " stages; worst prediction vs replay " << 100 * worst << " % ("
            << worst_case << ")\n";
}

// Nemotron-4 15B on 16 H100 in NeMo's published shape (TP 4, PP 1, micro-batch 4, distributed
// optimizer, sequence parallelism, no recompute, flash attention): it ran, so it must fit. The
// Korthikanti formula the estimate used before charged the s×s scores flash attention never
// keeps (149 GiB of activations); the rule above holds what the implementation keeps.
TEST(SplitMemoryRule, NemotronFifteenBInNemosShapeFitsOnSixteenH100) {
  const Scenario s = costmodels::load_scenario(std::filesystem::path(CEPHALO_SOURCE_DIR) /
                                               "scenarios" / "h100x16-nemotron4-15b.json");
  ModelSplit split;
  split.tensor_parallel = 4;
  split.sequence_parallel = true;
  split.sharding = ShardingKind::Optimizer;
  split.micro_batches = 4;  // 64 samples over 4 replicas: micro-batch 4
  PipelineStage stage;
  stage.chunks = {{0, s.job.model.num_layers}};
  for (int r = 0; r < 16; ++r) stage.ranks.push_back(r);
  split.stages = {stage};
  const auto models = costmodels::make_cost_models(s);
  const auto e = planner::estimate_split(s, split, {}, models);
  ASSERT_TRUE(e.fits) << e.refusal;
  EXPECT_EQ(e.stages[0].micro_batch, 4);
  Plan plan = even_split_plan(s, split);
  plan.activation_checkpointing.kind = ActivationCheckpointing::Kind::None;
  const auto replay = sim::simulate_plan(plan, s, *models.compute, *models.comm);
  EXPECT_FALSE(replay.report.oom);
  const double replayed = replay.report.ranks[0].peak_memory_bytes;
  EXPECT_NEAR(e.stages[0].memory.total / replayed, 1.0, 0.01);
  EXPECT_LT(replayed, e.stages[0].memory.capacity);
}

// The plan `plan` writes is never one its replay finds out of memory: a winner the replay
// finds out of memory gives way to the fastest finalist that fits, and when none fits the
// answer is InfeasibleError naming the closest and its shortfall.
TEST(SplitMemoryRule, APlanOutOfMemoryInItsReplayIsNeverWritten) {
  // 4 L4 (22.4 GiB usable): the model's state unsharded does not fit, fully sharded it does.
  const Scenario s = test_support::split_scenario({{"L4", 4}}, 16, 16, 4096, 32);
  const auto models = costmodels::make_cost_models(s, "roofline");
  auto candidate = [&](ShardingKind sharding) {
    const ModelSplit split = make_split({1, 2, false, {K::OneFOneB, 1}}, 4, 16, sharding);
    return planner::SplitCandidate{split, ActivationCheckpointing::Kind::None,
                                   planner::ReplicaBatches::Even,
                                   planner::estimate_split(s, split, {}, models)};
  };
  const auto unsharded = candidate(ShardingKind::None);
  const auto sharded = candidate(ShardingKind::Full);
  ASSERT_FALSE(unsharded.estimate.fits);
  ASSERT_TRUE(sharded.estimate.fits) << sharded.estimate.refusal;
  planner::SplitSearchResult search;
  search.split = unsharded.split;
  search.estimate = unsharded.estimate;
  search.finalists = {unsharded, sharded};
  const auto r = planner::plan_for_split(s, search, models);
  EXPECT_FALSE(r.simulated_oom);
  EXPECT_EQ(r.plan.model_split, sharded.split);
  ASSERT_EQ(r.family(), planner::PlanFamily::Split);
  EXPECT_EQ(r.split->search.split, sharded.split);
  search.finalists = {unsharded};
  try {
    planner::plan_for_split(s, search, models);
    ADD_FAILURE() << "an out-of-memory plan was returned";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("short by"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TP 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cephalo

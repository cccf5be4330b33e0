// Stages that mix GPU types and carry uneven batches (planner/README.md, "3D plans: stages that
// mix GPU types"): the per-stage balance of samples and shares, the estimate of a given
// allocation, and the search against an exhaustive enumeration of every allocation.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "cephalo/planner/split_search.hpp"
#include "split_fixture.hpp"
#include "split_replicas.hpp"

namespace cephalo {
namespace {

using planner::ReplicaAllocation;
using planner::ReplicaBatches;
using planner::SplitOptions;
using planner::SplitSearchOptions;
using Kind = pipeline::PipelineSchedule::Kind;

// Two nodes, each `a100` A100-80GB then `l4` L4 on PCIe, 10 Gbit/s between them; a GPT of
// `layers` layers (hidden 1024, 16 heads), sequence 1024, global batch `batch`.
Scenario mixed_nodes(int a100, int l4, int layers, int batch) {
  return test_support::mixed_cluster({{a100, l4}, {a100, l4}}, 10, layers, batch, false);
}

using test_support::compositions;

TEST(SplitReplicas, BalanceSamplesMinimisesTheSlowestReplica) {
  // Replica 0 twice as fast as 1 and 2: 12 samples -> 6, 3, 3 (each at 6 time units).
  const auto time = [](std::size_t j, int b) { return (j == 0 ? 1.0 : 2.0) * b; };
  EXPECT_EQ(planner::balance_samples(12, {100, 100, 100}, time), (std::vector<int>{6, 3, 3}));
  // A cap moves the rest to the others; infeasible totals give nothing.
  EXPECT_EQ(planner::balance_samples(12, {4, 100, 100}, time), (std::vector<int>{4, 4, 4}));
  EXPECT_TRUE(planner::balance_samples(12, {4, 4, 3}, time).empty());
  EXPECT_TRUE(planner::balance_samples(2, {4, 4, 4}, time).empty());
  // Against every allocation of 1..9 samples over three replicas of other speeds.
  const auto uneven = [](std::size_t j, int b) { return (1.0 + 0.7 * j) * b + (j == 2 ? 3 : 0); };
  for (int total = 3; total <= 9; ++total) {
    const auto got = planner::balance_samples(total, {9, 9, 9}, uneven);
    ASSERT_EQ(std::accumulate(got.begin(), got.end(), 0), total);
    double best = std::numeric_limits<double>::infinity(), mine = 0;
    std::vector<int> cur;
    compositions(total, 3, 1, cur, [&](const std::vector<int>& b) {
      double worst = 0;
      for (std::size_t j = 0; j < 3; ++j) worst = std::max(worst, uneven(j, b[j]));
      best = std::min(best, worst);
    });
    for (std::size_t j = 0; j < 3; ++j) mine = std::max(mine, uneven(j, got[j]));
    EXPECT_DOUBLE_EQ(mine, best) << total;
  }
}

// Alike replicas (one time function, one cap) are dealt level by level; the deal must be the
// greedy's own, sample for sample: times rising, flat in runs (ties go to the lowest replica
// first, all of a run's levels at once), rising by steps, and falling (the greedy runs).
TEST(SplitReplicas, AlikeReplicasAreDealtAsTheGreedyDealsThem) {
  const std::vector<std::function<double(int)>> shapes = {
      [](int b) { return 2.0 * b; },
      [](int b) { return static_cast<double>((b + 2) / 3); },  // runs of three equal times
      [](int b) { return b < 5 ? 1.0 : 1.0 + b; },             // one long run, then rising
      [](int b) { return b % 2 == 0 ? 3.0 : 1.0 * b; },        // falls now and then
      [](int) { return 1.0; },                                 // one run of every level
  };
  int compared = 0;
  for (std::size_t f = 0; f < shapes.size(); ++f)
    for (std::size_t n = 1; n <= 7; ++n)
      for (int cap = 1; cap <= 9; ++cap)
        for (int total = static_cast<int>(n); total <= static_cast<int>(n) * cap + 1; ++total) {
          const auto time = [&](std::size_t, int b) { return shapes[f](b); };
          const std::vector<int> caps(n, cap);
          const auto greedy = planner::balance_samples(total, caps, time);
          const auto alike = planner::balance_samples(total, caps, time, true);
          ASSERT_EQ(alike, greedy) << "shape " << f << ", " << n << " replicas, cap " << cap << ", "
                                   << total << " samples";
          compared += greedy.empty() ? 0 : 1;
        }
  EXPECT_GT(compared, 1000);
  // Caps that differ: the greedy, whatever `alike` says.
  const auto rising = [](std::size_t, int b) { return 1.0 * b; };
  EXPECT_EQ(planner::balance_samples(7, {2, 5, 5}, rising, true),
            planner::balance_samples(7, {2, 5, 5}, rising));
}

TEST(SplitReplicas, AGivenEvenAllocationIsPricedAsTheEvenCut) {
  const Scenario s = mixed_nodes(2, 2, 8, 16);
  const auto models = costmodels::make_cost_models(s);
  ModelSplit split;
  split.micro_batches = 2;
  split.stages = {{{{0, 4}}, {0, 1, 2, 3}, 0}, {{{4, 8}}, {4, 5, 6, 7}, 0}};
  const auto even = planner::estimate_split(s, split, SplitOptions{}, models);
  SplitOptions given;
  given.replica_batches = ReplicaBatches::Given;
  given.allocation.micro_batch.assign(8, 2);
  given.allocation.state_share.assign(8, 0.25);
  const auto same = planner::estimate_split(s, split, given, models);
  EXPECT_NEAR(same.iteration_s, even.iteration_s, 1e-12 * even.iteration_s);
  // Moving samples from the L4s to the A100s is faster; the slowest replica sets the stage.
  given.allocation.micro_batch = {3, 3, 1, 1, 3, 3, 1, 1};
  const auto faster = planner::estimate_split(s, split, given, models);
  EXPECT_LT(faster.iteration_s, even.iteration_s);
  EXPECT_EQ(faster.stages[0].micro_batch, 3);
  EXPECT_EQ(faster.stages[0].replica_micro_batches, (std::vector<int>{3, 3, 1, 1}));
  EXPECT_EQ(faster.stages[0].gpu, "A100-80GB+L4");
  // A replica allocation that does not sum to the micro-batch is refused naming the stage.
  given.allocation.micro_batch = {3, 3, 1, 2, 3, 3, 1, 1};
  EXPECT_THROW(planner::estimate_split(s, split, given, models), ValidationError);
}

// The search against every split of its node-run family enumerated with every allocation of
// each stage's micro-batch to its replicas: one stage of all 6 ranks, or one per node (1 A100 +
// 2 L4 each), every layer composition, micro-batch count and schedule, equal shares (memory is
// not binding here). Sharding, SP and checkpointing held fixed so it stays small.
TEST(SplitReplicas, TheSearchMatchesTheExhaustiveEnumerationOfMixedStagesAndUnevenBatches) {
  const int layers = 8, batch = 12;
  const Scenario s = mixed_nodes(1, 2, layers, batch);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  const std::vector<std::vector<int>> layouts[] = {{{0, 1, 2, 3, 4, 5}}, {{0, 1, 2}, {3, 4, 5}}};
  long long candidates = 0;
  double best = std::numeric_limits<double>::infinity();
  std::string best_text;
  for (const auto& stage_ranks : layouts) {
    const int p = static_cast<int>(stage_ranks.size());
    for (int m = p; m <= batch; ++m) {
      if (batch % m != 0) continue;
      const int per = batch / m;
      std::vector<pipeline::PipelineSchedule> schedules = {{Kind::GPipe, 1}, {Kind::OneFOneB, 1}};
      if (p >= 2 && m % p == 0)
        for (int v = 2; v * p <= layers; ++v)
          if (layers % v == 0) schedules.push_back({Kind::Interleaved, v});
      // Every allocation of `per` samples to each stage's replicas.
      std::vector<std::vector<std::vector<int>>> allocations(static_cast<std::size_t>(p));
      for (int i = 0; i < p; ++i) {
        std::vector<int> cur;
        compositions(per, static_cast<int>(stage_ranks[static_cast<std::size_t>(i)].size()), 1, cur,
                     [&](const std::vector<int>& a) {
                       allocations[static_cast<std::size_t>(i)].push_back(a);
                     });
      }
      if (allocations.back().empty() || allocations.front().empty()) continue;
      for (const auto& schedule : schedules) {
        const int v = schedule.virtual_stages;
        std::vector<int> cur;
        compositions(layers, p, v, cur, [&](const std::vector<int>& counts) {
          ModelSplit split;
          split.schedule = schedule;
          split.micro_batches = m;
          split.sharding = ShardingKind::Full;
          split.stages.resize(static_cast<std::size_t>(p));
          test_support::lay_out_chunks(split.stages, counts, v);
          for (int i = 0; i < p; ++i)
            split.stages[static_cast<std::size_t>(i)].ranks =
                stage_ranks[static_cast<std::size_t>(i)];
          SplitOptions o;
          o.replica_batches = ReplicaBatches::Given;
          o.allocation.micro_batch.assign(6, 0);
          o.allocation.state_share.assign(6, 0);
          const std::size_t n0 = allocations[0].size();
          const std::size_t n1 = p > 1 ? allocations[1].size() : 1;
          for (std::size_t a0 = 0; a0 < n0; ++a0)
            for (std::size_t a1 = 0; a1 < n1; ++a1) {
              for (int i = 0; i < p; ++i) {
                const auto& a = allocations[static_cast<std::size_t>(i)][i == 0 ? a0 : a1];
                const auto& rs = stage_ranks[static_cast<std::size_t>(i)];
                for (std::size_t j = 0; j < rs.size(); ++j) {
                  o.allocation.micro_batch[static_cast<std::size_t>(rs[j])] = a[j];
                  o.allocation.state_share[static_cast<std::size_t>(rs[j])] =
                      1.0 / static_cast<double>(rs.size());
                }
              }
              const auto e = estimator.estimate(split, o);
              ++candidates;
              if (e.fits && e.iteration_s < best) {
                best = e.iteration_s;
                best_text = e.split;
                for (int b : o.allocation.micro_batch) best_text += " " + std::to_string(b);
              }
            }
        });
      }
    }
  }
  SplitSearchOptions options;
  options.sharding = ShardingKind::Full;
  options.sequence_parallel = false;
  options.checkpointing = ActivationCheckpointing::Kind::None;
  options.tensor_parallel = 1;
  // The family enumerated; the type-block family has its own exhaustive test
  // (SplitSearch.MatchesTheExhaustiveEnumerationOnTwoGpuTypes) and the search keeps the better.
  options.type_stages = false;
  const auto r = planner::search_split(s, options, models);
  std::cout << "exhaustive: " << candidates << " allocations, best " << best << " s: " << best_text
            << "\nsearch: " << r.evaluated << " evaluated, best " << r.estimate.iteration_s
            << " s: " << r.estimate.split << "\n";
  ASSERT_GT(candidates, 1000);
  EXPECT_TRUE(r.estimate.fits);
  EXPECT_LE(r.estimate.iteration_s, best * 1.01);
  // The search's answer with equal shares is one of the enumerated splits: never below the
  // best (its shares by free memory may put it below: the enumeration keeps shares equal).
  SplitOptions equal;
  equal.replica_batches = ReplicaBatches::Given;
  equal.allocation = r.estimate.allocation;
  for (const auto& st : r.split.stages)
    for (int rank : st.ranks)
      equal.allocation.state_share[static_cast<std::size_t>(rank)] =
          1.0 / static_cast<double>(st.ranks.size());
  EXPECT_GE(planner::estimate_split(s, r.split, equal, models).iteration_s, best * (1 - 1e-9));
  // The winner mixes GPU types in a stage and deals its samples unevenly.
  ASSERT_EQ(r.replica_batches, ReplicaBatches::BySpeed);
  bool uneven = false;
  for (const auto& st : r.estimate.stages)
    for (int b : st.replica_micro_batches) uneven = uneven || b != st.replica_micro_batches[0];
  EXPECT_TRUE(uneven);
  // Its estimate is the split's own under the allocation it reports.
  SplitOptions again;
  again.replica_batches = ReplicaBatches::Given;
  again.allocation = r.estimate.allocation;
  EXPECT_NEAR(planner::estimate_split(s, r.split, again, models).iteration_s,
              r.estimate.iteration_s, 1e-9 * r.estimate.iteration_s);
}

}  // namespace
}  // namespace cephalo

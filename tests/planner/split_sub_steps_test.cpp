// Ranks that run their share of every pipeline micro-batch in sub-steps (DESIGN §4, "Ranks") in
// the split estimate and the per-stage replica deal (planner/README.md, "3D plans: sub-steps"):
// the estimate of a plan with sub-steps against the simulator's replay of it, and the deal that
// chooses them where a replica's share does not fit in one step, against every allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "split_fixture.hpp"

namespace cephalo {
namespace {

using planner::ReplicaBatches;
using planner::SplitOptions;
using K = pipeline::PipelineSchedule::Kind;
using CK = ActivationCheckpointing::Kind;

using test_support::plan_of;

std::vector<int> divisors(int b) {
  std::vector<int> out;
  for (int k = 1; k <= b; ++k)
    if (b % k == 0) out.push_back(k);
  return out;
}

// Random splits on one node of A100s and L4s (no stage's collectives cross a NIC), each rank
// given a random share of every micro-batch and a random sub-step count dividing it, unequal
// between ranks: the estimate is the replay within the bounds the agreement test asserts for
// one-step shares (split_replay_agreement_test.cpp), and sub-steps are priced, not ignored.
TEST(SplitSubSteps, TheEstimatePricesSubStepsAsTheReplayRunsThem) {
  std::mt19937 rng(20261207);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int compared = 0, slower = 0;
  std::vector<double> errors;
  std::string worst_case;
  double worst = 0;
  for (int tries = 0; tries < 400 && compared < 40; ++tries) {
    const int a100 = pick(1, 2), l4 = pick(1, 2), world = a100 + l4;
    const int layers = 8, batch = std::vector<int>{12, 24}[static_cast<std::size_t>(pick(0, 1))];
    const Scenario s =
        test_support::mixed_cluster({{a100, l4}}, 25, layers, batch, pick(0, 1) == 1);
    const int p = std::min(world, pick(1, 2));
    std::vector<std::vector<int>> ranks(static_cast<std::size_t>(p));
    const int cut = p == 1 ? world : pick(1, world - 1);
    for (int r = 0; r < world; ++r)
      ranks[static_cast<std::size_t>(r < cut ? 0 : p - 1)].push_back(r);
    ModelSplit split;
    test_support::place_stages(split, ranks, std::vector<int>(ranks.size(), 1),
                               p == 1 ? std::vector<int>{layers} : std::vector<int>{4, 4}, 1);
    std::vector<int> ms;
    for (int m = p; m <= batch; ++m)
      if (batch % m == 0 && batch / m >= world) ms.push_back(m);
    if (ms.empty()) continue;
    split.micro_batches = ms[static_cast<std::size_t>(pick(0, static_cast<int>(ms.size()) - 1))];
    split.schedule = {pick(0, 1) ? K::GPipe : K::OneFOneB, 1};
    // One stage under full sharding is an FSDP plan (its micro-batches its own): the others.
    split.sharding = std::vector<ShardingKind>{
        ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer,
        ShardingKind::None}[static_cast<std::size_t>(pick(p == 1 ? 1 : 0, 3))];
    SplitOptions o;
    o.activation_checkpointing = std::vector<ActivationCheckpointing>{
        {CK::None}, {CK::Full}, {CK::Selective}}[static_cast<std::size_t>(pick(0, 2))];
    o.replica_batches = ReplicaBatches::Given;
    auto& a = o.allocation;
    a.micro_batch.assign(static_cast<std::size_t>(world), 0);
    a.state_share.assign(static_cast<std::size_t>(world), 0);
    a.sub_steps.assign(static_cast<std::size_t>(world), 1);
    const int per = batch / split.micro_batches;
    bool stepped = false;
    for (const auto& rs : ranks) {
      std::vector<int> share(rs.size(), 1);
      for (int left = per - static_cast<int>(rs.size()); left > 0; --left)
        ++share[static_cast<std::size_t>(pick(0, static_cast<int>(rs.size()) - 1))];
      for (std::size_t j = 0; j < rs.size(); ++j) {
        const auto r = static_cast<std::size_t>(rs[j]);
        const auto ks = divisors(share[j]);
        a.micro_batch[r] = share[j];
        a.sub_steps[r] = ks[static_cast<std::size_t>(pick(0, static_cast<int>(ks.size()) - 1))];
        a.state_share[r] = 1.0 / static_cast<double>(rs.size());
        stepped = stepped || a.sub_steps[r] > 1;
      }
    }
    if (!stepped) continue;
    const auto models = costmodels::make_cost_models(s);
    planner::SplitEstimate e;
    try {
      e = planner::estimate_split(s, split, o, models);
    } catch (const Error&) {
      continue;  // not a split this cluster takes (a tied head's stage of other replicas)
    }
    if (!e.fits) continue;
    const Plan plan = plan_of(s, split, e, o.activation_checkpointing);
    const auto replay = sim::simulate_plan(plan, s, *models.compute, *models.comm);
    ASSERT_FALSE(replay.report.oom) << e.split;
    const double err = e.iteration_s / replay.report.iteration_time_s - 1.0;
    errors.push_back(std::abs(err));
    if (std::abs(err) > worst) {
      worst = std::abs(err);
      worst_case = e.split + " " + to_string(o.activation_checkpointing);
    }
    // The same shares in one step each: sub-steps of fewer samples are never faster.
    SplitOptions one = o;
    one.allocation.sub_steps.clear();
    const auto whole = planner::estimate_split(s, split, one, models);
    EXPECT_GE(e.iteration_s, whole.iteration_s * (1 - 1e-9)) << e.split;
    if (e.iteration_s > whole.iteration_s * (1 + 1e-6)) ++slower;
    ++compared;
  }
  ASSERT_GE(compared, 30);
  std::sort(errors.begin(), errors.end());
  std::cout << compared << " plans with sub-steps: median |estimate / replay - 1| "
            << 100 * errors[errors.size() / 2] << " %, 90th "
            << 100 * errors[errors.size() * 9 / 10] << " %, worst " << 100 * worst << " % ("
            << worst_case << ")\n";
  EXPECT_LE(errors[errors.size() / 2], 0.001);
  EXPECT_LE(errors[errors.size() * 9 / 10], 0.005);
  EXPECT_LE(worst, 0.025) << worst_case;
  EXPECT_GT(slower, compared / 2);
}

// One A100-80GB and one L4 (24 GB) in one stage, no sharding (each holds the whole state of a
// 4-layer GPT of hidden 4096, sequence 4096) with full recompute: the L4's share by speed does
// not fit in one step. The deal runs it in sub-steps, and what it chooses is the best of every
// allocation of the micro-batch's samples to the two with every sub-step count dividing each,
// enumerated; the plan written from it fits in the replay, which agrees with the estimate.
TEST(SplitSubSteps, TheDealRunsAShareThatDoesNotFitInSubStepsAsTheEnumerationsBest) {
  for (const int batch : {48, 64}) {
    const Scenario s = test_support::split_scenario({{"A100-80GB", 1, 1, "10Gbit/s"}}, 4, batch,
                                                    4096, 32, 4096, "L4", 1);
    const auto models = costmodels::make_cost_models(s);
    planner::SplitEstimator estimator(s, models);
    ModelSplit split;
    test_support::place_stages(split, {{0, 1}}, {1}, {4}, 1);
    split.micro_batches = 1;
    split.schedule = {K::OneFOneB, 1};
    split.sharding = ShardingKind::None;
    SplitOptions o;
    o.activation_checkpointing = {CK::Full};
    o.replica_batches = ReplicaBatches::BySpeed;
    const auto e = estimator.estimate(split, o);
    ASSERT_TRUE(e.fits) << e.refusal;
    const auto& a = e.allocation;
    ASSERT_EQ(a.sub_steps.size(), 2u);
    EXPECT_GT(a.sub_steps[1], 1) << "the L4's share in sub-steps";
    // Its share in one step does not fit: memory requires the sub-steps.
    SplitOptions one = o;
    one.replica_batches = ReplicaBatches::Given;
    one.allocation = a;
    one.allocation.sub_steps.assign(2, 1);
    EXPECT_FALSE(estimator.estimate(split, one).fits);
    SplitOptions same = one;
    same.allocation = a;
    const auto again = estimator.estimate(split, same);
    EXPECT_TRUE(again.fits) << again.refusal;
    EXPECT_NEAR(again.iteration_s, e.iteration_s, 1e-9 * e.iteration_s);
    // Every allocation of the samples and every sub-step count dividing each share.
    double best = std::numeric_limits<double>::infinity(),
           best_one_step = std::numeric_limits<double>::infinity();
    int enumerated = 0;
    SplitOptions given = one;
    for (int b0 = 1; b0 < batch; ++b0)
      for (int k0 : divisors(b0))
        for (int k1 : divisors(batch - b0)) {
          given.allocation.micro_batch = {b0, batch - b0};
          given.allocation.sub_steps = {k0, k1};
          const auto g = estimator.estimate(split, given);
          ++enumerated;
          if (!g.fits) continue;
          best = std::min(best, g.iteration_s);
          if (k0 == 1 && k1 == 1) best_one_step = std::min(best_one_step, g.iteration_s);
        }
    ASSERT_GT(enumerated, 300);
    EXPECT_NEAR(e.iteration_s, best, 1e-9 * best) << batch;
    // The best allocation in one step each is slower: the L4 holds fewer samples than its
    // speed earns, the A100 runs the rest.
    ASSERT_TRUE(std::isfinite(best));
    EXPECT_GT(best_one_step, best * 1.01);
    std::cout << "batch " << batch << ": " << enumerated << " allocations, best " << best
              << " s, in one step each " << best_one_step << " s; the deal " << a.micro_batch[0]
              << " in " << a.sub_steps[0] << " + " << a.micro_batch[1] << " in " << a.sub_steps[1]
              << " sub-steps\n";
    const Plan plan = plan_of(s, split, e, o.activation_checkpointing);
    EXPECT_GT(plan.ranks[1].sub_steps(1), 1);
    const auto replay = sim::simulate_plan(plan, s, *models.compute, *models.comm);
    EXPECT_FALSE(replay.report.oom) << batch;
    EXPECT_NEAR(e.iteration_s / replay.report.iteration_time_s, 1.0, 0.02) << batch;
  }
}

}  // namespace
}  // namespace cephalo

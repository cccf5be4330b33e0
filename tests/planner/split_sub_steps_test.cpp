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

Plan plan_of(const Scenario& s, const ModelSplit& split, const planner::SplitEstimate& e,
             const ActivationCheckpointing& ck) {
  Plan plan = even_split_plan(s, split, "<test>");
  planner::apply_allocation(plan, e.allocation);
  plan.activation_checkpointing = ck;
  return plan;
}

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

}  // namespace
}  // namespace cephalo

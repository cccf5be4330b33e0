// The planner's replay memo (planner/src/replay_outcome.hpp): a plan the replay reads the same
// way as one replayed before is answered from that replay, and only then. Under one
// micro-batch per rank every accumulation is the same replay; any other difference in rows,
// groups or schedule is a new one.
#include <gtest/gtest.h>

#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "plan_support.hpp"
#include "replay_outcome.hpp"
#include "scenario_fixture.hpp"

namespace cephalo::planner {
namespace {

Scenario four_ranks() {
  return test_support::inline_scenario("memo", "memo", test_support::two_a100_nodes(), "gpt-1.3b",
                                       1024, 16, "<replay cache test>");
}

// Every rank `batch` samples in micro-batches of `micro` (the last may be smaller), shares even.
Plan plan_of(const Scenario& s, Accumulation acc, int micro) {
  Plan plan = empty_plan(s, "even");
  plan.accumulation = acc;
  detail::set_even_batches(plan, s.job.global_batch);
  for (auto& r : plan.ranks) {
    r.micro_batch = micro;
    r.micro_batches = (r.batch + micro - 1) / micro;
    r.state_share = 1.0 / static_cast<double>(plan.ranks.size());
  }
  return plan;
}

void expect_same(const SimOutcome& a, const SimOutcome& b) {
  EXPECT_EQ(a.iteration_s, b.iteration_s);
  EXPECT_EQ(a.samples_per_s, b.samples_per_s);
  EXPECT_EQ(a.oom, b.oom);
  EXPECT_EQ(a.oom_detail, b.oom_detail);
  EXPECT_EQ(a.peak_bytes, b.peak_bytes);
  EXPECT_EQ(a.capacity_bytes, b.capacity_bytes);
}

TEST(ReplayCache, OneMicroBatchPerRankIsOneReplayUnderEveryAccumulation) {
  const Scenario s = four_ranks();
  const auto models = costmodels::make_cost_models(s);
  ActivationCheckpointing none;
  none.kind = ActivationCheckpointing::Kind::None;
  for (const auto& ckpt : {ActivationCheckpointing{}, none}) {
    ReplayCache cache;
    for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync}) {
      SCOPED_TRACE(to_string(acc));
      Plan plan = plan_of(s, acc, 4);
      plan.activation_checkpointing = ckpt;
      // The memo's answer is the plan's own replay, to the bit.
      expect_same(cache.outcome(plan, s, models), replay_outcome(plan, s, models));
    }
    EXPECT_EQ(cache.replays(), 1);
    EXPECT_EQ(cache.hits(), 2);
  }
}

TEST(ReplayCache, SeveralMicroBatchesKeepTheAccumulationsApart) {
  const Scenario s = four_ranks();
  const auto models = costmodels::make_cost_models(s);
  ReplayCache cache;
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync})
    expect_same(cache.outcome(plan_of(s, acc, 2), s, models),
                replay_outcome(plan_of(s, acc, 2), s, models));
  EXPECT_EQ(cache.replays(), 3);
  EXPECT_EQ(cache.hits(), 0);
  // One rank alone with two micro-batches is enough to keep them apart.
  ReplayCache mixed;
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard}) {
    Plan plan = plan_of(s, acc, 4);
    plan.ranks[2].micro_batch = 2;
    plan.ranks[2].micro_batches = 2;
    mixed.outcome(plan, s, models);
  }
  EXPECT_EQ(mixed.replays(), 2);
}

TEST(ReplayCache, RowsAndGroupsWrittenAsRunsStayDistinct) {
  const Scenario s = four_ranks();
  const auto models = costmodels::make_cost_models(s);
  ReplayCache cache;
  const Plan even = plan_of(s, Accumulation::Layered, 4);
  cache.outcome(even, s, models);
  cache.outcome(even, s, models);
  cache.outcome(plan_of(s, Accumulation::NoSync, 4), s, models);  // one micro-batch each
  EXPECT_EQ(cache.replays(), 1);
  EXPECT_EQ(cache.hits(), 2);
  cache.outcome(plan_of(s, Accumulation::Layered, 2), s, models);  // two each
  EXPECT_EQ(cache.replays(), 2);
  // The same samples in other places: 3, 5, 4, 4 and 5, 3, 4, 4 are runs of equal length.
  for (const auto& batches : {std::vector<int>{3, 5, 4, 4}, std::vector<int>{5, 3, 4, 4}}) {
    Plan p = even;
    for (std::size_t i = 0; i < p.ranks.size(); ++i) {
      p.ranks[i].batch = batches[i];
      p.ranks[i].micro_batch = batches[i];
    }
    cache.outcome(p, s, models);
  }
  EXPECT_EQ(cache.replays(), 4);
  // Hybrid groups of the same sizes over other ranks, and one group of all four.
  const std::vector<std::vector<std::vector<int>>> groupings = {
      {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0, 1, 2, 3}}};
  for (const auto& groups : groupings) {
    Plan p = even;
    p.sharding.kind = ShardingKind::Hybrid;
    p.sharding.groups = groups;
    for (auto& r : p.ranks) r.state_share = 1.0 / static_cast<double>(groups.front().size());
    cache.outcome(p, s, models);
    cache.outcome(p, s, models);  // and again: answered from the first
  }
  EXPECT_EQ(cache.replays(), 7);
  EXPECT_EQ(cache.hits(), 5);
}

// A bound on the ranks a replay builds refuses a new plan above it before anything is built
// (saying how many it would build: the unbounded replay's count) and never a plan answered
// from an earlier replay.
TEST(ReplayCache, AReplayAboveTheRankBoundIsRefusedUnlessReplayedBefore) {
  const Scenario s = four_ranks();
  const auto models = costmodels::make_cost_models(s);
  Plan unlike = plan_of(s, Accumulation::Layered, 4);
  const std::vector<int> batches = {3, 5, 6, 2};
  for (std::size_t i = 0; i < unlike.ranks.size(); ++i) {
    unlike.ranks[i].batch = batches[i];
    unlike.ranks[i].micro_batch = batches[i];
  }
  const Plan alike = plan_of(s, Accumulation::Layered, 4);
  const int built = sim::simulate_plan(unlike, s, *models.compute, *models.comm).replayed_ranks;
  ASSERT_EQ(built, 4);  // no two ranks alike: every rank is built
  ReplayCache cache;
  try {
    cache.outcome(unlike, s, models, built - 1);
    ADD_FAILURE() << "a replay of " << built << " ranks under a bound of " << built - 1;
  } catch (const sim::ReplayTooLarge& e) {
    EXPECT_EQ(e.ranks(), built);
  }
  EXPECT_EQ(cache.replays(), 0);
  // At the bound it replays, and once replayed any bound answers it.
  expect_same(cache.outcome(unlike, s, models, built), replay_outcome(unlike, s, models));
  expect_same(cache.outcome(unlike, s, models, 1), replay_outcome(unlike, s, models));
  EXPECT_EQ(cache.hits(), 1);
  // A plan of alike ranks builds one of them and passes a bound of one.
  expect_same(cache.outcome(alike, s, models, 1), replay_outcome(alike, s, models));
}

}  // namespace
}  // namespace cephalo::planner

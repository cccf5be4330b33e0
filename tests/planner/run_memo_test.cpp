// The planner's walks over ranks ask one memo per walk (planner/src/run_memo.hpp), which
// compares the last key before searching its map. Its answers are the map's: every key is
// answered by its first make(), and make() runs once per distinct key. The walks that use it
// give, on random small clusters (GPU types mixed, batches and micro-batches in runs and not),
// exactly what the memory model gives rank by rank: first_rank_over the first rank it
// refuses, apply_grouping the shares by free memory of every group.
#include <gtest/gtest.h>

#include <random>

#include "cephalo/costmodels/memory_model.hpp"
#include "plan_support.hpp"
#include "run_memo.hpp"
#include "scenario_fixture.hpp"
#include "sharding_choice.hpp"

namespace cephalo::planner {
namespace {

TEST(RunMemo, AnswersEveryKeyByItsFirstMakeOncePerKey) {
  std::mt19937 rng(20261207);
  std::uniform_int_distribution<int> key_d(0, 6), run_d(1, 5);
  for (int trial = 0; trial < 100; ++trial) {
    detail::RunMemo<std::pair<int, double>, int> memo;
    std::map<std::pair<int, double>, int> made;  // key -> how often make() ran for it
    int asked = 0;
    while (asked < 200) {
      const std::pair<int, double> key{key_d(rng), 0.25 * key_d(rng)};
      for (int run = run_d(rng); run > 0; --run, ++asked) {
        const int value = memo.get(key, [&] {
          ++made[key];
          return key.first * 100 + static_cast<int>(key.second * 4);
        });
        EXPECT_EQ(value, key.first * 100 + static_cast<int>(key.second * 4));
      }
    }
    EXPECT_EQ(memo.size(), made.size());
    for (const auto& [key, times] : made) EXPECT_EQ(times, 1);
  }
}

// 1-5 nodes of one of four GPU types each (1-4 GPUs), a 1.3B GPT at sequence 2048, and a plan
// whose batches come in runs of random length (so alike ranks sit together, as in a fleet, and
// apart), micro-batches of 1, 2 or the whole batch, equal shares.
struct Instance {
  Scenario scenario;
  Plan plan;
};

Instance random_instance(std::mt19937& rng) {
  const std::vector<std::string> types = {"A100-80GB", "L4", "T4", "RTX-A6000"};
  std::uniform_int_distribution<int> nodes_d(1, 5), count_d(1, 4), type_d(0, 3), batch_d(1, 24),
      run_d(1, 6), micro_d(0, 2);
  Json nodes = Json::array();
  const int n_nodes = nodes_d(rng);
  for (int n = 0; n < n_nodes; ++n)
    nodes.push_back(
        {{"name", "n" + std::to_string(n)},
         {"gpus", Json::array({{{"type", types[type_d(rng)]}, {"count", count_d(rng)}}})},
         {"intra_link", {{"kind", "pcie"}, {"bandwidth", "25GB/s"}, {"latency", "5us"}}},
         {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}});
  Instance in{test_support::inline_scenario("memo", "memo", nodes, "gpt-1.3b", 2048, 1024,
                                            "<run memo test>"),
              {}};
  in.plan = empty_plan(in.scenario, "even");
  const int n = static_cast<int>(in.plan.ranks.size());
  int batch = batch_d(rng), left = run_d(rng), micro = micro_d(rng), total = 0;
  for (auto& r : in.plan.ranks) {
    if (left-- == 0) {
      batch = batch_d(rng);
      left = run_d(rng) - 1;
      micro = micro_d(rng);
    }
    r.batch = batch;
    r.micro_batch = micro == 0 ? 1 : micro == 1 ? std::min(2, batch) : batch;
    r.micro_batches = (batch + r.micro_batch - 1) / r.micro_batch;
    r.state_share = 1.0 / n;
    total += batch;
  }
  in.scenario.job.global_batch = total;
  return in;
}

TEST(RunMemo, FirstRankOverIsTheFirstRankTheMemoryModelRefuses) {
  std::mt19937 rng(20261208);
  int refused = 0, fitted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Instance in = random_instance(rng);
    const Scenario& s = in.scenario;
    const int n = static_cast<int>(in.plan.ranks.size());
    for (int micro : {0, 2, 8}) {
      int expected = -1;
      for (const auto& r : in.plan.ranks) {
        const auto& spec = s.cluster.ranks()[r.rank].slot->spec;
        const int m = std::max(1, std::min(micro > 0 ? micro : 1, r.batch));
        const auto in_memory =
            detail::memory_inputs(in.plan, spec, n, r.state_share, detail::split_batch(r.batch, m));
        if (detail::terms_total(s.job, in_memory) > detail::plannable_bytes(spec)) {
          expected = r.rank;
          break;
        }
      }
      SCOPED_TRACE("trial " + std::to_string(trial) + ", micro-batch " + std::to_string(micro));
      EXPECT_EQ(detail::first_rank_over(s, in.plan, micro), expected);
      (expected < 0 ? fitted : refused) += 1;
    }
  }
  EXPECT_GE(refused, 40);
  EXPECT_GE(fitted, 100);
}

TEST(RunMemo, ApplyGroupingCutsEveryGroupsSharesAsTheMemoryModelRankByRank) {
  std::mt19937 rng(20261209);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Instance in = random_instance(rng);
    const Scenario& s = in.scenario;
    const int nodes = static_cast<int>(s.cluster.nodes.size());
    const int k = std::uniform_int_distribution<int>(1, nodes)(rng);
    const auto candidates = sharding_candidates(s, "hybrid", k);
    ASSERT_EQ(candidates.size(), 1u);
    Plan plan = in.plan;
    if (!apply_grouping(s, plan, candidates.front().sharding, nullptr)) continue;
    // Rank by rank, no memo: each group's free bytes after everything but the state, and the
    // state's full copy (the memory model's slope in the share).
    Plan direct = in.plan;
    direct.sharding = candidates.front().sharding;
    bool first_attempt = true;
    for (const auto& group : direct.sharding.groups) {
      std::vector<double> free;
      double total_free = 0, state = 0;
      for (int r : group) {
        PlanRank row = direct.ranks[static_cast<std::size_t>(r)];
        const auto& spec = s.cluster.ranks()[static_cast<std::size_t>(r)].slot->spec;
        const int world = static_cast<int>(direct.ranks.size());
        row.state_share = 0.0;
        const double m0 = costmodels::predict_memory(s.job, direct, row, spec, world).total;
        row.state_share = 1.0;
        const double m1 = costmodels::predict_memory(s.job, direct, row, spec, world).total;
        state = std::max(state, m1 - m0);
        free.push_back(std::max(0.0, detail::plannable_bytes(spec) - m0));
        total_free += free.back();
      }
      if (!(total_free >= state && total_free > 0)) {
        first_attempt = false;  // micro-batches were halved: not this comparison's case
        break;
      }
      const auto shares = detail::shares_by_free_memory(free);
      for (std::size_t i = 0; i < group.size(); ++i)
        direct.ranks[static_cast<std::size_t>(group[i])].state_share = shares[i];
    }
    if (!first_attempt) continue;
    ++compared;
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(k) + " nodes a group");
    for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
      EXPECT_EQ(plan.ranks[r].state_share, direct.ranks[r].state_share) << "rank " << r;
      EXPECT_EQ(plan.ranks[r].micro_batch, direct.ranks[r].micro_batch) << "rank " << r;
    }
  }
  EXPECT_GE(compared, 150);
}

}  // namespace
}  // namespace cephalo::planner

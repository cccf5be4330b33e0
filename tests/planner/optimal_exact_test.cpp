// `optimal` against brute force *through the simulator* ("exact where it claims to
// be"): on small heterogeneous scenarios every plan of a grid — every batch split, every
// micro-batch size per rank, every state share on a 0.05 grid (0.01 with two ranks), both
// uneven-collective variants — is replayed on the simulator, and none may be faster than the
// plan `optimal` returns beyond the stated tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <random>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/strategies.hpp"
#include "replay_outcome.hpp"
#include "scenario_fixture.hpp"

namespace cephalo::planner {
namespace {

struct Case {
  std::string model;
  int seq;
  int batch;
  std::vector<std::string> gpus;  // one node, PCIe
  double grid;                    // share step
  // Allowed relative gap (grid best / optimal ≥ 1 − tolerance); see the case list.
  double tolerance;
};

Scenario make_case(const Case& c) {
  Json gpus = Json::array();
  for (const auto& g : c.gpus) gpus.push_back({{"type", g}, {"count", 1}});
  const Json nodes = Json::array(
      {{{"name", "n0"},
        {"gpus", gpus},
        {"intra_link", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
        {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}}});
  return test_support::inline_scenario("exact", "exact", nodes, c.model, c.seq, c.batch,
                                       "<exact test>");
}

struct Best {
  double seconds = std::numeric_limits<double>::infinity();
  Plan plan;
  long plans = 0;
};

// Every plan of the grid under one schedule (offload none, prefetch; `schedule`'s accumulation
// and checkpointing; micro-batches of `micro_batch` when > 0, else every split). With
// `idle_ranks`, a rank may also get no samples at all (batch 0, it only holds state).
Best brute_force(const Scenario& s, const costmodels::CostModels& models, double grid,
                 const Plan& schedule, int micro_batch = 0, bool idle_ranks = false) {
  const int n = s.cluster.num_ranks();
  const int B = s.job.global_batch;
  Plan plan = empty_plan(s, "grid");
  plan.accumulation = schedule.accumulation;
  plan.activation_checkpointing = schedule.activation_checkpointing;
  const int steps = static_cast<int>(std::lround(1.0 / grid));
  Best best;
  std::vector<int> units(n);
  auto score = [&]() {
    for (int v = 0; v < 2; ++v) {
      plan.uneven_collective = v == 0 ? UnevenCollective::Grouped : UnevenCollective::Padded;
      if (v == 1 && plan.even_shares()) break;
      const auto o = replay_outcome(plan, s, models);
      ++best.plans;
      if (!o.oom && o.iteration_s < best.seconds) {
        best.seconds = o.iteration_s;
        best.plan = plan;
      }
    }
  };
  std::function<void(int, int)> shares = [&](int i, int left) {
    if (i == n - 1) {
      units[i] = left;
      double sum = 0;
      for (int k = 0; k < n; ++k) {
        plan.ranks[k].state_share = units[k] / static_cast<double>(steps);
        sum += plan.ranks[k].state_share;
      }
      plan.ranks[n - 1].state_share += 1 - sum;
      score();
      return;
    }
    for (int u = 0; u <= left; ++u) {
      units[i] = u;
      shares(i + 1, left - u);
    }
  };
  std::function<void(int)> micro = [&](int i) {
    if (i == n) {
      shares(0, steps);
      return;
    }
    auto& r = plan.ranks[i];
    if (r.batch == 0) {
      r.micro_batch = 0;
      r.micro_batches = 0;
      micro(i + 1);
      return;
    }
    int last_count = -1;
    for (int m = 1; m <= r.batch; ++m) {
      if (micro_batch > 0 && m != std::min(micro_batch, r.batch)) continue;
      const int count = (r.batch + m - 1) / m;
      if (count == last_count) continue;  // same split as a smaller m
      last_count = count;
      r.micro_batch = m;
      r.micro_batches = count;
      micro(i + 1);
    }
  };
  std::function<void(int, int)> batches = [&](int i, int left) {
    if (i == n - 1) {
      plan.ranks[i].batch = left;
      micro(0);
      return;
    }
    const int least = idle_ranks ? 0 : 1;
    for (int b = least; b <= left - least * (n - 1 - i); ++b) {
      plan.ranks[i].batch = b;
      batches(i + 1, left - b);
    }
  };
  batches(0, B);
  return best;
}

TEST(OptimalExact, NothingOnTheGridSimulatesFasterThanOptimal) {
  // The first two are compute bound phase by phase: the model (per-device optimizer step,
  // planner/README.md) is exact there, so the grid may not beat optimal beyond rounding. In the
  // third, the T4's PCIe 3 link makes the forward phases' grouped gathers (their time grows as
  // the smallest share shrinks) longer than the layers' forward compute: the simulator exposes
  // that per unit, the model (max(C, τ) over the iteration) does not, and the grid finds a
  // plan 1.5 % faster between the two models' plans. Stated gap, asserted so it cannot grow.
  const std::vector<Case> cases = {
      {"gpt-1.3b", 512, 6, {"a6000", "p40"}, 0.01, 1e-6},
      {"gpt-1.3b", 512, 6, {"l4", "a6000", "p40"}, 0.05, 1e-6},
      {"gpt-2.7b", 512, 5, {"t4", "a6000", "l4"}, 0.05, 0.02},
  };
  for (const auto& c : cases) {
    const Scenario s = make_case(c);
    const auto models = costmodels::make_cost_models(s);
    PlannerOptions opt;
    opt.strategy = "optimal";
    opt.offload = "none";
    // The grid's schedule (the default search would also weigh others).
    opt.accumulation = Accumulation::Layered;
    opt.activation_checkpointing = ActivationCheckpointing{};
    opt.sharding = "full";
    const auto res = make_plan(s, opt);
    const auto mine = replay_outcome(res.plan, s, models);
    ASSERT_FALSE(mine.oom);
    const Best best = brute_force(s, models, c.grid, res.plan);
    std::cout << c.model << " b" << c.batch << " " << c.gpus.size() << " GPUs: optimal "
              << mine.iteration_s << " s, grid best " << best.seconds << " s over " << best.plans
              << " plans, ratio " << best.seconds / mine.iteration_s << "\n  grid best:";
    for (const auto& r : best.plan.ranks)
      std::cout << " [" << r.gpu << " b" << r.batch << " m" << r.micro_batch << " s"
                << r.state_share << "]";
    std::cout << (best.plan.uneven_collective == UnevenCollective::Padded ? " padded" : "")
              << "\n  optimal:  ";
    for (const auto& r : res.plan.ranks)
      std::cout << " [" << r.gpu << " b" << r.batch << " m" << r.micro_batch << " s"
                << r.state_share << "]";
    std::cout << "\n";
    EXPECT_GE(best.seconds, mine.iteration_s * (1 - c.tolerance)) << c.model;
  }
}

// Under every fixed schedule (accumulation x checkpointing x a fixed micro-batch or not), on the
// two-GPU case: optimal is within its stated gap of the grid's best under the same schedule and
// never slower in simulation than even or proportional on the same flags.
TEST(OptimalExact, UnderEveryFixedScheduleOptimalIsNearTheGridBestAndNoSlowerThanEqualShares) {
  const Case c{"gpt-1.3b", 512, 6, {"a6000", "p40"}, 0.05, 0};
  const Scenario s = make_case(c);
  const auto models = costmodels::make_cost_models(s);
  ActivationCheckpointing none;
  none.kind = ActivationCheckpointing::Kind::None;
  double worst = 0;
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync})
    for (const ActivationCheckpointing& ckpt : {ActivationCheckpointing{}, none})
      for (int micro : {0, 1}) {
        const std::string label = to_string(acc) + " / " + to_string(ckpt) + " / micro-batch " +
                                  (micro ? std::to_string(micro) : "open");
        PlannerOptions opt;
        opt.offload = "none";
        opt.accumulation = acc;
        opt.activation_checkpointing = ckpt;
        opt.sharding = "full";
        opt.micro_batch = micro;
        double mine = 0;
        Plan schedule;
        std::map<std::string, double> simulated;
        for (const std::string strategy : {"optimal", "even", "proportional"}) {
          opt.strategy = strategy;
          try {
            const auto res = make_plan(s, opt);
            if (res.simulated_oom) continue;
            simulated[strategy] = res.predicted_iteration_s;
            if (strategy == "optimal") schedule = res.plan;
          } catch (const InfeasibleError&) {
          }
        }
        if (!simulated.count("optimal")) {
          // Nothing fits this schedule for optimal: the grid must not find a plan either.
          Plan p = empty_plan(s, "grid");
          p.accumulation = acc;
          p.activation_checkpointing = ckpt;
          EXPECT_FALSE(std::isfinite(brute_force(s, models, c.grid, p, micro).seconds)) << label;
          continue;
        }
        mine = simulated["optimal"];
        for (const char* other : {"even", "proportional"})
          if (simulated.count(other)) {
            EXPECT_LE(mine, simulated[other] * (1 + 1e-9)) << label;
          }
        const Best best = brute_force(s, models, c.grid, schedule, micro);
        const double gap = 1 - best.seconds / mine;
        worst = std::max(worst, gap);
        std::cout << label << ": optimal " << mine << " s, grid best " << best.seconds << " s over "
                  << best.plans << " plans, gap " << 100 * gap << " %\n";
        // The share grid is 0.05 here, so the grid's best can only trail optimal; a grid plan
        // more than 0.1 % faster is a miss of the schedule-aware model.
        EXPECT_LE(gap, 0.001) << label;
      }
  std::cout << "worst gap " << 100 * worst << " %\n";
}

// Random small heterogeneous instances (fixed seed, so a failure reproduces): 2 or 3 GPUs
// drawn from six generations, a model, a global batch of 3-6 (2-6 with two GPUs), each solved
// by `optimal` and scored against every plan of the grid through the simulator. Returns the
// worst gap (1 - grid best / optimal) over the instances.
double worst_gap_on_random_instances(bool idle_ranks, double tolerance) {
  const std::vector<std::string> pool = {"p40", "t4", "v100-pcie-16gb", "l4", "a6000", "a100-40gb"};
  const std::vector<std::string> models = {"gpt-1.3b", "gpt-2.7b", "llama-3b"};
  std::mt19937 rng(20261202);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  double worst = 0;
  for (int instance = 0; instance < 10; ++instance) {
    Case c;
    c.model = models[static_cast<std::size_t>(pick(3))];
    c.seq = 512;
    const int n = 2 + pick(2);
    c.batch = n + pick(7 - n);
    for (int i = 0; i < n; ++i) c.gpus.push_back(pool[static_cast<std::size_t>(pick(6))]);
    c.grid = n == 2 ? 0.05 : 0.1;
    const Scenario s = make_case(c);
    const auto cm = costmodels::make_cost_models(s);
    PlannerOptions opt;
    opt.strategy = "optimal";
    opt.offload = "none";
    std::string label = c.model + " b" + std::to_string(c.batch);
    for (const auto& g : c.gpus) label += " " + g;
    PlanResult res;
    try {
      res = make_plan(s, opt);
    } catch (const InfeasibleError& e) {
      // Then no grid plan may fit either.
      const Best best = brute_force(s, cm, c.grid, empty_plan(s, "grid"), 0, idle_ranks);
      EXPECT_FALSE(std::isfinite(best.seconds)) << label << ": optimal says " << e.what();
      std::cout << label << ": infeasible for optimal and the grid\n";
      continue;
    }
    const auto mine = replay_outcome(res.plan, s, cm);
    EXPECT_FALSE(mine.oom) << label;
    const Best best = brute_force(s, cm, c.grid, empty_plan(s, "grid"), 0, idle_ranks);
    const double gap = 1 - best.seconds / mine.iteration_s;
    worst = std::max(worst, gap);
    std::cout << label << ": optimal " << mine.iteration_s << " s, grid best " << best.seconds
              << " s over " << best.plans << " plans (gap " << 100 * gap << " %):";
    for (const auto& r : best.plan.ranks)
      std::cout << " [b" << r.batch << " m" << r.micro_batch << " s" << r.state_share << "]";
    std::cout << "\n";
    EXPECT_GE(best.seconds, mine.iteration_s * (1 - tolerance)) << label;
  }
  std::cout << "worst gap of optimal behind the grid: " << 100 * worst << " %\n";
  return worst;
}

// Every rank with at least one sample (the grid of the cases above). Measured: optimal is at
// least as fast as the grid's best on all 10 instances (worst gap 0 %, the grid best up to
// 0.53 % slower), so the tolerance is the compute-bound cases' 1e-6, rounding only. (On
// llama-3b b2 A6000 + T4 no such plan fits; optimal's plan idles the T4.)
constexpr double kRandomTolerance = 1e-6;
TEST(OptimalExact, RandomHeterogeneousInstancesAgainstTheGrid) {
  worst_gap_on_random_instances(/*idle_ranks=*/false, kRandomTolerance);
}

// The same grid where a rank may take no samples (it only holds state). Disabled, a finding
// for the planner: `optimal` idles a rank only where nothing else fits, and on these instances
// a grid plan that leaves the slowest GPUs (P40, T4) without samples simulates up to 44.7 %
// faster (gpt-2.7b b3 on A100-40GB + P40 + T4: optimal 2.434 s, grid 1.346 s with only the A100
// computing); 6 of the 9 feasible instances lose by more than 3 %. Enable it when the planner
// considers idle ranks.
TEST(OptimalExact, DISABLED_RandomHeterogeneousInstancesAgainstTheGridWithIdleRanks) {
  worst_gap_on_random_instances(/*idle_ranks=*/true, kRandomTolerance);
}

}  // namespace
}  // namespace cephalo::planner

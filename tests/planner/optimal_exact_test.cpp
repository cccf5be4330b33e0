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

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/simulate_plan.hpp"
#include "cephalo/planner/strategies.hpp"
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
// and checkpointing; micro-batches of `micro_batch` when > 0, else every split).
Best brute_force(const Scenario& s, const costmodels::CostModels& models, double grid,
                 const Plan& schedule, int micro_batch = 0) {
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
      const auto o = simulate_plan(s, models, plan);
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
    for (int b = 1; b <= left - (n - 1 - i); ++b) {
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
    const auto mine = simulate_plan(s, models, res.plan);
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

}  // namespace
}  // namespace cephalo::planner

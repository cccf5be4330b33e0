// The `optimal` solver against exhaustive enumeration on small random instances, plus its
// infeasibility diagnostics and the water-fill helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cephalo/core/error.hpp"
#include "cephalo/planner/optimal_solver.hpp"

namespace cephalo::planner {
namespace {

OptimalRankModel random_rank(std::mt19937& rng, int max_mb) {
  std::uniform_real_distribution<double> speed(0.5, 4.0), intercept(0.0, 2.0), noise(-0.3, 0.3);
  std::uniform_real_distribution<double> gb(0.5, 3.0), per(0.0, 0.4), fixed(0.1, 0.6);
  OptimalRankModel r;
  r.name = "random";
  const double s = speed(rng), c = intercept(rng);
  r.micro_batch_time.assign(max_mb + 1, 0);
  r.working_bytes.assign(max_mb + 1, 0);
  const double w0 = gb(rng) * 0.3, w1 = gb(rng) * 0.2;
  for (int m = 1; m <= max_mb; ++m) {
    // Measured-looking tables: mostly linear with noise (the model flattens dips).
    r.micro_batch_time[m] = c + s * m + noise(rng);
    r.working_bytes[m] = w0 + w1 * m + 0.1 * noise(rng);
  }
  r.extra_micro_batch_overhead = per(rng);
  r.fixed_bytes = fixed(rng);
  r.bytes_per_sample = per(rng);
  r.usable_bytes = gb(rng) + 1.0;
  return r;
}

// The problem-wide terms of a random instance: state size, optimizer step, communication
// affine in the largest share (from its even value 1/n).
void random_totals(std::mt19937& rng, OptimalProblem& p) {
  const int n = p.num_ranks();
  std::uniform_real_distribution<double> state(0.5, 4.0), opt(0.0, 3.0), comm(0.0, 6.0);
  p.state_bytes = state(rng);
  p.optimizer_seconds = opt(rng);
  const double c0 = comm(rng), c1 = comm(rng);
  p.comm_seconds = [c0, c1, n](double sigma) { return c0 + c1 * (sigma - 1.0 / n); };
}

// The brute-force optimum, or -1 when the instance is infeasible (and then the solver must say
// so too).
double brute_force_or_both_infeasible(const OptimalProblem& p, int trial) {
  try {
    return solve_optimal_brute_force(p).iteration_seconds;
  } catch (const InfeasibleError&) {
    EXPECT_THROW(solve_optimal(p), InfeasibleError) << "trial " << trial;
    return -1;
  }
}

TEST(OptimalSolver, MatchesBruteForceOnRandomInstances) {
  std::mt19937 rng(20241129);
  int solved = 0, infeasible = 0, uneven = 0;
  for (int trial = 0; solved < 60 && trial < 400; ++trial) {
    std::uniform_int_distribution<int> ranks(2, 3), extra(0, 6), mb(1, 4);
    OptimalProblem p;
    const int n = ranks(rng);
    const int max_mb = mb(rng);
    for (int i = 0; i < n; ++i) p.ranks.push_back(random_rank(rng, max_mb));
    p.global_batch = n + extra(rng);
    random_totals(rng, p);
    const double brute = brute_force_or_both_infeasible(p, trial);
    if (brute < 0) {
      ++infeasible;
      continue;
    }
    const auto sol = solve_optimal(p);
    EXPECT_NEAR(sol.iteration_seconds, brute, 1e-9 * std::max(1.0, brute)) << "trial " << trial;
    // The returned plan is consistent with the model it claims.
    int total = 0;
    double share_sum = 0, tau = 0, sigma = 0;
    for (std::size_t i = 0; i < sol.ranks.size(); ++i) {
      const auto& c = sol.ranks[i];
      total += c.batch;
      share_sum += c.share;
      sigma = std::max(sigma, c.share);
      ASSERT_GE(c.batch, 1);
      ASSERT_GE(c.micro_batch, 1);
      tau = std::max(tau, c.compute_seconds);
      EXPECT_LE(optimal_memory(p.ranks[i], c.batch, c.micro_batch, c.share, p.state_bytes),
                p.ranks[i].usable_bytes * (1 + 1e-9))
          << "trial " << trial << " rank " << i;
    }
    EXPECT_EQ(total, p.global_batch);
    EXPECT_NEAR(share_sum, 1.0, 1e-9);
    EXPECT_NEAR(sol.iteration_seconds,
                std::max(p.comm_seconds(sigma), tau) + p.optimizer_seconds * sigma, 1e-9);
    if (sigma > 1.0 / n + 1e-9) ++uneven;
    ++solved;
  }
  EXPECT_GE(solved, 50);
  // The instances must exercise the memory trade-off, not only the easy cases.
  EXPECT_GE(uneven, 5);
  EXPECT_GE(infeasible, 1);
}

// The phase-weighted variant (a configuration's time max(F/ρ, K/(1 − ρ)), used by `optimal`
// to generate candidates for the simulator's per-phase synchronisation) is solved exactly too.
TEST(OptimalSolver, PhaseWeightedMatchesBruteForce) {
  std::mt19937 rng(20261129);
  int solved = 0;
  for (int trial = 0; solved < 30 && trial < 200; ++trial) {
    std::uniform_int_distribution<int> ranks(2, 3), extra(0, 5), mb(1, 3);
    std::uniform_real_distribution<double> frac(0.2, 0.45), weight(0.2, 0.45);
    OptimalProblem p;
    const int n = ranks(rng);
    const int max_mb = mb(rng);
    const double rho = weight(rng);
    for (int i = 0; i < n; ++i) {
      auto r = random_rank(rng, max_mb);
      const double f = frac(rng);
      r.forward_time.assign(r.micro_batch_time.size(), 0.0);
      for (std::size_t m = 1; m < r.micro_batch_time.size(); ++m)
        r.forward_time[m] = f * r.micro_batch_time[m];
      r.phase_weight = rho;
      p.ranks.push_back(std::move(r));
    }
    p.global_batch = n + extra(rng);
    random_totals(rng, p);
    const double brute = brute_force_or_both_infeasible(p, trial);
    if (brute < 0) continue;
    EXPECT_NEAR(solve_optimal(p).iteration_seconds, brute, 1e-9 * std::max(1.0, brute))
        << "trial " << trial;
    ++solved;
  }
  EXPECT_GE(solved, 20);
}

TEST(OptimalSolver, StateThatCannotFitNamesTheShortfall) {
  OptimalProblem p;
  std::mt19937 rng(1);
  for (int i = 0; i < 2; ++i) {
    auto r = random_rank(rng, 2);
    r.usable_bytes = r.fixed_bytes + r.working_bytes[2] + r.bytes_per_sample * 2 + 1.0;
    p.ranks.push_back(r);
  }
  p.global_batch = 2;
  p.state_bytes = 10.0;  // at most ~2 bytes of room in total
  try {
    solve_optimal(p);
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("shortfall"), std::string::npos) << e.what();
  }
}

TEST(OptimalSolver, BatchSmallerThanDeviceCountIsRefused) {
  OptimalProblem p;
  std::mt19937 rng(2);
  for (int i = 0; i < 3; ++i) p.ranks.push_back(random_rank(rng, 2));
  p.global_batch = 2;
  p.state_bytes = 0.1;
  EXPECT_THROW(solve_optimal(p), InfeasibleError);
}

TEST(OptimalSolver, IdenticalRanksGetEvenSharesAndBalancedBatches) {
  OptimalProblem p;
  OptimalRankModel r;
  r.name = "gpu";
  r.micro_batch_time = {0, 1, 1.8, 2.6, 3.4};
  r.working_bytes = {0, 1, 2, 3, 4};
  r.usable_bytes = 100;
  for (int i = 0; i < 8; ++i) p.ranks.push_back(r);
  p.global_batch = 32;
  p.state_bytes = 40;
  const auto sol = solve_optimal(p);
  for (const auto& c : sol.ranks) {
    EXPECT_EQ(c.batch, 4);
    EXPECT_EQ(c.share, 1.0 / 8);
  }
}

TEST(WaterFill, LevelAndShares) {
  EXPECT_DOUBLE_EQ(water_fill_level({1, 1, 1, 1}), 0.25);
  EXPECT_DOUBLE_EQ(water_fill_level({0.1, 1, 1}), 0.45);
  EXPECT_TRUE(std::isinf(water_fill_level({0.1, 0.2})));
  const auto s = water_fill_shares({0.1, 1, 1});
  EXPECT_NEAR(s[0], 0.1, 1e-15);
  EXPECT_NEAR(s[1], 0.45, 1e-15);
}

}  // namespace
}  // namespace cephalo::planner

// The `optimal` solver against exhaustive enumeration on small random instances, plus its
// infeasibility diagnostics and the water-fill helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cephalo/core/error.hpp"
#include "optimal_solver.hpp"

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

// A device class with monotone tables (so the solver's normalisation leaves them as they
// are); with `offload` no activations stay per sample (a_i = 0), the case whose caps are large
// and whose room is a step function of the batch.
OptimalRankModel random_class(std::mt19937& rng, int max_mb, bool offload) {
  std::uniform_real_distribution<double> speed(0.5, 4.0), base(0.0, 2.0), step(0.0, 1.0);
  std::uniform_real_distribution<double> gb(1.0, 3.0), per(0.0, 0.2), fixed(0.1, 0.6);
  OptimalRankModel r;
  r.name = "class";
  r.micro_batch_time.assign(max_mb + 1, 0);
  r.working_bytes.assign(max_mb + 1, 0);
  double t = base(rng), w = 0.1 * gb(rng);
  const double s = speed(rng);
  for (int m = 1; m <= max_mb; ++m) {
    t += s * (0.5 + step(rng));
    w += 0.3 * step(rng);
    r.micro_batch_time[m] = t;
    r.working_bytes[m] = w;
  }
  r.extra_micro_batch_overhead = per(rng);
  r.fixed_bytes = fixed(rng);
  r.bytes_per_sample = offload ? 0.0 : 0.05 * per(rng);
  r.usable_bytes = gb(rng) + 1.0;
  return r;
}

OptimalProblem random_class_problem(std::mt19937& rng) {
  std::uniform_int_distribution<int> classes(1, 3), count(1, 12), mb(1, 6), spare(0, 40);
  std::bernoulli_distribution offload(0.6);
  OptimalProblem p;
  const int g = classes(rng);
  const bool host = offload(rng);
  for (int c = 0; c < g; ++c) {
    p.ranks.push_back(random_class(rng, mb(rng), host));
    for (int i = count(rng); i > 0; --i) p.rank_class.push_back(c);
  }
  p.global_batch = p.num_ranks() + spare(rng) * p.num_ranks() / 4;
  std::uniform_real_distribution<double> state(0.5, 6.0);
  p.state_bytes = state(rng);
  p.optimizer_seconds = 1.0;
  return p;
}

// The largest share room of a rank at batch b among its configurations within τ (the tables
// are monotone, so this is the model's R_i(b) without its normalisation).
double room_within(const OptimalRankModel& r, int b, double tau, double state_bytes) {
  double best = -std::numeric_limits<double>::infinity();
  for (int m = 1; m <= r.max_micro_batch(); ++m)
    if (r.allows(b, m) && optimal_compute_time(r, b, m) <= tau)
      best = std::max(
          best, (r.usable_bytes - r.fixed_bytes - r.working_bytes[m] - r.bytes_per_sample * b) /
                    state_bytes);
  return best;
}

// The per-class decision (levels, relaxation, chain) against the per-rank knapsack at points
// (τ, σ) spread over each instance's range; its batches are checked from the tables.
TEST(OptimalSolver, ClassFeasibilityAgreesWithThePerRankKnapsack) {
  std::mt19937 rng(20261203);
  int points = 0, feasible = 0, undecided_by_quick_tests = 0;
  for (int trial = 0; trial < 150; ++trial) {
    OptimalProblem p = random_class_problem(rng);
    OptimalProblem ref = p;
    ref.feasibility = OptimalFeasibility::RankKnapsack;
    const int n = p.num_ranks();
    double slowest = 0;
    for (const auto& r : p.ranks)
      slowest = std::max(slowest, optimal_compute_time(r, p.global_batch, 1));
    std::uniform_real_distribution<double> tau_of(0.0, slowest), sigma_of(1.0 / n, 1.0);
    for (int k = 0; k < 12; ++k) {
      const double tau = tau_of(rng), sigma = sigma_of(rng);
      std::vector<int> batches;
      const bool got = optimal_feasible(p, tau, sigma, &batches);
      const bool want = optimal_feasible(ref, tau, sigma);
      ASSERT_EQ(got, want) << "trial " << trial << " tau " << tau << " sigma " << sigma;
      ++points;
      if (!got) continue;
      ++feasible;
      ASSERT_EQ(static_cast<int>(batches.size()), n);
      int total = 0;
      double gain = 0, gain_at_one = 0;
      for (int i = 0; i < n; ++i) {
        ASSERT_GE(batches[i], 1) << "trial " << trial;
        total += batches[i];
        const double room = room_within(p.model_of(i), batches[i], tau, p.state_bytes);
        ASSERT_GE(room, 0) << "trial " << trial << " rank " << i << " batch " << batches[i];
        gain += std::min(sigma, room);
        gain_at_one += std::min(sigma, room_within(p.model_of(i), 1, tau, p.state_bytes));
      }
      EXPECT_EQ(total, p.global_batch) << "trial " << trial;
      EXPECT_GE(gain, 1 - 1e-9) << "trial " << trial;
      if (gain_at_one > gain) ++undecided_by_quick_tests;
    }
  }
  EXPECT_GE(feasible, points / 5);
  // Points where the batches chosen cost share room (batch and state compete for memory), so
  // the instances are not only the easy ones.
  EXPECT_GE(undecided_by_quick_tests, 20);
}

// The whole solve with per-class feasibility gives the per-rank knapsack's answer, and the
// per-rank knapsack is rarely its fallback.
TEST(OptimalSolver, ClassFeasibilityGivesThePerRankAnswer) {
  std::mt19937 rng(20261204);
  int solved = 0, class_runs = 0, fallbacks = 0, reference_runs = 0;
  for (int trial = 0; trial < 120; ++trial) {
    OptimalProblem p = random_class_problem(rng);
    OptimalProblem ref = p;
    ref.feasibility = OptimalFeasibility::RankKnapsack;
    OptimalSolution want;
    try {
      want = solve_optimal(ref);
    } catch (const InfeasibleError&) {
      EXPECT_THROW(solve_optimal(p), InfeasibleError) << "trial " << trial;
      continue;
    }
    const auto got = solve_optimal(p);
    EXPECT_NEAR(got.iteration_seconds, want.iteration_seconds,
                1e-9 * std::max(1.0, want.iteration_seconds))
        << "trial " << trial;
    EXPECT_NEAR(got.max_share, want.max_share, 1e-9) << "trial " << trial;
    class_runs += got.class_knapsack_runs;
    fallbacks += got.knapsack_runs;
    reference_runs += want.knapsack_runs;
    ++solved;
  }
  EXPECT_GE(solved, 60);
  EXPECT_GT(class_runs, 0);
  EXPECT_GT(reference_runs, 0);
  EXPECT_LE(fallbacks * 10, reference_runs)
      << class_runs << " class runs, " << fallbacks << " fallbacks, " << reference_runs
      << " reference knapsacks";
}

// The per-rank knapsack keeps only the totals from which the later ranks can still make the
// batch; where the caps sum to barely more than the batch that window is a few samples wide.
// Against every assignment enumerated: the same verdict, and its batches a real assignment.
TEST(OptimalSolver, RankKnapsackMatchesEnumerationWhereTheCapsBarelyCoverTheBatch) {
  std::mt19937 rng(20261207);
  std::uniform_int_distribution<int> classes(1, 3), count(1, 2), mb(1, 4), slack(0, 3);
  int points = 0, feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    OptimalProblem p;
    p.feasibility = OptimalFeasibility::RankKnapsack;
    const int g = classes(rng);
    for (int c = 0; c < g; ++c) {
      p.ranks.push_back(random_class(rng, mb(rng), false));
      for (int i = count(rng); i > 0; --i) p.rank_class.push_back(c);
    }
    std::uniform_real_distribution<double> state(0.5, 6.0);
    p.state_bytes = state(rng);
    p.optimizer_seconds = 1.0;
    const int n = p.num_ranks();
    // τ within the time of 8 samples on the slowest class, so that time and memory cap the
    // batches at a few samples each.
    double slowest = 0;
    for (const auto& r : p.ranks) slowest = std::max(slowest, optimal_compute_time(r, 8, 1));
    std::uniform_real_distribution<double> tau_of(0.0, slowest), sigma_of(1.0 / n, 1.0);
    const double tau = tau_of(rng), sigma = sigma_of(rng);
    std::vector<int> caps(n, 0);
    int cap_sum = 0;
    for (int i = 0; i < n; ++i) {
      while (caps[i] < 12 && room_within(p.model_of(i), caps[i] + 1, tau, p.state_bytes) >= 0)
        ++caps[i];
      cap_sum += caps[i];
    }
    p.global_batch = cap_sum - slack(rng);
    // Caps of 1 to 11 samples (12: the scan stopped, not the cap), a batch of a sample each.
    if (*std::min_element(caps.begin(), caps.end()) < 1 ||
        *std::max_element(caps.begin(), caps.end()) >= 12 || p.global_batch < n)
      continue;
    // Every assignment 1 <= b_i <= cap_i summing to the batch: the best summed gain.
    double best = -std::numeric_limits<double>::infinity();
    std::vector<int> b(n, 1);
    for (;;) {
      int total = 0;
      double gain = 0;
      for (int i = 0; i < n; ++i) {
        total += b[i];
        gain += std::min(sigma, room_within(p.model_of(i), b[i], tau, p.state_bytes));
      }
      if (total == p.global_batch) best = std::max(best, gain);
      int i = 0;
      while (i < n && b[i] == caps[i]) b[i++] = 1;
      if (i == n) break;
      ++b[i];
    }
    std::vector<int> batches;
    const bool got = optimal_feasible(p, tau, sigma, &batches);
    ASSERT_EQ(got, best >= 1 - 1e-12) << "trial " << trial << " best " << best;
    ++points;
    if (!got) {
      ++infeasible;
      continue;
    }
    ++feasible;
    int total = 0;
    double gain = 0;
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(batches[i], 1) << "trial " << trial;
      ASSERT_LE(batches[i], caps[i]) << "trial " << trial;
      total += batches[i];
      gain += std::min(sigma, room_within(p.model_of(i), batches[i], tau, p.state_bytes));
    }
    EXPECT_EQ(total, p.global_batch) << "trial " << trial;
    EXPECT_GE(gain, 1 - 1e-9) << "trial " << trial;
  }
  EXPECT_GE(points, 100);
  EXPECT_GE(feasible, 20);
  EXPECT_GE(infeasible, 20);
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

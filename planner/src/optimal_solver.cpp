// Exact solver of the `optimal` model (see the header for the model and the argument): the
// walk over the (τ, σ) breakpoints, the exact per-rank knapsack and the build of a solution.
// The feasibility per class of alike ranks is in optimal_classes.cpp.
#include "optimal_solver.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "optimal_solver_impl.hpp"
#include "run_memo.hpp"

namespace cephalo::planner {

namespace detail {

namespace {

// Bisection on the bit patterns of nonnegative doubles: returns the smallest x in (lo, hi]
// with pred(x) true, given pred(lo) false and pred(hi) true and pred monotone.
template <typename Pred>
double bisect_doubles(double lo, double hi, Pred pred) {
  auto lo_bits = std::bit_cast<std::uint64_t>(lo);
  auto hi_bits = std::bit_cast<std::uint64_t>(hi);
  while (hi_bits - lo_bits > 1) {
    const std::uint64_t mid = lo_bits + (hi_bits - lo_bits) / 2;
    if (pred(std::bit_cast<double>(mid)))
      hi_bits = mid;
    else
      lo_bits = mid;
  }
  return std::bit_cast<double>(hi_bits);
}

}  // namespace

bool Solver::feasible(double tau, double sigma, std::vector<int>* batches) {
  ++checks_;
  std::vector<GroupAtTau> at(groups_.size());
  double cap_sum = 0, room_at_one = 0, room_at_cap = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& g = groups_[gi];
    at[gi] = at_tau(gi, tau);
    if (at[gi].cap < 1) return false;
    const double count = static_cast<double>(g.ranks.size());
    cap_sum += count * at[gi].cap;
    room_at_one += count * std::min(sigma * g.weight, room(at[gi], 1));
    room_at_cap += count * std::min(sigma * g.weight, room(at[gi], at[gi].cap));
  }
  if (cap_sum < batch_ || room_at_one < 1 - kCoverTolerance) return false;
  if (room_at_cap >= 1 - kCoverTolerance) {
    if (batches) {
      // Every rank at its cap, then the excess off the slowest ranks first.
      std::vector<Bucket> buckets;
      for (std::size_t gi = 0; gi < groups_.size(); ++gi)
        buckets.push_back({gi, static_cast<int>(groups_[gi].ranks.size()), 1, at[gi].cap});
      assign_batches(buckets, batches);
    }
    return true;
  }
  if (p_.feasibility == OptimalFeasibility::Classes) {
    if (balanced_greedy(at, sigma, batches)) return true;
    const Verdict v = feasible_by_levels(at, sigma, batches);
    if (v != Verdict::Unknown) return v == Verdict::Feasible;
    // The per-rank knapsack below costs Σ_i c_i × B; past kMaxRankKnapsack cells the point
    // is taken as infeasible, which keeps every plan the solver returns feasible and moves
    // a breakpoint only within the band where the relaxations' bound reaches 1 and no
    // assignment found does (counted, and reported with the plan).
    constexpr double kMaxRankKnapsack = 4e8;
    double cells = 0;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      cells += static_cast<double>(groups_[gi].ranks.size()) * at[gi].cap;
    if (cells * batch_ > kMaxRankKnapsack) {
      ++undecided_;
      return false;
    }
  }
  // Exact: knapsack over (rank, samples) maximising Σ min(σ, R_i(b_i)).
  ++knapsacks_;
  const int B = batch_;
  std::vector<double> dp(B + 1, -kInf), next(B + 1);
  dp[0] = 0;
  std::vector<std::vector<int>> choice;
  if (batches) choice.assign(n_, std::vector<int>(B + 1, 0));
  std::vector<int> rank_group(n_);
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    for (int r : groups_[gi].ranks) rank_group[r] = static_cast<int>(gi);
  std::vector<std::vector<double>> gain(groups_.size());
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    gain[gi].assign(at[gi].cap + 1, -kInf);
    for (int b = 1; b <= at[gi].cap; ++b) {
      const double rr = room(at[gi], b);
      gain[gi][b] = rr < 0 ? -kInf : std::min(sigma * groups_[gi].weight, rr);
    }
  }
  // Only the totals from which the ranks left can still make B are kept: after rank r, x + the
  // later ranks' caps >= B and x + one sample per later rank <= B. A total outside that window
  // only leads to totals outside it, so the cells inside (and the choices read back from B) are
  // those of the whole table; near a breakpoint the caps sum to little more than B and the
  // window is that slack wide (the 1,024-GPU Zorse B x 16 without its A10G and T4 nodes: caps of
  // 77 and 26 samples over 128 and 256 ranks, 128 above the batch of 16,384).
  std::vector<long long> later_caps(n_ + 1, 0);  // Σ of the caps of ranks r..n-1
  for (int r = n_ - 1; r >= 0; --r)
    later_caps[r] = later_caps[r + 1] + static_cast<long long>(gain[rank_group[r]].size()) - 1;
  int lo = 0, reach = 0;  // the window of dp's totals: [lo, reach]
  for (int r = 0; r < n_; ++r) {
    const auto& gr = gain[rank_group[r]];
    const int cap = static_cast<int>(gr.size()) - 1;
    const int after = n_ - r - 1;  // ranks after this one, each at least one sample
    const int new_lo = static_cast<int>(std::max<long long>(lo + 1, B - later_caps[r + 1]));
    const int new_reach = std::min(B - after, reach + cap);
    if (new_lo > new_reach) return false;  // no total can still make B
    std::fill(next.begin() + new_lo, next.begin() + new_reach + 1, -kInf);
    for (int x = lo; x <= reach; ++x) {
      if (dp[x] == -kInf) continue;
      const int top = std::min(cap, new_reach - x);
      for (int b = std::max(1, new_lo - x); b <= top; ++b) {
        const double v = dp[x] + gr[b];
        if (v > next[x + b]) {
          next[x + b] = v;
          if (batches) choice[r][x + b] = b;
        }
      }
    }
    lo = new_lo;
    reach = new_reach;
    dp.swap(next);
  }
  if (!(dp[B] >= 1 - kCoverTolerance)) return false;
  if (batches) {
    batches->assign(n_, 0);
    int x = B;
    for (int r = n_ - 1; r >= 0; --r) {
      const int b = choice[r][x];
      (*batches)[r] = b;
      x -= b;
    }
  }
  return true;
}

OptimalSolution Solver::build(double tau, double sigma) {
  std::vector<int> batches;
  feasible(tau, sigma, &batches);
  std::vector<int> group_of(n_);
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    for (int r : groups_[gi].ranks) group_of[r] = static_cast<int>(gi);
  std::vector<GroupAtTau> at(groups_.size());
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) at[gi] = at_tau(gi, tau);
  std::vector<double> rooms(n_), weights(n_);
  for (int r = 0; r < n_; ++r) {
    weights[r] = groups_[group_of[r]].weight;
    rooms[r] = std::min(sigma * weights[r], room(at[group_of[r]], batches[r]));
  }
  std::vector<double> shares =
      unit_weights_ ? water_fill_shares(rooms) : weighted_water_fill_shares(rooms, weights);
  OptimalSolution sol;
  sol.ranks.resize(n_);
  // The configuration depends only on (group, batch, share): ranks alike are chosen once.
  RunMemo<std::tuple<int, int, double>, std::pair<int, double>> chosen;
  for (int r = 0; r < n_; ++r) {
    const auto& model = groups_[group_of[r]].model;
    auto& c = sol.ranks[r];
    c.batch = batches[r];
    c.share = shares[r];
    const auto [micro, seconds] = chosen.get({group_of[r], c.batch, c.share}, [&] {
      // The fastest configuration within τ whose memory holds the share.
      int chosen_micro = 0;
      double best_t = kInf, best_w = kInf;
      for (int m = 1; m <= model.max_micro_batch(); ++m) {
        if (!model.allows(c.batch, m) || optimal_compute_time(model, c.batch, m) > tau) continue;
        const double mem = optimal_memory(model, c.batch, m, c.share, p_.state_bytes);
        if (mem > model.usable_bytes * (1 + 1e-12)) continue;
        const double t = optimal_compute_time(model, c.batch, m);
        if (t < best_t || (t == best_t && model.working_bytes[m] < best_w)) {
          best_t = t;
          best_w = model.working_bytes[m];
          chosen_micro = std::min(m, c.batch);
        }
      }
      if (chosen_micro == 0) {
        // Only reachable through rounding: of the shares (take the leanest configuration in
        // time), or of a time a hair above τ (the phase-weighted K = t − F is a difference, so
        // a flat table's times need not grow with the batch in the last bit: take the
        // fastest).
        for (int m = 1; m <= model.max_micro_batch(); ++m)
          if (model.allows(c.batch, m) && optimal_compute_time(model, c.batch, m) <= tau &&
              (chosen_micro == 0 || model.working_bytes[m] < model.working_bytes[chosen_micro]))
            chosen_micro = std::min(m, c.batch);
        if (chosen_micro == 0) {
          double fastest = kInf;
          for (int m = 1; m <= model.max_micro_batch(); ++m)
            if (model.allows(c.batch, m) && optimal_compute_time(model, c.batch, m) < fastest) {
              fastest = optimal_compute_time(model, c.batch, m);
              chosen_micro = std::min(m, c.batch);
            }
        }
        best_t = optimal_compute_time(model, c.batch, chosen_micro);
      }
      return std::make_pair(chosen_micro, best_t);
    });
    c.micro_batch = micro;
    c.micro_batches = (c.batch + c.micro_batch - 1) / c.micro_batch;
    c.compute_seconds = seconds;
    c.memory_bytes = optimal_memory(model, c.batch, c.micro_batch, c.share, p_.state_bytes);
    sol.compute_seconds = std::max(sol.compute_seconds, seconds);
    sol.max_share = std::max(sol.max_share, c.share);
  }
  sol.comm_seconds = comm(sol.max_share);
  sol.optimizer_seconds = optimizer_step_seconds(p_, shares);
  sol.iteration_seconds = std::max(sol.comm_seconds, sol.compute_seconds) + sol.optimizer_seconds;
  return sol;
}

double Solver::tau_star(double sigma, double lo, double hi) {
  return bisect_doubles(lo, hi, [&](double t) { return feasible(t, sigma, nullptr); });
}

double Solver::sigma_star(double tau) {
  if (feasible(tau, lambda_min_, nullptr)) return lambda_min_;
  return bisect_doubles(lambda_min_, lambda_max_,
                        [&](double s) { return feasible(tau, s, nullptr); });
}

OptimalSolution Solver::solve() {
  if (n_ == 0) throw InfeasibleError("optimal: the cluster has no devices");
  if (batch_ < n_) {
    throw InfeasibleError("optimal: global batch " + std::to_string(batch_) +
                          " is smaller than the number of devices (" + std::to_string(n_) +
                          "); every device needs at least one sample: raise the global batch "
                          "to at least " +
                          std::to_string(n_));
  }
  // Diagnose what cannot fit even with unlimited time, to explain infeasibility.
  const double huge = 1e12;
  double room_one = 0, cap_total = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& g = groups_[gi];
    const auto at = at_tau(gi, huge);
    const double count = static_cast<double>(g.ranks.size());
    if (at.cap < 1) {
      const double need = g.model.fixed_bytes + g.model.working_bytes[1] + g.model.bytes_per_sample;
      std::ostringstream msg;
      msg << "optimal: " << g.model.name << " cannot run one sample even without any training "
          << "state: needs " << format_bytes(need) << ", " << format_bytes(g.model.usable_bytes)
          << " usable (shortfall " << format_bytes(need - g.model.usable_bytes)
          << "); use a device with more memory, a shorter sequence or a smaller model";
      throw InfeasibleError(msg.str());
    }
    cap_total += count * at.cap;
    room_one += count * std::min(1.0, room(at, 1));
  }
  if (room_one < 1 - kCoverTolerance) {
    std::ostringstream msg;
    msg << "optimal: the training state (" << format_bytes(p_.state_bytes)
        << ") does not fit even with perfect sharding and one sample per device: shortfall "
        << format_bytes((1 - room_one) * p_.state_bytes)
        << "; add that much device memory (more or larger devices), enable host offload, or "
           "use a smaller model";
    throw InfeasibleError(msg.str());
  }
  if (cap_total < batch_) {
    std::ostringstream msg;
    msg << "optimal: the devices can hold at most " << fixed(cap_total, 0)
        << " samples of activations at once, the global batch is " << batch_
        << "; lower the global batch to " << fixed(cap_total, 0)
        << ", enable host offload of activations, or add devices";
    throw InfeasibleError(msg.str());
  }
  if (!feasible(huge, lambda_max_, nullptr)) {
    throw InfeasibleError(
        "optimal: no assignment of the batch and the training state fits the devices' memory "
        "together; lower the global batch, enable host offload, or add device memory");
  }
  // τ0: the fastest compute bound with any shares. Bracket it by doubling from below.
  double lo = 0;
  double hi = kInf;
  for (double t = 1e-6; t < huge; t *= 2) {
    if (feasible(t, lambda_max_, nullptr)) {
      hi = t;
      break;
    }
    lo = t;
  }
  if (hi == kInf) hi = huge;
  double tau = tau_star(lambda_max_, lo, hi);
  OptimalSolution best;
  best.iteration_seconds = kInf;
  const double even = lambda_min_;
  // Lower bound of the optimizer term at any λ: every device at its even-weighted share.
  const double optimizer_floor = p_.optimizer_fixed_seconds + fastest_optimizer_ * even;
  for (;;) {
    const double sigma = sigma_star(tau);
    OptimalSolution cand = build(tau, sigma);
    staircase_.push_back(cand);
    if (cand.iteration_seconds < best.iteration_seconds) best = cand;
    if (sigma <= even) break;
    // Next breakpoint: the smallest τ at which fewer state has to sit on the fullest rank.
    const double smaller = std::nextafter(sigma, 0.0);
    if (smaller < even) break;
    if (!feasible(huge, smaller, nullptr)) break;
    const double next_tau = tau_star(smaller, tau, huge);
    if (std::max(comm(1.0 / n_), next_tau) + optimizer_floor >= best.iteration_seconds) break;
    tau = next_tau;
  }
  best.feasibility_checks = checks_;
  best.knapsack_runs = knapsacks_;
  best.class_knapsack_runs = class_runs_;
  best.undecided_checks = undecided_;
  return best;
}

}  // namespace detail

bool optimal_feasible(const OptimalProblem& problem, double tau, double sigma,
                      std::vector<int>* batches) {
  detail::Solver solver(problem);
  return solver.feasible(tau, sigma, batches);
}

OptimalSolution solve_optimal(const OptimalProblem& problem) {
  detail::Solver solver(problem);
  return solver.solve();
}

std::vector<OptimalSolution> solve_optimal_candidates(const OptimalProblem& problem) {
  detail::Solver solver(problem);
  OptimalSolution best = solver.solve();
  std::vector<OptimalSolution> out{best};
  for (const auto& c : solver.staircase())
    if (c.iteration_seconds != best.iteration_seconds || c.max_share != best.max_share)
      out.push_back(c);
  std::stable_sort(out.begin() + 1, out.end(), [](const auto& a, const auto& b) {
    return a.iteration_seconds < b.iteration_seconds;
  });
  return out;
}

}  // namespace cephalo::planner

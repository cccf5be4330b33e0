// The `optimal` model's per-rank functions, the water-fill of shares and the brute-force
// reference the solver is tested against (see optimal_solver.hpp).
#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "cephalo/core/error.hpp"
#include "optimal_internal.hpp"

namespace cephalo::planner {

using detail::kCoverTolerance;
using detail::kInf;
using detail::normalised;

namespace detail {

OptimalRankModel normalised(const OptimalRankModel& r) {
  OptimalRankModel out = r;
  if (out.forward_time.size() == out.micro_batch_time.size() && out.phase_weight > 0) {
    // Both phases nondecreasing in m, so both totals grow with the batch.
    std::vector<double> k(out.micro_batch_time.size(), 0.0);
    for (std::size_t m = 1; m < k.size(); ++m) {
      k[m] = out.micro_batch_time[m] - out.forward_time[m];
      if (m >= 2) {
        k[m] = std::max(k[m], k[m - 1]);
        out.forward_time[m] = std::max(out.forward_time[m], out.forward_time[m - 1]);
      }
      out.micro_batch_time[m] = out.forward_time[m] + k[m];
    }
  } else {
    out.forward_time.clear();
    out.phase_weight = 0;
  }
  for (std::size_t m = 2; m < out.micro_batch_time.size(); ++m)
    out.micro_batch_time[m] = std::max(out.micro_batch_time[m], out.micro_batch_time[m - 1]);
  for (std::size_t m = 2; m < out.working_bytes.size(); ++m)
    out.working_bytes[m] = std::max(out.working_bytes[m], out.working_bytes[m - 1]);
  return out;
}

std::vector<double> optimizer_weights(const OptimalProblem& p) {
  const int n = p.num_ranks();
  std::vector<double> o(n), w(n, 1.0);
  double fastest = kInf;
  for (int i = 0; i < n; ++i) {
    o[i] = optimizer_full_state_seconds(p, i);
    fastest = std::min(fastest, o[i]);
  }
  if (!(fastest > 0)) return w;  // a free optimizer step: no share is cheaper than another
  for (int i = 0; i < n; ++i) w[i] = fastest / o[i];
  return w;
}

std::vector<Group> group_ranks(const OptimalProblem& p) {
  std::vector<Group> groups;
  std::map<std::vector<double>, std::size_t> index;
  // Each class's model is normalised and keyed once; its ranks join the group of the first
  // class with the same normalised model (groups in order of their first rank).
  std::vector<long> group_of_class(p.ranks.size(), -1);
  const int n = p.num_ranks();
  const std::vector<double> weights = optimizer_weights(p);
  for (int i = 0; i < n; ++i) {
    const auto c = static_cast<std::size_t>(p.class_of(i));
    if (group_of_class[c] < 0) {
      OptimalRankModel m = normalised(p.ranks[c]);
      std::vector<double> key = m.micro_batch_time;
      key.insert(key.end(), m.working_bytes.begin(), m.working_bytes.end());
      key.push_back(-1);
      key.insert(key.end(), m.forward_time.begin(), m.forward_time.end());
      key.push_back(-2);
      key.push_back(m.phase_weight);
      key.push_back(m.extra_micro_batch_overhead);
      key.push_back(m.fixed_bytes);
      key.push_back(m.bytes_per_sample);
      key.push_back(m.usable_bytes);
      key.push_back(static_cast<double>(m.fixed_micro_batch));
      key.push_back(static_cast<double>(m.micro_batch_time.size()));
      key.push_back(weights[static_cast<std::size_t>(i)]);
      auto [it, inserted] = index.emplace(std::move(key), groups.size());
      if (inserted) groups.push_back({std::move(m), {}, weights[static_cast<std::size_t>(i)]});
      group_of_class[c] = static_cast<long>(it->second);
    }
    groups[static_cast<std::size_t>(group_of_class[c])].ranks.push_back(i);
  }
  return groups;
}

}  // namespace detail

double optimal_compute_time(const OptimalRankModel& r, int batch, int micro_batch) {
  const int m = std::min(micro_batch, batch);
  const int n = (batch + m - 1) / m;
  const int last = batch - (n - 1) * m;
  const double t =
      (n - 1) * (r.micro_batch_time[m] + r.extra_micro_batch_overhead) + r.micro_batch_time[last];
  if (r.phase_weight <= 0 || r.forward_time.size() != r.micro_batch_time.size()) return t;
  const double f = (n - 1) * r.forward_time[m] + r.forward_time[last];
  return std::max(f / r.phase_weight, (t - f) / (1 - r.phase_weight));
}

double optimal_forward_time(const OptimalRankModel& r, int batch, int micro_batch) {
  if (r.forward_time.size() != r.micro_batch_time.size()) return 0;
  const int m = std::min(micro_batch, batch);
  const int n = (batch + m - 1) / m;
  const int last = batch - (n - 1) * m;
  return (n - 1) * r.forward_time[m] + r.forward_time[last];
}

double optimal_memory(const OptimalRankModel& r, int batch, int micro_batch, double share,
                      double state_bytes) {
  return r.fixed_bytes + r.working_bytes[micro_batch] + r.bytes_per_sample * batch +
         share * state_bytes;
}

double water_fill_level(const std::vector<double>& rooms) {
  const double n = static_cast<double>(rooms.size());
  double total = 0;
  for (double r : rooms) total += std::max(0.0, r);
  if (total < 1 - kCoverTolerance) return kInf;
  std::vector<double> sorted;
  for (double r : rooms) sorted.push_back(std::max(0.0, r));
  std::sort(sorted.begin(), sorted.end());
  // Level λ: Σ min(λ, r_i) = 1. Ranks below λ give all their room.
  double given = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const double rest = n - static_cast<double>(i);
    const double level = (1 - given) / rest;
    if (level <= sorted[i]) return std::max(level, 1.0 / n);
    given += sorted[i];
  }
  return sorted.back();
}

std::vector<double> water_fill_shares(const std::vector<double>& rooms) {
  const std::size_t n = rooms.size();
  const double level = water_fill_level(rooms);
  std::vector<double> s(n);
  if (level <= 1.0 / static_cast<double>(n)) {
    std::fill(s.begin(), s.end(), 1.0 / static_cast<double>(n));
    return s;
  }
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = std::min(level, std::max(0.0, rooms[i]));
    sum += s[i];
  }
  for (auto& x : s) x /= sum;
  return s;
}

double optimizer_full_state_seconds(const OptimalProblem& p, int rank) {
  const double own = p.model_of(rank).optimizer_seconds;
  return own >= 0 ? own : p.optimizer_seconds;
}

double optimizer_step_seconds(const OptimalProblem& p, const std::vector<double>& shares) {
  double worst = 0;
  for (std::size_t i = 0; i < shares.size(); ++i)
    worst = std::max(worst, optimizer_full_state_seconds(p, static_cast<int>(i)) * shares[i]);
  return p.optimizer_fixed_seconds + worst;
}

std::vector<double> weighted_water_fill_shares(const std::vector<double>& rooms,
                                               const std::vector<double>& weights) {
  const std::size_t n = rooms.size();
  double total = 0;
  for (double r : rooms) total += std::max(0.0, r);
  if (n == 0 || !(total > 0)) return {};
  if (std::all_of(weights.begin(), weights.end(), [](double w) { return w == 1.0; }))
    return water_fill_shares(rooms);
  // Σ min(λ·w_i, r_i) is piecewise linear in λ with breakpoints r_i / w_i: walk them upwards.
  std::vector<std::pair<double, std::size_t>> breaks;
  for (std::size_t i = 0; i < n; ++i)
    breaks.emplace_back(weights[i] > 0 ? std::max(0.0, rooms[i]) / weights[i] : kInf, i);
  std::sort(breaks.begin(), breaks.end());
  double saturated = 0, open_weight = 0;
  for (double w : weights) open_weight += w;
  double level = kInf;
  for (const auto& [at, i] : breaks) {
    // Below `at`, the ranks not yet saturated contribute λ·w each.
    if (open_weight > 0) {
      const double lambda = (1 - saturated) / open_weight;
      if (lambda <= at) {
        level = lambda;
        break;
      }
    }
    saturated += std::max(0.0, rooms[i]);
    open_weight -= weights[i];
  }
  std::vector<double> s(n);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = std::min(level * weights[i], std::max(0.0, rooms[i]));
    sum += s[i];
  }
  for (auto& x : s) x /= sum;
  return s;
}

OptimalSolution solve_optimal_brute_force(const OptimalProblem& p) {
  const int n = p.num_ranks();
  std::vector<OptimalRankModel> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(normalised(p.model_of(i)));
  const std::vector<double> weights = detail::optimizer_weights(p);
  OptimalSolution best;
  best.iteration_seconds = kInf;
  std::vector<int> b(n, 1), m(n, 1);
  // Enumerate compositions of B into n parts ≥ 1, and every micro-batch size per rank.
  std::function<void(int, int)> over_batches = [&](int i, int left) {
    if (i == n - 1) {
      b[i] = left;
      std::function<void(int)> over_micro = [&](int j) {
        if (j == n) {
          std::vector<double> rooms(n);
          double tau = 0;
          for (int k = 0; k < n; ++k) {
            const double free = ranks[k].usable_bytes - ranks[k].fixed_bytes -
                                ranks[k].working_bytes[m[k]] - ranks[k].bytes_per_sample * b[k];
            if (free < 0) return;
            rooms[k] = p.state_bytes > 0 ? free / p.state_bytes : kInf;
            tau = std::max(tau, optimal_compute_time(ranks[k], b[k], m[k]));
          }
          if (water_fill_level(rooms) == kInf) return;  // Σ room < 1: the state does not fit
          const auto shares = weighted_water_fill_shares(rooms, weights);
          const double sigma = *std::max_element(shares.begin(), shares.end());
          const double c = p.comm_seconds ? p.comm_seconds(sigma) : 0.0;
          const double opt = optimizer_step_seconds(p, shares);
          const double t = std::max(c, tau) + opt;
          if (t < best.iteration_seconds) {
            best.iteration_seconds = t;
            best.compute_seconds = tau;
            best.max_share = sigma;
            best.comm_seconds = c;
            best.optimizer_seconds = opt;
            best.ranks.assign(n, {});
            for (int k = 0; k < n; ++k) {
              best.ranks[k].batch = b[k];
              best.ranks[k].micro_batch = std::min(m[k], b[k]);
            }
          }
          return;
        }
        for (int mm = 1; mm <= ranks[j].max_micro_batch(); ++mm) {
          if (!ranks[j].allows(b[j], mm)) continue;
          m[j] = mm;
          over_micro(j + 1);
        }
      };
      over_micro(0);
      return;
    }
    for (int x = 1; x <= left - (n - 1 - i); ++x) {
      b[i] = x;
      over_batches(i + 1, left - x);
    }
  };
  if (n > 0 && p.global_batch >= n) over_batches(0, p.global_batch);
  if (best.iteration_seconds == kInf) throw InfeasibleError("optimal (brute force): nothing fits");
  return best;
}

}  // namespace cephalo::planner

// Exact solver of the `optimal` model (see the header for the model and the argument).
#include "cephalo/planner/optimal_solver.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <queue>
#include <sstream>
#include <tuple>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "optimal_internal.hpp"

namespace cephalo::planner {
using detail::Group;
using detail::group_ranks;
using detail::kCoverTolerance;
using detail::kInf;

namespace {
// A group's view of one compute bound τ.
struct GroupAtTau {
  const OptimalRankModel* model = nullptr;
  std::size_t group = 0;
  double tau = 0;
  int cap = 0;  // c: largest b with a configuration in time and memory (share 0)
};

// Per batch b, the configurations that matter: sorted by time, each leaner in working memory
// than every faster one (the (t, w) Pareto staircase over micro-batch sizes). The leanest
// configuration within τ is then one binary search away.
struct Frontier {
  std::vector<double> time;
  std::vector<double> working;
};

class Solver {
 public:
  explicit Solver(const OptimalProblem& p) : p_(p), groups_(group_ranks(p)) {
    n_ = p.num_ranks();
    batch_ = p.global_batch;
    max_rank_batch_ = batch_ - (n_ - 1);
    // λ from every device at its weight's share of 1 (even shares when all weights are 1) to
    // no cap at all (the lightest-weighted device may hold everything).
    double weight_sum = 0, lightest = 1;
    for (const auto& g : groups_) {
      weight_sum += g.weight * static_cast<double>(g.ranks.size());
      lightest = std::min(lightest, g.weight);
    }
    lambda_min_ = 1.0 / weight_sum;
    lambda_max_ = 1.0 / lightest;
    unit_weights_ = lightest == 1.0;
    fastest_optimizer_ = kInf;
    for (int i = 0; i < n_; ++i)
      fastest_optimizer_ = std::min(fastest_optimizer_, optimizer_full_state_seconds(p_, i));
    frontiers_.resize(groups_.size());
    batch_limit_.resize(groups_.size());
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      // No configuration holds more samples than the activations of the leanest one allow.
      const auto& r = groups_[gi].model;
      int limit = max_rank_batch_;
      if (r.bytes_per_sample > 0 && r.max_micro_batch() >= 1) {
        const double free = r.usable_bytes - r.fixed_bytes - r.working_bytes[1];
        limit =
            free < 0
                ? 0
                : static_cast<int>(std::min<double>(limit, std::floor(free / r.bytes_per_sample)));
      }
      batch_limit_[gi] = limit;
      frontiers_[gi].resize(limit + 1);
    }
  }

  OptimalSolution solve();
  // Every (τ, σ) breakpoint of the staircase walk that solve() built, in walk order.
  const std::vector<OptimalSolution>& staircase() const { return staircase_; }

 private:
  double comm(double sigma) const { return p_.comm_seconds ? p_.comm_seconds(sigma) : 0.0; }

  const Frontier& frontier(std::size_t gi, int b) {
    Frontier& f = frontiers_[gi][b];
    if (!f.time.empty()) return f;
    const auto& r = groups_[gi].model;
    std::vector<std::pair<double, double>> all;
    const int top = std::min(r.max_micro_batch(), b);
    for (int m = 1; m <= top; ++m)
      if (r.allows(b, m)) all.emplace_back(optimal_compute_time(r, b, m), r.working_bytes[m]);
    std::sort(all.begin(), all.end());
    double lean = kInf;
    for (const auto& [t, w] : all) {
      if (w < lean) {
        f.time.push_back(t);
        f.working.push_back(w);
        lean = w;
      }
    }
    return f;
  }

  // Working bytes of the leanest configuration within τ at batch b (+inf when none).
  double leanest(std::size_t gi, int b, double tau) {
    const Frontier& f = frontier(gi, b);
    const auto it = std::upper_bound(f.time.begin(), f.time.end(), tau);
    if (it == f.time.begin()) return kInf;
    return f.working[static_cast<std::size_t>(it - f.time.begin()) - 1];
  }

  double room_of(std::size_t gi, int b, double tau) {
    const auto& r = groups_[gi].model;
    if (b > batch_limit_[gi]) return -kInf;
    const double w = leanest(gi, b, tau);
    if (w == kInf) return -kInf;
    const double bytes = r.usable_bytes - r.fixed_bytes - w - r.bytes_per_sample * b;
    if (p_.state_bytes <= 0) return bytes >= 0 ? kInf : -kInf;
    return bytes / p_.state_bytes;
  }

  GroupAtTau at_tau(std::size_t gi, double tau) {
    GroupAtTau g;
    g.model = &groups_[gi].model;
    g.group = gi;
    g.tau = tau;
    // R(b) is nonincreasing in b: binary search the largest b with R ≥ 0.
    if (batch_limit_[gi] < 1 || room_of(gi, 1, tau) < 0) return g;
    int lo = 1, hi = batch_limit_[gi];
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (room_of(gi, mid, tau) >= 0)
        lo = mid;
      else
        hi = mid - 1;
    }
    g.cap = lo;
    return g;
  }

  // R(b) in shares (may be negative): the most room over the configurations within τ.
  double room(const GroupAtTau& g, int b) { return room_of(g.group, b, g.tau); }

  // Feasibility of (τ, σ); fills `batches` (per rank) when asked and feasible.
  bool feasible(double tau, double sigma, std::vector<int>* batches);

  OptimalSolution build(double tau, double sigma);

  double tau_star(double sigma, double lo_infeasible, double hi_feasible);
  double sigma_star(double tau);

  const OptimalProblem& p_;
  std::vector<Group> groups_;
  std::vector<std::vector<Frontier>> frontiers_;  // [group][b], filled on first use
  std::vector<int> batch_limit_;
  int n_ = 0;
  int batch_ = 0;
  int max_rank_batch_ = 0;
  int checks_ = 0;
  int knapsacks_ = 0;
  double lambda_min_ = 0, lambda_max_ = 1;
  bool unit_weights_ = true;
  double fastest_optimizer_ = 0;  // O_f
  std::vector<OptimalSolution> staircase_;
};

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
      // Every rank at its cap, then remove the excess from the slowest ranks first.
      batches->assign(n_, 0);
      using Item = std::pair<double, int>;  // (time at current batch, rank)
      std::priority_queue<Item> heap;
      std::vector<int> group_of(n_);
      for (std::size_t gi = 0; gi < groups_.size(); ++gi)
        for (int r : groups_[gi].ranks) {
          group_of[r] = static_cast<int>(gi);
          (*batches)[r] = at[gi].cap;
        }
      std::map<std::pair<int, int>, double> best_of;  // (group, batch): alike ranks once
      auto best_time = [&](int r, int b) {
        auto [it, fresh] = best_of.emplace(std::make_pair(group_of[r], b), kInf);
        if (!fresh) return it->second;
        const auto& g = groups_[group_of[r]];
        double best = kInf;
        for (int m = 1; m <= g.model.max_micro_batch(); ++m)
          if (g.model.allows(b, m)) best = std::min(best, optimal_compute_time(g.model, b, m));
        it->second = best;
        return best;
      };
      for (int r = 0; r < n_; ++r) heap.emplace(best_time(r, (*batches)[r]), r);
      long excess = static_cast<long>(cap_sum) - batch_;
      while (excess > 0) {
        auto [t, r] = heap.top();
        heap.pop();
        if ((*batches)[r] <= 1) continue;  // cannot happen while excess > 0 and B ≥ n
        --(*batches)[r];
        --excess;
        heap.emplace(best_time(r, (*batches)[r]), r);
      }
    }
    return true;
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
  int reach = 0;
  for (int r = 0; r < n_; ++r) {
    const auto& gr = gain[rank_group[r]];
    const int cap = static_cast<int>(gr.size()) - 1;
    std::fill(next.begin(), next.end(), -kInf);
    const int new_reach = std::min(B, reach + cap);
    for (int x = 0; x <= reach; ++x) {
      if (dp[x] == -kInf) continue;
      const int top = std::min(cap, B - x);
      for (int b = 1; b <= top; ++b) {
        const double v = dp[x] + gr[b];
        if (v > next[x + b]) {
          next[x + b] = v;
          if (batches) choice[r][x + b] = b;
        }
      }
    }
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
  std::map<std::tuple<int, int, double>, std::pair<int, double>> chosen;
  for (int r = 0; r < n_; ++r) {
    const auto& model = groups_[group_of[r]].model;
    auto& c = sol.ranks[r];
    c.batch = batches[r];
    c.share = shares[r];
    const auto key = std::make_tuple(group_of[r], c.batch, c.share);
    if (auto it = chosen.find(key); it != chosen.end()) {
      c.micro_batch = it->second.first;
      c.micro_batches = (c.batch + c.micro_batch - 1) / c.micro_batch;
      c.compute_seconds = it->second.second;
      c.memory_bytes = optimal_memory(model, c.batch, c.micro_batch, c.share, p_.state_bytes);
      sol.compute_seconds = std::max(sol.compute_seconds, c.compute_seconds);
      sol.max_share = std::max(sol.max_share, c.share);
      continue;
    }
    // The fastest configuration within τ whose memory holds the share.
    double best_t = kInf, best_w = kInf;
    for (int m = 1; m <= model.max_micro_batch(); ++m) {
      if (!model.allows(c.batch, m) || optimal_compute_time(model, c.batch, m) > tau) continue;
      const double mem = optimal_memory(model, c.batch, m, c.share, p_.state_bytes);
      if (mem > model.usable_bytes * (1 + 1e-12)) continue;
      const double t = optimal_compute_time(model, c.batch, m);
      if (t < best_t || (t == best_t && model.working_bytes[m] < best_w)) {
        best_t = t;
        best_w = model.working_bytes[m];
        c.micro_batch = std::min(m, c.batch);
      }
    }
    if (c.micro_batch == 0) {
      // Only reachable through rounding of the shares: take the leanest configuration in time.
      for (int m = 1; m <= model.max_micro_batch(); ++m)
        if (model.allows(c.batch, m) && optimal_compute_time(model, c.batch, m) <= tau &&
            (c.micro_batch == 0 || model.working_bytes[m] < model.working_bytes[c.micro_batch]))
          c.micro_batch = std::min(m, c.batch);
      best_t = optimal_compute_time(model, c.batch, c.micro_batch);
    }
    chosen.emplace(key, std::make_pair(c.micro_batch, best_t));
    c.micro_batches = (c.batch + c.micro_batch - 1) / c.micro_batch;
    c.compute_seconds = best_t;
    c.memory_bytes = optimal_memory(model, c.batch, c.micro_batch, c.share, p_.state_bytes);
    sol.compute_seconds = std::max(sol.compute_seconds, best_t);
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
  return best;
}

}  // namespace

OptimalSolution solve_optimal(const OptimalProblem& problem) {
  Solver solver(problem);
  return solver.solve();
}

std::vector<OptimalSolution> solve_optimal_candidates(const OptimalProblem& problem) {
  Solver solver(problem);
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

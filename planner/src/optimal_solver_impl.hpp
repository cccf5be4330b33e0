#pragma once
// The `optimal` solver's state, shared by its files (private to planner/src): the τ/σ walk,
// the per-rank knapsack and the build of a solution (optimal_solver.cpp), and the feasibility
// per class of alike ranks (optimal_classes.cpp). The model and the argument are in
// optimal_solver.hpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "optimal_internal.hpp"

namespace cephalo::planner::detail {

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

// A run of batches lo..hi over which a rank's gain min(σ·w, R(b)) is the same.
struct Level {
  int lo = 1, hi = 1;
  double gain = 0;
};
// The ranks of a group whose batches lie in [lo, hi]; every rank starts at hi.
struct Bucket {
  std::size_t group = 0;
  int count = 0;
  int lo = 1, hi = 1;
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
  // Feasibility of (τ, σ); fills `batches` (per rank) when asked and feasible.
  bool feasible(double tau, double sigma, std::vector<int>* batches);

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

  enum class Verdict { Infeasible, Feasible, Unknown };
  // Feasibility per class of alike ranks over the levels of their gain (Unknown: undecided,
  // the per-rank knapsack decides).
  Verdict feasible_by_levels(const std::vector<GroupAtTau>& at, double sigma,
                             std::vector<int>* batches);
  // The levels of a group at (τ, σ) for b = 1..cap; empty when there are more than `limit`.
  std::vector<Level> levels(const GroupAtTau& g, double sigma, std::size_t limit);
  void assign_batches(const std::vector<Bucket>& buckets, std::vector<int>* batches);
  // A feasible assignment by a greedy over classes (false: none found, decides nothing).
  bool balanced_greedy(const std::vector<GroupAtTau>& at, double sigma, std::vector<int>* batches);
  // The fastest configuration's time at batch b (any micro-batch the model allows).
  double best_time(std::size_t gi, int b);

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
  int class_runs_ = 0;
  int undecided_ = 0;
  std::map<std::pair<std::size_t, int>, double> best_time_;
  double lambda_min_ = 0, lambda_max_ = 1;
  bool unit_weights_ = true;
  double fastest_optimizer_ = 0;  // O_f
  std::vector<OptimalSolution> staircase_;
};

}  // namespace cephalo::planner::detail

// Exact solver of the `optimal` model (see the header for the model and the argument).
#include "optimal_solver.hpp"

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

// Batches from buckets that hold at least B samples at their tops and at most B at their
// bottoms: the excess is taken off the slowest ranks first. Within a bucket the ranks are
// alike, so they stay within one sample of each other (q of them at `top`, the rest one
// below), and the walk costs a step per bucket and sample of height, not per rank.
void Solver::assign_batches(const std::vector<Bucket>& buckets, std::vector<int>* batches) {
  struct State {
    int top = 0;  // the batch of the `at_top` fullest ranks; the others hold top − 1
    int at_top = 0;
  };
  std::vector<State> st(buckets.size());
  long long excess = -batch_;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    st[i] = {buckets[i].hi, buckets[i].count};
    excess += static_cast<long long>(buckets[i].hi) * buckets[i].count;
  }
  using Item = std::pair<double, std::size_t>;  // (time at the bucket's top batch, bucket)
  std::priority_queue<Item> heap;
  for (std::size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i].count > 0 && st[i].top > buckets[i].lo)
      heap.emplace(best_time(buckets[i].group, st[i].top), i);
  while (excess > 0 && !heap.empty()) {
    const std::size_t i = heap.top().second;
    heap.pop();
    State& s = st[i];
    const long long take = std::min<long long>(excess, s.at_top);
    excess -= take;
    s.at_top -= static_cast<int>(take);
    if (s.at_top == 0) {
      --s.top;
      s.at_top = buckets[i].count;
    }
    if (s.top > buckets[i].lo) heap.emplace(best_time(buckets[i].group, s.top), i);
  }
  batches->assign(n_, 0);
  std::vector<std::size_t> next(groups_.size(), 0);  // next unassigned rank of each group
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto& ranks = groups_[buckets[i].group].ranks;
    for (int j = 0; j < buckets[i].count; ++j)
      (*batches)[ranks[next[buckets[i].group]++]] = j < st[i].at_top ? st[i].top : st[i].top - 1;
  }
}

double Solver::best_time(std::size_t gi, int b) {
  auto [it, fresh] = best_time_.emplace(std::make_pair(gi, b), kInf);
  if (!fresh) return it->second;
  const auto& model = groups_[gi].model;
  double best = kInf;
  for (int m = 1; m <= model.max_micro_batch(); ++m)
    if (model.allows(b, m)) best = std::min(best, optimal_compute_time(model, b, m));
  it->second = best;
  return best;
}

std::vector<Level> Solver::levels(const GroupAtTau& g, double sigma, std::size_t limit) {
  std::vector<Level> out;
  const double top = sigma * groups_[g.group].weight;
  auto gain = [&](int b) { return std::min(top, room(g, b)); };
  for (int b = 1; b <= g.cap;) {
    if (out.size() == limit) return {};
    const double v = gain(b);
    // The largest batch whose gain is still v (gain is nonincreasing): gallop, then bisect,
    // so unit-wide levels (activations kept per sample) cost a step or two each.
    int lo = b, hi = g.cap;
    for (int width = 1; lo < hi; width *= 2) {
      const int probe = static_cast<int>(std::min<long long>(hi, 0LL + lo + width));
      if (gain(probe) < v) {
        hi = probe - 1;
        break;
      }
      lo = probe;
    }
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (gain(mid) >= v)
        lo = mid;
      else
        hi = mid - 1;
    }
    out.push_back({b, lo, v});
    b = lo + 1;
  }
  return out;
}

// An item kind of a covering knapsack: each unit adds `samples` and loses `loss`, at most
// `limit` units; `units` is the solution's.
struct CoverItem {
  std::size_t group = 0;
  std::size_t level = 0;
  long long samples = 0;
  double loss = 0;
  long long limit = 0;
  long long units = 0;
};

// The least loss that adds at least `need` samples (`need` ≥ 1), or +inf; fills the units.
// A bounded knapsack over samples still needed, capped at `need` (covering more is as good),
// with a sliding-window minimum per residue of each kind's sample count: O(kinds × need).
double least_cover_loss(std::vector<CoverItem>& items, long long need) {
  const auto width = static_cast<std::size_t>(need) + 1;
  std::vector<double> dp(width, kInf), next(width);
  dp[0] = 0;
  std::vector<std::vector<long long>> took(items.size(), std::vector<long long>(width, 0));
  std::vector<std::pair<long long, double>> window;  // (position q on the residue chain, value)
  for (std::size_t ii = 0; ii < items.size(); ++ii) {
    const long long d = items[ii].samples, c = items[ii].limit;
    const double loss = items[ii].loss;
    auto& t = took[ii];
    for (long long r = 0; r < std::min(d, need + 1); ++r) {
      // x = r + q·d: j ≤ min(c, q) units give dp[x − j·d] + j·δ; with r > 0 also j = q + 1,
      // which covers all of x from this kind (dp[0] = 0).
      window.clear();
      std::size_t head = 0;
      for (long long q = 0, x = r; x <= need; ++q, x += d) {
        const double v = dp[static_cast<std::size_t>(x)] - static_cast<double>(q) * loss;
        while (window.size() > head && window.back().second >= v) window.pop_back();
        window.emplace_back(q, v);
        while (window[head].first < q - c) ++head;
        double best = window[head].second + static_cast<double>(q) * loss;
        long long j = q - window[head].first;
        if (r > 0 && q + 1 <= c && static_cast<double>(q + 1) * loss < best) {
          best = static_cast<double>(q + 1) * loss;
          j = q + 1;
        }
        next[static_cast<std::size_t>(x)] = best;
        t[static_cast<std::size_t>(x)] = j;
      }
    }
    dp.swap(next);
  }
  long long x = need;
  for (std::size_t ii = items.size(); ii-- > 0;) {
    items[ii].units = took[ii][static_cast<std::size_t>(x)];
    x = std::max<long long>(0, x - items[ii].units * items[ii].samples);
  }
  return dp[width - 1];
}

bool Solver::balanced_greedy(const std::vector<GroupAtTau>& at, double sigma,
                             std::vector<int>* batches) {
  // A certificate, not a test: every rank at 1, then each further sample to the class whose
  // next sample loses the least gain, the ranks of a class kept within one sample of each
  // other (`raised` of them at base + 1). Exact where gains are concave in the batch; where
  // they jump (a new configuration), a yes is still a real assignment.
  struct State {
    int base = 1;
    long long raised = 0;
  };
  std::vector<State> st(groups_.size());
  auto gain = [&](std::size_t gi, int b) {
    return std::min(sigma * groups_[gi].weight, room(at[gi], b));
  };
  long long left = static_cast<long long>(batch_) - n_;
  while (left > 0) {
    std::size_t best = groups_.size();
    double least = kInf;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      if (st[gi].base + 1 > at[gi].cap) continue;
      const double loss = gain(gi, st[gi].base) - gain(gi, st[gi].base + 1);
      if (loss < least) {
        least = loss;
        best = gi;
      }
    }
    if (best == groups_.size()) return false;
    const auto count = static_cast<long long>(groups_[best].ranks.size());
    const long long move = std::min(left, count - st[best].raised);
    st[best].raised += move;
    left -= move;
    if (st[best].raised == count) {
      ++st[best].base;
      st[best].raised = 0;
    }
  }
  double total = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto count = static_cast<long long>(groups_[gi].ranks.size());
    total += static_cast<double>(count - st[gi].raised) * gain(gi, st[gi].base);
    if (st[gi].raised > 0) total += static_cast<double>(st[gi].raised) * gain(gi, st[gi].base + 1);
  }
  if (!(total >= 1 - kCoverTolerance)) return false;
  if (batches) {
    std::vector<Bucket> buckets;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      const auto count = static_cast<int>(groups_[gi].ranks.size());
      const int raised = static_cast<int>(st[gi].raised);
      if (raised > 0) buckets.push_back({gi, raised, st[gi].base + 1, st[gi].base + 1});
      if (count > raised) buckets.push_back({gi, count - raised, st[gi].base, st[gi].base});
    }
    assign_batches(buckets, batches);
  }
  return true;
}

Solver::Verdict Solver::feasible_by_levels(const std::vector<GroupAtTau>& at, double sigma,
                                           std::vector<int>* batches) {
  // A rank's gain min(σ·w, R(b)) is a step function of its batch: a few levels (one per
  // leanest configuration within τ under host offload, where a_i = 0), each a run of batches
  // lo..hi that all gain the same. So a rank only chooses its level, and a class of c alike
  // ranks only how many of them sit at each level. A choice of levels is feasible iff its
  // tops hold B samples (Σ hi ≥ B; were the bottoms then above B, moving a rank one level down
  // would keep Σ hi ≥ B and gain, so a best choice has Σ lo ≤ B) and its gains sum to 1.
  // Every rank starts at level 1 (the largest gain); what the tops still miss, D, is covered
  // at the least loss of gain, a covering knapsack with few item kinds of multiplicity c,
  // relaxed two ways, each exact when it says no:
  //  * steps: y_k ranks at level k or above (c = y_1 ≥ … ≥ y_K), a unit of y_k adds
  //    hi_k − hi_{k−1} samples and loses gain_{k−1} − gain_k; the chain y_k ≥ y_{k+1} dropped;
  //  * jumps: a unit of level k adds hi_k − hi_1 and loses gain_1 − gain_k, up to c units per
  //    level; the bound Σ_k units ≤ c dropped.
  // A solution of either that keeps what was dropped is a real one. When neither decides
  // (Unknown, or too many levels for the tables) the per-rank knapsack does.
  constexpr std::size_t kMaxLevels = 1 << 16;
  constexpr double kMaxTable = 1 << 25;  // entries of a relaxation's choice table
  std::vector<std::vector<Level>> lv(groups_.size());
  double base_gain = 0;
  long long base_cover = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    lv[gi] = levels(at[gi], sigma, kMaxLevels);
    if (lv[gi].empty()) return Verdict::Unknown;
    const auto count = static_cast<long long>(groups_[gi].ranks.size());
    base_gain += static_cast<double>(count) * lv[gi].front().gain;
    base_cover += count * lv[gi].front().hi;
  }
  const long long need = static_cast<long long>(batch_) - base_cover;  // D
  const double budget = base_gain - (1 - kCoverTolerance);
  if (budget < 0) return Verdict::Infeasible;  // every rank at its largest gain falls short

  // Ranks per (group, level) → whether it is a real assignment (Unknown where a dropped
  // bound is broken) and then whether its gain, summed over the ranks, reaches 1 (the batches
  // filled when asked). The bottoms are first brought to ≤ B.
  auto judge = [&](std::vector<std::vector<long long>> at_level) {
    long long bottoms = 0, tops = 0;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      for (std::size_t k = 0; k < lv[gi].size(); ++k) {
        if (at_level[gi][k] < 0) return Verdict::Unknown;
        bottoms += at_level[gi][k] * lv[gi][k].lo;
        tops += at_level[gi][k] * lv[gi][k].hi;
      }
    if (tops < batch_) return Verdict::Unknown;
    for (std::size_t gi = 0; gi < groups_.size() && bottoms > batch_; ++gi)
      for (std::size_t k = lv[gi].size() - 1; k >= 1 && bottoms > batch_; --k) {
        const long long drop = lv[gi][k].lo - lv[gi][k - 1].lo;
        const long long move = std::min(at_level[gi][k], (bottoms - batch_ + drop - 1) / drop);
        at_level[gi][k] -= move;
        at_level[gi][k - 1] += move;
        bottoms -= move * drop;
      }
    double gain = 0;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      for (std::size_t k = 0; k < lv[gi].size(); ++k)
        gain += static_cast<double>(at_level[gi][k]) * lv[gi][k].gain;
    if (!(gain >= 1 - kCoverTolerance)) return Verdict::Infeasible;
    if (batches) {
      std::vector<Bucket> buckets;
      for (std::size_t gi = 0; gi < groups_.size(); ++gi)
        for (std::size_t k = 0; k < lv[gi].size(); ++k)
          if (at_level[gi][k] > 0)
            buckets.push_back({gi, static_cast<int>(at_level[gi][k]), lv[gi][k].lo, lv[gi][k].hi});
      assign_batches(buckets, batches);
    }
    return Verdict::Feasible;
  };
  auto everyone_at_level_one = [&]() {
    std::vector<std::vector<long long>> at_level(groups_.size());
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      at_level[gi].assign(lv[gi].size(), 0);
      at_level[gi][0] = static_cast<long long>(groups_[gi].ranks.size());
    }
    return at_level;
  };
  if (need <= 0) return judge(everyone_at_level_one());

  std::vector<CoverItem> steps, jumps;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto count = static_cast<long long>(groups_[gi].ranks.size());
    for (std::size_t k = 1; k < lv[gi].size(); ++k) {
      steps.push_back(
          {gi, k, lv[gi][k].hi - lv[gi][k - 1].hi, lv[gi][k - 1].gain - lv[gi][k].gain, count, 0});
      jumps.push_back(
          {gi, k, lv[gi][k].hi - lv[gi][0].hi, lv[gi][0].gain - lv[gi][k].gain, count, 0});
    }
  }
  auto from_steps = [&]() {
    auto at_level = everyone_at_level_one();
    std::vector<std::vector<long long>> reach(groups_.size());  // y_k
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      reach[gi].assign(lv[gi].size() + 1, 0);
      reach[gi][0] = at_level[gi][0];
    }
    for (const auto& s : steps) reach[s.group][s.level] = s.units;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      for (std::size_t k = 0; k < lv[gi].size(); ++k)
        at_level[gi][k] = reach[gi][k] - reach[gi][k + 1];  // < 0 where the chain breaks
    return at_level;
  };
  auto from_jumps = [&]() {
    auto at_level = everyone_at_level_one();
    for (const auto& j : jumps) {
      at_level[j.group][j.level] = j.units;
      at_level[j.group][0] -= j.units;  // < 0 where more than c ranks jumped
    }
    return at_level;
  };
  // The LP of the step relaxation (steps by loss per sample, the last one fractional) bounds
  // the loss from below, and its rounding up is a first candidate.
  std::vector<std::size_t> order(steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return steps[a].loss * static_cast<double>(steps[b].samples) <
           steps[b].loss * static_cast<double>(steps[a].samples);
  });
  double lp_loss = 0;
  long long left = need;
  for (std::size_t i : order) {
    if (left <= 0) break;
    auto& s = steps[i];
    s.units = std::min(s.limit, (left + s.samples - 1) / s.samples);
    const long long whole = std::min(s.units, left / s.samples);
    lp_loss += s.loss * static_cast<double>(whole);
    if (s.units > whole)
      lp_loss +=
          s.loss * static_cast<double>(left - whole * s.samples) / static_cast<double>(s.samples);
    left -= s.units * s.samples;
  }
  if (left > 0) return Verdict::Infeasible;  // the caps cannot hold B
  // Beyond rounding of the sums (the exact decision is the judged sum over ranks below).
  auto short_of = [&](double loss) { return loss > budget + 1e-12 * base_gain; };
  if (short_of(lp_loss)) return Verdict::Infeasible;
  if (judge(from_steps()) == Verdict::Feasible) return Verdict::Feasible;  // a heuristic: yes only
  const auto width = static_cast<double>(need) + 1;
  if (width * static_cast<double>(steps.size()) > kMaxTable) return Verdict::Unknown;
  ++class_runs_;
  // An optimum of a relaxation that is a real assignment is an optimum of the problem, so its
  // judged gain decides either way.
  const double step_loss = least_cover_loss(steps, need);
  if (const Verdict v = judge(from_steps()); v != Verdict::Unknown) return v;
  if (short_of(step_loss)) return Verdict::Infeasible;
  const double jump_loss = least_cover_loss(jumps, need);
  if (const Verdict v = judge(from_jumps()); v != Verdict::Unknown) return v;
  if (short_of(jump_loss)) return Verdict::Infeasible;
  return Verdict::Unknown;
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
      // Only reachable through rounding: of the shares (take the leanest configuration in
      // time), or of a time a hair above τ (the phase-weighted K = t − F is a difference, so a
      // flat table's times need not grow with the batch in the last bit: take the fastest).
      for (int m = 1; m <= model.max_micro_batch(); ++m)
        if (model.allows(c.batch, m) && optimal_compute_time(model, c.batch, m) <= tau &&
            (c.micro_batch == 0 || model.working_bytes[m] < model.working_bytes[c.micro_batch]))
          c.micro_batch = std::min(m, c.batch);
      if (c.micro_batch == 0) {
        double fastest = kInf;
        for (int m = 1; m <= model.max_micro_batch(); ++m)
          if (model.allows(c.batch, m) && optimal_compute_time(model, c.batch, m) < fastest) {
            fastest = optimal_compute_time(model, c.batch, m);
            c.micro_batch = std::min(m, c.batch);
          }
      }
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
  best.class_knapsack_runs = class_runs_;
  best.undecided_checks = undecided_;
  return best;
}

}  // namespace

bool optimal_feasible(const OptimalProblem& problem, double tau, double sigma,
                      std::vector<int>* batches) {
  Solver solver(problem);
  return solver.feasible(tau, sigma, batches);
}

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

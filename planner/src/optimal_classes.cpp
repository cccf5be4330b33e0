// The `optimal` solver's feasibility per class of alike ranks (optimal_solver_impl.hpp): a
// greedy certificate, the levels of a class's gain and the covering-knapsack relaxations over
// them, and the batches of a class assignment. Where none decides, the per-rank knapsack in
// optimal_solver.cpp does.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "optimal_solver_impl.hpp"

namespace cephalo::planner::detail {

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

namespace {

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

}  // namespace

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

}  // namespace cephalo::planner::detail

#include "split_search_bound.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace cephalo::planner::split_detail {

double pipeline_floor(std::span<const double> step, int m, int virtual_stages, int layers) {
  const std::size_t p = step.size();
  if (p == 0) return 0;
  const double V = virtual_stages;
  const int least_layers = virtual_stages;  // every chunk holds at least one layer
  const int free_layers = layers - static_cast<int>(p) * least_layers;
  if (free_layers < 0) return std::numeric_limits<double>::infinity();
  // For weights λ_s >= 0 summing to 1 the largest sum is at least Σ_s λ_s · (sum s) = Σ_j l_j·a_j
  // with a_j = step[j]·(m·λ_j + Λ_{>j} / V), and that is at least its least over the boundary
  // placements: every stage at its least_layers, the free layers on the smallest a_j.
  const auto bound_for = [&](const std::vector<double>& lambda) {
    double after = 0, sum = 0, smallest = std::numeric_limits<double>::infinity();
    for (std::size_t j = p; j-- > 0;) {
      const double a = step[j] * (m * lambda[j] + after / V);
      after += lambda[j];
      sum += a * least_layers;
      smallest = std::min(smallest, a);
    }
    return sum + free_layers * smallest;
  };
  // The busy sums balanced (λ_s ∝ 1 / step[s]), the last stage's sum alone, and mixes of the two.
  std::vector<double> balanced(p), last(p, 0.0), lambda(p);
  double total = 0;
  for (std::size_t s = 0; s < p; ++s) total += step[s] > 0 ? 1 / step[s] : 0;
  if (total <= 0) return 0;
  for (std::size_t s = 0; s < p; ++s) balanced[s] = step[s] > 0 ? 1 / step[s] / total : 0;
  last.back() = 1;
  double best = 0;
  for (double t : {0.0, 0.25, 0.5, 0.75, 0.9, 1.0}) {
    for (std::size_t s = 0; s < p; ++s) lambda[s] = (1 - t) * balanced[s] + t * last[s];
    best = std::max(best, bound_for(lambda));
  }
  // Every stage holds at least its least layers, after the chunks before it.
  double before = 0;
  for (std::size_t s = 0; s < p; ++s) {
    best = std::max(best, m * step[s] * least_layers + before);
    before += step[s] * least_layers / V;
  }
  return best;
}

double busy_floor(std::span<const double> step, std::span<const int> count, int m, int layers) {
  double rate = 0, one_layer = 0;
  for (std::size_t s = 0; s < step.size(); ++s) {
    if (count[s] <= 0) continue;
    one_layer = std::max(one_layer, m * step[s]);
    rate += step[s] > 0 ? count[s] / (m * step[s]) : std::numeric_limits<double>::infinity();
  }
  return std::max(one_layer, rate > 0 ? layers / rate : 0);
}

}  // namespace cephalo::planner::split_detail

#pragma once
// Shared by the `optimal` solver and its brute-force reference (internal).
#include <limits>
#include <vector>

#include "optimal_solver.hpp"

namespace cephalo::planner::detail {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kCoverTolerance = 1e-12;  // Σ shares ≥ 1 up to rounding

// The model takes c_i and w_i nondecreasing in m (running maximum of the given tables).
OptimalRankModel normalised(const OptimalRankModel& r);

// Per rank O_f / O_i (O_f the fastest device's optimizer step): the share a rank may hold per
// unit of the optimizer budget λ. All 1 when every device steps equally fast (then λ = σ).
std::vector<double> optimizer_weights(const OptimalProblem& p);

// Ranks with identical (normalised) models and optimizer weights are solved once; a group is
// a model and its ranks, groups in order of their first rank.
struct Group {
  OptimalRankModel model;
  std::vector<int> ranks;
  double weight = 1;  // O_f / O_i: share cap per unit of the optimizer budget λ
};
std::vector<Group> group_ranks(const OptimalProblem& p);

}  // namespace cephalo::planner::detail

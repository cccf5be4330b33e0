#pragma once
// How a pipeline stage's micro-batch and state are divided among its data-parallel replicas
// when they differ in speed or memory (planner/README.md, "3D plans: stages that mix GPU
// types"). A pure function: the estimate (split_estimate.cpp) supplies the times and the caps;
// the shares are optimal_solver.hpp's water_fill_shares.
#include <cstddef>
#include <functional>
#include <vector>

namespace cephalo::planner {

// Deals `total` samples to replicas, each at least one and at most caps[j], minimising the
// largest time(j, b_j) (time nondecreasing in b). Greedy: every replica starts at one sample and
// each further sample goes to the replica whose time with it is the smallest (ties: the lowest
// index). For nondecreasing times this is exact for the bottleneck: after each step the largest
// time is the smallest any allocation of that many samples reaches. Empty when the caps cannot
// hold `total` (or a cap is below one, or total < replicas).
// `alike`: every replica has the same time function (the caller knows it: one GPU type); with
// equal caps too the deal is worked out level by level, O(levels) calls of `time` instead of one
// per replica and sample, and equals the greedy's (while the times are nondecreasing in b; where
// they are not, the greedy itself runs).
std::vector<int> balance_samples(int total, const std::vector<int>& caps,
                                 const std::function<double(std::size_t, int)>& time,
                                 bool alike = false);

}  // namespace cephalo::planner

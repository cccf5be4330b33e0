#pragma once
// Lower bounds on the iteration of whole families of splits, before any of them is priced:
// internal to the planner (split_search.cpp prunes with them). A family is a stage layout
// (which ranks serve each stage, in pipeline order, with their T) at one micro-batch count and
// schedule, over every placement of the layer boundaries. The bounds read only floors of what
// estimate_split prices (SplitEstimator::layer_step_floor), so no split of a family is priced
// below its bound: pruning the families whose bound is no better than a split already priced
// leaves the search's best unchanged.
#include <span>

namespace cephalo::planner::split_detail {

// `step[s]`: a floor on one micro-batch's forward + backward through one layer on stage s;
// `tail[s]`: on the DP tail (collectives and optimizer step) one layer adds after its last
// backward. Whatever the boundaries (stage s holds l_s >= V layers, Σ l_s = layers):
//  - stage s runs its m·step[s]·l_s of steps one after another (its busy time) and then its
//    tail: B_s = (m·step[s] + tail[s])·l_s;
//  - it cannot start before micro-batch 0's forward has passed chunk 0 of every stage before
//    it, and stage 0 cannot end before the last micro-batch's backward of chunk 0 has passed
//    back from s, nor finish before its own tail after that:
//    A_s = m·step[s]·l_s + Σ_{j<s} step[j]·l_j / V + tail[0]·l_0.
// The iteration is at least the largest of these; the bound is the least that largest can be
// over every boundary placement, from below (weighted averages of the sums).
double pipeline_floor(std::span<const double> step, std::span<const double> tail, int m,
                      int virtual_stages, int layers);

// The B sums alone, with stage s's floor per layer and micro-batch `step[s]` (its tail over m
// included) shared by `count[s]` identical stages (the order of the stages does not enter): at
// least layers / Σ count[s] / (m·step[s]) and at least one layer's m·step[s] on every stage.
double busy_floor(std::span<const double> step, std::span<const int> count, int m, int layers);

}  // namespace cephalo::planner::split_detail

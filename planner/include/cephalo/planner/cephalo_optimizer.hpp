#pragma once
// A faithful reimplementation of the optimizer published with Cephalo (Guo et al., ICS'25;
// `split_batch_dp_ga` and `split_parameters_*` of the authors' MIT-licensed code), kept for
// comparison and ablation. It works on its own small input structs so it can be tested without
// the cost models; `strategies.hpp` binds it to a Scenario and the shipped profile tables.
//
// Model (times in ms per transformer layer, memory in GB = 2^30 bytes, as published):
//   for GPU i running n micro-batches of size m,
//     T_i = max(A', n·F(m)) + max(A' + R', n·(F(m) + B(m)) + (n − 1)·ga_overhead)
//   with A' = 1.25·A, R' = 1.25·R when m exceeds the largest micro-batch that fits next to an
//   even share of the training state (16 B/param), else A' = A, R' = R.
//   Memory of a GPU = compute_memory(⌈b/n⌉) + comm_reserve; the plan must satisfy
//   Σ_i memory_i + 16 B·params < usable_fraction · Σ_i capacity_i (the total, not per GPU).
// A dynamic program over (GPU, samples assigned, sum of micro-batch sizes) minimises max_i T_i;
// the plan with the best throughput under the total-memory cap wins. State shares are then
// split with `min_params` or `min_util`.
//
// Differences from the original, all deliberate:
//   * when no candidate satisfies the memory cap the original returns an over-capacity plan;
//     we throw InfeasibleError with the shortfall;
//   * `min_params` throws InfeasibleError when the deficit cannot be absorbed (the original
//     returns shares that still do not fit).
// Kept as published (documented in planner/README.md): the share split evaluates each GPU's
// memory with ⌊batch / micro-batch count⌋ micro-batches, i.e. it passes the micro-batch *count*
// where the published function expects the micro-batch *size*. This is what makes the
// published GPT-2.7B example come out with equal shares; `published_share_memory = false`
// evaluates the real micro-batch size instead.
#include <string>
#include <vector>

namespace cephalo::planner {

// One GPU as the published optimizer sees it.
struct CephaloGpu {
  std::string name;        // profile name ("l4", "a6000", ...)
  double capacity_gb = 0;  // the optimizer's GPU_MEMORY entry
  // Linear fits of per-layer time (ms) vs micro-batch size: slope, intercept.
  double forward_slope = 0, forward_intercept = 0;
  double backward_slope = 0, backward_intercept = 0;
  // Measured per-layer times (ms) for micro-batch 1..k; used where present, else the fit.
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;

  double forward(int micro_batch) const;
  double backward(int micro_batch) const;
};

enum class ShareObjective { MinParams, MinUtil, Even };
std::string to_string(ShareObjective objective);

struct CephaloInputs {
  std::vector<CephaloGpu> gpus;
  // Profiled compute memory (GB) for micro-batch 1..k; extrapolated linearly beyond (slope of
  // the last up-to-5 points, as published).
  std::vector<double> compute_memory_gb;
  double parameters = 0;  // model parameters (the memory profile's count)
  int global_batch = 0;
  double all_gather_ms = 0;      // A, per layer (published default 0)
  double reduce_scatter_ms = 0;  // R, per layer (published default 0)
};

struct CephaloOptions {
  double bytes_per_parameter = 16;  // fp32 params + grads + Adam m, v
  double comm_reserve_gb = 2;       // "comm_mem_overhead"
  double usable_fraction = 0.75;    // "max_alloc_frac"
  double ga_overhead_ms = 10;       // per extra micro-batch in backward
  int max_micro_batch = 10000;
  ShareObjective share_objective = ShareObjective::MinParams;
  double max_balance_util = 0.5;       // min_util: below this even shares are kept
  bool published_share_memory = true;  // see the header comment
};

struct CephaloSolution {
  std::vector<int> batch;          // samples per GPU
  std::vector<int> micro_batch;    // micro-batch size per GPU
  std::vector<int> micro_batches;  // micro-batch count per GPU
  std::vector<double> shares;      // state share per GPU, Σ = 1
  std::vector<double> layer_ms;    // T_i per GPU (ms per layer)
  double iteration_layer_ms = 0;   // max_i T_i
  double memory_gb = 0;            // Σ_i memory_i + training state (the checked total)
  double memory_cap_gb = 0;        // usable_fraction · Σ capacity
  std::vector<int> max_micro_batch_even_share;  // per GPU ("max_batch_sizes_es")
  std::vector<int> max_micro_batch_no_state;    // per GPU ("max_batch_sizes")
};

// The published per-GPU capacities in GB (a6000 47.99, l4 22.5, ...); -1 when unknown.
double cephalo_published_capacity_gb(const std::string& gpu);

// Compute memory (GB) of a micro-batch of `micro_batch` samples, plus the reserve.
double cephalo_memory_gb(const std::vector<double>& compute_memory_gb, int micro_batch,
                         double comm_reserve_gb);

// Runs the DP and the share split. Throws InfeasibleError (with the shortfall in bytes) when
// nothing fits, ValidationError-free: inputs are assumed checked by the caller.
CephaloSolution solve_cephalo(const CephaloInputs& inputs, const CephaloOptions& options = {});

// The share splits on their own (parameters assigned per GPU, normalised to shares).
std::vector<double> cephalo_split_min_params(const CephaloInputs& inputs,
                                             const CephaloOptions& options,
                                             const std::vector<double>& base_memory_gb);
std::vector<double> cephalo_split_min_util(const CephaloInputs& inputs,
                                           const CephaloOptions& options,
                                           const std::vector<double>& base_memory_gb);

}  // namespace cephalo::planner

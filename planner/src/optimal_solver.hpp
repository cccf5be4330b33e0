#pragma once
// The `optimal` strategy's solver, on its own input structs (bound to a Scenario in
// strategies.cpp). It is exact for the following model (tests check it against brute force)
// wherever a solution reports undecided_checks == 0 (see the feasibility paragraph below).
//
// Decision: per rank i a batch b_i ≥ 1 (Σ b_i = B), a micro-batch size m_i (n_i = ⌈b_i/m_i⌉
// micro-batches, the last one smaller when m_i does not divide b_i) and a state share s_i ≥ 0
// (Σ s_i = 1).
// Time: compute of rank i is
//     t_i = (n_i − 1)·(c_i(m_i) + g_i) + c_i(b_i − (n_i − 1)·m_i)
// where c_i(m) is the time of one micro-batch of m samples through every unit (embedding,
// layers, head; forward, recompute, backward) and g_i a per-extra-micro-batch overhead. c_i is
// taken nondecreasing in m (a measured dip is flattened), so t_i grows with b_i.
// Communication overlaps compute (prefetch); with σ = max_i s_i the iteration takes
//     T = max(C(σ), max_i t_i) + O·σ
// C(σ): every collective of the iteration with shards padded to the largest share (the even
// collective when σ = 1/n; an upper bound of the grouped variant); nondecreasing in σ.
// O: the optimizer step, which every rank starts when the last reduce-scatter completes (the
// same instant on all ranks), so the iteration ends with the slowest of them:
//     O = O_0 + max_i O_i·s_i
// with O_i the step over the whole state on rank i's device and O_0 the per-step launch cost
// (what the simulator times: each rank's step over its own shard). So the objective is
//     T = max(C(σ), max_i t_i) + O_0 + max_i O_i·s_i.
// The solver's share parameter is λ, the optimizer budget in units of the fastest device's
// O_f: rank i may hold s_i ≤ min(λ·O_f/O_i, R_i) (with one O for all, λ = σ, the largest
// share). For fixed batches the smallest λ whose caps cover 1 minimises the optimizer term;
// the shares are then the weighted water-fill s_i = min(λ·O_f/O_i, R_i), and C is evaluated at
// their largest share. (Exact whenever C does not bind; when communication binds, a plan with
// a larger λ but a smaller largest share could be faster, and the walk does not look for it.)
// Memory of rank i: fixed_i + w_i(m_i) + a_i·b_i + s_i·S ≤ U_i, w_i nondecreasing (kept
// boundary activations a_i per sample; a_i = 0 with host offload).
//
// Algorithm: τ (the compute bound) only matters through the set of configurations with
// t ≤ τ, σ only through the share caps; feasibility of (τ, σ) is monotone in both. For a
// given σ the smallest feasible τ and for a given τ the smallest feasible σ are found by
// bisection on the bit patterns of doubles (so the result is an exact breakpoint, not an
// approximation). Walking the staircase of (τ, σ) breakpoints from the fastest τ towards even
// shares, with a lower bound to stop early, visits every candidate optimum.
// Feasibility of (τ, σ): with R_i(b) the largest share room of rank i at batch b among its
// configurations within τ (nonincreasing in b) and c_i the largest batch with R_i ≥ 0, a
// solution exists iff some Σ b_i = B, 1 ≤ b_i ≤ c_i has Σ min(σ, R_i(b_i)) ≥ 1. Quick
// sufficient test: every rank at c_i; quick necessary test: every rank at 1 and Σ c_i ≥ B.
// Otherwise per class of alike ranks: a balanced greedy (a certificate), then the levels of
// a rank's gain min(σ, R_i(b)), a step function of b (a few levels under host offload), so a
// class only chooses how many ranks sit at each level: a covering knapsack over samples with
// few item kinds, relaxed (planner/README.md). Where neither decides, an exact knapsack DP
// over (rank, samples) of at most 4·10⁸ cells; past that the point counts as infeasible and
// as an undecided check.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace cephalo::planner {

struct OptimalRankModel {
  std::string name;                       // for messages ("rank 3 (L4)")
  std::vector<double> micro_batch_time;   // [m] seconds for m = 0..M (index 0 unused)
  double extra_micro_batch_overhead = 0;  // g_i, seconds
  std::vector<double> working_bytes;      // [m] bytes for m = 0..M (index 0 unused)
  double fixed_bytes = 0;                 // reserves, gathered units, gradient buffers
  double bytes_per_sample = 0;            // a_i: kept boundary activations per sample
  double usable_bytes = 0;                // U_i
  // Optional phase split: forward_time[m] is the forward part f_i(m) of micro_batch_time[m]
  // (the rest k_i(m) = c_i(m) − f_i(m) is recompute, backward and g_i). With a phase weight
  // ρ ∈ (0, 1) and the table given, a configuration's time is max(F/ρ, K/(1 − ρ)) for its
  // forward and backward totals F and K (composed like t_i); ρ = 0 (default): t_i.
  std::vector<double> forward_time;  // [m] seconds, empty or the size of micro_batch_time
  double phase_weight = 0;           // ρ
  // O_i: the optimizer step over the whole state on this device, without the per-step launch
  // cost (OptimalProblem::optimizer_fixed_seconds). < 0: OptimalProblem::optimizer_seconds.
  double optimizer_seconds = -1;
  // > 0: the micro-batch size is fixed (`--micro-batch`): a rank with batch b runs micro-batches
  // of min(fixed, b) samples, the only configuration the model then allows at that batch.
  int fixed_micro_batch = 0;
  int max_micro_batch() const { return static_cast<int>(micro_batch_time.size()) - 1; }
  // Whether configuration (batch, micro-batch m) is one the model may choose.
  bool allows(int batch, int m) const {
    return fixed_micro_batch <= 0 || m == std::min(fixed_micro_batch, batch);
  }
};

// How the solver decides feasibility of (τ, σ) when the quick tests do not: per class of
// alike ranks where that decides (the default), or only by the per-rank knapsack (the
// reference the per-class decision is tested against; O(ranks × batch × cap)).
enum class OptimalFeasibility { Classes, RankKnapsack };

struct OptimalProblem {
  // One model per rank; or, with rank_class given, one per class of identical ranks and
  // rank_class[i] the model of rank i (a 100k-GPU cluster of a few device types then holds a
  // few tables, not 100k).
  std::vector<OptimalRankModel> ranks;
  std::vector<int> rank_class;
  int num_ranks() const {
    return static_cast<int>(rank_class.empty() ? ranks.size() : rank_class.size());
  }
  int class_of(int rank) const {
    return rank_class.empty() ? rank : rank_class[static_cast<std::size_t>(rank)];
  }
  const OptimalRankModel& model_of(int rank) const {
    return ranks[static_cast<std::size_t>(class_of(rank))];
  }
  int global_batch = 0;
  double state_bytes = 0;              // S: the whole sharded training state
  double optimizer_seconds = 0;        // O_i of the models that give none (see OptimalRankModel)
  double optimizer_fixed_seconds = 0;  // O_0: the step's launch cost, on every rank
  // C(σ) in seconds; must be nondecreasing in σ ∈ [1/n, 1]. Empty: no communication.
  std::function<double(double)> comm_seconds;
  OptimalFeasibility feasibility = OptimalFeasibility::Classes;
};

struct OptimalRankChoice {
  int batch = 0;
  int micro_batch = 0;
  int micro_batches = 0;
  double share = 0;
  double compute_seconds = 0;  // t_i
  double memory_bytes = 0;     // predicted by the model, with the share
};

struct OptimalSolution {
  std::vector<OptimalRankChoice> ranks;
  double iteration_seconds = 0;  // T
  double compute_seconds = 0;    // τ = max_i t_i
  double comm_seconds = 0;       // C(σ)
  double optimizer_seconds = 0;  // O_0 + max_i O_i·s_i
  double max_share = 0;          // σ
  int feasibility_checks = 0;    // work done (for the benchmark and the README)
  int knapsack_runs = 0;         // per-rank knapsacks (the slow exact fallback)
  int class_knapsack_runs = 0;   // per-class knapsacks over levels
  // Checks neither the per-class tests nor a per-rank knapsack of bounded size decided, taken
  // as infeasible (the plan stays feasible; a breakpoint may sit up to one sample's room of
  // share above the exact one). 0 means the solution is exact.
  int undecided_checks = 0;
};

// Per-rank time for a batch and micro-batch size under the model above.
double optimal_compute_time(const OptimalRankModel& rank, int batch, int micro_batch);
// F of the phase split (0 without a forward table); K = t_i − F with ρ = 0.
double optimal_forward_time(const OptimalRankModel& rank, int batch, int micro_batch);
double optimal_memory(const OptimalRankModel& rank, int batch, int micro_batch, double share,
                      double state_bytes);

// Whether (τ, σ) is feasible as the solver decides it (for tests: with problem.feasibility
// RankKnapsack it is the per-rank reference); fills `batches` per rank when feasible.
bool optimal_feasible(const OptimalProblem& problem, double tau, double sigma,
                      std::vector<int>* batches = nullptr);

// Throws InfeasibleError naming the shortfall when no plan fits.
OptimalSolution solve_optimal(const OptimalProblem& problem);
// The optimum first, then the other (τ, σ) breakpoints of the staircase walk (each the
// model's best plan for its largest share), by model time. Candidates for a caller that ranks
// plans by a finer objective than this model (the simulator's per-phase synchronisation).
std::vector<OptimalSolution> solve_optimal_candidates(const OptimalProblem& problem);

// O_i of rank i (the model's own, else the problem's) and the optimizer term of a share vector.
double optimizer_full_state_seconds(const OptimalProblem& problem, int rank);
double optimizer_step_seconds(const OptimalProblem& problem, const std::vector<double>& shares);
// Shares s_i = min(λ·weight_i, room_i) for the smallest λ with Σ s_i = 1 (weights in (0, 1]);
// with all weights 1 exactly water_fill_shares. When Σ room < 1 (within rounding of a
// feasibility test) the rooms scaled to sum to 1, like water_fill_shares; empty when Σ room ≤ 0.
std::vector<double> weighted_water_fill_shares(const std::vector<double>& rooms,
                                               const std::vector<double>& weights);

// Exhaustive reference for tests: every (b, m) assignment, shares water-filled. Exponential.
OptimalSolution solve_optimal_brute_force(const OptimalProblem& problem);

// Water-fill: the smallest σ with Σ min(σ, room_i) ≥ 1 (σ ≥ 1/n); +inf when Σ room < 1.
double water_fill_level(const std::vector<double>& rooms);
// Shares s_i = min(room_i, σ) scaled to sum to 1; exactly 1/n each when σ = 1/n is feasible.
std::vector<double> water_fill_shares(const std::vector<double>& rooms);

}  // namespace cephalo::planner

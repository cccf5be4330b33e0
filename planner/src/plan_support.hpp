#pragma once
// What the strategies share (internal to the planner): per-device compute tables, the memory
// model read as the planners need it, the empty plan of a scenario, equal shares, and the one
// place a solver's allocation is written into a plan's ranks.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"
#include "cephalo/planner/plan_result.hpp"
#include "cephalo/planner/strategies.hpp"
#include "optimal_solver.hpp"
#include "run_memo.hpp"

namespace cephalo::planner::detail {

using planner::PlannerOptions;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);

// Compute time of one micro-batch through every unit and phase on one device type, cached by
// micro-batch size (layers are identical, so one layer is evaluated and multiplied by L).
class ComputeTable {
 public:
  // `checkpointing`: which units pay a recompute (Plan::activation_checkpointing, as the
  // TrainingGraph schedules it).
  ComputeTable(const costmodels::ComputeModel& model, const Job& job, const DeviceSpec& spec,
               double slowdown, ActivationCheckpointing checkpointing = {})
      : model_(model), job_(job), spec_(spec), slowdown_(slowdown), checkpointing_(checkpointing) {}

  double micro_batch(int m) {
    ensure(m);
    return total_[m];
  }
  double layer(int m) {
    ensure(m);
    return layer_[m];
  }
  // The forward phase alone of micro_batch(m).
  double forward(int m) {
    ensure(m);
    return forward_[m];
  }

 private:
  double unit(int u, int m, bool forward_only = false, bool recompute = true);
  void ensure(int m);
  const costmodels::ComputeModel& model_;
  const Job& job_;
  const DeviceSpec& spec_;
  double slowdown_;
  ActivationCheckpointing checkpointing_;
  std::vector<double> total_, layer_, forward_;
};

// The scenario's devices and one compute table per (device type, slowdown).
struct ScenarioModel {
  ScenarioModel(const Scenario& s, const costmodels::CostModels& m,
                ActivationCheckpointing checkpointing = {});
  const Scenario* scenario = nullptr;
  const std::vector<RankDevice>& devices;  // the cluster's rank table (built once per cluster)
  std::map<std::pair<std::string, double>, std::unique_ptr<ComputeTable>> tables;
  const costmodels::CostModels* models = nullptr;
  ActivationCheckpointing checkpointing;

  ComputeTable& table(const RankDevice& d);
};

double terms_total(const Job& job, const costmodels::RankMemoryInputs& in);
// The inputs of memory_terms for a rank of the planners' plans (layered, prefetch) on a device
// that runs the GPU runtime or not (costmodels::runs_gpu_runtime: a CPU rank holds no CUDA or
// NCCL reserve and no allocator slack).
costmodels::RankMemoryInputs memory_inputs(bool gpu_runtime, int world_size, Offload offload,
                                           double share, std::vector<int> sizes);
// The same for a plan's schedule (accumulation, checkpointing, offload, prefetch) on `spec`:
// what predict_memory reads for that rank.
costmodels::RankMemoryInputs memory_inputs(const Plan& plan, const DeviceSpec& spec, int world_size,
                                           double share, std::vector<int> sizes);
// `batch` samples as micro-batches of `m` (the last smaller).
std::vector<int> split_batch(int batch, int m);

double usable_bytes(const DeviceSpec& spec);
// What the planners let a plan use: the usable capacity less a small headroom, so a plan at
// the exact edge of the memory model (the optimum often is) does not go over by rounding or
// by the simulator's allocation order.
constexpr double kPlanHeadroomBytes = 128.0 * 1024 * 1024;
double plannable_bytes(const DeviceSpec& spec);

using planner::empty_plan;  // strategies.hpp
// InfeasibleError when the global batch cannot give every device a sample.
void check_batch(const Scenario& s, const std::string& who);
// Equal shares; micro-batch sizes from memory (stock FSDP gradient accumulation) under the
// plan's schedule, or options.micro_batch when the user fixed it; with
// options.choose_checkpointing the least recompute that fits every rank at some micro-batch
// (none, else every:k for the largest such k, else full), with each rank's largest micro-batch.
void fill_equal_shares(const Scenario& s, Plan& plan, const std::string& who,
                       const PlannerOptions& options = {});
// State shares of a group by the memory each rank has free after everything but the state:
// equal where the ranks are alike (within 1e-9: even collectives), else in proportion to
// `free`; the last share takes the rounding so they sum to 1 exactly. Both the FSDP plan's
// hybrid groups (sharding_choice.cpp) and a 3D stage's data-parallel replicas
// (split_estimate.cpp) cut shares so.
std::vector<double> shares_by_free_memory(const std::vector<double>& free);
// What `optimal` solves under `--activation-checkpointing auto`, least recompute first: none,
// selective (each layer's attention core), every:k for k = fitting_every (when above 4), 4, 3,
// 2 (periods up to the layer count), full.
std::vector<ActivationCheckpointing> checkpointing_candidates(int num_layers,
                                                              int fitting_every = 0);
ActivationCheckpointing every_k(int k);
// The first rank (rank id) of `plan` (its schedule, batches and shares) over its plannable
// memory at micro-batches of min(micro_batch, batch) (micro_batch 0: 1, the least memory);
// -1 when every rank fits.
int first_rank_over(const Scenario& s, const Plan& plan, int micro_batch);
// The largest period k in [2, L] (below `below` when > 0) with which every rank of `plan` fits
// as first_rank_over checks it (bisection: memory grows with k); 0 when every:2 does not fit.
int largest_fitting_every(const Scenario& s, const Plan& plan, int micro_batch, int below = 0);
// even's batches: B / n each, the remainder to the first ranks.
void set_even_batches(Plan& plan, int global_batch);
// The schedule the user fixed (accumulation, checkpointing) written into a strategy's plan.
void apply_schedule_options(Plan& plan, const PlannerOptions& options);
// After a strategy: the user's fixed micro-batch re-splits every rank's batch, and when the user
// fixed anything a rank over its usable memory is an InfeasibleError stating the rank, the
// positive shortfall in bytes and what would fit. (`auto` checkpointing is each strategy's own
// choice: strategies.hpp.)
void honour_schedule_options(const Scenario& s, Plan& plan, const PlannerOptions& options);

// The one place a solver's allocation is written into plan.ranks (batch, micro-batch size and
// count, state share), rank by rank in the plan's order.
void set_rank(PlanRank& r, int batch, int micro_batch, int micro_batches, double share);
void apply_solution(Plan& plan, const OptimalSolution& solution);
void apply_solution(Plan& plan, const CephaloSolution& solution);

}  // namespace cephalo::planner::detail

#pragma once
// What every strategy returns: the Plan, the planner's options, and the one per-rank
// prediction all strategies are shown with (memory from the memory model, compute from the
// compute model, the iteration from the `optimal` model), so strategies compare on one scale.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"

namespace cephalo::planner {

struct PlannerOptions {
  std::string strategy = "optimal";
  std::string compute_source = "auto";  // costmodels::make_cost_models source
  // optimal / search: "none", "host" or "auto" (solve both, keep the faster)
  std::string offload = "auto";
  // Largest micro-batch the optimal model tabulates (bounds the table-building cost).
  int max_micro_batch = 512;
  // optimal: replay the plan on the simulator and tighten the memory budget of a device type
  // the simulator finds over capacity, then solve again (at most 5 times).
  bool verify_with_simulator = true;
  // cephalo
  ShareObjective cephalo_share = ShareObjective::MinParams;
  bool cephalo_published_share_memory = true;
  std::string cephalo_memory_cluster;  // empty: paper, paper_4gpu, aws-16gpu, ... first found
  // search
  int search_neighbours = 24;  // simulated neighbour plans at most
  bool progress = false;       // progress lines on stderr
  // Schedule choices the user fixes (`cephalo plan --micro-batch --accumulation
  // --activation-checkpointing`); every strategy honours them and optimises the rest.
  int micro_batch = 0;                       // 0: the strategy chooses
  std::optional<Accumulation> accumulation;  // unset: layered
  // Unset: full (the default schedule). choose_checkpointing (`auto`), decided by the strategy
  // jointly with its batches and shares: even / proportional take the least recompute (none,
  // every 2, full) with which every rank fits at its largest micro-batch; optimal solves its
  // model exactly for each and keeps the fastest in simulation (search: the best of its seeds
  // and neighbours); cephalo refuses it (strategies.hpp).
  std::optional<ActivationCheckpointing> activation_checkpointing;
  bool choose_checkpointing = false;
  // How the state is sharded (sharding_choice.hpp): "full", "hybrid" or "auto"; groups of
  // `group_nodes` consecutive nodes (0: hybrid takes 1, auto tries every size).
  std::string sharding = "full";
  int group_nodes = 0;
};

struct RankPrediction {
  int rank = 0;
  std::string gpu;
  double memory_bytes = 0;  // memory model, this plan
  double usable_bytes = 0;
  double compute_s = 0;            // the rank's compute per iteration (all units, all phases)
  double compute_per_layer_s = 0;  // one transformer layer, all micro-batches, fwd+rc+bwd
};

struct PlanResult {
  Plan plan;
  std::vector<RankPrediction> ranks;
  double predicted_iteration_s = 0;  // the optimal model's time of this plan
  double predicted_comm_s = 0;
  double predicted_optimizer_s = 0;
  double planning_s = 0;                        // wall time of the strategy
  std::optional<double> simulated_iteration_s;  // search only
  int simulated_candidates = 0;
  std::string note;   // e.g. the cephalo strategy's profile rows
  bool fits() const;  // every rank within its usable memory
};

// The shared prediction for any plan (used for the table of every strategy).
void predict(const Scenario& scenario, const costmodels::CostModels& models, PlanResult& result);

// Per-rank table and JSON of a result.
std::string render_table(const PlanResult& result);
Json to_json(const PlanResult& result);
// to_json without the "plan" key: the record a Plan carries as its `predicted` field.
Json prediction_json(const PlanResult& result);
// What `cephalo plan --json` prints and `-o` writes: the Plan record whose `predicted` field is
// prediction_json (one valid Plan; the prediction is moved in, not copied through
// Plan::predicted, which at 100k ranks costs more than the planning).
Json plan_record(const PlanResult& result);

}  // namespace cephalo::planner

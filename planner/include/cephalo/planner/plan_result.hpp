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
#include "cephalo/traces/summarize.hpp"

namespace cephalo::planner {

// PlannerOptions::options_source of the CLI: errors then spell options as flags (`--micro-batch`)
// and the CLI exits 2 (a bad command line).
inline constexpr const char* kOptionsFromCommandLine = "command line";
// An option as its source spells it: `--micro-batch` from kOptionsFromCommandLine, `micro_batch`
// (keyword arguments) from any other.
std::string spell_option(const std::string& options_source, std::string name);

struct PlannerOptions {
  // Who gave these options, the ValidationError's source: kOptionsFromCommandLine, or any
  // other label (Python: "arguments"), whose options are spelt as keyword arguments.
  std::string options_source = "arguments";
  // The scenario as the caller named it (its file), for messages; empty: the scenario's name.
  std::string scenario_label;
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
  // --activation-checkpointing --sharding --group-size --offload`); every strategy honours
  // them and optimises the rest. What is left open, `optimal` searches (make_plan sets
  // choose_accumulation, choose_checkpointing and sharding "auto"); the other strategies take
  // layered accumulation, full checkpointing and full sharding.
  int micro_batch = 0;                       // 0: the strategy chooses
  std::optional<Accumulation> accumulation;  // unset: layered, or optimal searches all three
  bool choose_accumulation = false;          // optimal: solve and simulate each accumulation
  // Unset: full (the default schedule). choose_checkpointing (`auto`), decided by the strategy
  // jointly with its batches and shares: even / proportional take the least recompute (none,
  // every 2, full) with which every rank fits at its largest micro-batch; optimal solves its
  // model exactly for each and keeps the fastest in simulation (search: the best of its seeds
  // and neighbours); cephalo refuses it (strategies.hpp).
  std::optional<ActivationCheckpointing> activation_checkpointing;
  bool choose_checkpointing = false;
  // How the state is sharded (sharding_choice.hpp): "full", "hybrid" or "auto"; groups of
  // `group_nodes` consecutive nodes (0: hybrid takes 1, auto tries every size). Empty: left
  // open (optimal: auto; the others: full; with group_nodes given: hybrid).
  std::string sharding;
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
  // make_plan's answer: the simulator's replay of this plan (what `cephalo simulate` of the
  // written plan reports). predict() alone sets the fast model's time here.
  double predicted_iteration_s = 0;
  double model_iteration_s = 0;  // the planner's fast model of this plan (predict)
  // Samples, tokens, MFU and HFU at predicted_iteration_s (traces::throughput: the definitions
  // `cephalo simulate` reports with).
  traces::Throughput rate;
  double predicted_comm_s = 0;  // the fast model's communication and optimizer step
  double predicted_optimizer_s = 0;
  double planning_s = 0;                        // wall time of the strategy
  std::optional<double> simulated_iteration_s;  // make_plan: the replay of the returned plan
  int simulated_candidates = 0;
  // The strategy's search log, e.g. the cephalo strategy's profile rows, optimal's schedules
  // and shardings with their simulated times: `plan --explain` and the record's "note".
  std::string note;
  // The best candidate the strategy did not keep, and why it lost ("standard / full / offload
  // none simulated at 1.31 s, 8% slower"); empty when the strategy compared none.
  std::string runner_up;
  // make_plan: what the prediction should carry (costmodels::prediction_warnings: a dtype a GPU
  // runs on a slower pipeline, a stack fitted on another job), as the simulate record does.
  std::vector<std::string> warnings;
  bool fits() const;                 // every rank within its usable memory
  bool simulated_oom = false;        // the replay of the returned plan ran out of memory
  std::string simulated_oom_detail;  // where ("rank 2, op F u3 mb1 r2, 23.1 GiB > 22.0 GiB")
};

// A runner-up as the summaries print it: "<label> simulated at 1.31 s, 8 % slower" (or "as
// fast; the first found is kept" when it ties the chosen plan's `best_s`).
std::string runner_up_text(const std::string& label, double runner_s, double best_s);

// The shared fast-model prediction for any plan (memory, compute, the optimal model's time;
// sets predicted_iteration_s and model_iteration_s to the model's time).
void predict(const Scenario& scenario, const costmodels::CostModels& models, PlanResult& result);

// The table of a result: one row per run of consecutive ranks with equal rows (their rank
// range), or with `per_rank` one row per rank; and its JSON.
std::string render_table(const PlanResult& result, bool per_rank = false);
// What `cephalo plan` prints without --json: a line naming the scenario (model, sequence, global
// batch, devices, stack), the table and, when the memory model finds a rank over capacity, a
// warning (`fits`: PlanResult::fits). `table` is render_table(result), built by the caller
// only when it prints.
std::string render_plan_text(const Scenario& scenario, const std::string& table, bool fits);
Json to_json(const PlanResult& result);
// to_json without the "plan" key: the record a Plan carries as its `predicted` field. Its
// per-rank predictions are "ranks" (one object per rank) or, for a plan written in the compact
// form, "rank_classes" (one per run of ranks with equal predictions, with their "ranks": [first,
// last]).
Json prediction_json(const PlanResult& result, PlanForm form = PlanForm::Auto);
// What `cephalo plan --json` prints and `-o` writes: the Plan record whose `predicted` field is
// prediction_json (one valid Plan; the prediction is moved in, not copied through
// Plan::predicted, which at 100k ranks costs more than the planning).
// `form` is the file form of the plan's rows (core/plan.hpp; Auto: compact above
// kCompactPlanAbove ranks), which the prediction's rows follow.
Json plan_record(const PlanResult& result, PlanForm form = PlanForm::Auto);

}  // namespace cephalo::planner

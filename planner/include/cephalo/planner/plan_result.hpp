#pragma once
// The one answer of every planner: a PlanResult, whichever family the plan is of. An FSDP
// strategy (strategies.hpp, make_plan), the split search made into a plan (src/split_plan.hpp,
// plan_split) and a whole request (plan_request.hpp, answer_plan) all return it, and every
// front end (`plan`, `sweep`, Python, bench) reads it the same way: the plan, its family, its
// prediction and simulated time, memory, and the notes on what was compared and why it won.
// FSDP plans also carry the one per-rank prediction all strategies are shown with (memory from
// the memory model, compute from the compute model, the iteration from the `optimal` model), so
// strategies compare on one scale; split plans carry the search that chose them.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/planner_options.hpp"
#include "cephalo/planner/split_search.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo::planner {

struct RankPrediction {
  int rank = 0;
  std::string gpu;
  double memory_bytes = 0;  // memory model, this plan
  double usable_bytes = 0;
  double compute_s = 0;            // the rank's compute per iteration (all units, all phases)
  double compute_per_layer_s = 0;  // one transformer layer, all micro-batches, fwd+rc+bwd
};

// The family of a plan: FSDP (a data-parallel plan of per-rank batches and state shares, the
// strategies) or a split (tensor x pipeline x data parallel, the split search). Named "fsdp" and
// "3d" as `plan --parallelism` names them.
enum class PlanFamily { Fsdp, Split };
std::string to_string(PlanFamily family);

// Leaving GPUs out (answer_plan, plan_request.hpp): which nodes the answered plan leaves idle.
struct IdleAdvice {
  std::vector<std::string> nodes;  // the nodes left idle, by name
  std::vector<int> ranks;          // their ranks in the scenario's cluster (every GPU numbered)
  std::vector<int> used_nodes;     // the nodes the plan runs on: its "nodes"
  std::string gpus;                // "16x L4"
  double with_all_s = 0;           // the best plan of every GPU, simulated
  double without_s = 0;            // the answered plan of the other nodes, simulated
  std::string without_plan;        // that plan in words ("the split TP 2 x PP 2 ...")
};

// What only a split plan has: the search that chose it and the simulator's replay.
struct SplitDetail {
  SplitSearchResult search;        // the split chosen (search.split), its estimate and counts
  traces::IterationReport report;  // the simulator's replay of the plan
  // Each finalist's split and simulated time ("...: 7.58 s (out of memory)").
  std::vector<std::string> replays;
};

struct PlanResult {
  Plan plan;
  // Set exactly for a split plan (plan_split); family() reads it.
  std::optional<SplitDetail> split;
  PlanFamily family() const { return split ? PlanFamily::Split : PlanFamily::Fsdp; }
  // FSDP: one per rank, the memory and compute models' prediction. Split: empty (the split's
  // memory is its estimate's per stage, in split->search.estimate).
  std::vector<RankPrediction> ranks;
  // make_plan's and plan_split's answer: the simulator's replay of this plan (what `cephalo
  // simulate` of the written plan reports). predict() alone sets the fast model's time here.
  double predicted_iteration_s = 0;
  // The planner's fast model of this plan: FSDP's (predict), a split's estimate.
  double model_iteration_s = 0;
  // Samples, tokens, MFU and HFU at predicted_iteration_s (traces::throughput: the definitions
  // `cephalo simulate` reports with).
  traces::Throughput rate;
  double predicted_comm_s = 0;  // FSDP: the fast model's communication and optimizer step
  double predicted_optimizer_s = 0;
  // Wall time of what produced it: the strategy (make_plan), or the whole answer: both
  // families, their replays and the subsets weighed (answer_plan).
  double planning_s = 0;
  std::optional<double> simulated_iteration_s;  // the replay of the returned plan
  int simulated_candidates = 0;
  // The search log, e.g. the cephalo strategy's profile rows, optimal's schedules and
  // shardings with their simulated times, a split's replayed finalists: `plan --explain` and
  // the record's "explanation" (plan_explanation).
  std::string note;
  // The best candidate the planner did not keep, and why it lost ("standard / full / offload
  // none simulated at 1.31 s, 8% slower"); empty when it compared none.
  std::string runner_up;
  // make_plan: what the prediction should carry (costmodels::prediction_warnings: a dtype a GPU
  // runs on a slower pipeline, a stack fitted on another job), as the simulate record does.
  std::vector<std::string> warnings;
  bool fits() const;                 // every rank within its usable memory (the memory model)
  bool simulated_oom = false;        // the replay of the returned plan ran out of memory
  std::string simulated_oom_detail;  // where ("rank 2, op F u3 mb1 r2, 23.1 GiB > 22.0 GiB")
  // answer_plan with parallelism auto: why the other family lost; empty otherwise.
  std::string why;
  // answer_plan with parallelism auto under PlanRequest::split_ceiling_s: why the split search
  // stopped at its ceiling (SplitCeilingReached), the FSDP plan answering; empty otherwise.
  std::string split_ceiling;
  // answer_plan: when leaving the slowest nodes idle is faster, which (plan.nodes lists those
  // it runs on); `subsets` is the log of every subset weighed, empty when none was.
  std::optional<IdleAdvice> faster_without;
  std::string subsets;
};

// A runner-up as the summaries print it: "<label> simulated at 1.31 s, 8 % slower" (or "as
// fast; the first found is kept" when it ties the chosen plan's `best_s`).
std::string runner_up_text(const std::string& label, double runner_s, double best_s);

// The shared fast-model prediction for any plan (memory, compute, the optimal model's time;
// sets predicted_iteration_s and model_iteration_s to the model's time).
void predict(const Scenario& scenario, const costmodels::CostModels& models, PlanResult& result);

// What `cephalo plan` prints without --json above its summary, for `scenario` (the one the
// plan runs on, scenario_for_plan). FSDP: a line naming the scenario (model, sequence, global
// batch, devices, stack), the table (one row per run of consecutive ranks with equal rows, or
// with `per_rank` one row per rank) and, when the memory model finds a rank over capacity, a
// warning. Split: the search's table and the replay (split_plan.hpp, render_split_plan).
std::string render_plan(const Scenario& scenario, const PlanResult& result, bool per_rank = false);

// What `cephalo plan` prints under its table, at most kPlanSummaryLines lines: the plan
// chosen with its predicted time and throughput, the runner-up and why it lost (its time, or
// with parallelism auto the other family's `why`), when leaving nodes idle is faster which
// and by how much, and where the full log is.
inline constexpr int kPlanSummaryLines = 4;
std::string plan_summary(const PlanResult& result);
// The whole search log (`plan --explain`, and the record's "explanation"): the note (the
// strategy's candidates and their times, a split's replayed finalists), with parallelism auto
// why the other family lost, and the subsets weighed.
std::string plan_explanation(const PlanResult& result);

// What `cephalo plan --json` prints and `-o` writes: one valid Plan record carrying its
// prediction in "predicted" (an FSDP plan's per-rank predictions are "ranks", one object per
// rank, or in the compact form "rank_classes", one per run of ranks with equal predictions and
// their "ranks": [first, last]; a split's Plan has its "model_split" and its prediction holds
// the search's estimate and counts); "predicted" also holds "explanation" (plan_explanation),
// "planning_s" and, when leaving nodes idle is faster, "faster_without". The prediction is
// moved in, not copied through Plan::predicted, which at 100k ranks costs more than the
// planning. `form` is the file form of the plan's rows (core/plan.hpp; Auto: compact above
// kCompactPlanAbove ranks), which the prediction's rows follow.
Json plan_record(const PlanResult& result, PlanForm form = PlanForm::Auto);

}  // namespace cephalo::planner

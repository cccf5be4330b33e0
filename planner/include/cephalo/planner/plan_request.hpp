#pragma once
// One planning request as a front end states it, and its answer. `cephalo plan`'s flags and
// `cephalo.plan()`'s keywords fill the same PlanRequest and call the same answer_plan, so the
// rules on which option goes with which family (FSDP plans, or tensor x pipeline x data
// parallel splits), how an option's text reads, and how `auto` picks a family are stated once.
//
//   PlanRequest r;
//   r.options.options_source = kOptionsFromCommandLine;  // messages spell `--tensor-parallel`
//   r.parallelism = "auto";
//   PlanResult a = answer_plan(scenario, r);  // a.family(); a.why says why (auto)
//   plan_record(a)                            // what `cephalo plan --json` prints
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/planner/plan_result.hpp"
#include "cephalo/planner/split_search.hpp"

namespace cephalo::planner {

struct PlanRequest {
  // strategy, offload, compute_source, max_micro_batch, verify_with_simulator,
  // search_neighbours, micro_batch and group_nodes (0: left open), progress, scenario_label;
  // options_source spells the options in messages (kOptionsFromCommandLine: as flags, else as
  // keyword arguments).
  PlannerOptions options;
  std::string cephalo_shares = "min_params";  // cephalo: min_params | min_util
  bool cephalo_corrected_share_memory = false;
  // As the user wrote them; empty: left open.
  std::string accumulation;  // layered | standard | no_sync (FSDP only)
  // full | none | selective | every:K | auto (3d: full | none | selective | auto)
  std::string activation_checkpointing;
  // fsdp: full | hybrid | auto; 3d: full | hybrid | optimizer | none | auto (searched)
  std::string sharding;
  // fsdp | 3d | auto (both; the faster); empty (the default): the family the options given fix,
  // else auto (check_request, answer_plan).
  std::string parallelism;
  // 3d: each fixes one dimension of the split search; 0 / empty / false: searched.
  int tensor_parallel = 0, pipeline_stages = 0, micro_batches = 0;
  std::string pipeline_schedule;  // gpipe | 1f1b | interleaved:V
  bool sequence_parallel = false;
  // The split search's bounds (SplitSearchOptions::finalists, the splits its estimate ranks
  // best that are replayed, and max_pipeline_stages); 0: the search's defaults. A sweep,
  // planning hundreds of rows, bounds them (sweep.hpp, kSweepSplitFinalists).
  int split_finalists = 0;
  int split_max_stages = 0;
  // SplitSearchOptions::ceiling (0: none): set by answer_plan when it weighs a subset of the
  // GPUs, to the estimate of the best split of every GPU.
  double split_ceiling_s = 0;
  // Plan every GPU given and weigh no subset of the nodes (`plan --use-all`); otherwise
  // answer_plan also plans the cluster without its slowest node classes (plan_subsets.cpp).
  bool use_all = false;
  // The options the caller set, by their keyword names ("strategy", "tensor_parallel"), whatever
  // their values: an option whose value equals its default (`--strategy optimal`) is still one
  // the chosen family must read. Options with an "open" value (0, empty, false) count as given
  // when set even if the caller leaves them out of this list.
  std::vector<std::string> given;
};

// Every option applies to the family it is planned in, or is refused: ValidationError naming
// the option, its value and the family that reads it (`--tensor-parallel` without
// `--parallelism 3d`, `--strategy` or `--offload` with it). With parallelism auto each family
// reads its own. answer_plan calls it first; exposed for front ends that check before reading
// their inputs.
void check_request(const PlanRequest& request);

// The options of each family, checked: ValidationError naming the option as its source spells
// it for a value that family cannot take (the FSDP schedule's flags under 3d, `every:K`
// checkpointing or optimizer / none sharding on the wrong side, a schedule's text).
PlannerOptions fsdp_options(const PlanRequest& request);
SplitSearchOptions split_options(const PlanRequest& request);

// The answer, one PlanResult of either family: an FSDP plan is make_plan's, a split is
// plan_split's (the search's best split made into its plan and replayed). With parallelism auto
// both families are planned (an FSDP plan that cannot be made throws; a split search that finds
// nothing is noted) and choose_family (src/split_plan.hpp) keeps the faster, `why` saying why the
// other lost. `planning_s` is the whole answer's wall time.
//
// Leaving GPUs out: unless `use_all`, the cluster's nodes are grouped into classes by their GPU
// types, and the cluster without its slowest class, its two slowest, ... (at most
// kMaxSubsetCandidates candidates, always keeping the fastest class) is planned with the same
// request. A subset whose plan simulates at least kIdleGain faster than the plan of every GPU
// is the answer: its plan's "nodes" (core/plan_nodes.hpp) list the nodes it runs on, the others
// stay idle (a rank with batch 0 and share 0 would still join every gather and reduction), and
// `faster_without` says which nodes and ranks idle and both times. Every reader of the plan
// runs it on the scenario cut to its nodes, so `simulate` of the written plan against the
// scenario given replays the plan the prediction replayed. `subsets` is the log of every
// candidate weighed.
inline constexpr int kMaxSubsetCandidates = 3;
inline constexpr double kIdleGain = 0.01;
PlanResult answer_plan(const Scenario& scenario, const PlanRequest& request);

// `cephalo predict 3d`'s request: the estimate of one given split, its options as text.
struct SplitEstimateRequest {
  // none | full (every layer recomputed) | selective (each layer's attention core recomputed);
  // empty: a plan file's own (read_split_plan), else none.
  std::string activation_checkpointing;
  std::string dp_overlap = "none";  // none | last-backward | per-unit (the replay's, the search's)
  bool scatter_gather = true;       // false: P2P sends the full activation from every TP rank
  std::string compute_model = "auto";
  std::string options_source = "arguments";  // as PlannerOptions::options_source
  std::string split_file;                    // where the split was read from: its refusals name it
  std::string split_path = "model_split";    // where in that file (load_model_split_for's)
  // A plan's replicas' samples and shares (read_split_plan); empty: even replicas.
  ReplicaAllocation allocation;
  // true: each layer's backward at the forward's rate times the op list's backward / forward
  // work (SplitOptions::backward_at_forward_rate), to see what the calibrated backward adds.
  bool backward_at_forward_rate = false;
};
// What a split file that is a plan ("ranks" or "rank_classes" beside its "model_split") says beyond
// its split, read into the request so every caller (CLI, Python) prices the same: its ranks'
// micro_batch and state_share (priced as given), and its activation_checkpointing, which an option
// may repeat but not contradict (ValidationError naming the option, both values and the file; a
// plan's every:K, which the estimate does not price, is refused at the file's key). A bare split
// leaves the allocation empty (even replicas) and the checkpointing the option's or none.
void read_split_plan(SplitEstimateRequest& r);
// The scenario a split file is estimated on: a plan file ("ranks" or "rank_classes") runs on the
// nodes it lists (scenario_for_plan, core/plan_nodes.hpp); a bare split on the whole scenario.
Scenario scenario_for_split_file(const Scenario& scenario, const std::string& file);
// estimate_split with the request's options and cost models; ValidationError naming the
// option for a value it cannot take.
SplitEstimate estimate_split_request(const Scenario& scenario, const ModelSplit& split,
                                     const SplitEstimateRequest& request);
// The line `predict 3d` prints under its table: "iteration 1.2 s (schedule 1.1 s, p2p 3 ms per
// transfer)".
std::string render_split_summary(const SplitEstimate& estimate);

}  // namespace cephalo::planner

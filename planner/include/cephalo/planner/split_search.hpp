#pragma once
// The planner's search over three-dimensional model splits (core/model_split.hpp): the split
// with the lowest estimate_split iteration time (split_estimate.hpp) that fits in memory.
//
//   SplitSearchOptions options;
//   options.pipeline_stages = 4;                         // fix any dimension, or leave it open
//   SplitSearchResult r = search_split(scenario, options); // InfeasibleError when nothing fits
//   write r.split with to_json(r.split): the file `predict 3d --split` reads.
//
// What is searched (planner/README.md, "3D plans: search"):
//   - which GPUs serve which stage: the ranks of one GPU type form k_t stages of equal rank
//     counts (contiguous in rank order, so node-major), every rank serves a stage, and the
//     types' blocks of stages are laid out in every order of the types (stage 0 of one
//     block after the last of the previous). P = Σ k_t.
//   - TP: per GPU type, T dividing the heads (and key/value heads) and every node's count of
//     that type (a TP group never leaves its node), and dividing the type's stage size.
//   - micro-batch count m: every m >= P with m x replicas dividing the global batch on every
//     stage (a multiple of P for interleaving).
//   - schedule: GPipe, 1F1B, interleaved:V for V >= 2 dividing every stage's layer count.
//   - DP sharding (full, hybrid, optimizer, none), sequence parallelism (when some T > 1) and
//     full activation checkpointing.
//   - stage boundaries, by a heuristic: layers are first dealt out in proportion to each
//     stage's speed (1 / the compute model's per-layer forward + backward time for its
//     micro-batch, over its T), at least one per stage; the best candidate of each P,
//     schedule and stage layout (types and T) is then
//     refined by moving one boundary by one layer at a time, keeping a move while it lowers the
//     estimate (hill climbing to a local optimum).
// Families of splits (a stage layout at one micro-batch count and schedule) whose floor is no
// better than the best split priced so far are skipped, layouts explored lowest floor first
// (SplitSearchOptions::bound; the best is the same without).
// Every candidate is priced by estimate_split; splits are validated by check_model_split_for
// inside it, so no schedule rule is restated here.
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/planner_options.hpp"
#include "cephalo/planner/split_estimate.hpp"

namespace cephalo::planner {

struct SplitSearchOptions {
  // Each fixed dimension, or open (searched).
  std::optional<int> tensor_parallel;  // every stage's T
  std::optional<int> pipeline_stages;  // P
  std::optional<pipeline::PipelineSchedule> schedule;
  std::optional<int> micro_batches;
  std::optional<ShardingKind> sharding;
  std::optional<bool> sequence_parallel;
  // Every candidate's checkpointing: Full (every layer recomputed), None, or Selective (each
  // layer's attention core rerun, `--activation-checkpointing selective`). Left open, the
  // search tries none and full, and a candidate without recompute that does not fit is priced
  // again with selective recompute: the least recompute that fits, then the time.
  std::optional<ActivationCheckpointing::Kind> checkpointing;
  // Passed to estimate_split (recompute there is set per candidate).
  SplitOptions estimate;
  int max_pipeline_stages = 64;  // P searched up to this (and the layer count)
  // Also stages of whole consecutive nodes (of any GPU types) with each stage's micro-batch
  // dealt to its replicas by speed and shares by free memory (ReplicaBatches::BySpeed).
  bool node_stages = true;
  // The stages of one GPU type each with even replicas (the first family above); off, the
  // search covers only the node stages (their exhaustive test).
  bool type_stages = true;
  // How many of the best refined candidates (by estimate) the result lists as finalists, which
  // plan_split replays on the simulator to keep the fastest that fits.
  int finalists = 8;
  // Called with a one-line progress report ("3D split search: 12000 candidates priced in 4 s,
  // best so far 9.1 s") every 2 s once the search has run 2 s; empty: silent. The CLI prints
  // it on stderr.
  std::function<void(const std::string&)> progress;
  int refine_per_stages = 1;  // candidates of each (P, schedule, stage layout) refined
  // Skip the families of splits (a stage layout at one micro-batch count and schedule, over
  // every boundary placement) whose lower bound is no better than the best split priced so far
  // (split_search_bound.hpp), exploring the type-block layouts by their bound, lowest first.
  // The best is the same either way; off (the tests' reference) every family is priced.
  bool bound = true;
  // With the bound, the candidates priced (estimate_split calls, the climbs included) after
  // which the search opens no further layout and climbs no further candidate: a large
  // heterogeneous cluster holds thousands of layouts whose floors lie below the best, and each
  // costs ~0.3 ms per candidate. What is left is reported (SplitSearchResult::unexplored and
  // its floor), so the answer's gap to the whole search is stated: no split left comes in below
  // that floor. 0: no budget. The small cases never reach it (their answer is the full
  // search's).
  long long budget = 120000;
  // With the bound, the estimate the caller needs a split below (infinity: none). Once every
  // split priced is estimated at least this and every family left (the queue's lowest floor,
  // the climbs of the candidates not yet climbed) is floored at least this, the search stops
  // with SplitCeilingReached: without the ceiling its answer would be estimated no lower. Below
  // it the search runs as without one, so a search that answers answers the same.
  // weigh_subsets sets it to the best split's estimate on every GPU, which a subset must beat.
  double ceiling = std::numeric_limits<double>::infinity();
  // Who fixed the dimensions, the source of a ValidationError about one (kOptionsFromCommandLine:
  // spelt as flags, `--tensor-parallel`; otherwise as keyword arguments).
  std::string options_source = "arguments";
};

// One priced candidate.
struct SplitCandidate {
  ModelSplit split;
  // Full (every layer recomputed), Selective (each layer's attention core rerun) or None.
  ActivationCheckpointing::Kind checkpointing = ActivationCheckpointing::Kind::None;
  ReplicaBatches replica_batches = ReplicaBatches::Even;  // Even or BySpeed
  SplitEstimate estimate;
};

struct SplitSearchResult {
  ModelSplit split;  // the best
  // Full (every layer recomputed), Selective (each layer's attention core rerun) or None.
  ActivationCheckpointing::Kind checkpointing = ActivationCheckpointing::Kind::None;
  // How its stages' replicas share each micro-batch: Even, or BySpeed (the samples and shares
  // in estimate.allocation).
  ReplicaBatches replica_batches = ReplicaBatches::Even;
  SplitEstimate estimate;
  int evaluated = 0;  // estimate_split calls
  int refused = 0;    // of them, candidates that do not fit
  int pruned = 0;     // candidates dropped before estimating (divisibility)
  // Candidates not priced because their family's lower bound was no better than the best split
  // priced by then (SplitSearchOptions::bound).
  long long bounded = 0;
  // Layouts (each order of a type family one) not explored, and lists' best candidates not
  // climbed, when SplitSearchOptions::budget ran out, and the least floor among them (infinity
  // when none): every split left is estimated at least that.
  long long unexplored = 0;
  double unexplored_floor = std::numeric_limits<double>::infinity();
  // The budget that ran out (SplitSearchOptions::budget: candidates priced); 0 when none did.
  long long budget = 0;
  // Climbs done ahead of their turn to see whether SplitSearchOptions::ceiling stops the
  // search, which did not, and that the search then took as its own instead of climbing again
  // (their candidates priced count in `evaluated` once).
  long long climbed_ahead = 0;
  // The best fitting candidate of every P that has one, by P (the winner's P included).
  std::vector<SplitCandidate> best_per_stages;
  // The best refined candidates by estimate, best first (the winner first), at most
  // SplitSearchOptions::finalists: what plan_for_split replays, keeping the fastest that fits.
  std::vector<SplitCandidate> finalists;
};

// search_split's refusal when SplitSearchOptions::ceiling is reached: no split of the cluster
// is estimated below it.
class SplitCeilingReached : public InfeasibleError {
 public:
  using InfeasibleError::InfeasibleError;
};

// Throws InfeasibleError when no candidate fits, with the refusal of the candidate that came
// closest (the smallest needed / capacity ratio at its tightest stage); ValidationError for a
// fixed dimension no candidate can have (e.g. a T that does not divide the heads);
// SplitCeilingReached when SplitSearchOptions::ceiling is reached.
SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options,
                               const costmodels::CostModels& models);
SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options);

// The search's record (`plan --parallelism 3d --json`) and its table: the split, the estimate,
// one row per stage, and the best other pipeline depth.
Json to_json(const SplitSearchResult& result);
std::string render_split_search(const SplitSearchResult& result);
// One estimate as `predict 3d` prints it: the split, the schedule, one aligned row per stage
// (times per micro-batch where the header says /mb; ranks from `split`, "all" without stages).
std::string render_split_estimate(const SplitEstimate& estimate, const ModelSplit& split);

// The boundaries the heuristic starts from: `layers` dealt to stages in proportion to
// `speed` (largest remainders), each stage at least one layer. Exposed for the tests.
std::vector<int> balanced_layer_counts(int layers, const std::vector<double>& speed);

}  // namespace cephalo::planner

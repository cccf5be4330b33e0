#pragma once
// The Plan (DESIGN §4): the one object that drives both the simulator and the backend.
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/core/sharding.hpp"

namespace cephalo {

// Layered: unit-major (DESIGN §1). Standard: micro-batch-major FSDP, every micro-batch gathers
// and reduce-scatters every unit. NoSync: micro-batch-major like Standard (parameters
// re-gathered every micro-batch, FSDP FULL_SHARD under `no_sync()`), but the unsharded
// gradients of every unit are kept across micro-batches and reduce-scattered once, in the last.
enum class Accumulation { Layered, Standard, NoSync };
enum class Offload { None, Host };
// How uneven shards are gathered and reduced: one broadcast/reduce per owner inside a group,
// or padding every shard to the largest and using the even collective. Auto (the default):
// per collective, whichever of the two the comm model prices lower
// (costmodels::uneven_variant); the graph builder resolves it, so a graph's collectives, what
// the simulator prices and what the backend runs are always Grouped or Padded.
enum class UnevenCollective { Grouped, Padded, Auto };

// Which transformer layers are checkpointed: their forward keeps only the layer's input and the
// backward recomputes the layer first (a Recompute op); the other layers' forward keeps its
// saved activations until the layer's backward, for every micro-batch that ran it (under
// layered accumulation: every micro-batch of the rank). Full: every layer (the default, the
// schedule of DESIGN §1). None: no layer. Every k: layers 1, 1+k, 1+2k, ... (1-based; every 1 =
// full). The embedding saves nothing (its backward needs only the token ids; it has an empty
// Recompute op unless checkpointing is none) and the head is recomputed in every setting (the
// fused head never keeps its vocabulary-sized logits).
struct ActivationCheckpointing {
  // Full: every layer keeps only its input and reruns its forward before its backward.
  // None: every layer keeps its forward's saved activations. Every: layers 1, 1 + k, ...
  // checkpointed, the others not. Selective (Korthikanti et al., 2022): every layer keeps its
  // saved activations but the attention core's, which it reruns before its backward.
  enum class Kind { Full, None, Every, Selective };
  Kind kind = Kind::Full;
  int every = 1;  // Every: the period k >= 1

  bool is_full() const { return kind == Kind::Full || (kind == Kind::Every && every == 1); }
  // Layer l (1..L) is checkpointed (recomputed before its backward).
  bool checkpoints_layer(int layer) const {
    return kind == Kind::Full || (kind == Kind::Every && (layer - 1) % every == 0);
  }
  // Every layer reruns only its attention core before its backward.
  bool recomputes_attention_core() const { return kind == Kind::Selective; }
  bool operator==(const ActivationCheckpointing&) const = default;
};
constexpr int kMaxCheckpointPeriod = 1 << 20;

std::string to_string(Accumulation a);
// The checkpointing vocabulary's one-word kinds, in its order: "full", "none", "selective"
// (every:K, the one spelling with a period, aside). A model split runs only these.
const std::vector<std::string>& checkpointing_words();
// The kind one of checkpointing_words() names; empty for any other text (every:K included).
std::optional<ActivationCheckpointing> parse_checkpointing_word(std::string_view word);
// checkpointing_words() listed for a message, `last` before the last one (" or ": "full, none
// or selective"; ", ": "full, none, selective", for a list that goes on), each in double
// quotes when `quoted`.
std::string checkpointing_words_text(std::string_view last, bool quoted = false);
// "full", "none", "selective", "every:K" (the command-line spelling; JSON: to_json below).
std::string to_string(const ActivationCheckpointing& c);
// Parses "full" | "none" | "selective" | "every:K" (the `--activation-checkpointing` flag);
// throws ValidationError naming `where` and the value.
ActivationCheckpointing parse_activation_checkpointing(const std::string& text,
                                                       const std::string& where);
// The plan key's JSON value: "full" | "none" | {"every": k}.
Json to_json(const ActivationCheckpointing& c);
std::string to_string(Offload o);
std::string to_string(UnevenCollective u);

struct PlanRank {
  int rank = 0;
  int node = 0;
  std::string gpu;         // device type as in the cluster
  int batch = 0;           // samples per iteration on this rank
  int micro_batch = 0;     // size of each micro-batch (the last may be smaller)
  int micro_batches = 0;   // count
  double state_share = 0;  // fraction of every unit's flat parameter owned by this rank

  // Sizes of the rank's micro-batches in execution order; sums to `batch`.
  std::vector<int> micro_batch_sizes() const;
  // Under a split of `pipeline_micro_batches` (m) micro-batches (DESIGN §4, "With a
  // non-default split"): the rank's sub-steps per pipeline micro-batch, micro_batches / m, and
  // its samples of every pipeline micro-batch, batch / m = sub-steps x micro_batch.
  int sub_steps(int pipeline_micro_batches) const { return micro_batches / pipeline_micro_batches; }
  int share_per_micro_batch(int pipeline_micro_batches) const {
    return batch / pipeline_micro_batches;
  }
};

// One class of the compact form ("rank_classes"): the ranks first..last (both included) share
// one row (device type, batch, micro-batches, state share) and a node rule.
struct PlanRankClass {
  int first = 0;
  int last = 0;
};

struct Plan {
  int version = 1;
  std::string scenario;
  std::string strategy;  // informational: which planner produced it
  Accumulation accumulation = Accumulation::Layered;
  ActivationCheckpointing activation_checkpointing;
  Offload offload = Offload::None;
  bool prefetch = true;
  UnevenCollective uneven_collective = UnevenCollective::Auto;
  Sharding sharding;  // "sharding": full (default) or hybrid groups (core/sharding.hpp)
  // "model_split": tensor / pipeline / data parallelism (DESIGN §4, "A split in the plan and
  // the graph"); the default is today's FSDP plan.
  ModelSplit model_split;
  // "nodes": the indices of the scenario's nodes the plan runs on, ascending; empty: every node.
  // Readers run the plan on scenario_for_plan's cut (core/plan_nodes.hpp): rank r is the r-th
  // GPU of these nodes, a row's node its node's position in this list.
  std::vector<int> nodes;
  // Every rank's row, whichever form the file used (the compact form is expanded when read:
  // a row is 64 bytes, 64 MB at 1M ranks, and every consumer indexes by rank).
  std::vector<PlanRank> ranks;
  // The classes the plan was read from ("rank_classes"); empty when it was read per rank or
  // built in code. Messages about a rank name the class it was written in (row_path).
  std::vector<PlanRankClass> rank_classes;
  Json predicted;  // optional, informational (planner's predictions); null when absent

  bool has_split() const { return !model_split.is_default(); }
  // Samples per iteration: Σ batch over the ranks, or under a split the samples every stage
  // runs (m × the micro-batch its replicas share).
  int global_batch() const;
  bool even_shares() const;  // all shares equal within 1e-12
  // Where rank r's row was written, as a JSON path with the rank range of a class:
  // "ranks[7]" (per rank) or "rank_classes[1]" ... " (ranks 8-15)" via row_label.
  std::string row_path(int rank) const;
  // "" for the per-rank form; " (class of ranks 8-15)" for the compact form.
  std::string row_label(int rank) const;
};

// The two forms of a plan's rows in a file (scenarios/README.md, "Plan keys"): "ranks", one
// object per rank, or "rank_classes", one object per run of ranks with the same row. Auto writes
// the compact form above kCompactPlanAbove ranks: the shipped scenarios (at most 64 ranks) and
// the plans people read and edit by hand stay per rank, while a 100k-rank plan (12,500 nodes of
// one kind) is a few lines instead of 40 MB. 256 ranks per rank are about 40 KB of JSON, the
// size past which a file is no longer read by eye.
enum class PlanForm { Auto, PerRank, Compact };
constexpr int kCompactPlanAbove = 256;

constexpr double kShareSumTolerance = 1e-9;
// Size bounds, checked while a plan is read so nothing downstream (graph builder, simulator,
// backend) allocates for an absurd plan. A rank runs at most kMaxMicroBatchesPerRank
// micro-batches; the training graph holds about 3 ops per unit (layers + 2) and micro-batch
// on each rank, and the sum over ranks of units x micro-batches may be at most
// kMaxScheduledUnitPasses. Measured: simulate takes about 390 bytes per unit pass (877 MB
// for 4 ranks x 16384 micro-batches of gpt-2.7b), so the bound is about 6.5 GB; 100k ranks of
// one micro-batch of a 32-layer model are 3.4M passes.
//
// The bound is on what a replay builds: an FSDP plan's ranks alike in device, node link and row
// replay once (sim/class_replay.hpp), so its bound is on classes x units x micro-batches (1M
// ranks of one class are 34 passes); a split plan, and a replay asked for per-op records or
// a trace, build every rank and are bounded by the sum over ranks.
constexpr int kMaxMicroBatchesPerRank = 1 << 16;
constexpr std::int64_t kMaxScheduledUnitPasses = std::int64_t{1} << 24;

// Σ over the ranks of units x micro-batches: what a replay of every rank builds (a split plan's
// rank builds its stage's units only: its layers, the embedding on the first stage, the head on
// the last).
std::int64_t full_unit_passes(const Plan& plan, const Scenario& scenario);
// A split's full_unit_passes from its stages' layer counts (all chunks) and rank counts: what
// the split search bounds its candidates by before a plan exists.
std::int64_t split_unit_passes(std::span<const int> stage_layers, std::span<const int> stage_ranks,
                               int micro_batches);
// Σ over the classes of ranks alike in device type, emulation slowdown, node link kind and row
// (batch, micro-batches, share) of units x micro-batches: what the class replay builds at least.
std::int64_t class_unit_passes(const Plan& plan, const Scenario& scenario);
// ValidationError at `plan_file`, path "ranks[*].micro_batches" (or "rank_classes[*]...") when
// `passes` exceeds kMaxScheduledUnitPasses; `what` says how they were counted.
void check_unit_passes(const Plan& plan, std::int64_t passes, const std::string& what,
                       const std::string& plan_file);

// Parses and checks the plan's own invariants (rank numbering, micro-batch arithmetic, shares
// summing to 1 over every sharding group, the groups a partition of the ranks; under a split,
// its rank lists, every rank running m micro-batches, a tensor-parallel group's ranks the same
// batch, every stage's replicas the same samples per micro-batch, shares summing to 1 over every
// data-parallel domain, and no FSDP-only key). With the scenario the plan is for (the whole
// scenario, or one cut to the plan's "nodes"), the rows are first counted against its cluster:
// a class whose range runs past the cluster is refused as that, naming the class, its range and
// the cluster's size, before the state shares it throws off are summed. Callers that have the
// scenario pass it; validate_plan_for repeats the count for plans read without one.
Plan parse_plan(JsonReader& reader, const Scenario* scenario = nullptr);
Plan load_plan(const std::filesystem::path& file, const Scenario* scenario = nullptr);
// Checks the plan against a scenario (the cut of its "nodes", scenario_for_plan: a plan with
// "nodes" given the whole scenario is refused, naming the key): the scenario it names (when it
// names one) is this one, rank count, nodes and device types match the cluster, Σ batch = global
// batch, the schedule is within kMaxScheduledUnitPasses, and a split passes check_model_split_for.
// Throws ValidationError naming `plan_file` and the field.
void validate_plan_for(const Plan& plan, const Scenario& scenario, const std::string& plan_file);
Json to_json(const Plan& plan, PlanForm form = PlanForm::Auto);

// The plan of `split` on `scenario`: every stage's share of a micro-batch (global batch / m
// samples) divided among its replicas as evenly as whole samples allow (the first replicas take
// one more), even state shares in every data-parallel domain, the default schedule keys. The
// split is checked first (check_model_split_for, messages naming `file` and the split's keys at
// `json_path`: "model_split", or "" for a bare split file); throws ValidationError at its
// micro_batches when m does not divide the global batch or a stage has more replicas than
// samples per micro-batch.
Plan even_split_plan(const Scenario& scenario, const ModelSplit& split,
                     const std::string& file = "model_split",
                     const std::string& json_path = "model_split");

}  // namespace cephalo

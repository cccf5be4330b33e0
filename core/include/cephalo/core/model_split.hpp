#pragma once
// How the model is split across the ranks in three dimensions (DESIGN §4, "Model split —
// planned"): tensor parallelism inside a node, pipeline stages over contiguous layer ranges,
// and data parallelism among the ranks of each stage. Plans do not accept a split yet; this is
// the description the planner, the graph builder, the simulator and the backend will share.
//
//   "model_split": {
//     "tensor_parallel": 2,            // T: ranks that split every layer of a stage (one node)
//     "sequence_parallel": true,       // norms / dropout split over the sequence among the T
//     "schedule": "1f1b",              // "gpipe" | "1f1b" | "interleaved:V"
//     "micro_batches": 8,              // per iteration, through every stage
//     "sharding": "optimizer",         // data parallelism inside each stage
//     "stages": [
//       {"layers": [0, 20], "ranks": [0, 1, 2, 3]},                      // layers 0..19
//       {"layers": [20, 32], "ranks": [4, 5], "tensor_parallel": 1}      // layers 20..31
//     ] }
//
// Layers are the transformer layers numbered 0..L−1 (0-based: layer l is the training graph's
// unit l + 1, which numbers the embedding 0; the embedding goes with the first stage, the head
// and loss with the last). A range is half-open, [begin, end): begin is the stage's
// first layer, end one past its last, so adjacent stages share a boundary number and a stage
// holds end − begin layers. Under an interleaved schedule a stage gives V ranges, "layers":
// [[0, 4], [16, 20]]: its chunk c is virtual stage c·p + s (pipeline_schedule.hpp), and the
// virtual stages in that order tile 0..L−1. Layer counts may differ between stages and chunks.
//
// Within a stage, the ranks in the order listed form tensor-parallel groups of T consecutive
// ranks (each inside one node); the i-th rank of every group forms data-parallel group i, so a
// stage of n ranks has n / T data-parallel replicas. Each micro-batch is split among a stage's
// replicas, so stages may have different replica counts (and GPU types).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/sharding.hpp"

namespace cephalo {

struct Scenario;

// Half-open range of transformer layers [begin, end).
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};

struct PipelineStage {
  // One range, or V under an interleaved schedule (chunk order).
  std::vector<LayerRange> chunks;
  std::vector<int> ranks;   // the ranks serving the stage, in tensor-parallel group order
  int tensor_parallel = 0;  // 0: the split's tensor_parallel
  bool operator==(const PipelineStage&) const = default;
};

struct ModelSplit {
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  pipeline::PipelineSchedule schedule;  // 1F1B
  int micro_batches = 1;
  ShardingKind sharding = ShardingKind::Full;
  // Empty: one stage holding every layer on every rank, today's plan (the plan's own per-rank
  // micro-batches and accumulation then order the work; schedule and micro_batches are unused).
  std::vector<PipelineStage> stages;

  // The T of stage `stage` (its own, or the split's).
  int tensor_parallel_of(std::size_t stage) const;
  // One stage, T = 1, no sequence parallelism, full sharding: exactly today's FSDP plan.
  bool is_default() const;
  bool operator==(const ModelSplit&) const = default;
};

// The stages every reader uses: `split.stages`, or for an empty list the one stage of layers
// 0..layers−1 on ranks 0..ranks−1.
std::vector<PipelineStage> resolved_stages(const ModelSplit& split, int layers, int ranks);

// Reads the "model_split" object (shape and ranges of each value: integers, enums, ranges of
// two integers, the interleaved stage's V ranges). check_model_split validates it against the
// model and the cluster.
ModelSplit parse_model_split(JsonReader reader);
// The object parse_model_split reads (every key written; stages omitted when empty).
Json to_json(const ModelSplit& split);

// What check_model_split needs to know about the model and the ranks.
struct SplitContext {
  int layers = 0;                     // transformer layers L
  int heads = 0;                      // attention heads (query heads)
  int kv_heads = 0;                   // key/value heads (GQA); 0: as many as heads
  bool tied_embeddings = false;       // the head uses the word embedding (a copy per end stage)
  int ffn_hidden = 0;                 // the MLP's inner width (0: not checked)
  std::span<const int> node_of_rank;  // rank r lives on node node_of_rank[r]
  std::string file;                   // named in messages
  std::string json_path = "model_split";
};

// Refuses, with a ValidationError naming the file, the field's JSON path and the numbers:
// a tensor-parallel degree < 1, one that does not divide the attention heads (and key/value
// heads), or a tensor-parallel group whose ranks are on more than one node; sequence
// parallelism without tensor parallelism; stages whose layers overlap, leave a gap, or do not
// cover 0..L−1; an empty chunk; a stage with no ranks, a rank outside the cluster, a rank in
// two stages (or twice in one); a stage whose rank count is not a multiple of its T; fewer
// micro-batches than stages (a pipeline could never fill); for an interleaved schedule fewer
// than 2 stages, a stage without exactly V chunks, or micro-batches not a multiple of the stage
// count (Megatron-LM's requirement for its interleaved order); sequence parallelism with another
// T on adjacent stages; and for a tied model over several stages, a last stage whose T or rank
// count differs from the first's (their word-embedding copies are all-reduced rank by rank).
void check_model_split(const ModelSplit& split, const SplitContext& context);
// The part of check_model_split that needs only the rank count (what a plan file alone can be
// checked for): every rank in exactly one stage, each stage's rank count a multiple of its T.
void check_split_ranks(const ModelSplit& split, int ranks, const std::string& file,
                       const std::string& json_path = "model_split");

// Where a rank sits in a split: its stage, its data-parallel replica (its tensor-parallel group
// among the stage's) and its position in that group.
struct RankPlace {
  int stage = -1;
  int replica = 0;
  int tp_rank = 0;
  int tensor_parallel = 1;
};

// The split's rank structure resolved once (DESIGN §4, "A split in the plan and the graph"): a
// stage's ranks in order form groups of T consecutive ranks (replica j = ranks[jT .. jT+T−1]);
// the ranks at position t of every group, in replica order, are the stage's data-parallel
// domain t. The graph builder, the plan's checks and the backend read these from here.
class SplitTopology {
 public:
  // Throws std::invalid_argument for a split check_split_ranks refuses (check it first).
  SplitTopology(const ModelSplit& split, int ranks);

  int stages() const { return static_cast<int>(stages_.size()); }
  int virtual_stages() const { return virtual_stages_; }  // V (1 unless interleaved)
  int ranks() const { return static_cast<int>(places_.size()); }
  const std::vector<int>& stage_ranks(int stage) const {
    return stages_[static_cast<std::size_t>(stage)].ranks;
  }
  int tensor_parallel(int stage) const { return tensor_parallel_[static_cast<std::size_t>(stage)]; }
  int replicas(int stage) const {
    return static_cast<int>(stage_ranks(stage).size()) / tensor_parallel(stage);
  }
  int rank_at(int stage, int replica, int tp_rank) const {
    return stage_ranks(stage)[static_cast<std::size_t>(replica * tensor_parallel(stage) + tp_rank)];
  }
  const RankPlace& place(int rank) const { return places_[static_cast<std::size_t>(rank)]; }
  // The T ranks of one replica of a stage, in tensor-parallel order.
  std::vector<int> tp_group(int stage, int replica) const;
  // Data-parallel domain t of a stage: its replicas' t-th ranks, in replica order.
  std::vector<int> domain(int stage, int tp_rank) const;

 private:
  std::vector<PipelineStage> stages_;
  std::vector<int> tensor_parallel_;
  int virtual_stages_ = 1;
  std::vector<RankPlace> places_;
};
// The same against a scenario: its model's layers, heads and key/value heads, its cluster's
// rank → node table (node-major ranks, as plans number them); messages name `file`.
void check_model_split_for(const ModelSplit& split, const Scenario& scenario,
                           const std::string& file, const std::string& json_path = "model_split");
// A split file ({"model_split": {...}}, a plan's key, or the object itself) read and parsed,
// the keys beside a wrapped split checked: every message names the split file and its JSON path.
// `json_path`, when given, receives where the split is in the file ("model_split", or "" for the
// object itself), for the later checks that blame its keys (SplitOptions::split_path).
ModelSplit load_model_split(const std::string& file, std::string* json_path = nullptr);
// The same, then checked against `scenario` (check_model_split_for).
ModelSplit load_model_split_for(const std::string& file, const Scenario& scenario,
                                std::string* json_path = nullptr);
// A key of a split at `root` in its file ("model_split", or "" for a bare split object):
// "model_split.micro_batches" or "micro_batches"; an empty key names the split object itself.
std::string split_key(const std::string& root, const std::string& key);

// "TP 2 (sequence parallel) x PP 2 (1F1B, 8 micro-batches) x DP 2/1, optimizer sharding", or
// "TP 1 x PP 1 (no pipeline), full sharding" for the default.
std::string describe(const ModelSplit& split, int ranks);

// What of a split the execution backend (backend/) does not run, "" when it runs all of it
// (today: sequence parallelism). The one statement of that rule: the backend refuses a plan
// with this reason, and the planner leaves such splits out of its search for a cluster of CPU
// devices, which only the backend runs (a plan made there is one `cephalo run` can run).
std::string backend_split_refusal(const ModelSplit& split);

}  // namespace cephalo

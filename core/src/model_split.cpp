#include "cephalo/core/model_split.hpp"

#include <algorithm>
#include <stdexcept>

#include "cephalo/core/checked.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/core/split_context.hpp"
#include "cephalo/core/table.hpp"

namespace cephalo {

namespace {

// The most ranks one tensor-parallel group may have (a node holds far fewer GPUs).
constexpr std::int64_t kMaxTensorParallel = 1024;

const char* const kRangeExpected =
    "a layer range [begin, end) of two integers with 0 <= begin < end (layers begin..end-1)";

std::string range_text(const LayerRange& r) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on `"[" + std::to_string(...)`.
  std::string s(1, '[');
  s += std::to_string(r.begin);
  s += ", ";
  s += std::to_string(r.end);
  s += ')';
  return s;
}

LayerRange parse_range(const JsonReader& r) {
  if (!r.is_array() || r.size() != 2) r.fail(kRangeExpected);
  LayerRange range;
  range.begin = static_cast<int>(r.element(0).as_integer(0, kMaxModelLayers));
  range.end = static_cast<int>(r.element(1).as_integer(0, kMaxModelLayers));
  if (range.begin >= range.end)
    r.fail_value(range_text(range) + " (" + std::to_string(range.size()) + " layers)",
                 kRangeExpected);
  return range;
}

Json range_json(const LayerRange& r) { return Json::array({r.begin, r.end}); }

}  // namespace

int ModelSplit::tensor_parallel_of(std::size_t stage) const {
  if (stage < stages.size() && stages[stage].tensor_parallel != 0)
    return stages[stage].tensor_parallel;
  return tensor_parallel;
}

bool ModelSplit::is_default() const {
  if (tensor_parallel != 1 || sequence_parallel || sharding != ShardingKind::Full) return false;
  if (stages.size() > 1) return false;
  return stages.empty() || tensor_parallel_of(0) == 1;
}

std::vector<PipelineStage> resolved_stages(const ModelSplit& split, int layers, int ranks) {
  if (!split.stages.empty()) return split.stages;
  PipelineStage all;
  all.chunks = {LayerRange{0, layers}};
  all.ranks.resize(static_cast<std::size_t>(std::max(ranks, 0)));
  for (int r = 0; r < ranks; ++r) all.ranks[static_cast<std::size_t>(r)] = r;
  return {all};
}

ModelSplit parse_model_split(JsonReader r) {
  if (!r.is_object())
    r.fail(
        "a model_split object (tensor_parallel, sequence_parallel, schedule, micro_batches, "
        "sharding, stages)");
  ModelSplit s;
  // Every key is known, read or not, so a misspelt one gets a "did you mean".
  r.allow(
      {"tensor_parallel", "sequence_parallel", "schedule", "micro_batches", "sharding", "stages"});
  s.tensor_parallel = static_cast<int>(r.integer_or("tensor_parallel", 1, 1, kMaxTensorParallel));
  s.sequence_parallel = r.boolean_or("sequence_parallel", false);
  if (auto c = r.optional_child("schedule"))
    s.schedule = pipeline::parse_pipeline_schedule(c->as_string(), c->file(), c->where());
  s.micro_batches = static_cast<int>(r.integer_or("micro_batches", 1, 1, kMaxMicroBatchesPerRank));
  if (auto c = r.optional_child("sharding")) {
    s.sharding = *parse_sharding_kind(c->as_enum({"full", "hybrid", "optimizer", "none"}));
  }
  if (auto stages = r.optional_child("stages")) {
    if (!stages->is_array()) stages->fail("an array of stages");
    // An empty list is no stage at all, not "one stage of every rank" (the key left out).
    if (stages->size() == 0)
      stages->fail(
          "at least one stage {\"layers\": [begin, end], \"ranks\": [...]}, or no "
          "\"stages\" key for one stage of every rank");
    if (stages->size() > static_cast<std::size_t>(kMaxDevices))
      stages->fail_value(std::to_string(stages->size()) + " stages",
                         "at most " + std::to_string(kMaxDevices) + " stages");
    for (auto& st : stages->elements()) {
      if (!st.is_object()) st.fail("a stage object {\"layers\": [begin, end], \"ranks\": [...]}");
      PipelineStage stage;
      st.allow({"layers", "ranks", "tensor_parallel"});
      auto layers = st.child("layers");
      // [b, e], or [[b, e], ...] (an interleaved stage's chunks).
      if (layers.is_array() && layers.size() > 0 && layers.element(0).is_array()) {
        if (layers.size() > static_cast<std::size_t>(pipeline::kMaxVirtualStages))
          layers.fail_value(std::to_string(layers.size()) + " chunks",
                            "at most " + std::to_string(pipeline::kMaxVirtualStages) +
                                " chunks (one per virtual stage)");
        for (auto& c : layers.elements()) stage.chunks.push_back(parse_range(c));
      } else {
        stage.chunks.push_back(parse_range(layers));
      }
      auto ranks = st.child("ranks");
      if (!ranks.is_array()) ranks.fail("an array of ranks");
      if (ranks.size() > static_cast<std::size_t>(kMaxDevices))
        ranks.fail_value(std::to_string(ranks.size()) + " ranks",
                         "at most " + std::to_string(kMaxDevices) + " ranks");
      for (auto& x : ranks.elements())
        stage.ranks.push_back(static_cast<int>(x.as_integer(0, kMaxDevices - 1)));
      stage.tensor_parallel =
          static_cast<int>(st.integer_or("tensor_parallel", 0, 1, kMaxTensorParallel));
      st.finish();
      s.stages.push_back(std::move(stage));
    }
  }
  r.finish();
  return s;
}

Json to_json(const ModelSplit& split) {
  Json j{{"tensor_parallel", split.tensor_parallel},
         {"sequence_parallel", split.sequence_parallel},
         {"schedule", pipeline::to_string(split.schedule)},
         {"micro_batches", split.micro_batches},
         {"sharding", to_string(split.sharding)}};
  if (split.stages.empty()) return j;
  Json stages = Json::array();
  for (const auto& st : split.stages) {
    Json layers;
    if (st.chunks.size() == 1 &&
        split.schedule.kind != pipeline::PipelineSchedule::Kind::Interleaved) {
      layers = range_json(st.chunks.front());
    } else {
      layers = Json::array();
      for (const auto& c : st.chunks) layers.push_back(range_json(c));
    }
    Json stage{{"layers", layers}, {"ranks", st.ranks}};
    if (st.tensor_parallel != 0) stage["tensor_parallel"] = st.tensor_parallel;
    stages.push_back(std::move(stage));
  }
  j["stages"] = std::move(stages);
  return j;
}

void check_model_split(const ModelSplit& split, const SplitContext& ctx) {
  const std::string& file = ctx.file;
  const std::string& root = ctx.json_path;
  auto at = [&root](const std::string& key) { return split_key(root, key); };
  const int layers = ctx.layers;
  const int n = static_cast<int>(ctx.node_of_rank.size());
  if (layers < 1)
    throw ValidationError(file, at("stages"), std::to_string(layers) + " layers",
                          "a model with at least one transformer layer to split");
  const bool explicit_stages = !split.stages.empty();
  // The split's own stages, not a copy of their rank lists (a planner checks every candidate).
  const std::vector<PipelineStage> one_stage =
      explicit_stages ? std::vector<PipelineStage>{} : resolved_stages(split, layers, n);
  const std::vector<PipelineStage>& stages = explicit_stages ? split.stages : one_stage;
  const int p = static_cast<int>(stages.size());
  const auto& sched = split.schedule;
  const bool interleaved = sched.kind == pipeline::PipelineSchedule::Kind::Interleaved;
  const int v = interleaved ? sched.virtual_stages : 1;
  auto stage_at = [&](int s, const std::string& key) {
    return at("stages[" + std::to_string(s) + "]" + (key.empty() ? "" : "." + key));
  };

  // ---- tensor parallelism: divides the heads, fits the stage, stays in one node ----
  if (split.tensor_parallel < 1)
    throw ValidationError(file, at("tensor_parallel"), std::to_string(split.tensor_parallel),
                          "an integer >= 1 (ranks splitting each layer)");
  bool any_tp = false;
  for (int s = 0; s < p; ++s) {
    const int t = split.tensor_parallel_of(static_cast<std::size_t>(s));
    const std::string tp_at =
        explicit_stages && split.stages[static_cast<std::size_t>(s)].tensor_parallel != 0
            ? stage_at(s, "tensor_parallel")
            : at("tensor_parallel");
    if (t < 1)
      throw ValidationError(file, tp_at, std::to_string(t),
                            "an integer >= 1 (ranks splitting each layer)");
    any_tp = any_tp || t > 1;
    // Megatron splits attention by heads: each of the T ranks computes heads / T whole heads
    // (and kv_heads / T key/value heads), so T must divide both.
    if (ctx.heads % t != 0)
      throw ValidationError(file, tp_at, std::to_string(t),
                            "a tensor-parallel degree dividing the model's " +
                                std::to_string(ctx.heads) + " attention heads (" +
                                std::to_string(ctx.heads) + " / " + std::to_string(t) +
                                " is not whole)");
    const int kv = ctx.kv_heads > 0 ? ctx.kv_heads : ctx.heads;
    if (kv % t != 0)
      throw ValidationError(file, tp_at, std::to_string(t),
                            "a tensor-parallel degree dividing the model's " + std::to_string(kv) +
                                " key/value heads (" + std::to_string(kv) + " / " +
                                std::to_string(t) + " is not whole)");
    // The MLP's first linear is split by columns: each rank computes ffn / T of them.
    if (ctx.ffn_hidden > 0 && ctx.ffn_hidden % t != 0)
      throw ValidationError(file, tp_at, std::to_string(t),
                            "a tensor-parallel degree dividing the model's MLP width " +
                                std::to_string(ctx.ffn_hidden) + " (" +
                                std::to_string(ctx.ffn_hidden) + " / " + std::to_string(t) +
                                " is not whole)");
  }
  if (split.sequence_parallel && !any_tp)
    throw ValidationError(file, at("sequence_parallel"), "true with tensor_parallel 1",
                          "sequence_parallel only with tensor_parallel > 1 (it splits the "
                          "sequence among a tensor-parallel group)");

  // ---- the schedule: enough micro-batches to fill the pipeline ----
  if (split.micro_batches < 1)
    throw ValidationError(file, at("micro_batches"), std::to_string(split.micro_batches),
                          "an integer >= 1");
  if (p > 1 && split.micro_batches < p)
    throw ValidationError(file, at("micro_batches"), std::to_string(split.micro_batches),
                          "at least as many micro-batches as pipeline stages (" +
                              std::to_string(p) + "): with fewer, the pipeline never fills");
  if (interleaved) {
    if (p < 2)
      throw ValidationError(
          file, at("schedule"),
          "\"" + pipeline::to_string(sched) + "\" with " + std::to_string(p) + " stage",
          "an interleaved schedule over at least 2 pipeline stages");
    // Megatron-LM's interleaved schedule walks the micro-batches in groups of one per stage
    // (each group through chunk 0, then again through chunk 1, ...), and refuses a micro-batch
    // count that is not a multiple of the pipeline size (forward_backward_pipelining_with_
    // interleaving, megatron/core/pipeline_parallel/schedules.py); stage_orders uses the same
    // grouping.
    if (split.micro_batches % p != 0)
      throw ValidationError(file, at("micro_batches"), std::to_string(split.micro_batches),
                            "a multiple of the " + std::to_string(p) +
                                " pipeline stages under an interleaved schedule (" +
                                std::to_string(split.micro_batches) + " = " +
                                std::to_string(split.micro_batches / p) + " x " +
                                std::to_string(p) + " + " +
                                std::to_string(split.micro_batches % p) + ")");
  }
  // The orders hold 2·m·V steps per stage; keep them within the bound a plan's schedule has.
  checked_product(
      file, at("micro_batches"), "the pipeline's steps",
      {{"stages", p}, {"micro_batches", split.micro_batches}, {"virtual stages", v}, {"passes", 2}},
      kMaxScheduledUnitPasses);

  // ---- layers: the virtual stages k = c·p + s tile 0..L−1 in order ----
  for (int s = 0; s < p; ++s) {
    const auto& st = stages[static_cast<std::size_t>(s)];
    const int chunks = static_cast<int>(st.chunks.size());
    if (chunks != v)
      throw ValidationError(
          file, stage_at(s, "layers"),
          std::to_string(chunks) + (chunks == 1 ? " layer range" : " layer ranges"),
          interleaved ? std::to_string(v) +
                            " layer ranges [[begin, end], ...], one per virtual "
                            "stage of \"" +
                            pipeline::to_string(sched) + "\""
                      : std::string("one layer range [begin, end] (only an interleaved schedule "
                                    "gives a stage several)"));
    for (int c = 0; c < chunks; ++c) {
      const auto& r = st.chunks[static_cast<std::size_t>(c)];
      if (r.begin < 0 || r.end > layers || r.begin >= r.end)
        throw ValidationError(
            file,
            stage_at(s, "layers") + (interleaved ? "[" + std::to_string(c) + "]" : std::string()),
            range_text(r),
            "a non-empty range [begin, end) within the model's " + std::to_string(layers) +
                " layers (0 <= begin < end <= " + std::to_string(layers) + ")");
    }
  }
  // "layer 12" / "layers 12..15": a range of one layer read as one.
  const auto layer_span = [](int first, int last) {
    return first == last ? "layer " + std::to_string(first)
                         : "layers " + std::to_string(first) + ".." + std::to_string(last);
  };
  int covered = 0;  // layers 0..covered−1 are in the virtual stages before k
  for (int k = 0; k < p * v; ++k) {
    const int s = k % p, c = k / p;
    const auto& r = stages[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
    const std::string where =
        stage_at(s, "layers") + (interleaved ? "[" + std::to_string(c) + "]" : std::string());
    const std::string name = interleaved
                                 ? "virtual stage " + std::to_string(k) + " (stage " +
                                       std::to_string(s) + ", chunk " + std::to_string(c) + ")"
                                 : "stage " + std::to_string(s);
    if (r.begin > covered)
      throw ValidationError(file, where, range_text(r),
                            name + " to begin at layer " + std::to_string(covered) + ": " +
                                layer_span(covered, r.begin - 1) +
                                (r.begin - 1 == covered ? " is" : " are") + " in no stage (a gap)");
    if (r.begin < covered)
      throw ValidationError(file, where, range_text(r),
                            name + " to begin at layer " + std::to_string(covered) + ": " +
                                layer_span(r.begin, std::min(covered, r.end) - 1) +
                                (std::min(covered, r.end) - 1 == r.begin ? " is" : " are") +
                                " already in the stage before (they overlap; stages list "
                                "their layers in pipeline order)");
    covered = r.end;
  }
  if (covered != layers)
    throw ValidationError(file, at("stages"),
                          "stages covering layers 0.." + std::to_string(covered - 1),
                          "stages covering all " + std::to_string(layers) +
                              " layers: " + layer_span(covered, layers - 1) +
                              (layers - 1 == covered ? " is" : " are") + " in no stage");

  // ---- ranks: each in exactly one stage; whole tensor-parallel groups, each in one node ----
  check_split_ranks(split, n, file, root);
  for (int s = 0; s < p; ++s) {
    const auto& st = stages[static_cast<std::size_t>(s)];
    const int t = split.tensor_parallel_of(static_cast<std::size_t>(s));
    const std::string ranks_at = explicit_stages ? stage_at(s, "ranks") : at("tensor_parallel");
    const int count = static_cast<int>(st.ranks.size());
    // Tensor parallelism all-reduces inside every layer, forward and backward: it is meant for
    // NVLink / PCIe inside a node, never a NIC.
    for (int g = 0; g * t < count; ++g) {
      const auto first = st.ranks.begin() + g * t;
      const auto node_of = [&](int r) { return ctx.node_of_rank[static_cast<std::size_t>(r)]; };
      // Lists are made only for the error: this runs per group of every candidate.
      if (std::all_of(first, first + t, [&](int r) { return node_of(r) == node_of(*first); }))
        continue;
      const std::vector<int> group(first, first + t);
      std::vector<int> nodes;
      for (int r : group) nodes.push_back(node_of(r));
      throw ValidationError(file, ranks_at,
                            "tensor-parallel group " + std::to_string(g) + " " +
                                format_int_list(group) + " on nodes " + format_int_list(nodes),
                            "every group of " + std::to_string(t) +
                                " consecutive ranks of a stage on one node (tensor "
                                "parallelism stays within a node)");
    }
  }
  // Sequence parallelism hands each pipeline neighbour the tensor-parallel rank's 1/T of the
  // sequence, so the two sides must cut the sequence alike.
  if (split.sequence_parallel)
    for (int s = 0; s + 1 < p; ++s) {
      const int a = split.tensor_parallel_of(static_cast<std::size_t>(s));
      const int b = split.tensor_parallel_of(static_cast<std::size_t>(s + 1));
      if (a != b)
        throw ValidationError(file, stage_at(s + 1, "tensor_parallel"), std::to_string(b),
                              "tensor_parallel " + std::to_string(a) + " as stage " +
                                  std::to_string(s) +
                                  " has: with sequence parallelism adjacent stages exchange "
                                  "1/T of the sequence per tensor-parallel rank");
    }
  // A tied word embedding lives on the first and the last stage; their copies are kept equal
  // by an all-reduce between rank i of the one and rank i of the other, so both need the same
  // ranks per tensor-parallel group and the same replicas.
  if (ctx.tied_embeddings && p > 1) {
    const auto& first = stages.front();
    const auto& last = stages.back();
    const int a = split.tensor_parallel_of(0);
    const int b = split.tensor_parallel_of(static_cast<std::size_t>(p - 1));
    if (a != b || first.ranks.size() != last.ranks.size())
      throw ValidationError(
          file, stage_at(p - 1, "ranks"),
          std::to_string(last.ranks.size()) + " ranks with tensor_parallel " + std::to_string(b),
          std::to_string(first.ranks.size()) + " ranks with tensor_parallel " + std::to_string(a) +
              ", as the first stage has: the model ties its head to the word embedding, whose "
              "two copies (first and last stage) are all-reduced rank by rank");
  }
}

void check_split_ranks(const ModelSplit& split, int ranks, const std::string& file,
                       const std::string& root) {
  auto at = [&root](const std::string& key) { return split_key(root, key); };
  auto stage_at = [&](int s, const std::string& key) {
    return at("stages[" + std::to_string(s) + "]" + (key.empty() ? "" : "." + key));
  };
  const bool explicit_stages = !split.stages.empty();
  // Only the rank lists are read: any layer count resolves the stages (the split's own, not a
  // copy, when it lists them).
  const std::vector<PipelineStage> one_stage =
      explicit_stages ? std::vector<PipelineStage>{} : resolved_stages(split, 1, ranks);
  const std::vector<PipelineStage>& stages = explicit_stages ? split.stages : one_stage;
  const int p = static_cast<int>(stages.size());
  const int n = ranks;
  std::vector<int> stage_of(static_cast<std::size_t>(n), -1);
  for (int s = 0; s < p; ++s) {
    const auto& st = stages[static_cast<std::size_t>(s)];
    const int t = split.tensor_parallel_of(static_cast<std::size_t>(s));
    if (t < 1)
      throw ValidationError(
          file, explicit_stages ? stage_at(s, "tensor_parallel") : at("tensor_parallel"),
          std::to_string(t), "an integer >= 1 (ranks splitting each layer)");
    if (st.ranks.empty())
      throw ValidationError(file, stage_at(s, "ranks"), "no ranks",
                            "at least one rank serving stage " + std::to_string(s) + " (layers " +
                                range_text(st.chunks.front()) + ")");
    for (std::size_t i = 0; i < st.ranks.size(); ++i) {
      const int r = st.ranks[i];
      // The path is spelled only for an error: a planner checks every candidate split.
      const auto where = [&] { return stage_at(s, "ranks") + "[" + std::to_string(i) + "]"; };
      if (r < 0 || r >= n)
        throw ValidationError(file, where(), std::to_string(r),
                              "a rank of the cluster (0.." + std::to_string(n - 1) + ")");
      int& owner = stage_of[static_cast<std::size_t>(r)];
      if (owner >= 0)
        throw ValidationError(file, where(), "rank " + std::to_string(r),
                              owner == s
                                  ? "each rank listed once (rank " + std::to_string(r) +
                                        " is already in stage " + std::to_string(s) + ")"
                                  : "a rank in no other stage (rank " + std::to_string(r) +
                                        " already serves stage " + std::to_string(owner) + ")");
      owner = s;
    }
    const int count = static_cast<int>(st.ranks.size());
    // A stage's own degree unlike the split's, whose groups its ranks would fill, is the first
    // cause: blamed at that key, not at the rank list it does not divide.
    const bool own_degree_at_fault =
        explicit_stages && st.tensor_parallel != 0 && split.tensor_parallel > 0 &&
        st.tensor_parallel != split.tensor_parallel && count % split.tensor_parallel == 0;
    if (count % t != 0)
      throw ValidationError(
          file,
          own_degree_at_fault ? stage_at(s, "tensor_parallel")
          : explicit_stages   ? stage_at(s, "ranks")
                              : at("tensor_parallel"),
          std::to_string(count) + " ranks with tensor_parallel " + std::to_string(t),
          "a rank count that is a multiple of the tensor-parallel degree " + std::to_string(t) +
              " (" + std::to_string(count) + " = " + std::to_string(count / t) + " x " +
              std::to_string(t) + " + " + std::to_string(count % t) + ")");
  }
  for (int r = 0; r < n; ++r)
    if (stage_of[static_cast<std::size_t>(r)] < 0)
      throw ValidationError(
          file, at("stages"), "no stage with rank " + std::to_string(r),
          "stages that together list every rank 0.." + std::to_string(n - 1) + " exactly once");
}

SplitTopology::SplitTopology(const ModelSplit& split, int ranks)
    : stages_(resolved_stages(split, 1, ranks)),
      virtual_stages_(split.schedule.kind == pipeline::PipelineSchedule::Kind::Interleaved
                          ? split.schedule.virtual_stages
                          : 1),
      places_(static_cast<std::size_t>(ranks)) {
  tensor_parallel_.reserve(stages_.size());
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    const int t = split.tensor_parallel_of(s);
    if (t < 1 || stages_[s].ranks.size() % static_cast<std::size_t>(t) != 0)
      throw std::invalid_argument("SplitTopology: a split check_split_ranks refuses");
    tensor_parallel_.push_back(t);
    const auto& list = stages_[s].ranks;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const int r = list[i];
      if (r < 0 || r >= ranks || places_[static_cast<std::size_t>(r)].stage >= 0)
        throw std::invalid_argument("SplitTopology: a split check_split_ranks refuses");
      RankPlace& pl = places_[static_cast<std::size_t>(r)];
      pl.stage = static_cast<int>(s);
      pl.replica = static_cast<int>(i) / t;
      pl.tp_rank = static_cast<int>(i) % t;
      pl.tensor_parallel = t;
    }
  }
  for (const auto& pl : places_)
    if (pl.stage < 0) throw std::invalid_argument("SplitTopology: a rank in no stage");
}

std::vector<int> SplitTopology::tp_group(int stage, int replica) const {
  const int t = tensor_parallel(stage);
  const auto& list = stages_[static_cast<std::size_t>(stage)].ranks;
  return {list.begin() + replica * t, list.begin() + (replica + 1) * t};
}

std::vector<int> SplitTopology::domain(int stage, int tp_rank) const {
  std::vector<int> out;
  const int n = replicas(stage);
  out.reserve(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) out.push_back(rank_at(stage, j, tp_rank));
  return out;
}

std::vector<int> rank_nodes(const Cluster& cluster) {
  const auto& ranks = cluster.ranks();
  std::vector<int> node_of_rank(ranks.size());
  for (const auto& r : ranks) node_of_rank[static_cast<std::size_t>(r.rank)] = r.node;
  return node_of_rank;
}

SplitContext split_context_for(const Scenario& scenario, std::span<const int> node_of_rank,
                               const std::string& file, const std::string& json_path) {
  SplitContext ctx;
  ctx.layers = scenario.job.model.num_layers;
  ctx.heads = scenario.job.model.heads;
  ctx.kv_heads = scenario.job.model.kv_heads;
  ctx.tied_embeddings = scenario.job.model.tied_embeddings;
  ctx.ffn_hidden = scenario.job.model.ffn_hidden;
  ctx.node_of_rank = node_of_rank;
  ctx.file = file;
  ctx.json_path = json_path;
  return ctx;
}

void check_model_split_for(const ModelSplit& split, const Scenario& scenario,
                           const std::string& file, const std::string& json_path) {
  const std::vector<int> node_of_rank = rank_nodes(scenario.cluster);
  check_model_split(split, split_context_for(scenario, node_of_rank, file, json_path));
}

ModelSplit load_model_split(const std::string& file, std::string* json_path) {
  const Json doc = read_json_file(file);
  JsonReader root(doc, file);
  const bool wrapped = root.has("model_split");
  const ModelSplit split = parse_model_split(wrapped ? root.child("model_split") : root);
  // Beside the split: a plan's keys, which the plan reader checks, or nothing but a
  // description (a misspelt key would otherwise be dropped silently).
  if (wrapped && (root.has("ranks") || root.has("version"))) {
    (void)load_plan(file);
  } else if (wrapped) {
    root.allow({"description"});
    root.finish();
  }
  if (json_path) *json_path = wrapped ? "model_split" : "";
  return split;
}

ModelSplit load_model_split_for(const std::string& file, const Scenario& scenario,
                                std::string* json_path) {
  std::string path;
  const ModelSplit split = load_model_split(file, &path);
  check_model_split_for(split, scenario, file, path);
  if (json_path) *json_path = path;
  return split;
}

std::string split_key(const std::string& root, const std::string& key) {
  if (root.empty()) return key;
  return key.empty() ? root : root + "." + key;
}

std::string backend_split_refusal(const ModelSplit& split) {
  if (split.sequence_parallel)
    return "the backend does not run sequence parallelism (model_split.sequence_parallel): its "
           "norms and dropouts would need the sequence-split activations and the all-gather / "
           "reduce-scatter pairs in place of the all-reduces";
  return {};
}

std::string describe(const ModelSplit& split, int ranks) {
  // Only the rank lists matter here, so any layer count resolves the stages.
  const auto stages = resolved_stages(split, 1, ranks);
  std::vector<int> tp, dp;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const int t = std::max(split.tensor_parallel_of(s), 1);
    tp.push_back(t);
    dp.push_back(static_cast<int>(stages[s].ranks.size()) / t);
  }
  // "2" when every stage has the same degree, else one per stage: "2/1".
  auto per_stage = [](const std::vector<int>& values) {
    std::string out;
    const bool uniform =
        std::all_of(values.begin(), values.end(), [&](int x) { return x == values.front(); });
    for (std::size_t i = 0; i < (uniform ? 1 : values.size()); ++i) {
      if (i) out += '/';
      out += std::to_string(values[i]);
    }
    return out;
  };
  std::string out = "TP " + per_stage(tp) +
                    (split.sequence_parallel ? " (sequence parallel)" : "") + " x PP " +
                    std::to_string(stages.size());
  if (stages.size() > 1)
    out += " (" + pipeline::display_name(split.schedule) + ", " +
           std::to_string(split.micro_batches) + " micro-batches)";
  return out + " x DP " + per_stage(dp) + ", " + to_string(split.sharding) + " sharding";
}

}  // namespace cephalo

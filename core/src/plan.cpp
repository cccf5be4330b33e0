#include "cephalo/core/plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "cephalo/core/checked.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/specs.hpp"
#include "cephalo/core/table.hpp"
#include "plan_rows.hpp"
#include "plan_split.hpp"

namespace cephalo {

std::string to_string(Accumulation a) {
  switch (a) {
    case Accumulation::Layered:
      return "layered";
    case Accumulation::Standard:
      return "standard";
    case Accumulation::NoSync:
      return "no_sync";
  }
  return "layered";
}

namespace {

// The one-word kinds and their words, in the vocabulary's order: the one table.
struct CheckpointingWord {
  ActivationCheckpointing::Kind kind;
  const char* word;
};
constexpr CheckpointingWord kCheckpointingWords[] = {
    {ActivationCheckpointing::Kind::Full, "full"},
    {ActivationCheckpointing::Kind::None, "none"},
    {ActivationCheckpointing::Kind::Selective, "selective"}};

}  // namespace

const std::vector<std::string>& checkpointing_words() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> out;
    for (const auto& w : kCheckpointingWords) out.emplace_back(w.word);
    return out;
  }();
  return words;
}

std::optional<ActivationCheckpointing> parse_checkpointing_word(std::string_view word) {
  for (const auto& w : kCheckpointingWords)
    if (word == w.word) return ActivationCheckpointing{w.kind};
  return std::nullopt;
}

std::string checkpointing_words_text(std::string_view last, bool quoted) {
  const auto& words = checkpointing_words();
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? std::string(last) : std::string(", ");
    out += quoted ? "\"" + words[i] + "\"" : words[i];
  }
  return out;
}

std::string to_string(const ActivationCheckpointing& c) {
  if (c.kind == ActivationCheckpointing::Kind::Every) return "every:" + std::to_string(c.every);
  for (const auto& w : kCheckpointingWords)
    if (c.kind == w.kind) return w.word;
  return kCheckpointingWords[0].word;
}

Json to_json(const ActivationCheckpointing& c) {
  if (c.kind == ActivationCheckpointing::Kind::Every) return Json{{"every", c.every}};
  return to_string(c);
}

namespace {

std::string checkpointing_json_allowed() {
  return checkpointing_words_text(", ", true) +
         " (every layer reruns only its attention core) or {\"every\": k} with k an "
         "integer from 1 to " +
         std::to_string(kMaxCheckpointPeriod) + " (checkpoint layers 1, 1+k, 1+2k, ...)";
}

ActivationCheckpointing parse_checkpointing_json(JsonReader r) {
  if (r.is_string()) {
    const std::string v = r.as_string();
    if (auto c = parse_checkpointing_word(v)) return *c;
    r.fail_value("\"" + v + "\"", checkpointing_json_allowed());
  }
  if (!r.is_object()) r.fail(checkpointing_json_allowed());
  ActivationCheckpointing c;
  c.kind = ActivationCheckpointing::Kind::Every;
  c.every = static_cast<int>(r.integer("every", 1, kMaxCheckpointPeriod));
  r.finish();
  return c;
}

}  // namespace

ActivationCheckpointing parse_activation_checkpointing(const std::string& text,
                                                       const std::string& where) {
  if (auto c = parse_checkpointing_word(text)) return *c;
  ActivationCheckpointing c;
  const std::string allowed = checkpointing_words_text(", ") +
                              " or every:K with K an integer from 1 to " +
                              std::to_string(kMaxCheckpointPeriod);
  const std::string prefix = "every:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string k = text.substr(prefix.size());
    bool digits = !k.empty() && k.size() <= 7 &&
                  std::all_of(k.begin(), k.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (digits) {
      const int v = std::stoi(k);
      if (v >= 1 && v <= kMaxCheckpointPeriod) {
        c.kind = ActivationCheckpointing::Kind::Every;
        c.every = v;
        return c;
      }
    }
  }
  throw ValidationError("", where, "\"" + text + "\"", allowed);
}
std::string to_string(Offload o) { return o == Offload::None ? "none" : "host"; }
std::string to_string(UnevenCollective u) {
  switch (u) {
    case UnevenCollective::Grouped:
      return "grouped";
    case UnevenCollective::Padded:
      return "padded";
    case UnevenCollective::Auto:
      return "auto";
  }
  return "?";
}

std::vector<int> PlanRank::micro_batch_sizes() const {
  std::vector<int> sizes;
  int left = batch;
  for (int i = 0; i < micro_batches; ++i) {
    int m = std::min(micro_batch, left);
    sizes.push_back(m);
    left -= m;
  }
  return sizes;
}

int Plan::global_batch() const {
  int total = 0;
  if (has_split()) {
    // Every stage runs every sample once: stage 0's replicas (their first tensor-parallel rank).
    const SplitTopology topo(model_split, static_cast<int>(ranks.size()));
    for (int j = 0; j < topo.replicas(0); ++j)
      total += ranks[static_cast<std::size_t>(topo.rank_at(0, j, 0))].batch;
    return total;
  }
  for (const auto& r : ranks) total += r.batch;
  return total;
}

bool Plan::even_shares() const {
  for (const auto& r : ranks)
    if (std::fabs(r.state_share - ranks.front().state_share) > 1e-12) return false;
  return true;
}

std::string Plan::row_path(int rank) const {
  if (rank_classes.empty()) return "ranks[" + std::to_string(rank) + "]";
  const auto it = std::upper_bound(rank_classes.begin(), rank_classes.end(), rank,
                                   [](int r, const PlanRankClass& c) { return r < c.first; });
  return "rank_classes[" + std::to_string(it - rank_classes.begin() - 1) + "]";
}

std::string Plan::row_label(int rank) const {
  if (rank_classes.empty()) return "";
  const auto it = std::upper_bound(rank_classes.begin(), rank_classes.end(), rank,
                                   [](int r, const PlanRankClass& c) { return r < c.first; });
  const PlanRankClass& c = *(it - 1);
  return " (class of ranks " + format_rank_range(c.first, c.last) + ")";
}

namespace {

// A plan made for another scenario may still match rank for rank (same cluster, other job) and
// would then run the wrong experiment without a word; a plan of another cluster is named as
// such before its rows are counted.
void check_scenario_name(const Plan& plan, const Scenario& scenario, const std::string& plan_file) {
  if (!plan.scenario.empty() && plan.scenario != scenario.name)
    throw ValidationError(plan_file, "scenario", "\"" + plan.scenario + "\"",
                          "\"" + scenario.name + "\", the name of the scenario given" +
                              (scenario.file.empty() ? "" : " (" + scenario.file.string() + ")") +
                              "; a plan is made for one scenario (re-plan, or edit \"scenario\" "
                              "if the two really are the same)");
}

}  // namespace

Plan parse_plan(JsonReader& reader, const Scenario* scenario) {
  if (!reader.is_object()) reader.fail("a plan object");
  Plan plan;
  plan.version = static_cast<int>(reader.integer("version", 1, 1));
  plan.scenario = reader.string_or("scenario", "");
  plan.strategy = reader.string_or("strategy", "");
  if (reader.has("accumulation")) {
    const std::string a = reader.child("accumulation").as_enum({"layered", "standard", "no_sync"});
    plan.accumulation = a == "layered"    ? Accumulation::Layered
                        : a == "standard" ? Accumulation::Standard
                                          : Accumulation::NoSync;
  }
  if (reader.has("activation_checkpointing"))
    plan.activation_checkpointing =
        parse_checkpointing_json(reader.child("activation_checkpointing"));
  if (reader.has("offload"))
    plan.offload =
        reader.child("offload").as_enum({"none", "host"}) == "none" ? Offload::None : Offload::Host;
  plan.prefetch = reader.boolean_or("prefetch", true);
  // Host offload moves the checkpointed layers' inputs off the device between forward and
  // recompute; a layer that keeps its saved activations keeps them on the device, so offloading
  // only its input is not a schedule the graph defines.
  if (schedule::offload_conflict(plan.offload, plan.activation_checkpointing))
    reader.child("activation_checkpointing")
        .fail_value(brief(to_json(plan.activation_checkpointing)),
                    "\"full\" with \"offload\": \"host\" (offload moves the checkpointed "
                    "layer inputs to host memory between forward and recompute; layers without "
                    "checkpointing keep their activations on the device); use \"offload\": "
                    "\"none\" or \"activation_checkpointing\": \"full\"");
  if (reader.has("uneven_collective")) {
    const std::string u = reader.child("uneven_collective").as_enum({"auto", "grouped", "padded"});
    plan.uneven_collective = u == "grouped"  ? UnevenCollective::Grouped
                             : u == "padded" ? UnevenCollective::Padded
                                             : UnevenCollective::Auto;
  }
  if (auto p = reader.optional_child("predicted")) {
    if (!p->is_object()) p->fail("an object of predictions");
    plan.predicted = p->value();
  }
  auto sharding = reader.optional_child("sharding");
  if (sharding) plan.sharding = parse_sharding(*sharding);
  auto split = reader.optional_child("model_split");
  if (split) plan.model_split = parse_model_split(*split);
  if (auto nodes = reader.optional_child("nodes")) plan.nodes = parse_plan_nodes(*nodes);
  // The rows: per rank ("ranks") or by class ("rank_classes"), one of the two.
  if (reader.has("ranks") && reader.has("rank_classes"))
    reader.child("rank_classes")
        .fail(
            "no \"rank_classes\" beside \"ranks\": a plan lists its rows one way (per rank, "
            "or by class)");
  const bool compact = reader.has("rank_classes");
  if (!compact && !reader.has("ranks"))
    throw ValidationError(reader.file(), "ranks", "nothing (missing)",
                          "the plan's rows: \"ranks\" (one object per rank) or "
                          "\"rank_classes\" (classes of ranks, scenarios/README.md)");
  auto ranks = reader.child(compact ? "rank_classes" : "ranks");
  if (compact)
    detail::read_rank_classes(ranks, plan);
  else
    detail::read_rank_rows(ranks, plan);
  // With the scenario, the rows are counted against its cluster before the sums over them.
  // A scenario cut to other nodes than the plan's is validate_plan_for's to refuse.
  if (scenario) {
    check_scenario_name(plan, *scenario, reader.file());
    const std::vector<int>& used = scenario->cluster.used_nodes;
    if (plan.nodes == used)
      detail::check_row_count(plan, *scenario, reader.file());
    else if (used.empty())
      detail::check_row_count(plan, scenario_for_plan(*scenario, plan, reader.file()),
                              reader.file());
  }
  std::vector<double> shares;
  shares.reserve(plan.ranks.size());
  for (const auto& pr : plan.ranks) shares.push_back(pr.state_share);
  if (plan.has_split()) {
    detail::check_split_plan(plan, reader, *split, ranks);
  } else {
    if (split) detail::check_default_split(plan, *split);
    // Σ shares = 1 over all ranks (full sharding) or within every group (hybrid).
    check_sharding(plan.sharding, shares, sharding ? *sharding : reader, ranks);
  }
  reader.finish();
  return plan;
}

Plan load_plan(const std::filesystem::path& file, const Scenario* scenario) {
  Json j = read_json_file(file);
  JsonReader r(j, file.string());
  return parse_plan(r, scenario);
}

namespace {

// The units a stage's ranks build (DESIGN §4, "Units"): its layers, the embedding on the first
// of `p` stages, the head on the last (a stage count near the layer count would otherwise be
// charged p times what its graph holds).
std::int64_t stage_units(std::size_t s, std::size_t p, std::int64_t layers) {
  return layers + (s == 0 ? 1 : 0) + (s + 1 == p ? 1 : 0);
}

}  // namespace

std::int64_t full_unit_passes(const Plan& plan, const Scenario& scenario) {
  const int layers = scenario.job.model.num_layers;
  std::int64_t passes = 0;
  if (!plan.has_split()) {
    const std::int64_t units = layers + 2;  // layers, embedding, head
    for (const auto& pr : plan.ranks) passes += units * pr.micro_batches;
    return passes;
  }
  const auto stages =
      resolved_stages(plan.model_split, layers, static_cast<int>(plan.ranks.size()));
  // A stage's units times each of its ranks' micro-batches: a rank with sub-steps runs its
  // units once per sub-step.
  const std::size_t p = stages.size();
  for (std::size_t s = 0; s < p; ++s) {
    std::int64_t held = 0;
    for (const LayerRange& c : stages[s].chunks) held += std::max(0, c.size());
    const std::int64_t units = stage_units(s, p, held);
    for (int r : stages[s].ranks)
      if (r >= 0 && static_cast<std::size_t>(r) < plan.ranks.size())
        passes += units * plan.ranks[static_cast<std::size_t>(r)].micro_batches;
  }
  return passes;
}

std::int64_t split_unit_passes(std::span<const int> stage_layers, std::span<const int> stage_ranks,
                               int micro_batches) {
  // A stage's ranks build only the stage's units, for each of the pipeline's micro-batches.
  std::int64_t passes = 0;
  const std::size_t p = stage_layers.size();
  for (std::size_t s = 0; s < p && s < stage_ranks.size(); ++s) {
    passes += stage_units(s, p, stage_layers[s]) * micro_batches * std::int64_t{stage_ranks[s]};
  }
  return passes;
}

std::int64_t class_unit_passes(const Plan& plan, const Scenario& scenario) {
  const std::int64_t units = scenario.job.model.num_layers + 2;
  const auto& devices = scenario.cluster.ranks();
  // The device by its kind (RankDevice::device_kind: spec name, slowdown, node link kind).
  using Key = std::tuple<int, int, int, int, double>;
  std::set<Key> seen;
  std::int64_t passes = 0;
  const std::size_t n = std::min(devices.size(), plan.ranks.size());
  for (std::size_t r = 0; r < n; ++r) {
    const auto& pr = plan.ranks[r];
    const auto& d = devices[r];
    // Neighbours are mostly alike: the set is asked only when the key changes.
    if (r > 0) {
      const auto& before = plan.ranks[r - 1];
      if (devices[r - 1].device_kind == d.device_kind && before.batch == pr.batch &&
          before.micro_batch == pr.micro_batch && before.micro_batches == pr.micro_batches &&
          before.state_share == pr.state_share)
        continue;
    }
    if (seen.emplace(d.device_kind, pr.batch, pr.micro_batch, pr.micro_batches, pr.state_share)
            .second)
      passes += units * pr.micro_batches;
  }
  return passes;
}

void check_unit_passes(const Plan& plan, std::int64_t passes, const std::string& what,
                       const std::string& plan_file) {
  if (passes <= kMaxScheduledUnitPasses) return;
  throw ValidationError(
      plan_file,
      std::string(plan.rank_classes.empty() ? "ranks" : "rank_classes") + "[*].micro_batches",
      std::to_string(passes) + " unit passes (" + what + ")",
      "at most " + std::to_string(kMaxScheduledUnitPasses) +
          " unit passes per iteration (fewer, larger micro-batches)");
}

void validate_plan_for(const Plan& plan, const Scenario& scenario, const std::string& plan_file) {
  check_scenario_name(plan, scenario, plan_file);
  // A plan of some nodes runs on the scenario cut to them (scenario_for_plan); given the whole
  // scenario its ranks would be read as the first nodes' GPUs.
  const std::vector<int>& used = scenario.cluster.used_nodes;
  if (!plan.nodes.empty() && plan.nodes != used)
    throw ValidationError(
        plan_file, "nodes", brief(plan_nodes_json(plan.nodes)),
        used.empty() ? "a scenario cut to these nodes (scenario_for_plan, "
                       "core/plan_nodes.hpp); got the whole cluster"
                     : "the nodes the scenario was cut to, " + brief(plan_nodes_json(used)));
  detail::check_row_count(plan, scenario, plan_file);
  const auto& devices = scenario.cluster.ranks();
  const bool compact = !plan.rank_classes.empty();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& pr = plan.ranks[i];
    const int rank = static_cast<int>(i);
    // The row's path is worked out only for an error: building it for every row was a string
    // per rank on every validation (100k rows, a few times per planning call).
    if (pr.node != devices[i].node)
      throw ValidationError(
          plan_file, plan.row_path(rank) + ".node",
          std::to_string(pr.node) + " for rank " + std::to_string(i) + plan.row_label(rank),
          "node " + std::to_string(devices[i].node) + " (where rank " + std::to_string(i) +
              " lives in the cluster)");
    // A rank on a slot equal to the previous rank's, naming the same device, passes as that
    // rank did (without reading its own slot: one per device, 100k places at 100k ranks).
    if (i > 0 && devices[i].slot_kind == devices[i - 1].slot_kind &&
        pr.gpu == plan.ranks[i - 1].gpu)
      continue;
    const auto& slot = *devices[i].slot;
    if (pr.gpu != slot.type && pr.gpu != slot.spec.name)
      throw ValidationError(
          plan_file, plan.row_path(rank) + ".gpu",
          "\"" + pr.gpu + "\" for rank " + std::to_string(i) + plan.row_label(rank),
          "\"" + slot.type + "\" (the cluster's device for rank " + std::to_string(i) + ")");
  }
  // A split plan is bounded by every rank's own stage (once its split is known valid); an
  // FSDP plan by one rank per class (plan.hpp).
  if (plan.has_split()) {
    check_model_split_for(plan.model_split, scenario, plan_file, "model_split");
    check_unit_passes(plan, full_unit_passes(plan, scenario),
                      "the units of each rank's stage x micro-batches, summed over ranks",
                      plan_file);
  } else {
    check_unit_passes(plan, class_unit_passes(plan, scenario),
                      "units x micro-batches, summed over classes of ranks alike in device, "
                      "node link and row",
                      plan_file);
  }
  // The default split written out is checked too (its stage's layers): plans that wrote none
  // hold the default split without stages.
  if (!plan.has_split() && !plan.model_split.stages.empty())
    check_model_split_for(plan.model_split, scenario, plan_file, "model_split");
  if (const auto why =
          schedule::attention_core_refusal(scenario.job.model, plan.activation_checkpointing))
    throw ValidationError(plan_file, "activation_checkpointing",
                          brief(to_json(plan.activation_checkpointing)), *why);
  if (plan.global_batch() != scenario.job.global_batch)
    throw ValidationError(
        plan_file, std::string(compact ? "rank_classes" : "ranks") + "[*].batch",
        "batches summing to " + std::to_string(plan.global_batch()),
        "batches summing to the job's global batch " + std::to_string(scenario.job.global_batch));
}

Json to_json(const Plan& plan, PlanForm form) {
  const bool compact =
      form == PlanForm::Compact ||
      (form == PlanForm::Auto && plan.ranks.size() > static_cast<std::size_t>(kCompactPlanAbove));
  // Key by key, not an initializer list per rank: at 100k ranks the temporaries of the list
  // form were most of writing a plan (bench/README.md).
  Json ranks = Json::array();
  if (!compact) ranks.get_ref<Json::array_t&>().reserve(plan.ranks.size());
  for (const auto& r : plan.ranks) {
    if (compact) break;
    Json& o = ranks.emplace_back(Json::value_t::object);
    o["rank"] = r.rank;
    o["node"] = r.node;
    o["gpu"] = r.gpu;
    o["batch"] = r.batch;
    o["micro_batch"] = r.micro_batch;
    o["micro_batches"] = r.micro_batches;
    o["state_share"] = r.state_share;
  }
  Json j = {{"version", plan.version},
            {"scenario", plan.scenario},
            {"accumulation", to_string(plan.accumulation)},
            {"offload", to_string(plan.offload)},
            {"prefetch", plan.prefetch},
            {"uneven_collective", to_string(plan.uneven_collective)}};
  if (compact)
    j["rank_classes"] = detail::rank_classes_json(plan);
  else
    j["ranks"] = std::move(ranks);
  if (!plan.strategy.empty()) j["strategy"] = plan.strategy;
  if (plan.sharding.hybrid()) j["sharding"] = to_json(plan.sharding, compact);
  if (plan.has_split()) j["model_split"] = to_json(plan.model_split);
  if (!plan.nodes.empty()) j["nodes"] = plan_nodes_json(plan.nodes);
  // Written only when it is not the default, so plans of the default schedule read as before.
  if (!(plan.activation_checkpointing == ActivationCheckpointing{}))
    j["activation_checkpointing"] = to_json(plan.activation_checkpointing);
  if (!plan.predicted.is_null()) j["predicted"] = plan.predicted;
  return j;
}

Plan even_split_plan(const Scenario& scenario, const ModelSplit& split, const std::string& file,
                     const std::string& json_path) {
  check_model_split_for(split, scenario, file, json_path);
  const std::string micro_batches_at = split_key(json_path, "micro_batches");
  const int n = scenario.cluster.num_ranks();
  const int m = split.micro_batches;
  const int global = scenario.job.global_batch;
  if (global % m != 0)
    throw ValidationError(file, micro_batches_at, std::to_string(m),
                          "a micro-batch count dividing the global batch " +
                              std::to_string(global) + " (every micro-batch the same size)");
  const int per_micro_batch = global / m;
  const SplitTopology topo(split, n);
  Plan plan;
  plan.scenario = scenario.name;
  plan.strategy = "split";
  plan.model_split = split;
  const auto& devices = scenario.cluster.ranks();
  plan.ranks.resize(static_cast<std::size_t>(n));
  for (int s = 0; s < topo.stages(); ++s) {
    const int replicas = topo.replicas(s);
    if (replicas > per_micro_batch)
      throw ValidationError(file, micro_batches_at, std::to_string(m),
                            "at most " + std::to_string(global / replicas) +
                                " micro-batches: stage " + std::to_string(s) + " has " +
                                std::to_string(replicas) + " replicas and each needs a sample of " +
                                "every micro-batch of " + std::to_string(per_micro_batch));
    for (int j = 0; j < replicas; ++j) {
      const int size = per_micro_batch / replicas + (j < per_micro_batch % replicas ? 1 : 0);
      for (int t = 0; t < topo.tensor_parallel(s); ++t) {
        const int r = topo.rank_at(s, j, t);
        PlanRank& pr = plan.ranks[static_cast<std::size_t>(r)];
        pr.rank = r;
        pr.node = devices[static_cast<std::size_t>(r)].node;
        pr.gpu = devices[static_cast<std::size_t>(r)].slot->type;
        pr.micro_batch = size;
        pr.micro_batches = m;
        pr.batch = size * m;
        pr.state_share = 1.0 / replicas;
      }
    }
  }
  return plan;
}

}  // namespace cephalo

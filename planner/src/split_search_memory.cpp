// The 3D split search's memory floor (split_search_impl.hpp): the most layers a stage's ranks
// can hold and fit, whatever else the search may still choose for it, so that a family's floor
// prices the recompute its memory forces instead of bounding its candidates as if they fit.
#include <algorithm>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "split_search_impl.hpp"

namespace cephalo::planner::split_detail {

std::vector<int> warmup_chunks(std::span<const pipeline::Step> order) {
  std::vector<int> chunks;
  for (const pipeline::Step& step : order) {
    if (step.pass == pipeline::Pass::Backward) break;
    chunks.push_back(step.chunk);
  }
  return chunks;
}

// A floor on what costmodels::split_rank_memory_terms gives a rank of a stage holding `layers`
// layers, at any place in a pipeline whose order for the stage begins with `warmup`: before the
// stage's first backward those forwards have run (every order begins with micro-batch 0's
// forward of chunk 0; 1F1B's stage s with min(m, p − s) of them, GPipe's with all m), so every
// gathered parameter of the chunks they passed (full / hybrid sharding) and their kept
// activations are held. That is the rule's walk over the stage's chunks of layers alone and
// those forwards (a prefix of the stage's order). The embedding, the head, the later steps and
// the gradients only add, except that the walk receives each chunk's input as a boundary, which
// the first stage's embedding makes instead: a boundary comes off again (with its share of the
// allocator slack). The least over the shardings, sequence parallelism and checkpointing the
// family may still choose (selective recompute keeps less than none, so candidates without
// full recompute are floored by it).
double stage_memory_floor(const Scenario& scenario, const SplitSearchOptions& options,
                          const DeviceSpec& spec, int layers, int T, int b, double share,
                          bool recompute, std::span<const int> warmup, int virtual_stages) {
  const Job& job = scenario.job;
  const auto& constants = costmodels::memory_constants();
  const int V = std::max(1, virtual_stages);
  const int per_chunk = layers / V;
  std::vector<std::vector<int>> chunks(static_cast<std::size_t>(V));
  for (int c = 0; c < V; ++c)
    for (int u = 0; u < per_chunk; ++u)
      chunks[static_cast<std::size_t>(c)].push_back(1 + c * per_chunk + u);
  std::vector<pipeline::Step> order;
  std::vector<int> seen(static_cast<std::size_t>(V), 0);
  for (int c : warmup)
    order.push_back({pipeline::Pass::Forward, seen[static_cast<std::size_t>(c)]++, c});
  if (order.empty()) order.push_back({pipeline::Pass::Forward, 0, 0});
  costmodels::SplitRankMemoryInputs in;
  in.chunks = chunks;
  in.order = order;
  in.tensor_parallel = T;
  in.micro_batch = b;
  in.state_share = share;
  using Kind = ActivationCheckpointing::Kind;
  in.activation_checkpointing.kind =
      recompute                                                            ? Kind::Full
      : options.checkpointing.value_or(Kind::Selective) == Kind::Selective ? Kind::Selective
                                                                           : Kind::None;
  in.gpu_runtime = costmodels::runs_gpu_runtime(spec);
  in.world_size = scenario.cluster.num_ranks();
  const std::vector<ShardingKind> shardings = candidate_shardings(scenario, options);
  std::vector<bool> sps = {false};
  if (T > 1) sps.push_back(true);
  if (options.sequence_parallel) sps = {*options.sequence_parallel};
  const double slack = 1 + costmodels::allocator_slack_fraction(in.gpu_runtime, constants);
  double least = std::numeric_limits<double>::infinity();
  for (ShardingKind sharding : shardings)
    for (bool sp : sps) {
      in.sharding = sharding;
      in.sequence_parallel = sp;
      // The rule scales the held bytes at its peak (gathered parameters, gradients and
      // activations) by two calibrated factors; another walk's peak may split its bytes
      // differently between them, so the held bytes count here at the smaller factor.
      double fixed = 0, framework = 0, held = 0;
      for (const auto& t : costmodels::split_rank_memory_terms(job, in, constants)) {
        if (t.name == "gathered_params" || t.name == "unit_gradient")
          held += constants.unit_scale > 0 ? t.bytes / constants.unit_scale : 0;
        else if (t.name == "activations")
          held += constants.activation_scale > 0 ? t.bytes / constants.activation_scale : 0;
        else if (t.name == "framework_buffers")
          framework = t.bytes;
        else if (t.name != "fragmentation")
          fixed += t.bytes;  // the training state and the runtime's reserves
      }
      held -= costmodels::split_boundary_bytes(job, b, T, sp);
      const double scale = std::min(constants.unit_scale, constants.activation_scale);
      least = std::min(least, fixed + slack * (framework + scale * std::max(0.0, held)));
    }
  return least;
}

int Search::warmup_id(int p, int m, const pipeline::PipelineSchedule& schedule, int stage) {
  const unsigned long long key = (static_cast<unsigned long long>(p) << 48) ^
                                 (static_cast<unsigned long long>(m) << 24) ^
                                 (static_cast<unsigned long long>(schedule.kind) << 20) ^
                                 static_cast<unsigned long long>(schedule.virtual_stages);
  auto it = warmups_.find(key);
  if (it == warmups_.end())
    it = warmups_.emplace(key, std::vector<int>(static_cast<std::size_t>(p), -1)).first;
  int& id = it->second[static_cast<std::size_t>(stage)];
  if (id < 0)
    id = intern_warmup(warmup_chunks(pipeline::stage_order(stage, p, m, schedule)),
                       schedule.virtual_stages);
  return id;
}

int Search::forwards_id(int forwards) {
  const auto k = static_cast<std::size_t>(std::max(1, forwards));
  if (forwards_ids_.size() <= k) forwards_ids_.resize(k + 1, -1);
  if (forwards_ids_[k] < 0) forwards_ids_[k] = intern_warmup(std::vector<int>(k, 0), 1);
  return forwards_ids_[k];
}

int Search::intern_warmup(std::vector<int> chunks, int virtual_stages) {
  chunks.push_back(-virtual_stages);  // the key holds V too
  const auto [it, added] =
      warmup_ids_.emplace(std::move(chunks), static_cast<int>(warmup_ids_.size()));
  if (added) warmup_of_.push_back(&it->first);
  return it->second;
}

int Search::layer_cap(const StageShape& shape, int m, bool recompute, int warmup) {
  const Job& job = scenario_.job;
  const int layers = job.model.num_layers;
  const int T = shape.tensor_parallel;
  // Even replicas: each runs global batch / (m · replicas) samples and holds 1 / replicas of
  // the state (hybrid sharding's share of a node is no less). Balanced by speed: each replica
  // holds at least one sample and some share, so the floor is at one sample and no state.
  const int b =
      shape.by_speed
          ? 1
          : static_cast<int>(job.global_batch / (static_cast<long long>(m) * shape.replicas));
  const double share = shape.by_speed ? 0.0 : 1.0 / shape.replicas;
  if (warmup < 0) warmup = forwards_id(1);
  // Every replica must fit: per replica its GPU and its tightest rank's usable bytes (the
  // estimate's capacity), each distinct pair once (read once per stage, by class). The cap
  // reads nothing else of the stage's ranks, so it is remembered by that set: stages of one
  // first rank and size can differ in it (a node's type run and its k-th slice of every run).
  const ShapeClasses& classes = shape_classes(shape);
  const std::pair<unsigned long long, unsigned long long> key{
      (static_cast<unsigned long long>(classes.fits_id) << 32) ^
          (static_cast<unsigned long long>(shape.replicas) << 10) ^
          (static_cast<unsigned long long>(T) << 2) ^
          (static_cast<unsigned long long>(shape.by_speed) << 1) ^
          static_cast<unsigned long long>(recompute),
      (static_cast<unsigned long long>(b) << 32) ^ static_cast<unsigned long long>(warmup)};
  const auto known = layer_caps_.find(key);
  if (known != layer_caps_.end()) return static_cast<int>(known->second);
  const std::vector<int>& keyed = *warmup_of_[static_cast<std::size_t>(warmup)];
  const int V = -keyed.back();
  const std::span<const int> chunks(keyed.data(), keyed.size() - 1);
  const auto& replicas = classes.fits;
  // In whole chunks: V layers at a time.
  int cap = layers / V;
  for (const auto& [spec, capacity] : replicas) {
    // The floor grows with the layers: the most chunks' worth that fit, by bisection.
    int lo = 0, hi = cap;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (stage_memory_floor(scenario_, options_, *spec, mid * V, T, b, share, recompute, chunks,
                             V) <= capacity)
        lo = mid;
      else
        hi = mid - 1;
    }
    cap = lo;
  }
  layer_caps_.emplace(key, cap * V);
  return cap * V;
}

}  // namespace cephalo::planner::split_detail

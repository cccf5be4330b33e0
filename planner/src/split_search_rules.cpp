// The search's checks of a request before any candidate, the stage layouts it builds from the
// cluster (split_search_rules.hpp), and the layer counts it deals by speed
// (balanced_layer_counts, split_search.hpp).
#include "split_search_rules.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::planner {
namespace split_detail {

std::vector<TypeBlock> type_blocks(const Cluster& cluster) {
  std::vector<TypeBlock> blocks;
  for (int r = 0; r < cluster.num_ranks(); ++r) {
    const auto& rank = cluster.ranks()[static_cast<std::size_t>(r)];
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const TypeBlock& b) {
      return b.spec->name == rank.slot->spec.name;
    });
    if (it == blocks.end()) {
      blocks.push_back({&rank.slot->spec, {}, {}});
      it = blocks.end() - 1;
    }
    it->ranks.push_back(r);
    ++it->per_node[rank.node];
  }
  return blocks;
}

std::vector<int> divisors(long long n, long long cap) {
  std::vector<long long> low, high;
  for (long long i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      low.push_back(i);
      if (i != n / i) high.push_back(n / i);
    }
  std::vector<int> d;
  for (long long x : low)
    if (x <= cap) d.push_back(static_cast<int>(x));
  for (auto it = high.rbegin(); it != high.rend(); ++it)
    if (*it <= cap) d.push_back(static_cast<int>(*it));
  return d;
}

std::vector<int> tp_degrees(const TypeBlock& block, const ModelSpec& model,
                            const std::optional<int>& fixed) {
  const int kv = model.kv_heads > 0 ? model.kv_heads : model.heads;
  std::vector<int> out;
  int smallest_node = std::numeric_limits<int>::max();
  for (const auto& [node, count] : block.per_node) smallest_node = std::min(smallest_node, count);
  for (int t = 1; t <= smallest_node; ++t) {
    if (fixed && t != *fixed) continue;
    if (model.heads % t != 0 || kv % t != 0) continue;
    bool fits = true;
    for (const auto& [node, count] : block.per_node) fits = fits && count % t == 0;
    if (fits) out.push_back(t);
  }
  return out;
}

std::vector<std::vector<int>> node_runs(int n) {
  std::vector<std::vector<int>> out;
  if (n <= kComposedNodes) {
    for (unsigned mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<int> runs{1};
      for (int i = 1; i < n; ++i) {
        if (mask & (1u << (i - 1)))
          runs.push_back(1);
        else
          ++runs.back();
      }
      out.push_back(std::move(runs));
    }
    return out;
  }
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) out.push_back(std::vector<int>(static_cast<std::size_t>(n / k), k));
  return out;
}

std::vector<PipelineStage> lay_out(const std::vector<StageShape>& shapes,
                                   const std::vector<int>& counts, int virtual_stages) {
  const std::size_t p = shapes.size();
  std::vector<PipelineStage> stages(p);
  int pos = 0;
  for (int c = 0; c < virtual_stages; ++c)
    for (std::size_t s = 0; s < p; ++s) {
      const int q = counts[s] / virtual_stages;
      stages[s].chunks.push_back({pos, pos + q});
      pos += q;
    }
  for (std::size_t s = 0; s < p; ++s) {
    stages[s].ranks = shapes[s].ranks;
    stages[s].tensor_parallel = shapes[s].tensor_parallel;
  }
  return stages;
}

bool backend_only(const Cluster& cluster) {
  for (const auto& rank : cluster.ranks())
    if (rank.slot->spec.kind != "cpu") return false;
  return cluster.num_ranks() > 0;
}

std::vector<ShardingKind> candidate_shardings(const Scenario& scenario,
                                              const SplitSearchOptions& o) {
  if (o.sharding) return {*o.sharding};
  if (schedule::replicates_state(scenario.job.implementation.framework))
    return {ShardingKind::None};
  return {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None};
}

void check_fixed_dimensions(const Scenario& scenario, const SplitSearchOptions& o) {
  const std::string& source = o.options_source;
  const auto flag = [&](const char* name) { return spell_option(source, name); };
  const auto refuse = [&](const char* name, const std::string& value, const std::string& rule) {
    throw ValidationError(source, flag(name), value, rule);
  };
  const Framework framework = scenario.job.implementation.framework;
  if (o.sharding && *o.sharding != ShardingKind::None && schedule::replicates_state(framework))
    refuse("sharding", to_string(*o.sharding),
           "none for framework " + to_string(framework) +
               " (it keeps a full replica of each stage's training state on every rank of the "
               "stage's data-parallel group)");
  const int layers = scenario.job.model.num_layers;
  const int ranks = scenario.cluster.num_ranks();
  const long long batch = scenario.job.global_batch;
  const std::string L = std::to_string(layers);
  if (o.pipeline_stages) {
    const int p = *o.pipeline_stages;
    const std::string v = std::to_string(p);
    if (p > layers)
      refuse("pipeline_stages", v, "at most the model's " + L + " layers (each stage holds one)");
    if (p > ranks)
      refuse("pipeline_stages", v,
             "at most the cluster's " + std::to_string(ranks) + " ranks (each stage has one)");
    if (p > o.max_pipeline_stages)
      refuse("pipeline_stages", v,
             "at most " + std::to_string(o.max_pipeline_stages) + " stages (the search's bound)");
  }
  if (o.micro_batches) {
    const int m = *o.micro_batches;
    const std::string v = std::to_string(m);
    if (m > batch || batch % m != 0)
      refuse("micro_batches", v,
             "a divisor of the global batch " + std::to_string(batch) +
                 " (each micro-batch holds the same samples)");
    if (o.pipeline_stages && m < *o.pipeline_stages)
      refuse("micro_batches", v,
             "at least " + flag("pipeline_stages") + " " + std::to_string(*o.pipeline_stages) +
                 " (a pipeline needs a micro-batch per stage in flight)");
  }
  if (o.schedule && o.schedule->kind == pipeline::PipelineSchedule::Kind::Interleaved) {
    const int v = o.schedule->virtual_stages;
    const std::string text = "interleaved:" + std::to_string(v);
    if (layers % v != 0)
      refuse("pipeline_schedule", text,
             "V dividing the model's " + L + " layers (every chunk holds the same count)");
    if (2 * v > layers)
      refuse("pipeline_schedule", text,
             "V at most half the model's " + L + " layers (two stages of V chunks each)");
    if (o.pipeline_stages) {
      const int p = *o.pipeline_stages;
      if (p < 2)
        refuse("pipeline_schedule", text,
               "2 or more stages (" + flag("pipeline_stages") + " 1 has nothing to interleave)");
      if (static_cast<long long>(p) * v > layers)
        refuse("pipeline_schedule", text,
               "V x " + flag("pipeline_stages") + " " + std::to_string(p) +
                   " at most the model's " + L + " layers");
      if (o.micro_batches && *o.micro_batches % p != 0)
        refuse("micro_batches", std::to_string(*o.micro_batches),
               "a multiple of " + flag("pipeline_stages") + " " + std::to_string(p) +
                   " with an interleaved schedule (Megatron's rule)");
    }
  }
  if (o.sequence_parallel && *o.sequence_parallel && o.tensor_parallel && *o.tensor_parallel == 1)
    refuse("sequence_parallel", "true",
           flag("tensor_parallel") + " above 1 (sequence parallelism splits the TP group's work; " +
               flag("tensor_parallel") + " 1 has none)");
  if (o.sequence_parallel && *o.sequence_parallel && backend_only(scenario.cluster)) {
    ModelSplit asked;
    asked.sequence_parallel = true;
    refuse(
        "sequence_parallel", "true",
        "a split the backend runs on this cluster of CPU devices: " + backend_split_refusal(asked));
  }
}

}  // namespace split_detail

std::vector<int> balanced_layer_counts(int layers, const std::vector<double>& speed) {
  const std::size_t p = speed.size();
  if (p == 0 || layers < static_cast<int>(p))
    throw std::invalid_argument("balanced_layer_counts: fewer layers than stages");
  const double total = std::accumulate(speed.begin(), speed.end(), 0.0);
  // Each stage one layer first, the rest by largest remainder of its share.
  const int rest = layers - static_cast<int>(p);
  std::vector<int> counts(p, 1);
  std::vector<std::pair<double, std::size_t>> remainder;
  int dealt = 0;
  for (std::size_t s = 0; s < p; ++s) {
    const double share = total > 0 ? rest * speed[s] / total : static_cast<double>(rest) / p;
    const int whole = static_cast<int>(std::floor(share));
    counts[s] += whole;
    dealt += whole;
    remainder.push_back({share - whole, s});
  }
  std::sort(remainder.begin(), remainder.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int i = 0; dealt < rest; ++i, ++dealt)
    ++counts[remainder[static_cast<std::size_t>(i)].second];
  return counts;
}

}  // namespace cephalo::planner

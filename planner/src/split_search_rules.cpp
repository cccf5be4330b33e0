// The search's checks of a request before any candidate (split_search_rules.hpp) and the
// layer counts it deals by speed (balanced_layer_counts, split_search.hpp).
#include "split_search_rules.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::planner {
namespace split_detail {

double overshoot(const SplitEstimate& e) {
  double worst = 0;
  for (const auto& s : e.stages)
    if (s.memory.capacity > 0) worst = std::max(worst, s.memory.total / s.memory.capacity);
  return worst;
}

bool backend_only(const Cluster& cluster) {
  for (const auto& rank : cluster.ranks())
    if (rank.slot->spec.kind != "cpu") return false;
  return cluster.num_ranks() > 0;
}

void check_fixed_dimensions(const Scenario& scenario, const SplitSearchOptions& o) {
  const std::string& source = o.options_source;
  const auto flag = [&](const char* name) { return spell_option(source, name); };
  const auto refuse = [&](const char* name, const std::string& value, const std::string& rule) {
    throw ValidationError(source, flag(name), value, rule);
  };
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

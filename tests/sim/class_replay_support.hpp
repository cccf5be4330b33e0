#pragma once
// What the class replay tests share: their scenario (a small GPT on the test's nodes, parsed
// as a user's file), the report fields the class replay must reproduce, and a rank's op times.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::sim::testing {

// A GPT of `layers` layers (hidden 1024, 16 heads, vocabulary 50257: equal shares of the
// embedding are not equal slices), sequence 512, fp16 compute with fp32 master weights and
// reduction, on `nodes` (the cluster's "nodes" list).
inline Scenario class_test_scenario(const std::string& name, const Json& nodes, int layers,
                                    int global_batch, bool tied_embeddings = true) {
  const Json doc = {
      {"name", name},
      {"cluster", {{"name", "c"}, {"nodes", nodes}}},
      {"job",
       {{"name", "j"},
        {"model",
         {{"name", "class-gpt"},
          {"family", "gpt"},
          {"layers", layers},
          {"hidden", 1024},
          {"heads", 16},
          {"tied_embeddings", tied_embeddings},
          {"vocab_size", 50257}}},
        {"sequence_length", 512},
        {"global_batch", global_batch},
        {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp32"}}}}}};
  JsonReader reader(doc, "<" + name + " scenario>");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

// The report as JSON without `events` (the replay's own work: fewer ranks, fewer events).
inline Json comparable(const traces::IterationReport& report) {
  Json j = traces::to_json(report);
  j.erase("events");
  return j;
}

// What a replay under a bound of `most` ranks (SimOptions::most_replayed_ranks) says: the
// ranks it would build when it refuses (ReplayTooLarge), 0 when it replays.
inline int refused_above(const Plan& plan, const Scenario& scenario,
                         const costmodels::CostModels& models, int most) {
  SimOptions options;
  options.most_replayed_ranks = most;
  try {
    simulate_plan(plan, scenario, *models.compute, *models.comm, options);
  } catch (const ReplayTooLarge& e) {
    return e.ranks();
  }
  return 0;
}

// A rank's program as (start, end) pairs in program order.
inline std::vector<std::pair<std::int64_t, std::int64_t>> program_times(
    const traces::TrainingGraph& graph, const SimResult& result, int rank) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& op : graph.program(rank))
    out.emplace_back(result.start_ns[op.id], result.end_ns[op.id]);
  return out;
}

}  // namespace cephalo::sim::testing

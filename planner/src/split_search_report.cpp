// The 3D estimate's and the split search's tables and record: the CLI prints these, Python can
// return them (the choice between the families is split_plan.cpp's).
#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <sstream>

#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/planner/split_search.hpp"

namespace cephalo::planner {
namespace {

// A stage's samples per replica: "4", or runs of equal replicas "12*4 4*4" (value*count).
std::string replica_batches_text(const StageEstimate& s) {
  const auto& b = s.replica_micro_batches;
  if (b.empty() || std::adjacent_find(b.begin(), b.end(), std::not_equal_to<>()) == b.end())
    return std::to_string(s.micro_batch);
  std::ostringstream out;
  for (std::size_t i = 0; i < b.size();) {
    std::size_t j = i;
    while (j < b.size() && b[j] == b[i]) ++j;
    out << (i > 0 ? " " : "") << b[i];
    if (j - i > 1) out << '*' << (j - i);
    i = j;
  }
  return out.str();
}

const char* replica_batches_name(ReplicaBatches r) {
  switch (r) {
    case ReplicaBatches::Even:
      return "even";
    case ReplicaBatches::BySpeed:
      return "by_speed";
    case ReplicaBatches::Given:
      return "given";
  }
  return "even";
}

}  // namespace

Json to_json(const SplitSearchResult& r) {
  Json alternatives = Json::array();
  for (const auto& c : r.best_per_stages)
    alternatives.push_back({{"pipeline_stages", c.split.stages.size()},
                            {"model_split", to_json(c.split)},
                            {"recompute", c.checkpointing == ActivationCheckpointing::Kind::Full},
                            {"replica_batches", replica_batches_name(c.replica_batches)},
                            {"iteration_s", c.estimate.iteration_s}});
  Json out = {{"model_split", to_json(r.split)},
              {"recompute", r.checkpointing == ActivationCheckpointing::Kind::Full},
              {"replica_batches", replica_batches_name(r.replica_batches)},
              {"estimate", to_json(r.estimate)},
              {"evaluated", r.evaluated},
              {"refused", r.refused},
              {"pruned", r.pruned},
              {"bounded", r.bounded},
              {"best_per_pipeline_stages", alternatives}};
  // Only a search whose budget ran out left anything.
  if (r.unexplored > 0) {
    out["unexplored"] = r.unexplored;
    out["unexplored_floor_s"] = r.unexplored_floor;
    out["budget_candidates"] = r.budget;
  }
  return out;
}

std::string render_split_estimate(const SplitEstimate& e, const ModelSplit& split) {
  std::ostringstream out;
  out << e.split << "\n" << e.schedule << "\n";
  TextTable table({"stage", "ranks", "gpu", "layers", "T", "replicas", "micro-batch", "compute/mb",
                   "TP comm/mb", "bubble", "DP comm", "optimizer", "peak memory", "capacity"});
  for (std::size_t i = 0; i < e.stages.size(); ++i) {
    const auto& s = e.stages[i];
    const std::vector<int>* ranks = i < split.stages.size() ? &split.stages[i].ranks : nullptr;
    table.add_row({std::to_string(s.stage),
                   ranks && !ranks->empty()
                       ? std::to_string(ranks->front()) + "-" + std::to_string(ranks->back())
                       : "all",
                   s.gpu, std::to_string(s.layers), std::to_string(s.tensor_parallel),
                   std::to_string(s.replicas), replica_batches_text(s),
                   format_seconds(s.forward_compute + s.backward_compute),
                   format_seconds(s.tp_comm_forward + s.tp_comm_backward), format_seconds(s.bubble),
                   format_seconds(s.dp_comm), format_seconds(s.optimizer_step),
                   format_bytes(s.memory.total), format_bytes(s.memory.capacity)});
  }
  out << table.render();
  out << "per stage: compute and TP comm per micro-batch; the bubble (waiting for pipeline "
         "neighbours) is idle; the iteration is each rank's compute + exposed communication + "
         "idle\n";
  return out.str();
}

std::string render_split_search(const SplitSearchResult& r) {
  std::ostringstream out;
  out << render_split_estimate(r.estimate, r.split);
  out << "iteration " << format_seconds(r.estimate.iteration_s) << " (estimated; " << r.evaluated
      << " candidates priced, " << r.refused << " did not fit, " << r.pruned << " pruned, "
      << r.bounded << " skipped by bound)"
      << (r.checkpointing == ActivationCheckpointing::Kind::Full ? ", full activation checkpointing"
          : r.checkpointing == ActivationCheckpointing::Kind::Selective ? ", selective recompute"
                                                                        : "")
      << "\n";
  if (r.unexplored > 0)
    out << "search budget spent (" << r.budget
        << " candidates priced, the climbs included): " << r.unexplored
        << " layouts or climbs left, every split left estimated at least "
        << format_seconds(r.unexplored_floor) << " (this split at most " << std::fixed
        << std::setprecision(1)
        << std::max(0.0, 100 * (r.estimate.iteration_s / r.unexplored_floor - 1))
        << std::defaultfloat << " % slower by estimate)\n";
  const SplitCandidate* alt = nullptr;
  for (const auto& c : r.best_per_stages)
    if (c.split.stages.size() != r.split.stages.size() &&
        (!alt || c.estimate.iteration_s < alt->estimate.iteration_s))
      alt = &c;
  if (alt)
    out << "best other pipeline depth: PP " << alt->split.stages.size() << " at "
        << format_seconds(alt->estimate.iteration_s) << " (" << alt->estimate.split << ")\n";
  else
    out << "best other pipeline depth: none (no other depth searched fits)\n";
  return out.str();
}

}  // namespace cephalo::planner

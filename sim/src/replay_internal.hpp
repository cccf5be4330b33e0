#pragma once
// Internal: the replay in class mode (class_replay.cpp drives it, replay.cpp runs it).
#include <vector>

#include "cephalo/sim/replay.hpp"

namespace cephalo::sim::detail {

struct ClassView {
  // Per rank of the plan: the rank whose replay stands for it (itself for a representative,
  // always ≤ the rank). Only representatives have ops in the graph.
  std::vector<int> representative;
  // Whether the plan's collectives span more than one node (the representatives alone may all
  // sit in one node): decides NVLink-only versus PCIe + NIC links, as in the full replay.
  bool spans_nodes = false;
};

SimResult replay_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan, const costmodels::ComputeModel& compute,
                         const costmodels::CommModel& comm, const SimOptions& options,
                         const ClassView& view);

}  // namespace cephalo::sim::detail

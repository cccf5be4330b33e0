#pragma once
// Internal: the replay in class mode (class_replay.cpp drives it, replay.cpp runs it).
#include <vector>

#include "cephalo/sim/replay.hpp"

namespace cephalo::sim::detail {

struct ClassView {
  // Per rank of the plan: the rank whose replay stands for it (itself for a representative,
  // always ≤ the rank). Only representatives have ops in the graph.
  std::vector<int> representative;
  // Whether a collective's full membership spans more than one node (the representatives alone
  // may all sit in one node): decides NVLink-only versus PCIe + NIC links, as in the full
  // replay. The cross-group reduction (group -1) has every rank; a group collective its group.
  bool spans_nodes = false;       // every rank of the plan
  std::vector<char> group_spans;  // per sharding group (hybrid); empty: full sharding
  bool collective_spans_nodes(int group) const {
    return group < 0 || group_spans.empty() ? spans_nodes
                                            : group_spans[static_cast<std::size_t>(group)] != 0;
  }
};

SimResult replay_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan, const costmodels::ComputeModel& compute,
                         const costmodels::CommModel& comm, const SimOptions& options,
                         const ClassView& view);

}  // namespace cephalo::sim::detail

#pragma once
// Internal: the replay in class mode (class_replay.cpp drives it, replay.cpp runs it, and
// split_classes.cpp forms the classes of a split plan).
#include <optional>
#include <string>
#include <vector>

#include "cephalo/sim/class_replay.hpp"
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
  // A split plan: per collective of the graph, 1 or 0 when its full membership does or does not
  // span nodes, -1 when the graph holds all its members (they say it). Empty: an FSDP plan.
  std::vector<signed char> collective_spans;
  bool collective_spans_nodes(const traces::Collective& c, bool members_span) const {
    if (!collective_spans.empty()) {
      const signed char v = collective_spans[static_cast<std::size_t>(c.id)];
      return v < 0 ? members_span : v != 0;
    }
    return c.group < 0 || group_spans.empty() ? spans_nodes
                                              : group_spans[static_cast<std::size_t>(c.group)] != 0;
  }
};

SimResult replay_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan, const costmodels::ComputeModel& compute,
                         const costmodels::CommModel& comm, const SimOptions& options,
                         const ClassView& view);

// A split plan's classes (split_classes.cpp), from a graph of the plan built for any of its
// ranks (its domains' layouts and static bytes are the whole plan's). Empty, with `why` saying
// what stands in the way, where the classes cannot be formed.
std::optional<RankClasses> split_rank_classes(const traces::TrainingGraph& probe,
                                              const Scenario& scenario, const Plan& plan,
                                              std::string& why);
// ClassView::collective_spans of a split plan's graph built for its representatives.
std::vector<signed char> split_collective_spans(const traces::TrainingGraph& graph,
                                                const Scenario& scenario);

}  // namespace cephalo::sim::detail

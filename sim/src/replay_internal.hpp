#pragma once
// Internal: the replay in class mode (class_replay.cpp drives it, replay.cpp runs it, and
// split_classes.cpp forms the classes of a split plan), and the full membership of a
// collective that every replay reads.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::sim::detail {

struct ClassView {
  // Per rank of the plan: the rank whose replay stands for it (itself for a representative,
  // always ≤ the rank). Only representatives have ops in the graph.
  std::vector<int> representative;
};

// The ranks of a data-parallel collective's full membership, whichever of them `graph` holds:
// its sharding group's, or every rank of its domain for the cross-group reduction (group -1).
// The domain is its first member's (an FSDP plan's one domain is every rank, in rank order).
// The one definition of the membership that full_collective_request prices and
// collective_spans_nodes places.
template <typename Visit>
void for_each_full_member(const traces::TrainingGraph& graph, const traces::Collective& c,
                          Visit&& visit) {
  const int first = graph.members(c).front().rank;
  const traces::ShardLayout& layout = graph.layout_of(first);
  const auto ranks = graph.layout_ranks(first);
  if (c.group >= 0) {
    for (int position : layout.group(c.group)) visit(ranks[static_cast<std::size_t>(position)]);
  } else {
    for (int position = 0; position < layout.num_ranks(); ++position)
      visit(ranks[static_cast<std::size_t>(position)]);
  }
}

// Per collective of `graph` (a graph of every rank or of representatives, of any plan: FSDP,
// hybrid or split): 1 when its full membership sits on more than one node, which decides
// NVLink-only versus PCIe + NIC links. A data-parallel collective's membership is
// for_each_full_member's (the representatives alone may all sit in one node); a tensor-
// parallel, pipeline or tied collective has all its members in the graph (a class replay
// builds its pipeline lane whole), so they say it.
std::vector<char> collective_spans_nodes(const traces::TrainingGraph& graph,
                                         const Scenario& scenario);

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

}  // namespace cephalo::sim::detail

#pragma once
// What the comm model is asked about one of the graph's collectives: its kind, its members and
// their shard bytes, the resolved uneven variant, and for a hybrid plan's cross-group reduction
// the pieces (ShardLayout). The one translation from graph to comm model, for the simulator and
// the planner alike.
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

costmodels::CollectiveKind collective_kind(OpKind kind);

costmodels::CollectiveRequest collective_request(const TrainingGraph& graph, const Collective& c,
                                                 bool overlaps_compute = false);

// Seconds the graph's collective `c` takes by `comm`: the request's time, times the calls of a
// tensor-parallel collective (each of sequence parallelism's calls an all-gather plus a
// reduce-scatter of the buffer); a pipeline transfer is a two-rank broadcast.
double collective_seconds(const costmodels::CommModel& comm, const Cluster& cluster,
                          const TrainingGraph& graph, const Collective& c,
                          bool overlaps_compute = false);
// The same rule for a request already made for `c` (sim/'s class replay asks with the full
// membership of a collective whose graph holds only some of its members).
double collective_seconds(const costmodels::CommModel& comm, const Cluster& cluster,
                          costmodels::CollectiveRequest request, const Collective& c);

}  // namespace cephalo::traces

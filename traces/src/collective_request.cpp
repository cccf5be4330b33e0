#include "cephalo/traces/collective_request.hpp"

namespace cephalo::traces {

costmodels::CollectiveKind collective_kind(OpKind k) {
  switch (k) {
    case OpKind::Send:
    case OpKind::Recv:
      return costmodels::CollectiveKind::Broadcast;
    case OpKind::AllGather:
    case OpKind::AllGatherV:
    case OpKind::TpGatherScatter:  // its reduce-scatter half: collective_seconds
      return costmodels::CollectiveKind::AllGather;
    case OpKind::ReduceScatter:
    case OpKind::ReduceScatterV:
      return costmodels::CollectiveKind::ReduceScatter;
    default:
      return costmodels::CollectiveKind::AllReduce;
  }
}

costmodels::CollectiveRequest collective_request(const TrainingGraph& g, const Collective& c,
                                                 bool overlaps_compute) {
  costmodels::CollectiveRequest req;
  req.kind = collective_kind(c.kind);
  req.uneven =
      c.variant == CollectiveVariant::Padded ? UnevenCollective::Padded : UnevenCollective::Grouped;
  req.overlaps_compute = overlaps_compute;
  // Parameter gathers and gradient reductions (not tensor-parallel or pipeline activations):
  // the framework's buffer copies around them are priced with them (costmodels).
  req.training_state = c.kind == OpKind::AllGather || c.kind == OpKind::AllGatherV ||
                       c.kind == OpKind::ReduceScatter || c.kind == OpKind::ReduceScatterV ||
                       c.kind == OpKind::AllReduce;
  for (const auto& m : g.members(c)) {
    req.ranks.push_back(m.rank);
    req.shard_bytes.push_back(m.shard_bytes);
  }
  if (c.kind == OpKind::AllReduce && c.group < 0) {
    // The cross-group reduction's pieces, in its layout's positions (a split's domain numbers
    // its own ranks), as global ranks.
    const int first = g.members(c).front().rank;
    const ShardLayout& layout = g.layout_of(first);
    const auto ranks = g.layout_ranks(first);
    for (const auto& seg : g.segments(c))
      for (const CrossPiece& p : layout.pieces(seg.unit)) {
        std::vector<int> owners;
        for (int o : layout.owners(p)) owners.push_back(ranks[static_cast<std::size_t>(o)]);
        req.pieces.push_back({std::move(owners), static_cast<double>(p.count) * c.element_bytes});
      }
  }
  return req;
}

double collective_seconds(const costmodels::CommModel& comm, const Cluster& cluster,
                          const TrainingGraph& graph, const Collective& c, bool overlaps_compute) {
  return collective_seconds(comm, cluster, collective_request(graph, c, overlaps_compute), c);
}

double collective_seconds(const costmodels::CommModel& comm, const Cluster& cluster,
                          costmodels::CollectiveRequest req, const Collective& c) {
  double t = comm.collective(cluster, req).seconds;
  if (c.kind == OpKind::TpGatherScatter) {
    req.kind = costmodels::CollectiveKind::ReduceScatter;
    t += comm.collective(cluster, req).seconds;
  }
  return t * c.calls;
}

}  // namespace cephalo::traces

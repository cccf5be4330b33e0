#include "cephalo/traces/collective_request.hpp"

namespace cephalo::traces {

costmodels::CollectiveKind collective_kind(OpKind k) {
  switch (k) {
    case OpKind::AllGather:
    case OpKind::AllGatherV:
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
  for (const auto& m : g.members(c)) {
    req.ranks.push_back(m.rank);
    req.shard_bytes.push_back(m.shard_bytes);
  }
  if (c.group < 0) {
    const ShardLayout& layout = g.layout();
    for (const auto& seg : g.segments(c))
      for (const CrossPiece& p : layout.pieces(seg.unit)) {
        auto owners = layout.owners(p);
        req.pieces.push_back({std::vector<int>(owners.begin(), owners.end()),
                              static_cast<double>(p.count) * c.element_bytes});
      }
  }
  return req;
}

}  // namespace cephalo::traces

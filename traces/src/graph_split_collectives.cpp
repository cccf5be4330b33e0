// SplitGraphBuilder's collectives: the data-parallel domains' at once; the tensor-parallel,
// pipeline transfers and the tied embedding's (StageLinks, asked for by the emitter), each made
// by its first member and found by the others.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "graph_split.hpp"

namespace cephalo::traces {

// ---- collectives ----------------------------------------------------------------------------

std::int32_t SplitGraphBuilder::tensor_parallel(int rank, OpKind kind, OpKind issued_by, int unit,
                                                Pass pass, int calls, double element_bytes,
                                                double elements) {
  const RankPlace& place = g_.places_[static_cast<std::size_t>(rank)];
  const int group = tp_group_base_[static_cast<std::size_t>(place.stage)] + place.replica;
  auto& ids = tp_ids_[static_cast<std::size_t>(group)];
  // Every member emits its group's TP collectives in the same order: the n-th of one member is
  // the n-th of every other, made by whichever member comes first.
  auto& cursor = tp_cursor_[static_cast<std::size_t>(rank)];
  if (cursor < ids.size()) return ids[cursor++];
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = kind;
  c.group = -1;
  c.unit = unit;
  c.pass = pass;
  c.phase = -1;
  c.element_bytes = element_bytes;
  c.total_bytes = elements * element_bytes;
  c.calls = calls;
  c.issued_by = issued_by;
  c.phase = pass == Pass::Forward ? unit : 2 * units_ - 1 - unit;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const auto members = topo_.tp_group(place.stage, place.replica);
  c.members_count = 0;
  for (int r : members) {
    if (!built(r)) continue;
    ++c.members_count;
    CollectiveMember m;
    m.rank = r;
    m.elements = std::llround(elements);
    m.shard_bytes = c.total_bytes / static_cast<double>(members.size());
    g_.members_.push_back(m);
  }
  g_.collectives_.push_back(c);
  ids.push_back(c.id);
  ++cursor;
  return c.id;
}

std::vector<StageLinks::Transfer> SplitGraphBuilder::transfers(int rank, int boundary, bool forward,
                                                               int micro_batch, bool sends) {
  std::vector<StageLinks::Transfer> out;
  for (const Transfer* t : transfers_of(boundary, forward, rank, sends)) {
    const double bytes = boundary_bytes(t->rows);
    out.push_back({transfer_collective(*t, forward, micro_batch, boundary, bytes), bytes});
  }
  return out;
}

std::int32_t SplitGraphBuilder::transfer_collective(const Transfer& t, bool forward,
                                                    int micro_batch, int boundary, double bytes) {
  const std::array<std::int64_t, 5> key{
      1, forward ? 1 : 0, boundary, static_cast<std::int64_t>(micro_batch) << 32 | t.from, t.to};
  if (auto it = keyed_.find(key); it != keyed_.end()) return it->second;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::Send;
  c.group = -1;
  c.pass = forward ? Pass::Forward : Pass::Backward;
  c.element_bytes = bytes_per_element(scenario_.job.precision.compute);
  c.total_bytes = bytes;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const std::int64_t elements = std::llround(bytes / c.element_bytes);
  c.members_count = 0;
  if (built(t.from)) {
    g_.members_.push_back({t.from, kNoOp, elements, bytes});  // the sender
    ++c.members_count;
  }
  if (built(t.to)) {
    g_.members_.push_back({t.to, kNoOp, elements, 0.0});  // the receiver
    ++c.members_count;
  }
  g_.collectives_.push_back(c);
  keyed_.emplace(key, c.id);
  return c.id;
}

// Every domain's collectives at once, in domain order (graph_ops.hpp's DomainCollectives): its
// stage's units gathered before their first forward and kept (full, hybrid; optimizer: the
// updated parameters after the step), reduced after their last backward (none: only across
// the replicas). A domain with no built rank has none.
void SplitGraphBuilder::setup_domain_collectives() {
  const ShardingKind kind = plan_.model_split.sharding;
  for (std::size_t d = 0; d < g_.domain_layouts_.size(); ++d) {
    const std::vector<int>& ranks = g_.domain_ranks_[d];
    if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return built(r); })) {
      domain_collectives_.emplace_back();
      continue;
    }
    const int stage = g_.places_[static_cast<std::size_t>(ranks.front())].stage;
    std::vector<DomainPhase> phases;
    for (int u = 0; u < units_; ++u)
      phases.push_back(
          {{u},
           u,
           Pass::Forward,
           u,
           kind != ShardingKind::None && g_.unit_stage_[static_cast<std::size_t>(u)] == stage,
           false});
    for (int u = units_ - 1; u >= 0; --u)
      phases.push_back({{u},
                        u,
                        Pass::Backward,
                        2 * units_ - 1 - u,
                        false,
                        g_.unit_stage_[static_cast<std::size_t>(u)] == stage});
    domain_collectives_.emplace_back(g_, scenario_.job.precision, variants_,
                                     DomainRanks{g_.domain_layouts_[d], ranks}, built_, phases,
                                     DomainOptions{kind != ShardingKind::None, false});
  }
}

std::int32_t SplitGraphBuilder::tied(int rank) {
  const RankPlace& place = g_.places_[static_cast<std::size_t>(rank)];
  const auto& list = topo_.stage_ranks(place.stage);
  const int position = static_cast<int>(std::find(list.begin(), list.end(), rank) - list.begin());
  const int tp_rank = place.tp_rank;
  const std::array<std::int64_t, 5> key{3, position, tp_rank, 0, 0};
  if (auto it = keyed_.find(key); it != keyed_.end()) return it->second;
  const ModelSpec& model = scenario_.job.model;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::TiedAllReduce;
  c.group = -1;
  c.unit = 0;
  c.pass = Pass::Backward;
  c.element_bytes = bytes_per_element(scenario_.job.precision.reduce);
  const int T = topo_.tensor_parallel(0);
  const std::int64_t e = costmodels::vocab_rows(model.vocab_size, T, tp_rank).size() *
                         static_cast<std::int64_t>(model.hidden);
  c.total_bytes = static_cast<double>(e) * c.element_bytes;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const int first = topo_.stage_ranks(0)[static_cast<std::size_t>(position)];
  const int last = topo_.stage_ranks(p_ - 1)[static_cast<std::size_t>(position)];
  c.members_count = 0;
  for (int r : {first, last})
    if (built(r)) {
      g_.members_.push_back({r, kNoOp, e, c.total_bytes / 2});
      ++c.members_count;
    }
  g_.collectives_.push_back(c);
  keyed_.emplace(key, c.id);
  return c.id;
}

}  // namespace cephalo::traces

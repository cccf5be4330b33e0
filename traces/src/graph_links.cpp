// GraphBuilder's links between the ranks of a split beyond their data-parallel domain: the
// pipeline transfers laid out per virtual-stage boundary, and the tensor-parallel, transfer and
// tied-embedding collectives (StageLinks, asked for by the emitter), each made by its first
// member and found by the others. An FSDP plan (one stage, T = 1) has none of them.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "graph_builder.hpp"
#include "stable_order.hpp"

namespace cephalo::traces {

// ---- transfers -------------------------------------------------------------------------------

double GraphBuilder::boundary_bytes(std::int64_t rows) const {
  const Job& job = scenario_.job;
  double b = static_cast<double>(rows) *
             costmodels::effective_sequence(job.model, job.sequence_length) * job.model.hidden *
             bytes_per_element(job.precision.compute);
  // Under sequence parallelism a stage boundary holds 1/T of the sequence per TP rank (the check
  // requires the same T on adjacent stages).
  if (split_.sequence_parallel) b /= topo_.tensor_parallel(0);
  return b;
}

void GraphBuilder::setup_transfers() {
  const int k_last = p_ * v_ - 1;
  forward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  backward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  // A micro-batch's samples laid out over a stage's replicas in order: per stage, once (an
  // interleaved pipeline crosses each stage's boundary V times).
  std::vector<std::vector<std::int64_t>> offsets(static_cast<std::size_t>(k_last > 0 ? p_ : 0));
  for (std::size_t s = 0; s < offsets.size(); ++s) {
    std::vector<std::int64_t>& off = offsets[s];
    off.push_back(0);
    for (int j = 0; j < topo_.replicas(static_cast<int>(s)); ++j)
      off.push_back(off.back() +
                    plan_.ranks[static_cast<std::size_t>(topo_.rank_at(static_cast<int>(s), j, 0))]
                        .share_per_micro_batch(m_));
  }
  for (int k = 0; k < k_last; ++k) {
    const int a = k % p_, b = (k + 1) % p_;
    const int ta = topo_.tensor_parallel(a), tb = topo_.tensor_parallel(b);
    const auto& oa = offsets[static_cast<std::size_t>(a)];
    const auto& ob = offsets[static_cast<std::size_t>(b)];
    // The replicas of b whose samples overlap replica ja's, by a walk over both ascending
    // offset lists (every pair made 2,048 replicas a boundary 4 M steps).
    int lo = 0;
    const int rb = topo_.replicas(b);
    for (int ja = 0; ja < topo_.replicas(a); ++ja) {
      while (lo < rb && ob[static_cast<std::size_t>(lo) + 1] <= oa[static_cast<std::size_t>(ja)])
        ++lo;
      for (int jb = lo;
           jb < rb && ob[static_cast<std::size_t>(jb)] < oa[static_cast<std::size_t>(ja) + 1];
           ++jb) {
        const std::int64_t rows = std::min(oa[ja + 1], ob[jb + 1]) - std::max(oa[ja], ob[jb]);
        if (rows <= 0) continue;
        // Only a built rank asks for its transfers (transfers_of, by sender or receiver), so a
        // transfer between two ranks left out is never read: a class replay of a 100k-rank
        // pipeline builds a few lanes, not millions of transfers. Those kept keep their order.
        const auto keep = [&](const Transfer& x) { return built(x.from) || built(x.to); };
        for (int t = 0; t < tb; ++t) {
          const Transfer x{topo_.rank_at(a, ja, t % ta), topo_.rank_at(b, jb, t), rows};
          if (keep(x)) forward_[static_cast<std::size_t>(k)].push_back(x);
        }
        for (int t = 0; t < ta; ++t) {
          const Transfer x{topo_.rank_at(b, jb, t % tb), topo_.rank_at(a, ja, t), rows};
          if (keep(x)) backward_[static_cast<std::size_t>(k)].push_back(x);
        }
      }
    }
  }
  auto index = [](const std::vector<Transfer>& list) {
    TransferIndex ix;
    const auto n = static_cast<std::uint32_t>(list.size());
    ix.by_from = detail::stable_order(n, [&](std::uint32_t i) { return list[i].from; });
    ix.by_to = detail::stable_order(n, [&](std::uint32_t i) { return list[i].to; });
    return ix;
  };
  for (const auto& list : forward_) forward_index_.push_back(index(list));
  for (const auto& list : backward_) backward_index_.push_back(index(list));
}

std::vector<const GraphBuilder::Transfer*> GraphBuilder::transfers_of(int boundary, bool forward,
                                                                      int rank, bool sends) const {
  const auto& list = boundary_transfers(boundary, forward);
  const TransferIndex& ix =
      (forward ? forward_index_ : backward_index_)[static_cast<std::size_t>(boundary)];
  const auto& order = sends ? ix.by_from : ix.by_to;
  auto end_of = [&](std::uint32_t i) { return sends ? list[i].from : list[i].to; };
  auto it = std::lower_bound(order.begin(), order.end(), rank,
                             [&](std::uint32_t i, int r) { return end_of(i) < r; });
  std::vector<const Transfer*> out;
  for (; it != order.end() && end_of(*it) == rank; ++it) out.push_back(&list[*it]);
  return out;
}

// ---- collectives ----------------------------------------------------------------------------

std::int32_t GraphBuilder::tensor_parallel(int rank, OpKind kind, OpKind issued_by, int unit,
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

std::vector<StageLinks::Transfer> GraphBuilder::transfers(int rank, int boundary, bool forward,
                                                          int micro_batch, bool sends) {
  std::vector<StageLinks::Transfer> out;
  for (const Transfer* t : transfers_of(boundary, forward, rank, sends)) {
    const double bytes = boundary_bytes(t->rows);
    out.push_back({transfer_collective(*t, forward, micro_batch, boundary, bytes), bytes});
  }
  return out;
}

std::int32_t GraphBuilder::transfer_collective(const Transfer& t, bool forward, int micro_batch,
                                               int boundary, double bytes) {
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

std::int32_t GraphBuilder::tied(int rank) {
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

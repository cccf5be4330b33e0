// GraphBuilder: one collective of a phase (its segments, resolved variant and members' slices).
// The variant is decided here once, from the integer slices; the replay and the executor read
// it (traces/README.md, "Decisions the graph carries").
#include <stdexcept>

#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

// Whether every member of the group owns as many elements of unit u: once per group and unit
// (every phase of the unit asks, and the walk is over all the group's ranks).
bool GraphBuilder::unit_equal_in_group(int u, int group) {
  if (unit_equal_.empty())
    unit_equal_.assign(static_cast<std::size_t>(groups_) * static_cast<std::size_t>(units_), -1);
  signed char& known =
      unit_equal_[static_cast<std::size_t>(group) * static_cast<std::size_t>(units_) +
                  static_cast<std::size_t>(u)];
  if (known < 0) {
    const auto members = g_.layout_.group(group);
    const std::int64_t first = g_.slice(u, members.front()).count;
    bool same = true;
    for (std::size_t i = 1; i < members.size() && same; ++i)
      same = g_.slice(u, members[i]).count == first;
    known = same ? 1 : 0;
  }
  return known == 1;
}

// The cross-group reduction of unit u after phase p: members are all ranks (in rank order),
// each moving its slice; the pieces (ShardLayout::pieces) say which ranks reduce what.
std::int32_t GraphBuilder::add_cross_reduction(int p, int u) {
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::AllReduce;
  c.group = -1;
  c.unit = u;
  c.pass = Pass::Backward;
  c.phase = p;
  c.variant = CollectiveVariant::Even;
  c.element_bytes = bytes_per_element(scenario_.job.precision.reduce);
  c.total_bytes =
      static_cast<double>(g_.unit_sizes_[static_cast<std::size_t>(u)].numel) * c.element_bytes;
  c.segments_begin = static_cast<std::uint32_t>(g_.segments_.size());
  g_.segments_.push_back(
      {u, g_.unit_sizes_[static_cast<std::size_t>(u)].numel, CollectiveVariant::Even});
  c.segments_count = 1;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  c.members_count = static_cast<std::uint32_t>(built_.size());
  for (int r : built_) {
    CollectiveMember m;
    m.rank = r;
    m.elements = g_.slice(u, r).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g_.members_.push_back(m);
  }
  g_.collectives_.push_back(c);
  return c.id;
}

// How unit u's uneven gathers and reduce-scatters run in `group`: the plan's variant, or under
// auto the comm model's decision (costmodels::uneven_variant) on the unit's all-gather over the
// group, once per unit size and group (units of one size have the same slices: the layers of a
// 96-layer model cost one decision). One variant per unit, whatever the direction or the phase:
// the executor runs each unit's segments one way (its reduce-scatter moves the same slices).
CollectiveVariant GraphBuilder::uneven_variant_of(int u, int group) {
  // A fixed choice needs no slices (UnevenVariants::choose returns it as is).
  if (plan_.uneven_collective != UnevenCollective::Auto) return variants_.choose({}, {});
  const auto key = std::make_pair(g_.unit_sizes_[static_cast<std::size_t>(u)].numel, group);
  if (auto it = variant_memo_.find(key); it != variant_memo_.end()) return it->second;
  const double element_bytes = bytes_per_element(scenario_.job.precision.compute);
  std::vector<int> ranks;
  std::vector<double> shard_bytes;
  for (int r : g_.layout_.group(group)) {
    ranks.push_back(r);
    shard_bytes.push_back(static_cast<double>(g_.slice(u, r).count) * element_bytes);
  }
  const CollectiveVariant v = variants_.choose(std::move(ranks), std::move(shard_bytes));
  variant_memo_.emplace(key, v);
  return v;
}

// One collective of phase p: the gather of its parameters or the reduce-scatter of its
// gradient. The variant of each segment follows from its integer counts; the collective is
// Even only when all of its segments are.
std::int32_t GraphBuilder::add_collective(int p, bool gather, int group) {
  const Phase& ph = phases_[p];
  const ModelSpec& model = scenario_.job.model;
  const Precision& prec = scenario_.job.precision;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.group = group;
  c.unit = ph.unit;
  c.pass = ph.pass;
  c.phase = p;
  c.element_bytes = bytes_per_element(gather ? prec.compute : prec.reduce);
  c.segments_begin = static_cast<std::uint32_t>(g_.segments_.size());
  // A head tied to the embedding brings the whole embedding unit (costmodels::phase_parameters).
  const double extra =
      costmodels::phase_parameters(model, ph.unit) - costmodels::unit_parameters(model, ph.unit);
  std::vector<int> units;
  if (extra > 0) {
    if (extra != costmodels::unit_parameters(model, 0))
      throw std::logic_error("phase_parameters adds something other than the embedding unit");
    units.push_back(0);
  }
  units.push_back(ph.unit);
  c.variant = CollectiveVariant::Even;
  for (int u : units) {
    CollectiveSegment seg;
    seg.unit = u;
    seg.numel = g_.unit_sizes_[u].numel;
    seg.variant =
        unit_equal_in_group(u, group) ? CollectiveVariant::Even : uneven_variant_of(u, group);
    if (seg.variant != CollectiveVariant::Even) c.variant = seg.variant;
    c.total_bytes += static_cast<double>(seg.numel) * c.element_bytes;
    g_.segments_.push_back(seg);
  }
  c.segments_count = static_cast<std::uint32_t>(units.size());
  c.kind = data_parallel_kind(gather, c.variant);
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  std::uint32_t built_members = 0;
  for (int r : built_of_group_[static_cast<std::size_t>(group)]) {
    ++built_members;
    CollectiveMember m;
    m.rank = r;
    for (int u : units) m.elements += g_.slice(u, r).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g_.members_.push_back(m);
  }
  c.members_count = built_members;
  g_.collectives_.push_back(c);
  return c.id;
}

}  // namespace cephalo::traces

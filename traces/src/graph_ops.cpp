// The pieces both orders of the graph builder make the same way (graph_ops.hpp).
#include "graph_ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo::traces {

Op micro_batch_op(OpKind kind, Pass pass, int unit, int p, int m, int size) {
  Op o;
  o.kind = kind;
  o.pass = pass;
  o.unit = unit;
  o.micro_batch = m;
  o.micro_batch_size = size;
  o.phase = p;
  return o;
}

Op compute_op(const ComputeContext& c, OpKind kind, int unit, int p, int m, int size) {
  const Job& job = c.job;
  const int T = c.tensor_parallel;
  Op o = micro_batch_op(kind, kind == OpKind::Forward ? Pass::Forward : Pass::Backward, unit, p, m,
                        size);
  const auto flops = costmodels::unit_flops(job.model, unit, job.sequence_length, size);
  const double share =
      costmodels::unit_kind(job.model, unit) == costmodels::UnitKind::Embedding ? 1.0 : 1.0 / T;
  const auto bytes = [&](costmodels::ComputeStep step) {
    return costmodels::split_compute_op_bytes(job, c.checkpointing, unit, step, size, T,
                                              c.sequence_parallel, c.gpu_runtime);
  };
  costmodels::OpBytes b;
  switch (kind) {
    case OpKind::Forward:
      o.flops = flops.forward * share;
      b = bytes(costmodels::ComputeStep::Forward);
      break;
    case OpKind::Recompute:
      // The unit's whole forward again, or under selective recompute its attention core only.
      o.flops = (schedule::recomputes_attention_core(c.checkpointing, unit, c.units)
                     ? costmodels::attention_core_forward_flops(job, size)
                     : flops.forward) *
                share;
      b = bytes(costmodels::ComputeStep::Recompute);
      break;
    case OpKind::Backward:
      o.flops = flops.backward * share;
      b = bytes(costmodels::ComputeStep::Backward);
      break;
    case OpKind::WeightGradient:
      // The deferred GEMM reads what the head's backward kept for it (its input and output
      // gradient, not priced as memory: costmodels/README.md) and adds into the gradient.
      o.flops = costmodels::output_weight_gradient_flops(job, size) * share;
      return o;
    default:
      throw std::logic_error("compute_op: " + to_string(kind) + " is not a compute op");
  }
  o.mem_alloc = b.alloc;
  o.mem_free = b.free;
  return o;
}

std::vector<int> ranks_to_build(const Plan& plan, const Scenario& scenario,
                                std::span<const int> only) {
  const int ranks = static_cast<int>(plan.ranks.size());
  if (ranks != scenario.cluster.num_ranks())
    throw Error("plan has " + std::to_string(ranks) + " ranks but the cluster has " +
                std::to_string(scenario.cluster.num_ranks()) + " devices");
  std::vector<int> built;
  if (only.empty()) {
    built.resize(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) built[static_cast<std::size_t>(r)] = r;
    return built;
  }
  for (int r : only) {
    if (r < 0 || r >= ranks || (!built.empty() && r <= built.back()))
      throw std::logic_error(
          "build_training_graph_of_ranks: ranks to build must be ascending and valid");
    built.push_back(r);
  }
  return built;
}

std::vector<char> gpu_runtime_ranks(const Scenario& scenario) {
  // Once per slot kind (RankDevice::slot_kind), not per rank's own slot (100k places).
  const auto& devices = scenario.cluster.ranks();
  std::vector<char> out, of_kind;
  out.reserve(devices.size());
  for (const RankDevice& d : devices) {
    const auto k = static_cast<std::size_t>(d.slot_kind);
    if (k >= of_kind.size()) of_kind.resize(k + 1, -1);
    if (of_kind[k] < 0) of_kind[k] = costmodels::runs_gpu_runtime(d.slot->spec) ? 1 : 0;
    out.push_back(of_kind[k]);
  }
  return out;
}

GraphSummary plan_summary(const Plan& plan, const Scenario& scenario, int units) {
  const Job& job = scenario.job;
  if (auto conflict = schedule::offload_conflict(plan.offload, plan.activation_checkpointing))
    throw Error(*conflict);
  GraphSummary s;
  s.num_ranks = static_cast<int>(plan.ranks.size());
  s.num_units = units;
  s.sequence_length = job.sequence_length;
  s.global_batch = plan.global_batch();
  s.accumulation = plan.accumulation;
  s.activation_checkpointing = plan.activation_checkpointing;
  s.offload = plan.offload;
  s.prefetch = plan.prefetch;
  s.model_flops_per_iteration = model_flops_per_iteration(job, s.global_batch);
  return s;
}

std::vector<std::uint8_t> recomputed_units(const Plan& plan, int units) {
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(units));
  for (int u = 0; u < units; ++u)
    out.push_back(schedule::recomputes(plan.activation_checkpointing, u, units) ? 1 : 0);
  return out;
}

CollectiveVariant UnevenVariants::choose(std::vector<int> ranks, std::vector<double> shard_bytes) {
  const UnevenCollective chosen = plan_.uneven_collective;
  if (chosen != UnevenCollective::Auto)
    return chosen == UnevenCollective::Padded ? CollectiveVariant::Padded
                                              : CollectiveVariant::Grouped;
  if (!comm_) {
    owned_comm_ = costmodels::make_comm_model(scenario_);
    comm_ = owned_comm_.get();
  }
  costmodels::CollectiveRequest req;
  req.kind = costmodels::CollectiveKind::AllGather;
  req.ranks = std::move(ranks);
  req.shard_bytes = std::move(shard_bytes);
  return costmodels::uneven_variant(*comm_, scenario_.cluster, std::move(req)) ==
                 UnevenCollective::Padded
             ? CollectiveVariant::Padded
             : CollectiveVariant::Grouped;
}

CollectiveVariant UnevenVariants::of(const ShardLayout& layout, std::span<const int> ranks,
                                     int unit, int group) {
  auto table = std::find_if(tables_.begin(), tables_.end(),
                            [&](const Table& t) { return t.layout == &layout; });
  if (table == tables_.end()) {
    tables_.push_back(
        {&layout, std::vector<signed char>(static_cast<std::size_t>(layout.num_groups()) *
                                               static_cast<std::size_t>(layout.num_units()),
                                           -1)});
    table = tables_.end() - 1;
  }
  signed char& known =
      table
          ->variant[static_cast<std::size_t>(group) * static_cast<std::size_t>(layout.num_units()) +
                    static_cast<std::size_t>(unit)];
  if (known >= 0) return static_cast<CollectiveVariant>(known);
  const auto key = std::make_tuple(&layout, group, layout.numel(unit));
  if (auto it = memo_.find(key); it != memo_.end()) {
    known = static_cast<signed char>(it->second);
    return it->second;
  }
  const std::vector<std::int64_t> counts = layout.group_counts(unit, group);
  const bool even = std::all_of(counts.begin(), counts.end(),
                                [&](std::int64_t x) { return x == counts.front(); });
  CollectiveVariant v = CollectiveVariant::Even;
  if (!even) {
    const double element_bytes = bytes_per_element(scenario_.job.precision.compute);
    const auto members = layout.group(group);
    std::vector<int> global;
    std::vector<double> shard_bytes;
    for (std::size_t i = 0; i < members.size(); ++i) {
      global.push_back(ranks[static_cast<std::size_t>(members[i])]);
      shard_bytes.push_back(static_cast<double>(counts[i]) * element_bytes);
    }
    v = choose(std::move(global), std::move(shard_bytes));
  }
  memo_.emplace(key, v);
  known = static_cast<signed char>(v);
  return v;
}

std::int32_t DataParallelCollectives::add_group(TrainingGraph& g, const Precision& precision,
                                                UnevenVariants& variants, const DomainRanks& domain,
                                                int group, std::span<const int> units, bool gather,
                                                Pass pass, int unit, int phase,
                                                std::span<const int> members) {
  Collective c;
  c.id = static_cast<std::int32_t>(g.collectives_.size());
  c.group = group;
  c.unit = unit;
  c.pass = pass;
  c.phase = phase;
  c.element_bytes = bytes_per_element(gather ? precision.compute : precision.reduce);
  c.segments_begin = static_cast<std::uint32_t>(g.segments_.size());
  c.variant = CollectiveVariant::Even;
  for (int u : units) {
    CollectiveSegment seg;
    seg.unit = u;
    seg.numel = domain.layout.numel(u);
    seg.variant = variants.of(domain.layout, domain.ranks, u, group);
    if (seg.variant != CollectiveVariant::Even) c.variant = seg.variant;
    c.total_bytes += static_cast<double>(seg.numel) * c.element_bytes;
    g.segments_.push_back(seg);
  }
  c.segments_count = static_cast<std::uint32_t>(units.size());
  c.kind = data_parallel_kind(gather, c.variant);
  c.members_begin = static_cast<std::uint32_t>(g.members_.size());
  for (int position : members) {
    CollectiveMember m;
    m.rank = domain.ranks[static_cast<std::size_t>(position)];
    for (int u : units) m.elements += domain.layout.slice(u, position).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g.members_.push_back(m);
  }
  c.members_count = static_cast<std::uint32_t>(members.size());
  g.collectives_.push_back(c);
  return c.id;
}

std::int32_t DataParallelCollectives::add_cross_reduction(TrainingGraph& g,
                                                          const Precision& precision,
                                                          const DomainRanks& domain, int unit,
                                                          int phase, std::span<const int> members) {
  Collective c;
  c.id = static_cast<std::int32_t>(g.collectives_.size());
  c.kind = OpKind::AllReduce;
  c.group = -1;
  c.unit = unit;
  c.pass = Pass::Backward;
  c.phase = phase;
  c.variant = CollectiveVariant::Even;
  c.element_bytes = bytes_per_element(precision.reduce);
  const std::int64_t numel = domain.layout.numel(unit);
  c.total_bytes = static_cast<double>(numel) * c.element_bytes;
  c.segments_begin = static_cast<std::uint32_t>(g.segments_.size());
  g.segments_.push_back({unit, numel, CollectiveVariant::Even});
  c.segments_count = 1;
  c.members_begin = static_cast<std::uint32_t>(g.members_.size());
  for (int position : members) {
    CollectiveMember m;
    m.rank = domain.ranks[static_cast<std::size_t>(position)];
    m.elements = domain.layout.slice(unit, position).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g.members_.push_back(m);
  }
  c.members_count = static_cast<std::uint32_t>(members.size());
  g.collectives_.push_back(c);
  return c.id;
}

DomainCollectives::DomainCollectives(TrainingGraph& g, const Precision& precision,
                                     UnevenVariants& variants, const DomainRanks& domain,
                                     std::span<const char> built,
                                     std::span<const DomainPhase> phases, bool group_reduces) {
  const ShardLayout& layout = domain.layout;
  const int n = layout.num_ranks();
  groups_ = layout.num_groups();
  auto is_built = [&](int position) {
    return built[static_cast<std::size_t>(domain.ranks[static_cast<std::size_t>(position)])] != 0;
  };
  // The members: per group its built positions in group order; the cross reduction's all built
  // positions in position order.
  group_slot_.assign(static_cast<std::size_t>(n), -1);
  cross_slot_.assign(static_cast<std::size_t>(n), -1);
  std::vector<std::vector<int>> members(static_cast<std::size_t>(groups_));
  std::vector<int> all;
  for (int grp = 0; grp < groups_; ++grp)
    for (int i : layout.group(grp))
      if (is_built(i)) {
        group_slot_[static_cast<std::size_t>(i)] =
            static_cast<int>(members[static_cast<std::size_t>(grp)].size());
        members[static_cast<std::size_t>(grp)].push_back(i);
      }
  for (int i = 0; i < n; ++i)
    if (is_built(i)) {
      cross_slot_[static_cast<std::size_t>(i)] = static_cast<int>(all.size());
      all.push_back(i);
    }
  const std::size_t count = phases.size();
  for (std::size_t p = 0; p < count; ++p) {
    const DomainPhase& ph = phases[p];
    for (int grp = 0; grp < groups_; ++grp) {
      const auto& m = members[static_cast<std::size_t>(grp)];
      if (m.empty()) {
        gathers_.push_back(-1);
        reduce_scatters_.push_back(-1);
        continue;
      }
      gathers_.push_back(ph.gathers ? DataParallelCollectives::add_group(
                                          g, precision, variants, domain, grp, ph.units, true,
                                          ph.pass, ph.unit, ph.phase, m)
                                    : -1);
      reduce_scatters_.push_back(
          ph.reduces && group_reduces
              ? DataParallelCollectives::add_group(g, precision, variants, domain, grp, ph.units,
                                                   false, Pass::Backward, ph.unit, ph.phase, m)
              : -1);
    }
  }
  // Several groups: each unit is reduced across groups once, after the last phase that reduces
  // it (a tied embedding: the embedding's own phase, after the head's).
  finished_at_.assign(count, {});
  if (!layout.hybrid()) return;
  const int units = layout.num_units();
  std::vector<int> last(static_cast<std::size_t>(units), -1);
  for (std::size_t p = 0; p < count; ++p)
    if (phases[p].reduces)
      for (int u : phases[p].units) last[static_cast<std::size_t>(u)] = static_cast<int>(p);
  cross_.assign(static_cast<std::size_t>(units), -1);
  for (std::size_t p = 0; p < count; ++p)
    for (int u = 0; u < units; ++u)
      if (last[static_cast<std::size_t>(u)] == static_cast<int>(p)) {
        finished_at_[p].push_back(u);
        cross_[static_cast<std::size_t>(u)] = DataParallelCollectives::add_cross_reduction(
            g, precision, domain, u, phases[p].phase, all);
      }
}

int DomainCollectives::slot(const Collective& c, int position) const {
  const int slot = (c.group < 0 ? cross_slot_ : group_slot_)[static_cast<std::size_t>(position)];
  if (slot < 0) throw std::logic_error("domain collectives: a member that is not built");
  return slot;
}

double DomainCollectives::shard_bytes(const TrainingGraph& g, std::int32_t c, int position) const {
  const Collective& col = g.collectives()[static_cast<std::size_t>(c)];
  return g.members(col)[static_cast<std::size_t>(slot(col, position))].shard_bytes;
}

Op DomainCollectives::op(const TrainingGraph& g, std::int32_t c, int position) const {
  const Collective& col = g.collectives()[static_cast<std::size_t>(c)];
  Op o;
  o.kind = col.kind;
  o.pass = col.pass;
  o.unit = col.unit;
  o.phase = col.phase;
  o.collective = c;
  o.bytes = col.total_bytes;
  o.shard_bytes = shard_bytes(g, c, position);
  return o;
}

void DomainCollectives::join(TrainingGraph& g, std::int32_t c, int position, OpId op) const {
  const Collective& col = g.collectives()[static_cast<std::size_t>(c)];
  DataParallelCollectives::join(
      g, col.members_begin + static_cast<std::uint32_t>(slot(col, position)), op);
}

void DataParallelCollectives::join(TrainingGraph& g, std::uint32_t member, OpId op) {
  g.members_[member].op = op;
}

OpKind data_parallel_kind(bool gather, CollectiveVariant variant) {
  const bool even = variant == CollectiveVariant::Even;
  if (gather) return even ? OpKind::AllGather : OpKind::AllGatherV;
  return even ? OpKind::ReduceScatter : OpKind::ReduceScatterV;
}

bool casts_gather_send(const Precision& precision) {
  return bytes_per_element(precision.params) != bytes_per_element(precision.compute);
}

void set_gather_memory(Op& gather, bool cast_send) {
  gather.mem_alloc = gather.bytes + (cast_send ? gather.shard_bytes : 0.0);
  gather.mem_free = cast_send ? gather.shard_bytes : 0.0;
}

void set_reduce_scatter_memory(Op& rs, bool gradient_held) {
  rs.mem_alloc = (gradient_held ? 0.0 : rs.bytes) + rs.shard_bytes;
  rs.mem_free = rs.bytes + rs.shard_bytes;
}

Op optimizer_step_op(const Job& job, const ShardLayout& layout, int position, int units) {
  Op opt;
  opt.kind = OpKind::OptimizerStep;
  opt.pass = Pass::Step;
  opt.unit = -1;
  opt.shard_parameters = static_cast<double>(layout.owned_elements(position));
  // AdamW: about 12 FLOPs per parameter (moments, bias correction, update, weight decay).
  opt.flops = 12.0 * opt.shard_parameters;
  // AdamW reads fp32 gradients: a 16-bit or loss-scaled (fp16) gradient shard is widened into
  // a transient fp32 copy, one unit at a time.
  if (bytes_per_element(job.precision.reduce) != 4.0 || job.precision.compute == Dtype::FP16) {
    std::int64_t largest = 0;
    for (int u = 0; u < units; ++u) largest = std::max(largest, layout.slice(u, position).count);
    opt.mem_alloc = opt.mem_free = static_cast<double>(largest) * 4.0;
  }
  return opt;
}

}  // namespace cephalo::traces

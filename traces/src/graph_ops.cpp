// The pieces both orders of the graph builder make the same way (graph_ops.hpp).
#include "graph_ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/cost_models.hpp"
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

// GraphBuilder::pipeline_program: one rank's program in its stage's pipeline order
// (pipeline::stage_order): per forward step its chunk's units ascending, the first receiving the
// chunk's input and the last sending its output; per backward step the units descending, each
// unit's last backward releasing its gathered parameters and, at the chunk's last backward step,
// followed by its reductions. Each unit is gathered once, before its first forward, in
// first-use order gated by the framework's prefetch rule. The emitter (graph_emit.hpp) turns the
// items into ops, tensor-parallel collectives and transfers.
#include <algorithm>

#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

void GraphBuilder::pipeline_program(int r, RankProgram& prog) const {
  prog.clear();
  const Job& job = scenario_.job;
  const RankPlace& place = g_.places_[static_cast<std::size_t>(r)];
  const int stage = place.stage;
  const int domain = g_.domain_of_[static_cast<std::size_t>(r)];
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(domain)];
  // The rank's share of every pipeline micro-batch runs as `sub` consecutive sub-steps of
  // `size` samples (its micro-batch i·sub + j: samples [j·size, (j + 1)·size) of its share);
  // the chunk's input is received before the first, its output sent after the last.
  const PlanRank& row = plan_.ranks[static_cast<std::size_t>(r)];
  const int size = row.micro_batch;
  const int sub = row.sub_steps(m_);
  const int share = row.share_per_micro_batch(m_);
  const ShardingKind kind = split_.sharding;
  // full / hybrid: each unit gathered once, kept to its last backward.
  const bool gathers = kind == ShardingKind::Full || kind == ShardingKind::Hybrid;
  prog.rank = r;
  prog.position = g_.domain_position_[static_cast<std::size_t>(r)];
  prog.group = layout.group_of(prog.position);
  prog.micro_batches = m_ * sub;
  prog.tensor_parallel = place.tensor_parallel;
  prog.grad_buffers = units_;  // a unit's gradient

  // The units in the order of their first forward, the backwards each unit and each chunk has.
  const std::size_t U = static_cast<std::size_t>(units_);
  const auto& order = orders_[static_cast<std::size_t>(stage)];
  std::vector<int> first_use;
  std::vector<int> first_use_index(U, -1);
  std::vector<int> backwards_left(U, 0);
  std::vector<int> backwards_left_in_chunk(static_cast<std::size_t>(v_), 0);
  for (const auto& step : order) {
    const auto& units = vstage_units_[static_cast<std::size_t>(virtual_stage(stage, step.chunk))];
    if (step.pass == pipeline::Pass::Forward) {
      for (int u : units)
        if (first_use_index[static_cast<std::size_t>(u)] < 0) {
          first_use_index[static_cast<std::size_t>(u)] = static_cast<int>(first_use.size());
          first_use.push_back(u);
        }
    } else {
      for (int u : units) ++backwards_left[static_cast<std::size_t>(u)];
      ++backwards_left_in_chunk[static_cast<std::size_t>(step.chunk)];
    }
  }
  // A unit's first forward is a mark; the gathers in first-use order are the phases the
  // framework's prefetch rule gates (as an FSDP plan's phases).
  prog.marks = static_cast<int>(first_use.size());
  if (gathers) {
    std::vector<schedule::GatherPhase> phases;
    for (int u : first_use) phases.push_back({static_cast<double>(layout.numel(u)), false});
    const std::vector<int> gates = schedule::gather_gates(
        schedule::gather_rules(job.implementation.framework, plan_.prefetch), phases);
    for (std::size_t i = 0; i < first_use.size(); ++i)
      prog.gathers.push_back({first_use[i], gates[i]});  // forward phase u gathers unit u
  }
  // ZeRO-1: every rank gathers the updated parameters of its stage's units after the step.
  if (kind == ShardingKind::Optimizer) prog.step_gathers = first_use;

  const int k_last = p_ * v_ - 1;
  const bool tied = scenario_.job.model.tied_embeddings && p_ > 1;
  // The job's deferred output-layer weight gradient: the last stage's head backward of the first
  // `deferred` micro-batches (all their sub-steps) leaves its weight-gradient GEMM to the flush
  // after the rank's last backward, where the head's reductions then follow the last of them.
  const int head = units_ - 1;
  const auto& last_units = vstage_units_[static_cast<std::size_t>(k_last)];
  const bool holds_head = stage == p_ - 1 && !last_units.empty() && last_units.back() == head;
  const int deferred =
      holds_head && costmodels::output_weight_gradient_flops(job, size) > 0
          ? pipeline::deferred_wgrad_micro_batches(job.implementation.defer_embedding_wgrad_compute,
                                                   job.implementation.wgrad_deferral_limit, p_, m_)
          : 0;
  // A tied word embedding's two copies first (rank i of the first stage with rank i of the
  // last), then the domain's reduce-scatter and cross-group reduction.
  const auto attach_reductions = [&](ComputeItem& it, int u) {
    it.reductions_begin = static_cast<std::uint32_t>(prog.reductions.size());
    if (tied && ((u == 0 && stage == 0) || (u == units_ - 1 && stage == p_ - 1)))
      prog.reductions.push_back({ReductionItem::Kind::Tied, it.phase, u, -1, u});
    if (kind != ShardingKind::None)
      prog.reductions.push_back({ReductionItem::Kind::ReduceScatter, it.phase, u, u, u});
    if (layout.hybrid())
      prog.reductions.push_back({ReductionItem::Kind::CrossGroup, it.phase, u, -1, u});
    it.reductions_count = static_cast<std::uint32_t>(prog.reductions.size()) - it.reductions_begin;
  };
  std::vector<char> used(U, 0);
  for (const auto& step : order) {
    const int k = virtual_stage(stage, step.chunk);
    const auto& units = vstage_units_[static_cast<std::size_t>(k)];
    const std::size_t begin = prog.items.size();
    const auto item = [&](int u, bool forward, int j) {
      ComputeItem it;
      it.unit = u;
      it.forward = forward;
      it.micro_batch = step.micro_batch * sub + j;
      it.size = size;
      it.transfer_micro_batch = step.micro_batch;
      it.transfer_size = share;
      return it;
    };
    if (step.pass == pipeline::Pass::Forward) {
      for (int j = 0; j < sub; ++j)
        for (int u : units) {
          ComputeItem it = item(u, true, j);
          it.phase = u;
          if (!used[static_cast<std::size_t>(u)]) {
            used[static_cast<std::size_t>(u)] = 1;
            it.mark = first_use_index[static_cast<std::size_t>(u)];
            if (gathers) it.waits_gather = it.mark;
          }
          prog.items.push_back(it);
        }
      if (k > 0) prog.items[begin].recv_boundary = k - 1;
      if (k < k_last) prog.items.back().send_boundary = k;
      continue;
    }
    const bool last_of_chunk = backwards_left_in_chunk[static_cast<std::size_t>(step.chunk)]-- == 1;
    for (int j = 0; j < sub; ++j)
      for (auto u_it = units.rbegin(); u_it != units.rend(); ++u_it) {
        const int u = *u_it;
        const std::size_t su = static_cast<std::size_t>(u);
        ComputeItem it = item(u, false, j);
        it.phase = 2 * units_ - 1 - u;
        it.grad_buffer = u;
        it.grad_bytes =
            static_cast<double>(layout.numel(u)) * bytes_per_element(job.precision.reduce);
        // The gathered parameters go with the unit's last backward (its gradient is complete).
        const bool last_sub = j + 1 == sub;
        if (last_sub && --backwards_left[su] == 0 && gathers) {
          it.frees_gathered = true;
          it.gathered_bytes =
              static_cast<double>(layout.numel(u)) * bytes_per_element(job.precision.compute);
        }
        const bool head_deferred = deferred > 0 && k == k_last && u == head;
        it.defers_wgrad = head_deferred && step.micro_batch < deferred;
        if (last_of_chunk && last_sub && !head_deferred) attach_reductions(it, u);
        prog.items.push_back(it);
      }
    if (k < k_last) prog.items[begin].recv_boundary = k;
    if (k > 0) prog.items.back().send_boundary = k - 1;
  }
  // The flush: the deferred GEMMs in micro-batch order on the compute stream.
  for (int i = 0; i < deferred; ++i)
    for (int j = 0; j < sub; ++j) {
      ComputeItem it;
      it.unit = head;
      it.forward = false;
      it.flush_wgrad = true;
      it.micro_batch = i * sub + j;
      it.size = size;
      it.phase = 2 * units_ - 1 - head;
      it.grad_buffer = head;
      if (i + 1 == deferred && j + 1 == sub) attach_reductions(it, head);
      prog.items.push_back(it);
    }
}

}  // namespace cephalo::traces

// SplitGraphBuilder::build_rank: one rank's program in its stage's pipeline order (compute,
// tensor-parallel, transfers, the domain's gathers and reductions, the optimizer step).
#include <algorithm>
#include <cmath>

#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "graph_builder.hpp"
#include "graph_split.hpp"

namespace cephalo::traces {

// ---- one rank's program -----------------------------------------------------------------------

OpId SplitGraphBuilder::emit_domain(const RankState& st, Op op, std::initializer_list<OpId> deps) {
  const OpId id = g_.append_op(op, current_rank_, {deps.begin(), deps.size()});
  domains(st).join(g_, op.collective, st.position, id);
  return id;
}

// The next gather in first-use order, issued once the first forward of its gate unit is done
// (gather_gates: the framework's prefetch rule, as for an FSDP plan's phases), or at the start.
void SplitGraphBuilder::emit_next_gather(RankState& st) {
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  const std::size_t i = static_cast<std::size_t>(st.next_gather++);
  const int unit = st.first_use[i];
  Op o = domains(st).op(g_, domains(st).gather(unit, layout.group_of(st.position)), st.position);
  set_gather_memory(o, st.cast_send);
  const int gate = st.gather_gates[i];
  st.gather[static_cast<std::size_t>(unit)] =
      emit_domain(st, o,
                  {gate >= 0 ? st.first_forward[static_cast<std::size_t>(
                                   st.first_use[static_cast<std::size_t>(gate)])]
                             : kNoOp});
}

// The gathers whose gate is the first forward of first_use[done] (done = -1: at the start).
void SplitGraphBuilder::emit_gathers_after(RankState& st, int done) {
  while (st.next_gather < static_cast<int>(st.first_use.size()) &&
         st.gather_gates[static_cast<std::size_t>(st.next_gather)] <= done)
    emit_next_gather(st);
}

void SplitGraphBuilder::emit_compute(RankState& st, OpKind kind, int unit, int micro_batch,
                                     Pass pass) {
  const Job& job = scenario_.job;
  const int T = st.place.tensor_parallel;
  const ComputeContext context{job,
                               plan_.activation_checkpointing,
                               units_,
                               T,
                               plan_.model_split.sequence_parallel,
                               gpu_runtime_[static_cast<std::size_t>(st.rank)] != 0};
  Op o = compute_op(context, kind, unit, pass == Pass::Forward ? unit : 2 * units_ - 1 - unit,
                    micro_batch, st.size);
  std::vector<OpId> deps{st.pending.begin(), st.pending.end()};
  st.pending.clear();
  const bool full = st.gathers;
  const bool core = kind == OpKind::Recompute && schedule::recomputes_attention_core(
                                                     plan_.activation_checkpointing, unit, units_);
  if (kind == OpKind::Forward) {
    if (full && !st.used[static_cast<std::size_t>(unit)])
      deps.push_back(st.gather[static_cast<std::size_t>(unit)]);
  } else if (kind == OpKind::Backward) {
    const std::size_t u = static_cast<std::size_t>(unit);
    const bool alloc_grad = full && !st.grad_held[u];
    st.grad_held[u] = st.grad_held[u] || full;
    const double grad_bytes =
        static_cast<double>(g_.domain_layouts_[static_cast<std::size_t>(st.domain)].numel(unit)) *
        bytes_per_element(job.precision.reduce);
    o.mem_alloc += alloc_grad ? grad_bytes : 0.0;
    // The gathered parameters go with the unit's last backward (its gradient is complete).
    if (full && --st.backwards_left[u] == 0) {
      o.mem_free += g_.domain_layouts_[static_cast<std::size_t>(st.domain)].numel(unit) *
                    bytes_per_element(job.precision.compute);
      o.frees_gathered = true;
    } else if (!full) {
      --st.backwards_left[u];
    }
  }
  st.last_compute = emit(o, deps);
  if (kind == OpKind::Forward) st.last_forward = st.last_compute;
  if (kind == OpKind::Backward) st.last_backward_op = st.last_compute;
  // The compute op's tensor-parallel collectives (DESIGN §4, "Tensor-parallel ops"), right
  // after it on the compute stream; then the gathers its completion releases.
  // (The attention core runs on the rank's own heads: no TP collective.)
  if (T > 1 && !core) emit_tensor_parallel(st, kind, unit, micro_batch, pass, o.phase);
  if (kind == OpKind::Forward && !st.used[static_cast<std::size_t>(unit)]) {
    st.used[static_cast<std::size_t>(unit)] = 1;
    st.first_forward[static_cast<std::size_t>(unit)] = st.last_forward;
    // The gathers this forward's completion releases (prefetch).
    if (full) emit_gathers_after(st, st.first_use_index[static_cast<std::size_t>(unit)]);
  }
}

void SplitGraphBuilder::emit_tensor_parallel(RankState& st, OpKind kind, int unit, int micro_batch,
                                             Pass pass, int phase) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int seq = job.sequence_length;
  const int T = st.place.tensor_parallel;
  const bool sp = plan_.model_split.sequence_parallel;
  const Dtype act = job.precision.compute;
  const int size = st.size;
  const auto unit_kind = costmodels::unit_kind(model, unit);
  const double tokens = static_cast<double>(size) * costmodels::effective_sequence(model, seq);
  int calls = 0;
  double elements = tokens * model.hidden;
  double element_bytes = bytes_per_element(act);
  if (unit_kind == costmodels::UnitKind::Layer) {
    calls = 2;
  } else if (unit_kind == costmodels::UnitKind::Embedding) {
    calls = kind == OpKind::Forward ? 1 : 0;
  } else if (kind == OpKind::Backward) {
    calls = 1;
  } else {
    // The vocabulary-parallel cross-entropy's max, sum of exponentials and target logit.
    calls = 3;
    elements = tokens;
    element_bytes = 4;
  }
  if (calls == 0) return;
  const OpKind tk = sp && unit_kind == costmodels::UnitKind::Layer ? OpKind::TpGatherScatter
                                                                   : OpKind::TpAllReduce;
  Op tp = micro_batch_op(tk, pass, unit, phase, micro_batch, size);
  tp.collective = tp_collective(st, tk, kind, unit, pass, calls, element_bytes, elements);
  tp.bytes = elements * element_bytes;
  tp.shard_bytes = tp.bytes / T;
  st.last_compute = emit(tp, {});
}

void SplitGraphBuilder::emit_reductions(RankState& st, int unit) {
  const ModelSpec& model = scenario_.job.model;
  const StageSharding kind = plan_.model_split.sharding;
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  const std::size_t u = static_cast<std::size_t>(unit);
  const OpId last_backward = st.last_backward[u];
  // A tied word embedding's two copies: rank i of the first stage with rank i of the last,
  // before either reduces over its domain.
  if (model.tied_embeddings && p_ > 1 &&
      ((unit == 0 && st.stage == 0) || (unit == units_ - 1 && st.stage == p_ - 1))) {
    const auto& list = topo_.stage_ranks(st.stage);
    const int position =
        static_cast<int>(std::find(list.begin(), list.end(), st.rank) - list.begin());
    Op t;
    t.kind = OpKind::TiedAllReduce;
    t.pass = Pass::Backward;
    t.unit = unit;
    t.phase = 2 * units_ - 1 - unit;
    t.collective = tied_collective(position, st.place.tp_rank);
    t.bytes = g_.collectives_[static_cast<std::size_t>(t.collective)].total_bytes;
    t.shard_bytes = t.bytes / 2;
    st.last_reduction = emit(t, {last_backward});
  }
  const int group = layout.group_of(st.position);
  const bool cross = layout.hybrid();
  if (kind != StageSharding::None) {
    Op rs =
        domains(st).op(g_, domains(st).reduce_scatter(2 * units_ - 1 - unit, group), st.position);
    if (st.gathers) {
      // The unsharded gradient (allocated by the first backward) and the received shard.
      set_reduce_scatter_memory(rs, st.grad_held[u]);
      st.grad_held[u] = false;
    }
    st.last_reduction = emit_domain(st, rs, {last_backward});
  }
  if (cross) {
    st.last_reduction =
        emit_domain(st, domains(st).op(g_, domains(st).cross(unit), st.position), {last_backward});
  }
}

void SplitGraphBuilder::emit_optimizer(RankState& st) {
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  const OpId step =
      emit(optimizer_step_op(scenario_.job, layout, st.position, units_), {st.last_reduction});
  if (plan_.model_split.sharding != StageSharding::Optimizer) return;
  // ZeRO-1: every rank gathers the updated parameters of its stage's units.
  for (int u : st.first_use) {
    Op o = domains(st).op(g_, domains(st).gather(u, layout.group_of(st.position)), st.position);
    o.pass = Pass::Step;
    emit_domain(st, o, {step});
  }
}

// This rank's receives of the boundary's rows at its virtual stage, for `forward`: the input of
// the chunk after `boundary` (forward) or the input gradient of the chunk it ends (backward).
void SplitGraphBuilder::emit_recvs(RankState& st, int boundary, bool forward, int unit,
                                   int micro_batch) {
  for (const Transfer* t : transfers_of(boundary, forward, st.rank, false)) {
    Op o = micro_batch_op(OpKind::Recv, forward ? Pass::Forward : Pass::Backward, unit, -1,
                          micro_batch, st.size);
    o.bytes = boundary_bytes(t->rows);
    o.mem_alloc = o.bytes;
    o.collective = transfer_collective(*t, forward, micro_batch, boundary, o.bytes);
    st.pending.push_back(emit(o, {}));
  }
}

// This rank's sends across `boundary`: the chunk's output (forward) or its input gradient
// (backward). The last send frees what the chunk left, or `producer` does when this rank sends
// nothing (another TP rank of its group does).
void SplitGraphBuilder::emit_sends(RankState& st, int boundary, bool forward, int unit,
                                   int micro_batch, OpId producer) {
  const std::vector<const Transfer*> sends = transfers_of(boundary, forward, st.rank, true);
  const double held = boundary_bytes(st.size);
  if (sends.empty()) g_.ops_[producer].mem_free += held;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    Op o = micro_batch_op(OpKind::Send, forward ? Pass::Forward : Pass::Backward, unit, -1,
                          micro_batch, st.size);
    o.bytes = boundary_bytes(sends[i]->rows);
    o.shard_bytes = o.bytes;
    if (i + 1 == sends.size()) o.mem_free = held;
    o.collective = transfer_collective(*sends[i], forward, micro_batch, boundary, o.bytes);
    emit(o, {st.last_compute});
  }
}

void SplitGraphBuilder::emit_forward_step(RankState& st, int micro_batch, int chunk) {
  const int k = virtual_stage(st.stage, chunk);
  const auto& units = vstage_units_[static_cast<std::size_t>(k)];
  if (k > 0) emit_recvs(st, k - 1, true, units.front(), micro_batch);
  for (int u : units) emit_compute(st, OpKind::Forward, u, micro_batch, Pass::Forward);
  if (k < p_ * v_ - 1) emit_sends(st, k, true, units.back(), micro_batch, st.last_forward);
}

void SplitGraphBuilder::emit_backward_step(RankState& st, int micro_batch, int chunk) {
  const int k = virtual_stage(st.stage, chunk);
  const auto& units = vstage_units_[static_cast<std::size_t>(k)];
  if (k < p_ * v_ - 1) emit_recvs(st, k, false, units.back(), micro_batch);
  const bool last_of_chunk = st.backwards_left_in_chunk[static_cast<std::size_t>(chunk)]-- == 1;
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const int u = *it;
    if (schedule::has_recompute_op(plan_.activation_checkpointing, u, units_))
      emit_compute(st, OpKind::Recompute, u, micro_batch, Pass::Backward);
    emit_compute(st, OpKind::Backward, u, micro_batch, Pass::Backward);
    st.last_backward[static_cast<std::size_t>(u)] = st.last_backward_op;
    if (last_of_chunk) emit_reductions(st, u);
  }
  if (k > 0) emit_sends(st, k - 1, false, units.front(), micro_batch, st.last_backward_op);
}

void SplitGraphBuilder::build_rank(int r) {
  current_rank_ = r;
  const Job& job = scenario_.job;
  RankState st;
  st.rank = r;
  st.place = topo_.place(r);
  st.stage = st.place.stage;
  st.domain = g_.domain_of_[static_cast<std::size_t>(r)];
  st.position = g_.domain_position_[static_cast<std::size_t>(r)];
  st.size = plan_.ranks[static_cast<std::size_t>(r)].micro_batch;
  const StageSharding kind = plan_.model_split.sharding;
  st.gathers = kind == StageSharding::Full || kind == StageSharding::Hybrid;
  st.cast_send = casts_gather_send(job.precision);
  const std::size_t U = static_cast<std::size_t>(units_);
  st.gather.assign(U, kNoOp);
  st.first_forward.assign(U, kNoOp);
  st.last_backward.assign(U, kNoOp);
  st.backwards_left.assign(U, 0);
  st.grad_held.assign(U, false);
  st.used.assign(U, 0);
  st.first_use_index.assign(U, -1);
  st.backwards_left_in_chunk.assign(static_cast<std::size_t>(v_), 0);
  const auto& order = orders_[static_cast<std::size_t>(st.stage)];
  for (const auto& step : order) {
    const auto& units =
        vstage_units_[static_cast<std::size_t>(virtual_stage(st.stage, step.chunk))];
    if (step.pass == pipeline::Pass::Forward) {
      for (int u : units)
        if (std::find(st.first_use.begin(), st.first_use.end(), u) == st.first_use.end())
          st.first_use.push_back(u);
    } else {
      for (int u : units) ++st.backwards_left[static_cast<std::size_t>(u)];
      ++st.backwards_left_in_chunk[static_cast<std::size_t>(step.chunk)];
    }
  }
  if (st.gathers) {
    // Each unit gathered once, before its first forward (kept to its last backward): the
    // gathers in first-use order are the phases the framework's prefetch rule gates.
    const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
    std::vector<schedule::GatherPhase> gathers;
    for (std::size_t i = 0; i < st.first_use.size(); ++i) {
      st.first_use_index[static_cast<std::size_t>(st.first_use[i])] = static_cast<int>(i);
      gathers.push_back({static_cast<double>(layout.numel(st.first_use[i])), false});
    }
    st.gather_gates = schedule::gather_gates(
        schedule::gather_rules(job.implementation.framework, plan_.prefetch), gathers);
    emit_gathers_after(st, -1);
  }
  for (const auto& step : order) {
    if (step.pass == pipeline::Pass::Forward)
      emit_forward_step(st, step.micro_batch, step.chunk);
    else
      emit_backward_step(st, step.micro_batch, step.chunk);
  }
  emit_optimizer(st);
}

}  // namespace cephalo::traces

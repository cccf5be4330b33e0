// GraphBuilder: one rank's program, the ops in issue order with their cross-stream
// dependencies and the memory each op allocates at its start and frees at its end (the
// buffers the backend's executor holds; traces/README.md, "Memory per op").
#include <algorithm>

#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

// What one rank's program needs while it is emitted, phase by phase.
struct GraphBuilder::RankState {
  int rank = 0;
  int group = 0;
  std::vector<int> sizes;  // micro-batch sizes, in micro-batch order
  int mbs = 0;
  int copy_lookahead = 1;            // 2 with prefetch: H2D copies run one backward ahead
  bool offload = false;              // layer inputs go to host between forward and recompute
  bool cast_send = false;            // the gather sends a cast copy of the shard
  std::vector<OpId> ag, phase_done;  // per phase: its gather; its last compute op (or gather)
  std::vector<OpId> d2h;             // per unit × micro-batch
  std::vector<OpId> backward_steps;  // B ops in order, for the H2D look-ahead
  OpId last_rs = kNoOp;
  // Whether the unsharded gradient buffer of a gradient phase is allocated on this rank (by
  // its first backward; released by its reduce-scatter), and its last backward.
  std::vector<bool> grad_held;
  std::vector<OpId> grad_last;
  // Within the current phase: its last compute op, and whether the next is its first.
  OpId last_compute = kNoOp;
  bool first = true;
};

OpId GraphBuilder::emit(Op op, std::initializer_list<OpId> deps) {
  return g_.append_op(op, current_rank_, {deps.begin(), deps.size()});
}

OpId GraphBuilder::emit_joined(Op op, std::initializer_list<OpId> deps) {
  const OpId id = emit(op, deps);
  dp_.join(g_, op.collective, current_rank_, id);  // the position of a rank is the rank
  return id;
}

bool GraphBuilder::recomputes(int u) const {
  return schedule::recomputes(plan_.activation_checkpointing, u, units_);
}

bool GraphBuilder::recomputes_attention_core(int u) const {
  return schedule::recomputes_attention_core(plan_.activation_checkpointing, u, units_);
}

Op GraphBuilder::compute_op(const RankState& st, OpKind kind, int p, int m) const {
  // One stage, T = 1: the compute op both builders make (graph_ops.hpp).
  const bool gpu = gpu_runtime_[static_cast<std::size_t>(st.rank)] != 0;
  const ComputeContext context{
      scenario_.job, plan_.activation_checkpointing, units_, 1, false, gpu};
  return traces::compute_op(context, kind, phases_[p].unit, p, m, st.sizes[m]);
}

void GraphBuilder::emit_gather(RankState& st, int p) {
  Op o = dp_.op(g_, dp_.gather(p, st.group), st.rank);
  // The gathered phase (freed by the phase's last compute op) and the cast send shard.
  set_gather_memory(o, st.cast_send);
  const int gate = gather_gates_[static_cast<std::size_t>(p)];
  st.ag[p] = emit_joined(o, {gate >= 0 ? st.phase_done[static_cast<std::size_t>(gate)] : kNoOp});
}

void GraphBuilder::emit_forward(RankState& st, int p, int m) {
  const Job& job = scenario_.job;
  const int u = phases_[p].unit;
  st.last_compute = emit(compute_op(st, OpKind::Forward, p, m), {st.first ? st.ag[p] : kNoOp});
  if (st.offload && u >= 1) {
    const int size = st.sizes[m];
    Op c = micro_batch_op(OpKind::CopyD2H, Pass::Forward, u, p, m, size);
    c.bytes = costmodels::boundary_activation_bytes(job.model, job.sequence_length, size,
                                                    job.precision.compute);
    c.mem_free = c.bytes;  // the device copy of the unit's input
    st.d2h[static_cast<std::size_t>(u) * st.mbs + m] = emit(c, {st.last_compute});
  }
}

void GraphBuilder::emit_backward(RankState& st, int p, int m, bool recompute) {
  const Job& job = scenario_.job;
  const int u = phases_[p].unit;
  const std::int32_t gp = g_.gradient_phase_[p];
  OpId h2d = kNoOp;
  if (st.offload && u >= 1) {
    const int size = st.sizes[m];
    Op c = micro_batch_op(OpKind::CopyH2D, Pass::Backward, u, p, m, size);
    c.bytes = costmodels::boundary_activation_bytes(job.model, job.sequence_length, size,
                                                    job.precision.compute);
    c.mem_alloc = c.bytes;
    const std::size_t steps = st.backward_steps.size();
    OpId gate = steps >= static_cast<std::size_t>(st.copy_lookahead)
                    ? st.backward_steps[steps - st.copy_lookahead]
                    : kNoOp;
    h2d = emit(c, {st.d2h[static_cast<std::size_t>(u) * st.mbs + m], gate});
  }
  // The layer's whole forward again, or under selective recompute its attention core only.
  const bool rerun = recompute || recomputes_attention_core(u);
  if (rerun) emit(compute_op(st, OpKind::Recompute, p, m), {st.first ? st.ag[p] : kNoOp, h2d});
  // The unsharded gradient buffer, when this is the first backward that accumulates into it.
  Op b = compute_op(st, OpKind::Backward, p, m);
  const bool alloc_grad = !st.grad_held[static_cast<std::size_t>(gp)];
  st.grad_held[static_cast<std::size_t>(gp)] = true;
  if (alloc_grad) b.mem_alloc += g_.unit_sizes_[u].gradient_bytes;
  // Without a recompute the backward itself is the phase's first use of the gather.
  st.last_compute = rerun ? emit(b, {}) : emit(b, {st.first ? st.ag[p] : kNoOp, h2d});
  st.backward_steps.push_back(st.last_compute);
  st.grad_last[static_cast<std::size_t>(gp)] = st.last_compute;
}

// Phase p's reduce-scatter (when it reduces) and, under hybrid sharding, the cross-group
// reductions of the units it finished.
void GraphBuilder::emit_reductions(RankState& st, int p) {
  const std::int32_t rs_id = dp_.reduce_scatter(p, st.group);
  if (phases_[p].pass != Pass::Backward || rs_id < 0) return;
  Op rs = dp_.op(g_, rs_id, st.rank);
  set_reduce_scatter_memory(rs, st.grad_held[static_cast<std::size_t>(p)]);
  st.grad_held[static_cast<std::size_t>(p)] = false;
  // The last backward into the buffer (under no_sync possibly an earlier round's).
  st.last_rs = emit_joined(rs, {st.grad_last[static_cast<std::size_t>(p)]});
  // Hybrid: the units this reduce-scatter finished, reduced across groups in place on the
  // gradient shard (no memory of its own).
  for (int unit : dp_.finished_at(p)) {
    const Op ar = dp_.op(g_, dp_.cross(unit), st.rank);
    st.last_rs = emit_joined(ar, {});
  }
}

void GraphBuilder::emit_optimizer_step(RankState& st) {
  emit(optimizer_step_op(scenario_.job, g_.layout_, st.rank, units_), {st.last_rs});
}

void GraphBuilder::build_rank(int r) {
  current_rank_ = r;
  const Job& job = scenario_.job;
  const PlanRank& pr = plan_.ranks[r];
  const int num_phases = static_cast<int>(phases_.size());
  RankState st;
  st.rank = r;
  st.group = g_.layout_.group_of(r);
  if (pr.batch > 0) st.sizes = pr.micro_batch_sizes();
  st.mbs = static_cast<int>(st.sizes.size());
  st.offload = plan_.offload == Offload::Host;
  st.copy_lookahead = plan_.prefetch ? 2 : 1;
  st.cast_send = casts_gather_send(job.precision);
  st.ag.assign(static_cast<std::size_t>(num_phases), kNoOp);
  st.phase_done.assign(static_cast<std::size_t>(num_phases), kNoOp);
  st.d2h.assign(static_cast<std::size_t>(units_) * std::max(st.mbs, 1), kNoOp);
  st.grad_held.assign(static_cast<std::size_t>(num_phases), false);
  st.grad_last.assign(static_cast<std::size_t>(num_phases), kNoOp);

  // The gathers in phase order, each once the compute of its gate phase is done
  // (schedule::gather_gates: the framework's prefetch).
  int next_gather = 0;
  auto emit_gathers_after = [&](int phase) {
    while (next_gather < num_phases &&
           gather_gates_[static_cast<std::size_t>(next_gather)] <= phase)
      emit_gather(st, next_gather++);
  };
  emit_gathers_after(-1);

  for (int p = 0; p < num_phases; ++p) {
    const Phase& ph = phases_[p];
    const int u = ph.unit;
    // What a forward keeps to its backward (a layer without a recompute: its working set; the
    // embedding: nothing, its backward needs only ids) is costmodels' per-op rule (op_bytes).
    const bool recompute = recomputes(u);
    st.last_compute = kNoOp;
    st.first = true;
    // Micro-batches this rank runs in this phase, in execution order.
    auto run = [&](int m) {
      if (ph.pass == Pass::Forward)
        emit_forward(st, p, m);
      else
        emit_backward(st, p, m, recompute);
      st.first = false;
    };
    if (plan_.accumulation == Accumulation::Layered) {
      for (int m = 0; m < st.mbs; ++m) run(ph.pass == Pass::Forward ? m : st.mbs - 1 - m);
    } else if (ph.round < st.mbs) {
      run(ph.round);
    }
    st.phase_done[p] = st.last_compute != kNoOp ? st.last_compute : st.ag[p];
    // The gathered parameters are released when the phase's compute is done.
    g_.ops_[st.phase_done[p]].mem_free += g_.unit_sizes_[u].gathered_bytes;
    g_.ops_[st.phase_done[p]].frees_gathered = true;

    emit_gathers_after(p);
    emit_reductions(st, p);
  }
  emit_optimizer_step(st);
}

}  // namespace cephalo::traces

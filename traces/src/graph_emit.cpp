// RankEmitter: one rank's program (a RankProgram, in issue order) as ops with their cross-stream
// waits and the memory each allocates at its start and frees at its end (traces/README.md,
// "Memory per op"), whichever order produced it.
#include "graph_emit.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

namespace cephalo::traces {

void RankProgram::clear() {
  gathers.clear();
  items.clear();
  reductions.clear();
  step_gathers.clear();
  marks = 0;
  grad_buffers = 0;
  micro_batches = 0;
  tensor_parallel = 1;
}

OpId RankEmitter::append(Op op, std::span<const OpId> deps) {
  return g_->append_op(op, prog_->rank, deps);
}

OpId RankEmitter::append_domain(Op op, std::initializer_list<OpId> deps) {
  const OpId id = append(op, deps);
  dp_->join(*g_, op.collective, prog_->position, id);
  return id;
}

OpId RankEmitter::append_linked(Op op, std::span<const OpId> deps) {
  const OpId id = append(op, deps);
  const Collective& col = g_->collectives_[static_cast<std::size_t>(op.collective)];
  for (std::uint32_t i = 0; i < col.members_count; ++i) {
    CollectiveMember& m = g_->members_[col.members_begin + i];
    if (m.rank == prog_->rank && m.op == kNoOp) {
      m.op = id;
      return id;
    }
  }
  throw std::logic_error("graph: rank " + std::to_string(prog_->rank) + " is not a member of " +
                         to_string(col.kind) + " collective " + std::to_string(op.collective));
}

// The gathers whose gate is mark `mark` or earlier (-1: those issued at the start), each waiting
// for its gate's op (the framework's prefetch rule, schedule::gather_gates, decided by the order).
void RankEmitter::issue_gathers(int mark) {
  const auto& gathers = prog_->gathers;
  while (next_gather_ < gathers.size() && gathers[next_gather_].gate <= mark) {
    const GatherItem& gi = gathers[next_gather_];
    Op o = dp_->op(*g_, dp_->gather(gi.phase, prog_->group), prog_->position);
    // The gathered buffer (freed by the item that frees it) and the cast send shard.
    set_gather_memory(o, c_.cast_send);
    gather_op_[next_gather_] =
        append_domain(o, {gi.gate >= 0 ? mark_op_[static_cast<std::size_t>(gi.gate)] : kNoOp});
    ++next_gather_;
  }
}

OpId RankEmitter::emit_compute(const ComputeItem& item, OpKind kind, std::vector<OpId>& deps) {
  const bool gpu = c_.gpu_runtime[static_cast<std::size_t>(prog_->rank)] != 0;
  const int T = prog_->tensor_parallel;
  const ComputeContext context{c_.job, c_.checkpointing, c_.units, T, c_.sequence_parallel, gpu};
  Op o = compute_op(context, kind, item.unit, item.phase, item.micro_batch, item.size);
  if (kind == OpKind::Backward && item.defers_wgrad)
    o.flops -= costmodels::output_weight_gradient_flops(c_.job, item.size) / T;
  const std::size_t buffer = static_cast<std::size_t>(item.grad_buffer);
  if (kind == OpKind::Backward && item.grad_buffer >= 0 && c_.transient_gradients) {
    // The unsharded gradient buffer, when this is the first backward that accumulates into it.
    if (!grad_held_[buffer]) o.mem_alloc += item.grad_bytes;
    grad_held_[buffer] = 1;
  }
  const OpId id = append(o, deps);
  deps.clear();
  last_compute_ = id;
  if (kind == OpKind::Backward) backward_steps_.push_back(id);
  if ((kind == OpKind::Backward || kind == OpKind::WeightGradient) && item.grad_buffer >= 0)
    grad_last_[buffer] = id;
  // The deferred GEMM is the vocabulary-parallel head's own slice: no TP collective.
  if (kind == OpKind::WeightGradient) return id;
  // The op's tensor-parallel collectives, right after it on the compute stream (DESIGN §4,
  // "Tensor-parallel ops"); the attention core alone runs on the rank's own heads: none.
  const bool core = kind == OpKind::Recompute &&
                    schedule::recomputes_attention_core(c_.checkpointing, item.unit, c_.units);
  if (T > 1 && !core) emit_tensor_parallel(item, kind, o.phase);
  return id;
}

void RankEmitter::emit_tensor_parallel(const ComputeItem& item, OpKind kind, int phase) {
  const ModelSpec& model = c_.job.model;
  const int T = prog_->tensor_parallel;
  const auto unit_kind = costmodels::unit_kind(model, item.unit);
  const double tokens = static_cast<double>(item.size) *
                        costmodels::effective_sequence(model, c_.job.sequence_length);
  int calls = 0;
  double elements = tokens * model.hidden;
  double element_bytes = bytes_per_element(c_.job.precision.compute);
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
  const OpKind tk = c_.sequence_parallel && unit_kind == costmodels::UnitKind::Layer
                        ? OpKind::TpGatherScatter
                        : OpKind::TpAllReduce;
  const Pass pass = item.forward ? Pass::Forward : Pass::Backward;
  Op tp = micro_batch_op(tk, pass, item.unit, phase, item.micro_batch, item.size);
  tp.collective = c_.links->tensor_parallel(prog_->rank, tk, kind, item.unit, pass, calls,
                                            element_bytes, elements);
  tp.bytes = elements * element_bytes;
  tp.shard_bytes = tp.bytes / T;
  last_compute_ = append_linked(tp, {});
}

// The item's receives across its boundary: the input of the chunk it starts (forward) or the
// gradient of the chunk's output (backward); the next compute op waits for them.
void RankEmitter::emit_recvs(const ComputeItem& item) {
  const Pass pass = item.forward ? Pass::Forward : Pass::Backward;
  const int mb = transfer_micro_batch(item), size = transfer_size(item);
  for (const StageLinks::Transfer& t :
       c_.links->transfers(prog_->rank, item.recv_boundary, item.forward, mb, false)) {
    Op o = micro_batch_op(OpKind::Recv, pass, item.unit, -1, mb, size);
    o.bytes = t.bytes;
    o.mem_alloc = o.bytes;
    o.collective = t.collective;
    pending_.push_back(append_linked(o, {}));
  }
}

// The item's sends: the chunk's output (forward) or its input gradient (backward). The last
// send frees what the chunk left, or the item's main op does when this rank sends nothing
// (another TP rank of its group does).
void RankEmitter::emit_sends(const ComputeItem& item, OpId main) {
  const int mb = transfer_micro_batch(item), size = transfer_size(item);
  const auto sends = c_.links->transfers(prog_->rank, item.send_boundary, item.forward, mb, true);
  // Every sub-step's part of the boundary goes with the send (the item is the last sub-step).
  const double held = c_.links->boundary_bytes(size);
  if (sends.empty()) g_->ops_[main].mem_free += held;
  const Pass pass = item.forward ? Pass::Forward : Pass::Backward;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    Op o = micro_batch_op(OpKind::Send, pass, item.unit, -1, mb, size);
    o.bytes = sends[i].bytes;
    o.shard_bytes = o.bytes;
    if (i + 1 == sends.size()) o.mem_free = held;
    o.collective = sends[i].collective;
    const OpId after = last_compute_;
    append_linked(o, std::span<const OpId>(&after, 1));
  }
}

void RankEmitter::emit_reduction(const ReductionItem& r) {
  const OpId wait =
      r.wait_buffer >= 0 ? grad_last_[static_cast<std::size_t>(r.wait_buffer)] : kNoOp;
  switch (r.kind) {
    case ReductionItem::Kind::ReduceScatter: {
      const std::int32_t id = dp_->reduce_scatter(r.phase, prog_->group);
      if (id < 0) throw std::logic_error("graph: a reduction item without its reduce-scatter");
      Op rs = dp_->op(*g_, id, prog_->position);
      if (c_.transient_gradients) {
        // The unsharded gradient (allocated by the first backward into it) and the received
        // shard.
        const std::size_t b = static_cast<std::size_t>(r.buffer);
        set_reduce_scatter_memory(rs, grad_held_[b] != 0);
        grad_held_[b] = 0;
      }
      last_reduction_ = append_domain(rs, {wait});
      break;
    }
    case ReductionItem::Kind::CrossGroup:
      // In place on the gradient shard (no memory of its own).
      last_reduction_ = append_domain(dp_->op(*g_, dp_->cross(r.unit), prog_->position), {wait});
      break;
    case ReductionItem::Kind::Tied: {
      Op t;
      t.kind = OpKind::TiedAllReduce;
      t.pass = Pass::Backward;
      t.unit = r.unit;
      t.phase = r.phase;
      t.collective = c_.links->tied(prog_->rank);
      t.bytes = g_->collectives_[static_cast<std::size_t>(t.collective)].total_bytes;
      t.shard_bytes = t.bytes / 2;
      last_reduction_ = append_linked(t, std::span<const OpId>(&wait, 1));
      break;
    }
  }
}

void RankEmitter::emit_item(const ComputeItem& item) {
  if (item.recv_boundary >= 0) emit_recvs(item);
  OpId main = kNoOp;
  if (!item.compute) {
    main = gather_op_[static_cast<std::size_t>(item.waits_gather)];
  } else {
    const Job& job = c_.job;
    std::vector<OpId>& deps = deps_;
    deps.assign(pending_.begin(), pending_.end());
    pending_.clear();
    if (item.waits_gather >= 0)
      deps.push_back(gather_op_[static_cast<std::size_t>(item.waits_gather)]);
    const bool copies = c_.offload && item.unit >= 1;
    const std::size_t slot =
        static_cast<std::size_t>(item.unit) * static_cast<std::size_t>(prog_->micro_batches) +
        static_cast<std::size_t>(item.micro_batch);
    const double boundary =
        copies ? costmodels::boundary_activation_bytes(job.model, job.sequence_length, item.size,
                                                       job.precision.compute)
               : 0.0;
    if (item.forward) {
      main = emit_compute(item, OpKind::Forward, deps);
      if (copies) {
        // The unit's input to host once the unit consumed it (its device copy freed).
        Op c = micro_batch_op(OpKind::CopyD2H, Pass::Forward, item.unit, item.phase,
                              item.micro_batch, item.size);
        c.bytes = boundary;
        c.mem_free = c.bytes;
        d2h_[slot] = append(c, {main});
      }
    } else if (item.flush_wgrad) {
      main = emit_compute(item, OpKind::WeightGradient, deps);
    } else {
      if (copies) {
        // ... and back before its recompute, `copy_lookahead` backwards ahead.
        Op c = micro_batch_op(OpKind::CopyH2D, Pass::Backward, item.unit, item.phase,
                              item.micro_batch, item.size);
        c.bytes = boundary;
        c.mem_alloc = c.bytes;
        const std::size_t steps = backward_steps_.size();
        const std::size_t ahead = static_cast<std::size_t>(c_.copy_lookahead);
        const OpId gate = steps >= ahead ? backward_steps_[steps - ahead] : kNoOp;
        deps.push_back(append(c, {d2h_[slot], gate}));
      }
      // The layer's whole forward again, or under selective recompute its attention core only;
      // without one the backward itself is the item's first op.
      if (schedule::has_recompute_op(c_.checkpointing, item.unit, c_.units))
        emit_compute(item, OpKind::Recompute, deps);
      main = emit_compute(item, OpKind::Backward, deps);
    }
  }
  if (item.frees_gathered) {
    g_->ops_[main].mem_free += item.gathered_bytes;
    g_->ops_[main].frees_gathered = true;
  }
  if (item.mark >= 0) {
    mark_op_[static_cast<std::size_t>(item.mark)] = main;
    issue_gathers(item.mark);
  }
  for (std::uint32_t i = 0; i < item.reductions_count; ++i)
    emit_reduction(prog_->reductions[item.reductions_begin + i]);
  if (item.send_boundary >= 0) emit_sends(item, main);
}

void RankEmitter::emit(TrainingGraph& g, const DomainCollectives& domain, const ShardLayout& layout,
                       const RankProgram& program) {
  g_ = &g;
  dp_ = &domain;
  prog_ = &program;
  gather_op_.assign(program.gathers.size(), kNoOp);
  mark_op_.assign(static_cast<std::size_t>(program.marks), kNoOp);
  next_gather_ = 0;
  pending_.clear();
  d2h_.assign(c_.offload ? static_cast<std::size_t>(c_.units) *
                               static_cast<std::size_t>(std::max(program.micro_batches, 1))
                         : 0,
              kNoOp);
  backward_steps_.clear();
  grad_held_.assign(static_cast<std::size_t>(program.grad_buffers), 0);
  grad_last_.assign(static_cast<std::size_t>(program.grad_buffers), kNoOp);
  last_compute_ = kNoOp;
  last_reduction_ = kNoOp;

  issue_gathers(-1);
  for (const ComputeItem& item : program.items) emit_item(item);
  const OpId step =
      append(optimizer_step_op(c_.job, layout, program.position, c_.units), {last_reduction_});
  // ZeRO-1: the updated parameters gathered again after the step.
  for (int phase : program.step_gathers) {
    Op o = dp_->op(g, dp_->gather(phase, program.group), program.position);
    o.pass = Pass::Step;
    append_domain(o, {step});
  }
}

}  // namespace cephalo::traces

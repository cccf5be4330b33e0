#include "cephalo/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "executor_impl.hpp"

// The op interpreter: walks this rank's program of the TrainingGraph op by op, issuing each on
// its stream after the ops it waits on, and holding every buffer exactly as long as the graph
// says. The state it updates is the ShardedState; the optimizer step is optimizer.cpp's.
namespace cephalo::backend {

namespace tr = cephalo::traces;

namespace {

StreamKind device_stream(tr::Stream s) {
  switch (s) {
    case tr::Stream::Compute:
      return StreamKind::Compute;
    case tr::Stream::Comm:
      return StreamKind::Comm;
    case tr::Stream::D2H:
    case tr::Stream::H2D:
      return StreamKind::Copy;
    case tr::Stream::Send:
      return StreamKind::Send;
    case tr::Stream::Recv:
      return StreamKind::Recv;
  }
  return StreamKind::Compute;
}

}  // namespace

Executor::Impl::Impl(const Scenario& s, const Plan& p, const tr::TrainingGraph& g,
                     const GptModel& mdl, Device& d, Communicator& c, const ExecutorOptions& o,
                     std::unique_ptr<Communicator> tp_comm)
    : scenario(s),
      plan(p),
      graph(g),
      model(mdl),
      dev(d),
      comm(c),
      opt(o),
      scaler(elem_type_of(s.job.precision.compute) == ElemType::F16,
             {o.loss_scale_init, o.loss_scale_growth, o.loss_scale_backoff,
              o.loss_scale_growth_interval}),
      failure{o.fail_at_step, o.fail_by_kill, o.fail_non_finite},
      slowdown(o.slowdown) {
  rank = comm.rank();
  ranks = comm.size();
  units = model.num_units();
  if (graph.num_ranks() != ranks || static_cast<int>(plan.ranks.size()) != ranks)
    throw RuntimeFailure("executor: graph has " + std::to_string(graph.num_ranks()) +
                         " ranks, plan " + std::to_string(plan.ranks.size()) + ", communicator " +
                         std::to_string(ranks));
  if (graph.summary().num_units != units)
    throw RuntimeFailure("executor: the training graph has " +
                         std::to_string(graph.summary().num_units) + " units, the model " +
                         std::to_string(units));
  split = graph.summary().split;
  sp.tp = std::move(tp_comm);
  if (const std::string why = split ? backend_split_refusal(plan.model_split) : ""; !why.empty())
    throw InfeasibleError(why + " (" +
                          describe(plan.model_split, static_cast<int>(plan.ranks.size())) +
                          "); drop it to run the plan, or simulate it with `cephalo simulate`");
  rows_per_sample = model.config().seq;
  const Precision& prec = scenario.job.precision;
  if (prec.params != Dtype::FP32)
    throw InfeasibleError(
        "the executor keeps fp32 master weights and AdamW state; the job asks "
        "for precision.params = " +
        to_string(prec.params) + " (use fp32)");
  compute_type = elem_type_of(prec.compute);
  reduce_type = elem_type_of(prec.reduce);
  for (ElemType t : {compute_type, reduce_type})
    if (!dev.supports(t))
      throw InfeasibleError("device " + dev.name() + " cannot compute in " + to_string(t));
  // The graph sizes every unit this rank holds as the model's slice does (a split graph: this
  // rank's domain's layout; an FSDP graph: the whole unit).
  for (int u = 0; u < units; ++u) {
    const std::int64_t want = split ? graph.layout_of(rank).numel(u) : graph.unit_sizes(u).numel;
    if ((!split || graph.holds(rank, u)) && want != model.unit_numel(u))
      throw RuntimeFailure("executor: the training graph's unit " + std::to_string(u) + " has " +
                           std::to_string(want) + " elements on rank " + std::to_string(rank) +
                           ", the model " + std::to_string(model.unit_numel(u)));
  }
  state = std::make_unique<ShardedState>(dev, model, graph, rank, reduce_type);
  if (split) {
    // Every pipeline micro-batch through this rank's stage: the replica's share of it.
    const PlanRank& me = plan.ranks[static_cast<std::size_t>(rank)];
    mb_sizes.assign(static_cast<std::size_t>(graph.summary().pipeline_micro_batches),
                    me.micro_batch);
    setup_split();
  } else {
    setup_sharding();
    mb_sizes = plan.ranks[static_cast<std::size_t>(rank)].batch > 0
                   ? plan.ranks[static_cast<std::size_t>(rank)].micro_batch_sizes()
                   : std::vector<int>{};
    read_graph_decisions();
  }
  dev.synchronize();
}

void Executor::Impl::retire(Buffer b, Stream& s) {
  if (!b) return;
  auto ev = std::shared_ptr<Event>(dev.create_event());
  ev->record(s);
  retired.push_back({std::move(b), std::move(ev)});
  reap();
}

// Frees every retired buffer whose last use has completed. The whole queue is scanned: buffers
// retired on different streams complete out of order (a reduce-scatter still in flight must
// not hold back the compute-stream buffers retired after it).
void Executor::Impl::reap() {
  retired.erase(std::remove_if(retired.begin(), retired.end(),
                               [](const Retired& r) { return r.done->query(); }),
                retired.end());
}

// The communicator's name of an uneven graph variant.
static UnevenCollective uneven_of(tr::CollectiveVariant v) {
  return v == tr::CollectiveVariant::Padded ? UnevenCollective::Padded : UnevenCollective::Grouped;
}

// Gather unit u's shards of the parameters (or gradients) into `full` (unit_numel elements, of
// full's element type) on stream `s`. A shard of another type is cast into a transient send
// buffer first (FSDP mixed precision: the fp32 master shard travels in the compute type).
void Executor::Impl::gather_unit(Stream& s, int u, bool gradients, TensorRef full) {
  gather_shard(s, *group_comm, u, unit_variant[static_cast<std::size_t>(u)], gradients, full);
}

void Executor::Impl::gather_shard(Stream& s, Communicator& group, int u, tr::CollectiveVariant v,
                                  bool gradients, TensorRef full) {
  const std::int64_t n = state->owned(u);
  TensorRef shard = (gradients ? state->grad(u) : state->param(u)).slice(0, n);
  Buffer send;
  if (shard.type != full.type) {
    send = dev.allocate(static_cast<std::size_t>(n), full.type);
    if (n) dev.cast(s, shard, send.ref());
    shard = send.ref();
  }
  // The graph's variant: Even takes the even collective (MPI_Allgather / ncclAllGather);
  // Grouped and Padded the -v call run that way (the variant the graph builder resolved and the
  // simulator priced; under the plan's auto, the comm model's choice).
  if (v == tr::CollectiveVariant::Even)
    group.all_gather(s, shard, full);
  else
    group.all_gather_v(s, shard, full, state->counts(u), uneven_of(v));
  retire(std::move(send), s);
}

// Reduce a full gradient onto the owners and add it into this rank's accumulator.
void Executor::Impl::reduce_unit(Stream& s, int u, TensorRef full) {
  reduce_shard(s, *group_comm, u, unit_variant[static_cast<std::size_t>(u)], full);
}

void Executor::Impl::reduce_shard(Stream& s, Communicator& group, int u, tr::CollectiveVariant v,
                                  TensorRef full) {
  const std::int64_t n = state->owned(u);
  Buffer tmp = gradient(n);
  if (v == tr::CollectiveVariant::Even)
    group.reduce_scatter(s, full, tmp.ref(), ReduceOp::Sum);
  else
    group.reduce_scatter_v(s, full, tmp.ref(), state->counts(u), ReduceOp::Sum, uneven_of(v));
  if (n) dev.axpy(s, 1.0f, tmp.ref(), state->grad(u).slice(0, n));
  retire(std::move(tmp), s);
}

void Executor::Impl::read_graph_decisions() {
  int phases = 0;
  for (const auto& op : graph.ops()) phases = std::max(phases, op.phase + 1);
  phase_segments.assign(static_cast<std::size_t>(phases), {});
  unit_variant.assign(static_cast<std::size_t>(units), tr::CollectiveVariant::Even);
  std::vector<bool> seen(static_cast<std::size_t>(units), false);
  for (const auto& c : graph.collectives()) {
    // This rank's group's gathers and reduce-scatters (the cross-group reduction is
    // setup_sharding's).
    if (c.group != group) continue;
    std::vector<PhaseSegment> segs;
    std::int64_t offset = 0;
    for (const auto& seg : graph.segments(c)) {
      segs.push_back({seg.unit, offset, seg.numel, seg.variant});
      offset += seg.numel;
      auto& known = unit_variant[static_cast<std::size_t>(seg.unit)];
      if (seen[static_cast<std::size_t>(seg.unit)] && known != seg.variant)
        throw RuntimeFailure("executor: the graph moves unit " + std::to_string(seg.unit) +
                             " both as " + to_string(known) + " and as " + to_string(seg.variant));
      known = seg.variant;
      seen[static_cast<std::size_t>(seg.unit)] = true;
    }
    auto& phase = phase_segments[static_cast<std::size_t>(c.phase)];
    if (phase.empty()) phase = std::move(segs);
  }
}

const std::vector<PhaseSegment>& Executor::Impl::segments_of(int phase) const {
  const auto& segs = phase_segments.at(static_cast<std::size_t>(phase));
  if (segs.empty())
    throw RuntimeFailure("executor: phase " + std::to_string(phase) + " has no collective");
  return segs;
}

std::int64_t Executor::Impl::phase_numel(int phase) const {
  const auto& segs = segments_of(phase);
  return segs.back().offset + segs.back().numel;
}

const PhaseSegment* Executor::Impl::find_segment(int phase, int unit) const {
  for (const auto& seg : segments_of(phase))
    if (seg.unit == unit) return &seg;
  return nullptr;
}

// A unit's parameters (gradient) inside the phase's gathered buffer, where the graph's
// segments put it.
TensorRef Executor::Impl::unit_params(int phase, int u) {
  const PhaseSegment* seg = find_segment(phase, u);
  if (!seg)
    throw RuntimeFailure("executor: phase " + std::to_string(phase) + " gathers no unit " +
                         std::to_string(u));
  return gathered.at(phase).slice(seg->offset, seg->numel);
}
TensorRef Executor::Impl::unit_grads(int phase, int u) {
  const PhaseSegment* seg = find_segment(phase, u);
  if (!seg)
    throw RuntimeFailure("executor: phase " + std::to_string(phase) + " reduces no unit " +
                         std::to_string(u));
  return phase_gradient(phase).slice(seg->offset, seg->numel);
}
Buffer& Executor::Impl::phase_gradient(int phase) {
  return phase_grad.at(graph.gradient_phase(phase));
}
// A tied head's logits use the embedding's wte, which the graph gathers in front of the head
// in the head's phases (costmodels::phase_parameters); an untied head owns its weight.
TensorRef Executor::Impl::embedding_params_for_head(int phase) {
  if (!model.config().tied_head) return {};
  return unit_params(phase, 0);
}
TensorRef Executor::Impl::embedding_grads_for_head(int phase) {
  if (!model.config().tied_head) return {};
  return unit_grads(phase, 0);
}

void Executor::Impl::prepare_data(int step) {
  tokens.clear();
  targets.clear();
  std::int64_t sample = 0;
  for (int r = 0; r < rank; ++r) sample += plan.ranks[static_cast<std::size_t>(r)].batch;
  const auto& cfg = model.config();
  for (int mb = 0; mb < static_cast<int>(mb_sizes.size()); ++mb) {
    const std::int64_t n = rows(mb);
    std::vector<std::int32_t> tok(static_cast<std::size_t>(n)), tgt(static_cast<std::size_t>(n));
    for (int i = 0; i < mb_sizes[static_cast<std::size_t>(mb)]; ++i, ++sample)
      synthetic_sample(cfg, opt.data_seed, step, sample, tok.data() + i * cfg.seq,
                       tgt.data() + i * cfg.seq);
    tokens.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    targets.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    dev.upload(tokens.back().ref(), tok.data(), tok.size() * 4);
    dev.upload(targets.back().ref(), tgt.data(), tgt.size() * 4);
  }
}

void Executor::Impl::ensure_phase_grads(const tr::Op& op) {
  const int gp = graph.gradient_phase(op.phase);
  if (phase_grad.count(gp)) return;
  Buffer g = gradient(phase_numel(gp));
  dev.fill(dev.stream(StreamKind::Compute), g.ref(), 0.0f);
  phase_grad[gp] = std::move(g);
}

void Executor::Impl::run_compute(const tr::Op& op) {
  const int u = op.unit, mb = op.micro_batch;
  const bool head = u == model.head_unit();
  // Mean token loss over the global batch, times the fp16 loss scale.
  const float grad_scale = static_cast<float>(
      scaler.scale() / (static_cast<double>(plan.global_batch()) * rows_per_sample));
  switch (op.kind) {
    case tr::OpKind::Forward: {
      if (head) {
        loss_sum += model.head_forward_backward(
            dev, unit_params(op.phase, u), embedding_params_for_head(op.phase),
            boundary[u][mb].ref(), targets[mb].ref(), rows(mb), 0.0f, {}, {}, {});
        break;
      }
      Buffer y = activation(rows(mb) * model.config().hidden);
      if (u == 0) {
        model.embedding_forward(dev, unit_params(op.phase, 0), tokens[mb].ref(), y.ref(), rows(mb));
      } else {
        // The checkpointed forward keeps only the unit's output: its activations are the
        // op's working set and go when it ends (the graph's F op frees them too), so they
        // never coexist with a backward's. A unit the graph does not recompute keeps them
        // for its backward.
        LayerActivations scratch;
        LayerActivations& acts = graph.recomputes(u) ? scratch : saved[u][mb];
        model.layer_forward(dev, unit_params(op.phase, u), boundary[u][mb].ref(), y.ref(), acts,
                            rows(mb));
        if (graph.recomputes_attention_core(u)) model.drop_attention_core(acts);
      }
      boundary[u + 1][mb] = std::move(y);
      break;
    }
    case tr::OpKind::Recompute: {
      // The embedding needs nothing saved; the head recomputes inside its backward op.
      if (graph.recomputes_attention_core(u)) {
        model.recompute_attention_core(dev, saved[u][mb], rows(mb));
      } else if (u >= 1 && !head) {
        Buffer y = activation(rows(mb) * model.config().hidden);
        model.layer_forward(dev, unit_params(op.phase, u), boundary[u][mb].ref(), y.ref(),
                            saved[u][mb], rows(mb));
        retire(std::move(y), dev.stream(StreamKind::Compute));
      }
      break;
    }
    case tr::OpKind::Backward: {
      ensure_phase_grads(op);
      auto& cs = dev.stream(StreamKind::Compute);
      if (head) {
        Buffer dx = activation(rows(mb) * model.config().hidden);
        model.head_forward_backward(dev, unit_params(op.phase, u),
                                    embedding_params_for_head(op.phase), boundary[u][mb].ref(),
                                    targets[mb].ref(), rows(mb), grad_scale, dx.ref(),
                                    unit_grads(op.phase, u), embedding_grads_for_head(op.phase));
        dgrad[mb] = std::move(dx);
        retire(std::move(boundary[u][mb]), cs);
      } else if (u >= 1) {
        Buffer dx = activation(rows(mb) * model.config().hidden);
        model.layer_backward(dev, unit_params(op.phase, u), unit_grads(op.phase, u),
                             boundary[u][mb].ref(), saved[u][mb], dgrad[mb].ref(), dx.ref(),
                             rows(mb));
        retire(std::move(dgrad[mb]), cs);
        dgrad[mb] = std::move(dx);
        retire(std::move(boundary[u][mb]), cs);
        saved[u][mb] = LayerActivations{};  // released with the backward, as the graph says
      } else {
        model.embedding_backward(dev, phase_gradient(op.phase).ref(), tokens[mb].ref(),
                                 dgrad[mb].ref(), rows(mb));
        retire(std::move(dgrad[mb]), cs);
      }
      break;
    }
    case tr::OpKind::OptimizerStep:
      optimizer_step();
      break;
    default:
      throw RuntimeFailure("executor: op " + graph.op_name(op.id) + " is not a compute op");
  }
}

void Executor::Impl::optimizer_step() {
  dev.stream(StreamKind::Comm).synchronize();  // every reduce-scatter has landed
  last_loss_scale = scaler.scale();
  const auto poison = [&](const char* part, Buffer& (ShardedState::*buffer)(int), float value) {
    if (!failure.injects(part, step_now)) return;
    for (int u = 0; u < units; ++u)
      if (state->owned(u)) {
        dev.fill(dev.stream(StreamKind::Compute), ((*state).*buffer)(u).slice(0, 1), value);
        break;
      }
  };
  poison("gradients", &ShardedState::grad, std::nanf(""));
  // Under fp16 the overflow verdict is all-reduced, so every rank skips or applies together
  // and the shards stay consistent; an overflow the scale cannot absorb any more ends the run.
  // Without the scaler a non-finite gradient would be applied: it ends the run before the
  // update.
  if (scaler.enabled()) {
    std::ostringstream scale;
    scale << scaler.scale();
    const bool overflowed = gradients_overflowed(dev, comm, *state);
    if (overflowed && scaler.scale() <= kMinLossScale)
      throw NonFiniteState(step_now, "fp16 loss scale",
                           "the fp16 loss scale collapsed: the gradients overflow fp16 (inf or "
                           "NaN) at a loss scale of " +
                               scale.str() + ", which no smaller scale absorbs");
    last_skipped = !scaler.update(overflowed);
    if (last_skipped) return;
  } else {
    last_skipped = false;
    if (gradients_overflowed(dev, comm, *state))
      throw NonFiniteState(step_now, "gradients",
                           "the gradients hold inf or NaN (before the update; none was applied)");
  }
  adamw_update(dev, *state, scenario.job.optimizer, last_loss_scale,
               [this](Buffer b, Stream& s) { retire(std::move(b), s); });
  poison("parameters", &ShardedState::param, std::nanf(""));
  poison("moments", &ShardedState::v, std::numeric_limits<float>::infinity());
  const std::vector<StatePart> parts = {StatePart::Parameters, StatePart::FirstMoments,
                                        StatePart::SecondMoments};
  const auto bad = non_finite_parts(dev, comm, *state, parts);
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (bad[i])
      throw NonFiniteState(
          step_now, state_part_name(parts[i]),
          std::string("the ") + state_part_name(parts[i]) + " hold inf or NaN after the update");
}

// A collective moves the graph's segments of its phase, each with its own variant.
void Executor::Impl::run_comm(const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Comm);
  switch (op.kind) {
    case tr::OpKind::AllGather:
    case tr::OpKind::AllGatherV: {
      Buffer full = activation(phase_numel(op.phase));
      for (const auto& seg : segments_of(op.phase))
        gather_unit(s, seg.unit, false, full.slice(seg.offset, seg.numel));
      gathered[op.phase] = std::move(full);
      break;
    }
    case tr::OpKind::AllReduce:
      run_cross_reduction(op);
      break;
    case tr::OpKind::ReduceScatter:
    case tr::OpKind::ReduceScatterV: {
      if (!phase_grad.count(op.phase)) ensure_phase_grads(op);  // no compute: zeros
      Buffer& g = phase_grad.at(op.phase);
      for (const auto& seg : segments_of(op.phase))
        reduce_unit(s, seg.unit, g.slice(seg.offset, seg.numel));
      retire(std::move(g), s);
      phase_grad.erase(op.phase);
      break;
    }
    default:
      throw RuntimeFailure("executor: unsupported collective " + graph.op_name(op.id));
  }
}

void Executor::Impl::run_copy(const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Copy);
  const int u = op.unit, mb = op.micro_batch;
  if (op.kind == tr::OpKind::CopyD2H) {
    Buffer& src = boundary[u][mb];
    Buffer host =
        dev.allocate(static_cast<std::size_t>(src.numel()), src.type(), MemorySpace::PinnedHost);
    dev.copy(s, host.ref(), src.ref());
    retire(std::move(src), s);
    offloaded[u][mb] = std::move(host);
  } else {
    Buffer& src = offloaded[u][mb];
    Buffer back = dev.allocate(static_cast<std::size_t>(src.numel()), src.type());
    dev.copy(s, back.ref(), src.ref());
    retire(std::move(src), s);
    boundary[u][mb] = std::move(back);
  }
}

double Executor::Impl::step(int step_index) {
  using Clock = std::chrono::steady_clock;
  failure.at_start_of(step_index);
  step_now = step_index;
  if (split) {
    split_prepare_data(step_index);
    split_begin_step();
  } else {
    prepare_data(step_index);
  }
  const int mbs = static_cast<int>(mb_sizes.size());
  boundary.clear();
  offloaded.clear();
  boundary.resize(static_cast<std::size_t>(units));
  offloaded.resize(static_cast<std::size_t>(units));
  for (int u = 0; u < units; ++u) {
    boundary[u].resize(static_cast<std::size_t>(mbs));
    offloaded[u].resize(static_cast<std::size_t>(mbs));
  }
  dgrad.clear();
  dgrad.resize(static_cast<std::size_t>(mbs));
  saved.clear();
  saved.resize(static_cast<std::size_t>(units));
  for (auto& per_unit : saved) per_unit.resize(static_cast<std::size_t>(mbs));
  loss_sum = 0;
  auto& cs = dev.stream(StreamKind::Compute);
  state->zero_gradients(cs);
  dev.synchronize();
  // Every rank starts the step together, so per-op times of all ranks share one origin.
  comm.barrier();
  dev.reset_peak();

  auto prog = graph.program(rank);
  if (prog.empty()) throw RuntimeFailure("executor: rank " + std::to_string(rank) + " has no ops");
  const tr::OpId first = prog.front().id;
  if (split) {
    sp.tp_calls.clear();
    sp.tp_calls.resize(prog.size());
    sp.tp_source.assign(prog.size(), -1);
  }
  std::size_t last_compute = 0;
  issued_bytes.assign(prog.size(), 0.0);
  start_ev.assign(prog.size(), nullptr);
  end_ev.assign(prog.size(), nullptr);
  auto origin = std::shared_ptr<Event>(dev.create_event());
  origin->record(cs);
  const auto t0 = Clock::now();
  for (const auto& op : prog) {
    const std::size_t i = op.id - first;
    reap();  // buffers whose last use completed since the previous op
    Stream& s = dev.stream(device_stream(op.stream));
    for (tr::OpId d : graph.waits_on(op.id)) s.wait(*end_ev[d - first]);
    start_ev[i] = std::shared_ptr<Event>(dev.create_event());
    end_ev[i] = std::shared_ptr<Event>(dev.create_event());
    start_ev[i]->record(s);
    if (tr::is_compute(op.kind)) {
      if (split) {
        run_split_compute(op);
        // The TP collectives its math issued; the graph's TP op after it reports them.
        sp.tp_calls[i] = model.take_tp_calls();
        last_compute = i;
      } else {
        run_compute(op);
      }
      slowdown.after_compute(dev, s, *start_ev[i]);
    } else if (tr::is_tensor_parallel(op.kind)) {
      sp.tp_source[i] = static_cast<int>(last_compute);  // ran inside that compute op
    } else if (tr::is_pipeline_transfer(op.kind)) {
      run_split_transfer(op);
    } else if (tr::is_collective(op.kind)) {
      if (split)
        run_split_comm(op);
      else
        run_comm(op);
    } else {
      run_copy(op);
    }
    end_ev[i]->record(s);
    issued_bytes[i] = static_cast<double>(dev.memory_stats(MemorySpace::Device).current);
    // The graph says which op's end releases the phase's gathered parameters (a split graph
    // keeps a unit's, gathered once, to its last backward).
    if (op.frees_gathered) {
      auto& held = split ? sp.gathered : gathered;
      auto it = held.find(split ? op.unit : op.phase);
      if (it != held.end()) {
        retire(std::move(it->second), s);
        held.erase(it);
      }
    }
  }
  dev.synchronize();
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  retired.clear();
  tokens.clear();
  targets.clear();
  last_peak = dev.memory_stats(MemorySpace::Device).peak;
  last_start.assign(graph.num_ops(), -1);
  last_end.assign(graph.num_ops(), -1);
  last_bytes.assign(graph.num_ops(), 0.0);
  for (std::size_t i = 0; i < prog.size(); ++i) {
    last_start[first + i] = static_cast<std::int64_t>(start_ev[i]->seconds_since(*origin) * 1e9);
    last_end[first + i] = static_cast<std::int64_t>(end_ev[i]->seconds_since(*origin) * 1e9);
    last_end[first + i] = std::max(last_end[first + i], last_start[first + i]);
    last_bytes[first + i] = issued_bytes[i];
  }
  // A TP op reports the collectives its compute op ran (DESIGN §4, "Tensor-parallel ops"): the
  // compute op's interval is split at its end, the calls' measured sum going to the TP op.
  if (split)
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const int c = sp.tp_source[i];
      if (c < 0) continue;
      double calls = 0;
      for (auto& call : sp.tp_calls[static_cast<std::size_t>(c)])
        calls += call.end->seconds_since(*call.start);
      const std::size_t ci = first + static_cast<std::size_t>(c);
      const std::int64_t end = last_end[ci];
      const std::int64_t cut =
          std::max(last_start[ci], end - static_cast<std::int64_t>(std::llround(calls * 1e9)));
      last_end[ci] = cut;
      last_start[first + i] = cut;
      last_end[first + i] = end;
    }
  // The ops are timed from the origin event, recorded just before t0: a preemption between the
  // two (a busy machine) can put the last op's end after the wall time. The step lasts until
  // both have passed, so that the step time and its report's iteration time (the later of the
  // two, traces::summarize) are one number.
  for (std::size_t i = 0; i < prog.size(); ++i)
    wall = std::max(wall, static_cast<double>(last_end[first + i]) * 1e-9);
  last_iteration_s = wall;
  return wall;
}

Executor::Executor(const Scenario& scenario, const Plan& plan, const tr::TrainingGraph& graph,
                   const GptConfig& config, Device& device, Communicator& comm,
                   const ExecutorOptions& options) {
  // Under a split the TP group's communicator comes first (the model slice needs it): a
  // collective on every rank, after the checks that could refuse on one rank and not another.
  std::unique_ptr<Communicator> tp_comm;
  model_ = std::make_unique<GptModel>(config, tensor_parallel_of(graph, config, comm, tp_comm));
  impl_ = std::make_unique<Impl>(scenario, plan, graph, *model_, device, comm, options,
                                 std::move(tp_comm));
}

Executor::~Executor() = default;

NonFiniteState::NonFiniteState(int step, const std::string& quantity, const std::string& detail)
    : RuntimeFailure("step " + std::to_string(step) + ": " + detail +
                     "; the run stops rather than train on broken state (a learning rate too "
                     "large, or data or a model the precision cannot hold)"),
      step_(step),
      quantity_(quantity) {}

StepResult Executor::run_step() {
  auto& I = *impl_;
  double wall = I.step(step_);
  double loss_sum = I.loss_sum;
  if (I.failure.injects("loss", step_)) loss_sum = std::nan("");
  I.comm.all_reduce_host(&loss_sum, 1, ReduceOp::Sum);
  // Every rank holds the same sum: every rank stops together. A step fp16's scaler skipped
  // has an overflowing loss by definition, and its state is untouched.
  if (!std::isfinite(loss_sum) && !I.last_skipped)
    throw NonFiniteState(step_, "loss",
                         "the loss (mean token loss over the global batch) is inf or NaN");
  double slowest = wall;
  I.comm.all_reduce_host(&slowest, 1, ReduceOp::Max);
  StepResult r;
  r.step = step_;
  r.loss = loss_sum / (static_cast<double>(I.plan.global_batch()) * I.rows_per_sample);
  r.time_s = slowest;
  r.samples_per_s = slowest > 0 ? I.plan.global_batch() / slowest : 0;
  r.loss_scale = I.last_loss_scale;
  r.skipped = I.last_skipped;
  ++step_;
  return r;
}

std::vector<float> Executor::gather_parameters() { return gather_full(false); }
std::vector<float> Executor::gather_gradients() { return gather_full(true); }

std::vector<float> Executor::gather_full(bool gradients) {
  auto& I = *impl_;
  std::vector<float> out;
  auto& cs = I.dev.stream(StreamKind::Comm);
  // Gradients are stored as reduced, i.e. still multiplied by the fp16 loss scale.
  const double unscale = gradients ? 1.0 / I.last_loss_scale : 1.0;
  for (int u = 0; u < I.units; ++u) {
    std::vector<float> host;
    if (I.split) {
      // The single-rank unit from its owners' slices of every TP rank's part.
      host = I.assemble_unit(u, gradients ? 3 : 0);
    } else {
      Buffer full = I.f32(model_->unit_numel(u));
      I.gather_unit(cs, u, gradients, full.ref());
      cs.synchronize();
      I.retired.clear();
      host.resize(static_cast<std::size_t>(full.numel()));
      I.dev.download(host.data(), full.ref(), host.size() * 4);
    }
    if (unscale != 1.0)
      for (float& x : host) x = static_cast<float>(x * unscale);
    out.insert(out.end(), host.begin(), host.end());
  }
  return out;
}

}  // namespace cephalo::backend

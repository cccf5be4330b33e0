#include "cephalo/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
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
      tp(std::move(tp_comm)),
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
  if (const std::string why = backend_split_refusal(plan.model_split); !why.empty())
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
  // The graph sizes every unit this rank holds as the model's slice does (its domain's layout:
  // the TP slice of its stage's units; without a split, the whole unit).
  for (int u = 0; u < units; ++u) {
    const std::int64_t want = graph.layout_of(rank).numel(u);
    if (graph.holds(rank, u) && want != model.unit_numel(u))
      throw RuntimeFailure("executor: the training graph's unit " + std::to_string(u) + " has " +
                           std::to_string(want) + " elements on rank " + std::to_string(rank) +
                           ", the model " + std::to_string(model.unit_numel(u)));
  }
  state = std::make_unique<ShardedState>(dev, model, graph, rank, reduce_type);
  place = graph.place(rank);
  set_up_samples();
  set_up_groups();
  read_program();
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

// The samples of this rank's micro-batches. With pipeline micro-batches (the graph's m > 0)
// pipeline micro-batch i holds the global batch's samples [i·G/m, (i + 1)·G/m), each stage's
// replicas consecutive shares of them in replica order (every stage covers all of them: the
// transfers move the overlaps), and a replica's share runs as its k sub-steps in order: the
// rank's micro-batch i·k + j. Without them every rank reads its own consecutive samples in
// rank order, cut into its micro-batches.
void Executor::Impl::set_up_samples() {
  const tr::GraphSummary& sum = graph.summary();
  const PlanRank& me = plan.ranks[static_cast<std::size_t>(rank)];
  const int m = sum.pipeline_micro_batches;
  mb_sizes.clear();
  mb_first.clear();
  if (m > 0) {
    replica_offsets.assign(static_cast<std::size_t>(sum.pipeline_stages), {});
    std::vector<std::vector<int>> sizes(static_cast<std::size_t>(sum.pipeline_stages));
    for (int r = 0; r < ranks; ++r) {
      const RankPlace& p = graph.place(r);
      auto& v = sizes[static_cast<std::size_t>(p.stage)];
      if (static_cast<int>(v.size()) <= p.replica)
        v.resize(static_cast<std::size_t>(p.replica) + 1);
      v[static_cast<std::size_t>(p.replica)] =
          plan.ranks[static_cast<std::size_t>(r)].share_per_micro_batch(m);
    }
    const std::int64_t per_micro_batch = plan.global_batch() / m;
    for (std::size_t st = 0; st < sizes.size(); ++st) {
      auto& off = replica_offsets[st];
      off.push_back(0);
      for (int n : sizes[st]) off.push_back(off.back() + n);
      if (off.back() != per_micro_batch)
        throw RuntimeFailure("executor: stage " + std::to_string(st) + "'s replicas run " +
                             std::to_string(off.back()) + " samples of a micro-batch of " +
                             std::to_string(per_micro_batch));
    }
    const std::int64_t first = replica_offsets[static_cast<std::size_t>(place.stage)]
                                              [static_cast<std::size_t>(place.replica)];
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < me.sub_steps(m); ++j) {
        mb_sizes.push_back(me.micro_batch);
        mb_first.push_back(i * per_micro_batch + first + std::int64_t{j} * me.micro_batch);
      }
    return;
  }
  std::int64_t sample = 0;
  for (int r = 0; r < rank; ++r) sample += plan.ranks[static_cast<std::size_t>(r)].batch;
  if (me.batch <= 0) return;
  for (int n : me.micro_batch_sizes()) {
    mb_sizes.push_back(n);
    mb_first.push_back(sample);
    sample += n;
  }
}

void Executor::Impl::read_program() {
  const auto prog = graph.program(rank);
  const tr::OpId first = prog.empty() ? 0 : prog.front().id;
  op_segments.assign(prog.size(), {});
  reducers.assign(static_cast<std::size_t>(units), {});
  phase_reducer.clear();
  std::vector<bool> step_gathered(static_cast<std::size_t>(units), false);
  resident_variant.assign(static_cast<std::size_t>(units), tr::CollectiveVariant::Even);
  for (const auto& op : prog) {
    const std::size_t i = op.id - first;
    const bool gather = op.kind == tr::OpKind::AllGather || op.kind == tr::OpKind::AllGatherV;
    const bool reduce =
        op.kind == tr::OpKind::ReduceScatter || op.kind == tr::OpKind::ReduceScatterV;
    if (!gather && !reduce) continue;
    const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
    if (reduce) phase_reducer[op.phase] = i;
    std::int64_t offset = 0;
    for (const auto& seg : graph.segments(c)) {
      op_segments[i].push_back({seg.unit, offset, seg.numel, seg.variant});
      offset += seg.numel;
      if (reduce) reducers[static_cast<std::size_t>(seg.unit)].push_back(i);
      if (gather && op.pass == tr::Pass::Step) {
        step_gathered[static_cast<std::size_t>(seg.unit)] = true;
        resident_variant[static_cast<std::size_t>(seg.unit)] = seg.variant;
      }
    }
  }
  // A domain sharded `optimizer` (ZeRO-1) or `none` keeps compute-type parameters of its units
  // resident: refreshed by the program's gathers after the optimizer step (ZeRO-1), or cast
  // from the master shard, which is the whole unit (`none`; in fp32 the master weights are the
  // compute parameters themselves). A domain sharded `full` or `hybrid` gathers them per use.
  const ShardingKind sharding = graph.summary().stage_sharding;
  const bool keeps = sharding == ShardingKind::Optimizer ||
                     (sharding == ShardingKind::None && compute_type != ElemType::F32);
  resident.clear();
  resident.resize(static_cast<std::size_t>(units));
  resident_kept.assign(static_cast<std::size_t>(units), false);
  resident_gathered = step_gathered;
  for (int u = 0; u < units; ++u)
    resident_kept[static_cast<std::size_t>(u)] = keeps && graph.holds(rank, u);
  resident_stale = true;
}

void Executor::Impl::prepare_data(int step) {
  tokens.clear();
  targets.clear();
  // Only the stages holding the embedding or the head read tokens or targets.
  if (!graph.holds(rank, 0) && !graph.holds(rank, model.head_unit())) return;
  const auto& cfg = model.config();
  for (int mb = 0; mb < static_cast<int>(mb_sizes.size()); ++mb) {
    const std::int64_t n = rows(mb);
    std::vector<std::int32_t> tok(static_cast<std::size_t>(n)), tgt(static_cast<std::size_t>(n));
    const std::int64_t sample = mb_first[static_cast<std::size_t>(mb)];
    for (int i = 0; i < mb_sizes[static_cast<std::size_t>(mb)]; ++i)
      synthetic_sample(cfg, opt.data_seed, step, sample + i, tok.data() + i * cfg.seq,
                       tgt.data() + i * cfg.seq);
    tokens.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    targets.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    dev.upload(tokens.back().ref(), tok.data(), tok.size() * 4);
    dev.upload(targets.back().ref(), tgt.data(), tgt.size() * 4);
  }
}

void Executor::Impl::begin_step() {
  if (resident_stale) refresh_resident();
  const std::size_t mbs = mb_sizes.size(), U = static_cast<std::size_t>(units);
  // (clear + resize: buffers move, they do not copy)
  for (auto* v : {&act, &dact}) {
    v->clear();
    v->resize(U + 1);
    for (auto& per_boundary : *v) per_boundary.resize(mbs);
  }
  offloaded.clear();
  offloaded.resize(U);
  for (auto& per_unit : offloaded) per_unit.resize(mbs);
  saved.clear();
  saved.resize(U);
  for (auto& per_unit : saved) per_unit.resize(mbs);
  head.clear();
  head.resize(mbs);
  gathered.clear();
  grads.clear();
  sends_left.clear();
  for (const auto& op : graph.program(rank)) {
    if (op.kind != tr::OpKind::Send) continue;
    const bool forward = op.pass == tr::Pass::Forward;
    for (const TransferPart& part : transfer_parts(op))
      ++sends_left[send_key(forward, forward ? op.unit + 1 : op.unit, part.mb)];
  }
}

// The live gather holding unit u that an op of `phase` reads: the latest issued whose phase is
// not after the op's. One rule for every graph: an FSDP graph gathers in phase order, each
// phase its units (a tied head's [unit 0 | head]), so that is the op's own phase's, never the
// next phase's prefetched gather of the same unit; a split graph gathers a unit once, at its
// forward phase, and keeps it across the unit's phases to its last backward.
std::deque<Executor::Impl::Gathered>::iterator Executor::Impl::find_gathered(int phase, int u) {
  auto found = gathered.end();
  for (auto it = gathered.begin(); it != gathered.end(); ++it)
    if (it->phase <= phase && find_segment(*it->segments, u) != nullptr) found = it;
  return found;
}

TensorRef Executor::Impl::params(const tr::Op& op, int u) {
  if (auto it = find_gathered(op.phase, u); it != gathered.end()) {
    const PhaseSegment* seg = find_segment(*it->segments, u);
    return it->buffer.slice(seg->offset, seg->numel);
  }
  if (resident[static_cast<std::size_t>(u)]) return resident[static_cast<std::size_t>(u)].ref();
  if (state->owned(u) == model.unit_numel(u)) return state->param(u).slice(0, state->owned(u));
  throw RuntimeFailure("executor: " + graph.op_name(op.id) + " needs unit " + std::to_string(u) +
                       ", which is not gathered on rank " + std::to_string(rank));
}

TensorRef Executor::Impl::grads_of(std::size_t i, const tr::Op& op, int u) {
  // An FSDP graph names the reduce-scatter (no_sync: the last round's); a split graph's head
  // phase reduces the head alone, so a tied head's wte gradient goes to unit 0's own.
  const int gp = op.phase >= 0 ? graph.gradient_phase(op.phase) : -1;
  std::optional<std::size_t> target;
  if (const auto it = phase_reducer.find(gp);
      it != phase_reducer.end() && find_segment(op_segments[it->second], u))
    target = it->second;
  const auto& rs = reducers[static_cast<std::size_t>(u)];
  if (!target)
    if (const auto next = std::upper_bound(rs.begin(), rs.end(), i); next != rs.end())
      target = *next;
  if (!target) {
    // No reduce-scatter follows (a domain sharded `none`): the rank's shard is the whole unit
    // (zeroed at the step's start); backwards accumulate into it and the all-reduce runs on it,
    // as the graph charges (no unsharded copy beside it).
    if (state->owned(u) != model.unit_numel(u))
      throw RuntimeFailure("executor: no reduce-scatter takes unit " + std::to_string(u) +
                           "'s gradient on rank " + std::to_string(rank) + ", which owns " +
                           std::to_string(state->owned(u)) + " of its " +
                           std::to_string(model.unit_numel(u)) + " elements");
    return state->grad(u).slice(0, state->owned(u));
  }
  const auto& segs = op_segments[*target];
  auto it = grads.find(*target);
  if (it == grads.end()) {
    Buffer g = gradient(segs.back().offset + segs.back().numel);
    dev.fill(dev.stream(StreamKind::Compute), g.ref(), 0.0f);
    it = grads.emplace(*target, std::move(g)).first;
  }
  const PhaseSegment* seg = find_segment(segs, u);
  return it->second.slice(seg->offset, seg->numel);
}

void Executor::Impl::release_gathered(const tr::Op& op, Stream& s) {
  auto it = find_gathered(op.phase, op.unit);
  if (it == gathered.end()) return;
  retire(std::move(it->buffer), s);
  gathered.erase(it);
}

void Executor::Impl::run_compute(std::size_t i, const tr::Op& op) {
  // The optimizer step belongs to no micro-batch (its micro_batch is -1): rows() is undefined.
  if (op.kind == tr::OpKind::OptimizerStep) {
    optimizer_step();
    return;
  }
  const int u = op.unit, mb = op.micro_batch, head_unit = model.head_unit();
  const std::size_t ub = static_cast<std::size_t>(u), m = static_cast<std::size_t>(mb);
  const std::int64_t n = rows(mb) * model.config().hidden;
  auto& cs = dev.stream(StreamKind::Compute);
  // A tied head uses unit 0's wte, except on a stage without the embedding (its own copy).
  const bool tied = model.config().tied_head && model.word_embedding_copy().count == 0;
  const TensorRef wte = tied && u == head_unit ? params(op, 0) : TensorRef{};
  // Mean token loss over the global batch, times the fp16 loss scale.
  const float grad_scale = static_cast<float>(
      scaler.scale() / (static_cast<double>(plan.global_batch()) * rows_per_sample));
  switch (op.kind) {
    case tr::OpKind::Forward: {
      if (u == head_unit) {
        const double loss = model.head_forward(dev, params(op, u), wte, act[ub][m].ref(),
                                               targets[m].ref(), rows(mb), nullptr);
        // Every TP rank computes the same loss: one of them counts it.
        if (place.tp_rank == 0) loss_sum += loss;
        break;
      }
      Buffer y = activation(n);
      if (u == 0) {
        model.embedding_forward(dev, params(op, 0), tokens[m].ref(), y.ref(), rows(mb));
      } else {
        // The checkpointed forward keeps only the unit's output: its activations are the
        // op's working set and go when it ends (the graph's F op frees them too), so they
        // never coexist with a backward's. A unit the graph does not recompute keeps them
        // for its backward.
        LayerActivations scratch;
        LayerActivations& acts = graph.recomputes(u) ? scratch : saved[ub][m];
        model.layer_forward(dev, params(op, u), act[ub][m].ref(), y.ref(), acts, rows(mb));
        if (graph.recomputes_attention_core(u)) model.drop_attention_core(acts);
      }
      act[ub + 1][m] = std::move(y);
      // An output that leaves the stage goes with its last send; this TP rank may send none.
      if (!graph.holds(rank, u + 1) && sends_left[send_key(true, u + 1, mb)] == 0)
        retire(std::move(act[ub + 1][m]), cs);
      break;
    }
    case tr::OpKind::Recompute: {
      if (u == head_unit) {
        // The head's forward again, keeping what its backward reads (its 3 TP calls here).
        model.head_forward(dev, params(op, u), wte, act[ub][m].ref(), targets[m].ref(), rows(mb),
                           &head[m]);
      } else if (graph.recomputes_attention_core(u)) {
        model.recompute_attention_core(dev, saved[ub][m], rows(mb));
      } else if (u >= 1) {
        // (The embedding needs nothing saved.)
        Buffer y = activation(n);
        model.layer_forward(dev, params(op, u), act[ub][m].ref(), y.ref(), saved[ub][m], rows(mb));
        retire(std::move(y), cs);
      }
      break;
    }
    case tr::OpKind::Backward: {
      if (u == head_unit) {
        // Without a recompute op of its own the backward runs the head's forward first.
        if (!head[m].logits)
          model.head_forward(dev, params(op, u), wte, act[ub][m].ref(), targets[m].ref(), rows(mb),
                             &head[m]);
        Buffer dx = activation(n);
        model.head_backward(dev, params(op, u), wte, act[ub][m].ref(), targets[m].ref(), rows(mb),
                            grad_scale, head[m], dx.ref(), grads_of(i, op, u),
                            tied ? grads_of(i, op, 0) : TensorRef{});
        dact[ub][m] = std::move(dx);
        retire(std::move(act[ub][m]), cs);
      } else if (u >= 1) {
        Buffer dx = activation(n);
        model.layer_backward(dev, params(op, u), grads_of(i, op, u), act[ub][m].ref(), saved[ub][m],
                             dact[ub + 1][m].ref(), dx.ref(), rows(mb));
        retire(std::move(dact[ub + 1][m]), cs);
        dact[ub][m] = std::move(dx);
        retire(std::move(act[ub][m]), cs);
        saved[ub][m] = LayerActivations{};  // released with the backward, as the graph says
      } else {
        model.embedding_backward(dev, grads_of(i, op, 0), tokens[m].ref(), dact[1][m].ref(),
                                 rows(mb));
        retire(std::move(dact[1][m]), cs);
      }
      // An input gradient that leaves the stage goes with its last send.
      if (u > 0 && !graph.holds(rank, u - 1) && sends_left[send_key(false, u, mb)] == 0)
        retire(std::move(dact[ub][m]), cs);
      break;
    }
    default:
      throw RuntimeFailure("executor: op " + graph.op_name(op.id) + " is not a compute op");
  }
}

void Executor::Impl::optimizer_step() {
  auto& cs = dev.stream(StreamKind::Compute);
  dev.stream(StreamKind::Comm).synchronize();  // every reduce-scatter has landed
  last_loss_scale = scaler.scale();
  const auto poison = [&](const char* part, Buffer& (ShardedState::*buffer)(int), float value) {
    if (!failure.injects(part, step_now)) return;
    for (int u = 0; u < units; ++u)
      if (state->owned(u)) {
        dev.fill(cs, ((*state).*buffer)(u).slice(0, 1), value);
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
  // Resident compute copies that no gather of the step pass refreshes: a cast of the update.
  for (int u = 0; u < units; ++u)
    if (resident[static_cast<std::size_t>(u)] && !resident_gathered[static_cast<std::size_t>(u)])
      dev.cast(cs, state->param(u).slice(0, state->owned(u)),
               resident[static_cast<std::size_t>(u)].ref());
}

void Executor::Impl::run_copy(const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Copy);
  const std::size_t u = static_cast<std::size_t>(op.unit),
                    mb = static_cast<std::size_t>(op.micro_batch);
  if (op.kind == tr::OpKind::CopyD2H) {
    Buffer& src = act[u][mb];
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
    act[u][mb] = std::move(back);
  }
}

double Executor::Impl::step(int step_index) {
  using Clock = std::chrono::steady_clock;
  failure.at_start_of(step_index);
  step_now = step_index;
  prepare_data(step_index);
  begin_step();
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
  tp_calls.clear();
  tp_calls.resize(prog.size());
  tp_source.assign(prog.size(), -1);
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
      run_compute(i, op);
      // The TP collectives its math issued; the graph's TP op after it reports them.
      tp_calls[i] = model.take_tp_calls();
      last_compute = i;
      slowdown.after_compute(dev, s, *start_ev[i]);
    } else if (tr::is_tensor_parallel(op.kind)) {
      tp_source[i] = static_cast<int>(last_compute);  // ran inside that compute op
    } else if (tr::is_pipeline_transfer(op.kind)) {
      run_transfer(op);
    } else if (tr::is_collective(op.kind)) {
      run_comm(i, op);
    } else {
      run_copy(op);
    }
    end_ev[i]->record(s);
    issued_bytes[i] = static_cast<double>(dev.memory_stats(MemorySpace::Device).current);
    // The graph says which op's end releases gathered parameters: the last compute op of the
    // phase (or its gather) that read them.
    if (op.frees_gathered) release_gathered(op, s);
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
  for (std::size_t i = 0; i < prog.size(); ++i) {
    const int c = tp_source[i];
    if (c < 0) continue;
    double calls = 0;
    for (auto& call : tp_calls[static_cast<std::size_t>(c)])
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
  // The TP group's communicator comes first (the model slice needs it): a collective on every
  // rank, after the checks that could refuse on one rank and not another.
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

// Each unit assembled from its owners (the single-rank unit, whatever the plan).
std::vector<float> Executor::gather_full(bool gradients) {
  auto& I = *impl_;
  std::vector<float> out;
  // Gradients are stored as reduced, i.e. still multiplied by the fp16 loss scale.
  const double unscale = gradients ? 1.0 / I.last_loss_scale : 1.0;
  for (int u = 0; u < I.units; ++u) {
    std::vector<float> host = I.assemble_unit(u, gradients ? 3 : 0);
    if (unscale != 1.0)
      for (float& x : host) x = static_cast<float>(x * unscale);
    out.insert(out.end(), host.begin(), host.end());
  }
  return out;
}

}  // namespace cephalo::backend

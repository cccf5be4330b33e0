#include "cephalo/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/table.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

std::vector<std::int64_t> shard_offsets(std::int64_t numel, const std::vector<double>& shares) {
  std::vector<std::int64_t> off(shares.size() + 1, 0);
  double prefix = 0;
  for (std::size_t r = 0; r < shares.size(); ++r) {
    prefix += shares[r];
    off[r + 1] =
        r + 1 == shares.size()
            ? numel
            : std::clamp<std::int64_t>(
                  static_cast<std::int64_t>(std::floor(static_cast<double>(numel) * prefix + 0.5)),
                  off[r], numel);
  }
  return off;
}

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
  }
  return StreamKind::Compute;
}

// A buffer whose last use was enqueued on a stream: freed once `done` has completed.
struct Retired {
  Buffer buffer;
  std::shared_ptr<Event> done;
};

}  // namespace

struct Executor::Impl {
  const Scenario& scenario;
  const Plan& plan;
  const tr::TrainingGraph& graph;
  const GptModel& model;
  Device& dev;
  Communicator& comm;
  ExecutorOptions opt;
  int rank = 0;
  int ranks = 1;
  int units = 0;
  std::int64_t rows_per_sample = 0;
  ElemType compute_type = ElemType::F32;  // gathered parameters, activations, input gradients
  ElemType reduce_type = ElemType::F32;   // unit gradients, reduce-scatter, gradient shard
  bool loss_scaling = false;              // fp16 compute: dynamic loss scaling
  double loss_scale = 1.0;
  int clean_steps = 0;  // consecutive steps without overflow (growth of the loss scale)
  bool last_skipped = false;
  double last_loss_scale = 1.0;

  // Sharded training state, per unit: owned slice of the flat fp32 parameters, its gradient
  // accumulator (reduce type) and the fp32 AdamW moments.
  std::vector<std::vector<std::int64_t>> offsets;  // per unit: rank -> start (size ranks+1)
  std::vector<Buffer> param, grad, m, v;
  std::int64_t adam_step = 0;

  // Per-step state.
  std::vector<Buffer> tokens, targets;  // per micro-batch, I32 [rows]
  std::vector<int> mb_sizes;
  std::map<int, Buffer> gathered;        // phase -> full unit (head phases: [embedding | head])
  std::map<int, Buffer> phase_grad;      // phase -> full gradient of the unit
  std::map<int, Buffer> phase_emb_grad;  // head phases: embedding-gradient contribution (tied)
  std::vector<std::vector<Buffer>> boundary;   // [unit][mb]: input activation of unit
  std::vector<std::vector<Buffer>> offloaded;  // [unit][mb]: host copy (offload: host)
  std::vector<Buffer> dgrad;                   // [mb]: gradient w.r.t. current unit input
  std::vector<LayerActivations> recomputed;    // [mb] activations of the recompute
  std::deque<Retired> retired;
  std::vector<std::shared_ptr<Event>> start_ev, end_ev;  // per op of this rank's program
  std::vector<int> phase_last_op;  // phase -> last op id that uses its gathered unit
  double loss_sum = 0;
  double emulated_sleep_s = 0;

  // Last step's measurements.
  std::vector<std::int64_t> last_start, last_end;  // per global op id; -1 = not this rank's
  std::vector<double> last_bytes;                  // per global op id: allocated after issue
  std::vector<double> issued_bytes;                // this step, per op of the program
  double last_iteration_s = 0;
  std::size_t last_peak = 0;

  Impl(const Scenario& s, const Plan& p, const tr::TrainingGraph& g, const GptModel& mdl, Device& d,
       Communicator& c, const ExecutorOptions& o)
      : scenario(s), plan(p), graph(g), model(mdl), dev(d), comm(c), opt(o) {
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
    loss_scaling = compute_type == ElemType::F16;
    loss_scale = loss_scaling ? opt.loss_scale_init : 1.0;
    if (loss_scaling &&
        !(opt.loss_scale_init > 0 && opt.loss_scale_backoff > 0 && opt.loss_scale_backoff < 1 &&
          opt.loss_scale_growth >= 1 && opt.loss_scale_growth_interval >= 1))
      throw RuntimeFailure(
          "executor: invalid loss-scaling options (init > 0, 0 < backoff < 1, "
          "growth >= 1, growth interval >= 1)");
    std::vector<double> shares;
    for (const auto& r : plan.ranks) shares.push_back(r.state_share);
    for (int u = 0; u < units; ++u) {
      offsets.push_back(shard_offsets(model.unit_numel(u), shares));
      const std::int64_t n = owned(u);
      param.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::F32));
      grad.push_back(dev.allocate(static_cast<std::size_t>(n), reduce_type));
      m.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::F32));
      v.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::F32));
      auto init = model.initial_unit(u);
      if (n) dev.upload(param[u].ref(), init.data() + begin(u), static_cast<std::size_t>(n) * 4);
      auto& cs = dev.stream(StreamKind::Compute);
      if (n) {
        dev.fill(cs, m[u].ref(), 0.0f);
        dev.fill(cs, v[u].ref(), 0.0f);
      }
    }
    mb_sizes = plan.ranks[static_cast<std::size_t>(rank)].batch > 0
                   ? plan.ranks[static_cast<std::size_t>(rank)].micro_batch_sizes()
                   : std::vector<int>{};
    // Which op last touches each phase's gathered parameters on this rank.
    auto prog = graph.program(rank);
    int phases = 0;
    for (const auto& op : graph.ops()) phases = std::max(phases, op.phase + 1);
    phase_last_op.assign(static_cast<std::size_t>(phases), -1);
    for (const auto& op : prog)
      if (op.phase >= 0 && (tr::is_compute(op.kind) || op.kind == tr::OpKind::AllGather ||
                            op.kind == tr::OpKind::AllGatherV))
        phase_last_op[static_cast<std::size_t>(op.phase)] = static_cast<int>(op.id);
    dev.synchronize();
  }

  std::int64_t begin(int u) const { return offsets[u][static_cast<std::size_t>(rank)]; }
  std::int64_t owned(int u) const {
    return offsets[u][static_cast<std::size_t>(rank) + 1] -
           offsets[u][static_cast<std::size_t>(rank)];
  }
  std::vector<std::int64_t> counts(int u) const {
    std::vector<std::int64_t> c;
    for (int r = 0; r < ranks; ++r)
      c.push_back(offsets[u][static_cast<std::size_t>(r) + 1] -
                  offsets[u][static_cast<std::size_t>(r)]);
    return c;
  }
  std::int64_t rows(int mb) const {
    return mb_sizes[static_cast<std::size_t>(mb)] * rows_per_sample;
  }
  Buffer f32(std::int64_t n) { return dev.allocate(static_cast<std::size_t>(n), ElemType::F32); }
  Buffer activation(std::int64_t n) {
    return dev.allocate(static_cast<std::size_t>(n), compute_type);
  }
  Buffer gradient(std::int64_t n) { return dev.allocate(static_cast<std::size_t>(n), reduce_type); }

  void retire(Buffer b, Stream& s) {
    if (!b) return;
    auto ev = std::shared_ptr<Event>(dev.create_event());
    ev->record(s);
    retired.push_back({std::move(b), std::move(ev)});
    reap();
  }
  // Frees every retired buffer whose last use has completed. The whole queue is scanned: buffers
  // retired on different streams complete out of order (a reduce-scatter still in flight must
  // not hold back the compute-stream buffers retired after it).
  void reap() {
    retired.erase(std::remove_if(retired.begin(), retired.end(),
                                 [](const Retired& r) { return r.done->query(); }),
                  retired.end());
  }

  // Gather unit u's shards of `state` (param or grad) into `full` (unit_numel elements, of
  // full's element type) on stream `s`. A shard of another type is cast into a transient send
  // buffer first (FSDP mixed precision: the fp32 master shard travels in the compute type).
  void gather_unit(Stream& s, int u, const std::vector<Buffer>& state, TensorRef full) {
    auto c = counts(u);
    TensorRef shard = state[u].slice(0, owned(u));
    Buffer send;
    if (shard.type != full.type) {
      send = dev.allocate(static_cast<std::size_t>(owned(u)), full.type);
      if (owned(u)) dev.cast(s, shard, send.ref());
      shard = send.ref();
    }
    // Even shards (equal counts) take the even collective (MPI_Allgather / ncclAllGather);
    // anything else the -v variant (MPI_Allgatherv / grouped broadcasts on NCCL).
    if (std::adjacent_find(c.begin(), c.end(), std::not_equal_to<>()) == c.end())
      comm.all_gather(s, shard, full);
    else
      comm.all_gather_v(s, shard, full, c);
    retire(std::move(send), s);
  }
  // Reduce a full gradient onto the owners and add it into this rank's accumulator.
  void reduce_unit(Stream& s, int u, TensorRef full) {
    auto c = counts(u);
    Buffer tmp = gradient(owned(u));
    if (std::adjacent_find(c.begin(), c.end(), std::not_equal_to<>()) == c.end())
      comm.reduce_scatter(s, full, tmp.ref(), ReduceOp::Sum);
    else
      comm.reduce_scatter_v(s, full, tmp.ref(), c, ReduceOp::Sum);
    if (owned(u)) dev.axpy(s, 1.0f, tmp.ref(), grad[u].slice(0, owned(u)));
    retire(std::move(tmp), s);
  }

  // A tied head's logits use the embedding's wte: its phases gather unit 0 in front of the
  // head and reduce a wte gradient contribution into unit 0's shard. An untied head owns its
  // weight and its phases are exactly the graph's.
  bool brings_embedding(int u) const { return u == model.head_unit() && model.config().tied_head; }
  TensorRef unit_params(int phase, int u) {
    Buffer& b = gathered.at(phase);
    if (brings_embedding(u)) return b.slice(model.unit_numel(0), model.unit_numel(u));
    return b.slice(0, model.unit_numel(u));
  }
  TensorRef embedding_params_for_head(int phase) {
    if (!model.config().tied_head) return {};
    return gathered.at(phase).slice(0, model.unit_numel(0));
  }
  TensorRef embedding_grads_for_head(int phase) {
    if (!model.config().tied_head) return {};
    return phase_emb_grad.at(phase).ref();
  }

  void prepare_data(int step) {
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

  void ensure_phase_grads(const tr::Op& op) {
    if (phase_grad.count(op.phase)) return;
    auto& cs = dev.stream(StreamKind::Compute);
    Buffer g = gradient(model.unit_numel(op.unit));
    dev.fill(cs, g.ref(), 0.0f);
    phase_grad[op.phase] = std::move(g);
    if (brings_embedding(op.unit)) {
      Buffer e = gradient(model.unit_numel(0));
      dev.fill(cs, e.ref(), 0.0f);
      phase_emb_grad[op.phase] = std::move(e);
    }
  }

  void run_compute(const tr::Op& op) {
    const int u = op.unit, mb = op.micro_batch;
    const bool head = u == model.head_unit();
    // Mean token loss over the global batch, times the fp16 loss scale.
    const float grad_scale = static_cast<float>(
        loss_scale / (static_cast<double>(plan.global_batch()) * rows_per_sample));
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
          model.embedding_forward(dev, unit_params(op.phase, 0), tokens[mb].ref(), y.ref(),
                                  rows(mb));
        } else {
          // The checkpointed forward keeps only the unit's output: its activations are the
          // op's working set and go when it ends (the graph's F op frees them too), so they
          // never coexist with a backward's.
          LayerActivations scratch;
          model.layer_forward(dev, unit_params(op.phase, u), boundary[u][mb].ref(), y.ref(),
                              scratch, rows(mb));
        }
        boundary[u + 1][mb] = std::move(y);
        break;
      }
      case tr::OpKind::Recompute: {
        // The embedding needs nothing saved; the head recomputes inside its backward op.
        if (u >= 1 && !head) {
          Buffer y = activation(rows(mb) * model.config().hidden);
          model.layer_forward(dev, unit_params(op.phase, u), boundary[u][mb].ref(), y.ref(),
                              recomputed[mb], rows(mb));
          retire(std::move(y), dev.stream(StreamKind::Compute));
        }
        break;
      }
      case tr::OpKind::Backward: {
        ensure_phase_grads(op);
        auto& cs = dev.stream(StreamKind::Compute);
        if (head) {
          Buffer dx = activation(rows(mb) * model.config().hidden);
          model.head_forward_backward(
              dev, unit_params(op.phase, u), embedding_params_for_head(op.phase),
              boundary[u][mb].ref(), targets[mb].ref(), rows(mb), grad_scale, dx.ref(),
              phase_grad.at(op.phase).ref(), embedding_grads_for_head(op.phase));
          dgrad[mb] = std::move(dx);
          retire(std::move(boundary[u][mb]), cs);
        } else if (u >= 1) {
          Buffer dx = activation(rows(mb) * model.config().hidden);
          model.layer_backward(dev, unit_params(op.phase, u), phase_grad.at(op.phase).ref(),
                               boundary[u][mb].ref(), recomputed[mb], dgrad[mb].ref(), dx.ref(),
                               rows(mb));
          retire(std::move(dgrad[mb]), cs);
          dgrad[mb] = std::move(dx);
          retire(std::move(boundary[u][mb]), cs);
          recomputed[mb] = LayerActivations{};  // one layer's working set at a time
        } else {
          model.embedding_backward(dev, phase_grad.at(op.phase).ref(), tokens[mb].ref(),
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

  // True when any rank's gradient shard holds an inf or NaN (collective, blocking): the sum of
  // a shard is finite exactly when every element is (overflow cannot come from summing
  // gradients that are themselves far below fp32's range).
  bool gradients_overflowed() {
    auto& cs = dev.stream(StreamKind::Compute);
    Buffer sums = f32(units);
    for (int u = 0; u < units; ++u) {
      if (owned(u))
        dev.sum(cs, grad[u].slice(0, owned(u)), sums.slice(u, 1));
      else
        dev.fill(cs, sums.slice(u, 1), 0.0f);
    }
    cs.synchronize();
    std::vector<float> host(static_cast<std::size_t>(units));
    dev.download(host.data(), sums.ref(), host.size() * sizeof(float));
    double bad = 0;
    for (float x : host)
      if (!std::isfinite(x)) bad = 1;
    comm.all_reduce_host(&bad, 1, ReduceOp::Max);
    return bad > 0;
  }

  void optimizer_step() {
    dev.stream(StreamKind::Comm).synchronize();  // every reduce-scatter has landed
    last_loss_scale = loss_scale;
    last_skipped = false;
    if (loss_scaling) {
      if (gradients_overflowed()) {
        // Same decision on every rank (the flag was all-reduced), so shards stay consistent.
        last_skipped = true;
        loss_scale *= opt.loss_scale_backoff;
        clean_steps = 0;
        return;
      }
      if (++clean_steps >= opt.loss_scale_growth_interval) {
        loss_scale *= opt.loss_scale_growth;
        clean_steps = 0;
      }
    }
    ++adam_step;
    const auto& o = scenario.job.optimizer;
    AdamWParams p{static_cast<float>(o.learning_rate), static_cast<float>(o.beta1),
                  static_cast<float>(o.beta2),         static_cast<float>(o.epsilon),
                  static_cast<float>(o.weight_decay),  adam_step};
    auto& cs = dev.stream(StreamKind::Compute);
    const float unscale = static_cast<float>(1.0 / last_loss_scale);
    for (int u = 0; u < units; ++u) {
      if (!owned(u)) continue;
      // AdamW reads an fp32 gradient: a bf16/fp16 shard is widened, and a loss-scaled one
      // unscaled, in a transient fp32 buffer (the shard itself stays as reduced, so
      // gather_gradients sees one convention whatever the types).
      Buffer wide;
      TensorRef g = grad[u].slice(0, owned(u));
      if (reduce_type != ElemType::F32 || unscale != 1.0f) {
        wide = f32(owned(u));
        if (reduce_type == ElemType::F32)
          dev.copy(cs, wide.ref(), g);
        else
          dev.cast(cs, g, wide.ref());
        g = wide.ref();
      }
      if (unscale != 1.0f) dev.scale(cs, g, unscale);
      dev.adamw_step(cs, param[u].ref(), g, m[u].ref(), v[u].ref(), p);
      retire(std::move(wide), cs);
    }
  }

  void run_comm(const tr::Op& op) {
    auto& s = dev.stream(StreamKind::Comm);
    const int u = op.unit;
    switch (op.kind) {
      case tr::OpKind::AllGather:
      case tr::OpKind::AllGatherV: {
        const bool tied = brings_embedding(u);
        const std::int64_t lead = tied ? model.unit_numel(0) : 0;
        Buffer full = activation(lead + model.unit_numel(u));
        if (tied) gather_unit(s, 0, param, full.slice(0, lead));
        gather_unit(s, u, param, full.slice(lead, model.unit_numel(u)));
        gathered[op.phase] = std::move(full);
        break;
      }
      case tr::OpKind::ReduceScatter:
      case tr::OpKind::ReduceScatterV: {
        if (!phase_grad.count(op.phase)) ensure_phase_grads(op);  // no compute: zeros
        const bool tied = brings_embedding(u);
        reduce_unit(s, u, phase_grad.at(op.phase).ref());
        if (tied) reduce_unit(s, 0, phase_emb_grad.at(op.phase).ref());
        retire(std::move(phase_grad.at(op.phase)), s);
        phase_grad.erase(op.phase);
        if (tied) {
          retire(std::move(phase_emb_grad.at(op.phase)), s);
          phase_emb_grad.erase(op.phase);
        }
        break;
      }
      default:
        throw RuntimeFailure("executor: unsupported collective " + graph.op_name(op.id));
    }
  }

  void run_copy(const tr::Op& op) {
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

  double step(int step_index) {
    using Clock = std::chrono::steady_clock;
    if (opt.fail_at_step == step_index && opt.fail_by_kill) std::raise(SIGKILL);
    if (opt.fail_at_step == step_index)
      throw RuntimeFailure("injected failure at step " + std::to_string(step_index) +
                           " (--inject-failure)");
    prepare_data(step_index);
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
    recomputed.clear();
    recomputed.resize(static_cast<std::size_t>(mbs));
    loss_sum = 0;
    auto& cs = dev.stream(StreamKind::Compute);
    for (int u = 0; u < units; ++u)
      if (owned(u)) dev.fill(cs, grad[u].ref(), 0.0f);
    dev.synchronize();
    // Every rank starts the step together, so per-op times of all ranks share one origin.
    comm.barrier();
    dev.reset_peak();

    auto prog = graph.program(rank);
    const tr::OpId first = prog.front().id;
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
        run_compute(op);
        if (opt.slowdown > 1.0) {
          // Emulation of a slower device: hold the compute stream for (slowdown-1)x longer.
          auto mid = dev.create_event();
          mid->record(s);
          const double took = mid->seconds_since(*start_ev[i]);
          const double extra = (opt.slowdown - 1.0) * took;
          std::this_thread::sleep_for(std::chrono::duration<double>(extra));
          emulated_sleep_s += extra;
        }
      } else if (tr::is_collective(op.kind)) {
        run_comm(op);
      } else {
        run_copy(op);
      }
      end_ev[i]->record(s);
      issued_bytes[i] = static_cast<double>(dev.memory_stats(MemorySpace::Device).current);
      if (op.phase >= 0 &&
          phase_last_op[static_cast<std::size_t>(op.phase)] == static_cast<int>(op.id)) {
        auto it = gathered.find(op.phase);
        if (it != gathered.end()) {
          retire(std::move(it->second), s);
          gathered.erase(it);
        }
      }
    }
    dev.synchronize();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
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
    last_iteration_s = wall;
    return wall;
  }
};

Executor::Executor(const Scenario& scenario, const Plan& plan, const tr::TrainingGraph& graph,
                   const GptConfig& config, Device& device, Communicator& comm,
                   const ExecutorOptions& options)
    : model_(config) {
  impl_ = std::make_unique<Impl>(scenario, plan, graph, model_, device, comm, options);
}

Executor::~Executor() = default;

StepResult Executor::run_step() {
  auto& I = *impl_;
  double wall = I.step(step_);
  double vals[2] = {I.loss_sum, 0};
  I.comm.all_reduce_host(vals, 1, ReduceOp::Sum);
  double slowest = wall;
  I.comm.all_reduce_host(&slowest, 1, ReduceOp::Max);
  StepResult r;
  r.step = step_;
  r.loss = vals[0] / (static_cast<double>(I.plan.global_batch()) * I.rows_per_sample);
  r.time_s = slowest;
  r.samples_per_s = slowest > 0 ? I.plan.global_batch() / slowest : 0;
  r.loss_scale = I.last_loss_scale;
  r.skipped = I.last_skipped;
  ++step_;
  return r;
}

void Executor::last_op_times(std::vector<std::int64_t>& start_ns,
                             std::vector<std::int64_t>& end_ns) {
  auto& I = *impl_;
  const std::size_t n = I.graph.num_ops();
  // Each op belongs to exactly one rank: a sum over ranks of (own value + 1, else 0) gathers
  // them all (values fit a double exactly below 2^53 ns).
  std::vector<double> buf(2 * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    if (I.last_start[i] >= 0) {
      buf[i] = static_cast<double>(I.last_start[i] + 1);
      buf[n + i] = static_cast<double>(I.last_end[i] + 1);
    }
  I.comm.all_reduce_host(buf.data(), static_cast<int>(buf.size()), ReduceOp::Sum);
  start_ns.assign(n, -1);
  end_ns.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    start_ns[i] = static_cast<std::int64_t>(buf[i]) - 1;
    end_ns[i] = static_cast<std::int64_t>(buf[n + i]) - 1;
  }
}

std::vector<std::vector<traces::MemorySample>> Executor::last_memory() {
  auto& I = *impl_;
  std::vector<double> bytes = I.last_bytes;  // zero for other ranks' ops: a sum gathers them
  I.comm.all_reduce_host(bytes.data(), static_cast<int>(bytes.size()), ReduceOp::Sum);
  std::vector<std::int64_t> s, e;
  last_op_times(s, e);
  std::vector<std::vector<traces::MemorySample>> out(static_cast<std::size_t>(I.ranks));
  for (int r = 0; r < I.ranks; ++r) {
    auto& v = out[static_cast<std::size_t>(r)];
    for (const auto& op : I.graph.program(r))
      if (e[op.id] >= 0) v.push_back({e[op.id], bytes[op.id]});
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  }
  return out;
}

traces::IterationReport Executor::last_report() {
  auto& I = *impl_;
  std::vector<std::int64_t> s, e;
  last_op_times(s, e);
  traces::IterationReport rep;
  rep.source = I.dev.kind();
  const int R = I.ranks;
  // Per-rank peak memory and iteration time.
  std::vector<double> per(static_cast<std::size_t>(2 * R), 0.0);
  per[static_cast<std::size_t>(I.rank)] = static_cast<double>(I.last_peak);
  per[static_cast<std::size_t>(R + I.rank)] = I.last_iteration_s;
  I.comm.all_reduce_host(per.data(), 2 * R, ReduceOp::Sum);
  double iter = 0;
  for (int r = 0; r < R; ++r) iter = std::max(iter, per[static_cast<std::size_t>(R + r)]);
  rep.iteration_time_s = iter;
  rep.samples_per_s = iter > 0 ? I.plan.global_batch() / iter : 0;
  rep.tokens_per_s = rep.samples_per_s * I.rows_per_sample;
  double peak_sum = 0;
  auto devices = I.scenario.cluster.ranks();
  for (const auto& d : devices)
    peak_sum += d.slot->spec.peak_flops(I.scenario.job.precision.compute) / d.slot->slowdown;
  const double flops = model_.training_flops(I.plan.global_batch());
  rep.mfu = iter > 0 && peak_sum > 0 ? flops / (iter * peak_sum) : 0;
  rep.events = I.graph.num_ops();  // every rank executes every op of its program
  // Busy time per lane from the measured intervals.
  for (int r = 0; r < R; ++r) {
    traces::RankReport rr;
    rr.rank = r;
    const auto& d = devices[static_cast<std::size_t>(r)];
    rr.gpu = d.slot->type;
    if (d.slot->slowdown != 1.0)
      rr.gpu += " (emulated " + fixed(d.slot->slowdown, 2) + "x slowdown)";
    rr.node = d.node;
    std::vector<std::pair<std::int64_t, std::int64_t>> comp, com;
    for (const auto& op : I.graph.program(r)) {
      if (s[op.id] < 0) continue;
      (tr::is_compute(op.kind) ? comp : com).push_back({s[op.id], e[op.id]});
    }
    auto total = [](std::vector<std::pair<std::int64_t, std::int64_t>> v) {
      std::sort(v.begin(), v.end());
      std::int64_t sum = 0, cur_s = -1, cur_e = -1;
      for (auto [a, b] : v) {
        if (a > cur_e) {
          if (cur_e > cur_s) sum += cur_e - cur_s;
          cur_s = a;
          cur_e = b;
        } else {
          cur_e = std::max(cur_e, b);
        }
      }
      if (cur_e > cur_s) sum += cur_e - cur_s;
      return sum;
    };
    auto both = comp;
    both.insert(both.end(), com.begin(), com.end());
    const double busy_compute = static_cast<double>(total(comp)) * 1e-9;
    const double busy_any = static_cast<double>(total(both)) * 1e-9;
    rr.compute_s = busy_compute;
    rr.comm_s = static_cast<double>(total(com)) * 1e-9;
    rr.exposed_comm_s = std::max(0.0, busy_any - busy_compute);
    rr.idle_s = std::max(0.0, per[static_cast<std::size_t>(R + r)] - busy_any);
    rr.peak_memory_bytes = per[static_cast<std::size_t>(r)];
    rr.capacity_bytes = d.slot->spec.memory_bytes;
    rep.ranks.push_back(rr);
  }
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] >= 0)
      rep.ops.push_back({static_cast<std::uint32_t>(i), static_cast<double>(s[i]) * 1e-9,
                         static_cast<double>(e[i]) * 1e-9});
  return rep;
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
    Buffer full = I.f32(model_.unit_numel(u));
    I.gather_unit(cs, u, gradients ? I.grad : I.param, full.ref());
    cs.synchronize();
    I.retired.clear();
    std::vector<float> host(static_cast<std::size_t>(full.numel()));
    I.dev.download(host.data(), full.ref(), host.size() * 4);
    if (unscale != 1.0)
      for (float& x : host) x = static_cast<float>(x * unscale);
    out.insert(out.end(), host.begin(), host.end());
  }
  return out;
}

namespace {

std::string step_dir_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return buf;
}
std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.bin", rank);
  return buf;
}

std::string read_binary(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError("cannot read checkpoint shard " + file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

void Executor::save_checkpoint(const std::filesystem::path& dir) {
  auto& I = *impl_;
  I.dev.synchronize();
  const auto step_dir = dir / step_dir_name(step_);
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  if (ec)
    throw IoError("cannot create checkpoint folder " + step_dir.string() + ": " + ec.message());
  // Shard file: for every unit, the owned slice of params, then m, then v (fp32, native
  // endianness; the manifest records the slice bounds).
  std::string bytes;
  for (int u = 0; u < I.units; ++u) {
    const std::size_t n = static_cast<std::size_t>(I.owned(u));
    std::vector<float> host(n);
    for (Buffer* b : {&I.param[u], &I.m[u], &I.v[u]}) {
      if (n) I.dev.download(host.data(), b->ref(), n * 4);
      bytes.append(reinterpret_cast<const char*>(host.data()), n * 4);
    }
  }
  write_file_atomically(step_dir / rank_file_name(I.rank), bytes);
  I.comm.barrier();  // every shard is on disk before the manifest makes the checkpoint valid
  if (I.rank == 0) {
    Json units = Json::array();
    for (int u = 0; u < I.units; ++u)
      units.push_back({{"numel", model_.unit_numel(u)}, {"offsets", I.offsets[u]}});
    const auto& c = model_.config();
    Json manifest = {{"format", "cephalo-checkpoint"},
                     {"version", 1},
                     {"step", step_},
                     {"adam_step", I.adam_step},
                     {"loss_scale", I.loss_scale},
                     {"loss_scale_clean_steps", I.clean_steps},
                     {"data_seed", I.opt.data_seed},
                     {"ranks", I.ranks},
                     {"model",
                      {{"layers", c.layers},
                       {"hidden", c.hidden},
                       {"heads", c.heads},
                       {"ffn", c.ffn},
                       {"vocab", c.vocab},
                       {"positions", c.position_rows()},
                       {"seq", c.seq},
                       {"tied_head", c.tied_head}}},
                     {"units", units}};
    write_file_atomically(step_dir / "manifest.json", manifest.dump(2) + "\n");
    write_file_atomically(dir / "latest", step_dir_name(step_) + "\n");
  }
  I.comm.barrier();
}

void Executor::load_checkpoint(const std::filesystem::path& dir) {
  auto& I = *impl_;
  const auto latest_file = dir / "latest";
  std::string latest = read_binary(latest_file);
  while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back())))
    latest.pop_back();
  const auto step_dir = dir / latest;
  const auto manifest_file = step_dir / "manifest.json";
  Json j = read_json_file(manifest_file);
  JsonReader r(j, manifest_file.string());
  if (r.string("format") != "cephalo-checkpoint") r.child("format").fail("\"cephalo-checkpoint\"");
  r.integer("version", 1, 1);
  const int step = static_cast<int>(r.integer("step", 0));
  const std::int64_t adam_step = r.integer("adam_step", 0);
  // fp16 loss-scaler state (absent in checkpoints of older builds: start afresh).
  const double loss_scale = r.number_or("loss_scale", I.loss_scale);
  if (!(loss_scale > 0)) r.child("loss_scale").fail("a positive loss scale");
  const int clean_steps =
      static_cast<int>(r.integer_or("loss_scale_clean_steps", I.clean_steps, 0, 1 << 30));
  r.integer("data_seed", 0);
  const int old_ranks = static_cast<int>(r.integer("ranks", 1, 1 << 20));
  auto model = r.child("model");
  const auto& c = model_.config();
  for (auto [key, want] : std::initializer_list<std::pair<const char*, int>>{{"layers", c.layers},
                                                                             {"hidden", c.hidden},
                                                                             {"heads", c.heads},
                                                                             {"ffn", c.ffn},
                                                                             {"vocab", c.vocab}}) {
    auto got = model.integer(key);
    if (got != want)
      model.child(key).fail_value(std::to_string(got),
                                  std::to_string(want) + " (the model of the run being resumed)");
  }
  // The sequence length of the run that wrote it is informational: the position table has the
  // model's rows, so a run may resume at another length. Checkpoints written before the table
  // had the model's rows sized it by their sequence (the unit sizes below catch a mismatch).
  const auto old_seq = model.integer("seq", 1);
  const auto positions = model.integer_or("positions", old_seq, 1);
  if (positions != c.position_rows())
    model.child(model.has("positions") ? "positions" : "seq")
        .fail_value(std::to_string(positions),
                    std::to_string(c.position_rows()) +
                        " position rows (the model of the run being resumed)");
  // Absent in checkpoints written before untied heads existed, which were all tied.
  if (model.boolean_or("tied_head", true) != c.tied_head)
    model.child("tied_head")
        .fail(std::string(c.tied_head ? "true" : "false") +
              " (the model of the run being resumed)");
  model.finish();
  auto units = r.child("units");
  if (!units.is_array() || static_cast<int>(units.size()) != I.units)
    units.fail(std::to_string(I.units) + " units");
  std::vector<std::vector<std::int64_t>> old_off;
  for (int u = 0; u < I.units; ++u) {
    auto ur = units.element(static_cast<std::size_t>(u));
    if (ur.integer("numel") != model_.unit_numel(u))
      ur.child("numel").fail(std::to_string(model_.unit_numel(u)));
    auto offs = ur.child("offsets");
    std::vector<std::int64_t> o;
    for (auto& x : offs.elements()) o.push_back(x.as_integer(0));
    if (static_cast<int>(o.size()) != old_ranks + 1 || o.back() != model_.unit_numel(u))
      offs.fail(std::to_string(old_ranks + 1) + " shard offsets ending at the unit size");
    old_off.push_back(std::move(o));
    ur.finish();
  }
  r.finish();
  // Read the old shards that overlap this rank's new slices.
  std::vector<std::string> files(static_cast<std::size_t>(old_ranks));
  auto file_of = [&](int orank) -> const std::string& {
    auto& f = files[static_cast<std::size_t>(orank)];
    if (f.empty()) {
      f = read_binary(step_dir / rank_file_name(orank));
      std::int64_t want = 0;
      for (int u = 0; u < I.units; ++u)
        want += 3 * (old_off[u][static_cast<std::size_t>(orank) + 1] -
                     old_off[u][static_cast<std::size_t>(orank)]);
      if (static_cast<std::int64_t>(f.size()) != want * 4)
        throw IoError("checkpoint shard " + (step_dir / rank_file_name(orank)).string() + " has " +
                      std::to_string(f.size()) + " bytes, the manifest implies " +
                      std::to_string(want * 4));
    }
    return f;
  };
  for (int u = 0; u < I.units; ++u) {
    const std::int64_t lo = I.begin(u), hi = lo + I.owned(u);
    std::vector<float> p(static_cast<std::size_t>(hi - lo)), mm(p.size()), vv(p.size());
    for (int o = 0; o < old_ranks; ++o) {
      const std::int64_t olo = old_off[u][static_cast<std::size_t>(o)],
                         ohi = old_off[u][static_cast<std::size_t>(o) + 1];
      const std::int64_t a = std::max(lo, olo), b = std::min(hi, ohi);
      if (a >= b) continue;
      const std::string& f = file_of(o);
      std::int64_t base = 0;  // element offset of unit u's block in the old shard file
      for (int uu = 0; uu < u; ++uu)
        base += 3 * (old_off[uu][static_cast<std::size_t>(o) + 1] -
                     old_off[uu][static_cast<std::size_t>(o)]);
      const std::int64_t on = ohi - olo;
      for (int k = 0; k < 3; ++k) {
        float* dst = (k == 0 ? p : k == 1 ? mm : vv).data() + (a - lo);
        std::memcpy(dst, f.data() + (base + k * on + (a - olo)) * 4,
                    static_cast<std::size_t>(b - a) * 4);
      }
    }
    const std::size_t bytes = p.size() * 4;
    if (bytes) {
      I.dev.upload(I.param[u].ref(), p.data(), bytes);
      I.dev.upload(I.m[u].ref(), mm.data(), bytes);
      I.dev.upload(I.v[u].ref(), vv.data(), bytes);
    }
  }
  I.adam_step = adam_step;
  // A loss scale only means something under fp16; a run resumed in another precision keeps 1.
  if (I.loss_scaling) {
    I.loss_scale = loss_scale;
    I.clean_steps = clean_steps;
  }
  step_ = step;
  I.comm.barrier();
}

}  // namespace cephalo::backend

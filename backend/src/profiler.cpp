#include "cephalo/backend/profiler.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include "cephalo/backend/sharded_state.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "implementation.hpp"

namespace cephalo::backend {

namespace {

// The uneven points time the grouped variant (MPI's -v collectives): the padded one is the
// even collective on the padded size, which the even points already measure.
constexpr UnevenCollective kProfiledUneven = UnevenCollective::Grouped;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

struct Sample {
  double value_ms = 0;  // the statistic of the repeats
  double stddev_ms = 0;
};

// The statistic of a point's repeats. `min` is the op's cost when nothing else ran on its core
// (what the cost model represents); `median` also absorbs typical interference.
double summarise(const std::vector<double>& v, const std::string& statistic) {
  return statistic == "min" ? *std::min_element(v.begin(), v.end()) : median(v);
}

class Profiler {
 public:
  Profiler(Device& dev, Communicator& comm, const ProfilerOptions& a)
      : dev_(dev), comm_(&comm), args_(a) {}

  // Times `fn` on the compute stream with the device's events (steady clock on CPU, CUDA events
  // on GPU): warmup calls, then the median of `repeats`; under mpirun the median is averaged
  // over ranks (they all measure at once, sharing the machine as they do in training).
  template <class Fn>
  Sample time_compute(Fn&& fn) {
    auto& s = dev_.stream(StreamKind::Compute);
    for (int i = 0; i < args_.warmup; ++i) fn();
    dev_.synchronize();
    std::vector<double> ms;
    auto start = dev_.create_event();
    auto stop = dev_.create_event();
    for (int i = 0; i < args_.repeats; ++i) {
      start->record(s);
      fn();
      stop->record(s);
      stop->synchronize();
      ms.push_back(1e3 * stop->seconds_since(*start));
    }
    Sample out{summarise(ms, args_.statistic), stddev(ms)};
    if (comm_ && comm_->size() > 1) {
      double v[2] = {out.value_ms, out.stddev_ms};
      comm_->all_reduce_host(v, 2, ReduceOp::Sum);
      out.value_ms = v[0] / comm_->size();
      out.stddev_ms = v[1] / comm_->size();
    }
    return out;
  }

  // Whether this rank is the collective points' late participant (see time_collective).
  bool arrives_last() const { return comm_->rank() == comm_->size() - 1; }

  // Times one collective call (enqueued on the comm stream, then synchronised) on otherwise
  // idle ranks, from the last participant's arrival, as the simulator counts a collective:
  // after a barrier every rank but the last enqueues it at once, the last waits 1 ms first
  // (idle) and its own time is the call's. In training ranks reach a collective when their
  // compute lets them, rarely together; arriving together would let the call finish inside
  // the early ranks' hot polling (mpi_communicator.cpp, `complete`), which training rarely
  // sees.
  template <class Fn>
  double time_collective(Fn&& fn) {
    auto& s = dev_.stream(StreamKind::Comm);
    for (int i = 0; i < args_.warmup; ++i) {
      fn(s);
      s.synchronize();
    }
    std::vector<double> sec;
    for (int i = 0; i < args_.repeats; ++i) {
      comm_->barrier();
      if (arrives_last()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto t0 = std::chrono::steady_clock::now();
      fn(s);
      s.synchronize();
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!arrives_last()) t = 0;
      comm_->all_reduce_host(&t, 1, ReduceOp::Max);  // the last rank's time, on every rank
      sec.push_back(t);
    }
    return summarise(sec, args_.statistic);
  }

  // The same call under compute load, as prefetched gathers and overlapped reduce-scatters run
  // in training, again from the last participant's arrival: after a barrier every rank but
  // the last enqueues the collective on its comm stream at once, the last first runs one
  // `load` to completion. Until the collective has completed every rank keeps its compute
  // stream busy with `load` (at most two in flight on a GPU, inline on the CPU device),
  // polling the comm stream's event between them. The time is the last rank's, from its comm
  // stream's start event to its stop event (stamped where the stream runs them, so not
  // rounded to a GEMM).
  template <class Fn, class Load>
  double time_collective_under_load(Fn&& fn, Load&& load) {
    auto& s = dev_.stream(StreamKind::Comm);
    auto& cs = dev_.stream(StreamKind::Compute);
    auto start = dev_.create_event();
    auto stop = dev_.create_event();
    std::unique_ptr<Event> done[2] = {dev_.create_event(), dev_.create_event()};
    const bool late = arrives_last();
    auto once = [&]() -> double {
      comm_->barrier();
      if (late) {
        load();
        cs.synchronize();
      }
      start->record(s);
      fn(s);
      stop->record(s);
      int i = 0;
      while (!stop->query()) {
        load();
        done[i & 1]->record(cs);
        ++i;
        if (i >= 2) done[i & 1]->synchronize();
      }
      cs.synchronize();
      return late ? stop->seconds_since(*start) : 0.0;
    };
    for (int i = 0; i < args_.warmup; ++i) once();
    std::vector<double> sec;
    for (int i = 0; i < args_.repeats; ++i) {
      double t = once();
      comm_->all_reduce_host(&t, 1, ReduceOp::Max);  // the last rank's time, on every rank
      sec.push_back(t);
    }
    return summarise(sec, args_.statistic);
  }

  // Host wall time of `fn` (which must synchronise what it starts): for work on other streams.
  template <class Fn>
  Sample time_host(Fn&& fn) {
    for (int i = 0; i < args_.warmup; ++i) fn();
    std::vector<double> ms;
    for (int i = 0; i < args_.repeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      ms.push_back(1e3 *
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return {summarise(ms, args_.statistic), stddev(ms)};
  }

  // Normal(0, scale) values in `type` (generated in fp32, cast on the device).
  Buffer random(std::int64_t n, std::uint64_t seed, float scale = 1.0f,
                ElemType type = ElemType::F32) {
    std::vector<float> host(static_cast<std::size_t>(n));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    for (float& x : host) x = dist(rng);
    return upload(host, type);
  }
  Buffer unit_params(const GptModel& model, int unit, ElemType type) {
    return upload(model.initial_unit(unit), type);
  }
  Buffer zeros(std::int64_t n, ElemType type = ElemType::F32) {
    Buffer b = dev_.allocate(static_cast<std::size_t>(n), type);
    dev_.fill(dev_.stream(StreamKind::Compute), b.ref(), 0.0f);
    return b;
  }
  Buffer tokens(const GptConfig& cfg, int micro_batch, bool targets) {
    const std::int64_t rows = static_cast<std::int64_t>(micro_batch) * cfg.seq;
    std::vector<std::int32_t> tok(static_cast<std::size_t>(rows)), tgt(tok.size());
    for (int i = 0; i < micro_batch; ++i)
      synthetic_sample(cfg, 7, 0, i, tok.data() + i * cfg.seq, tgt.data() + i * cfg.seq);
    Buffer b = dev_.allocate(static_cast<std::size_t>(rows), ElemType::I32);
    dev_.upload(b.ref(), targets ? tgt.data() : tok.data(), tok.size() * 4);
    return b;
  }

  Device& dev() { return dev_; }
  Communicator* comm() { return comm_; }

 private:
  Buffer upload(const std::vector<float>& host, ElemType type) {
    Buffer wide = dev_.allocate(host.size(), ElemType::F32);
    dev_.upload(wide.ref(), host.data(), host.size() * sizeof(float));
    if (type == ElemType::F32) return wide;
    Buffer b = dev_.allocate(host.size(), type);
    auto& cs = dev_.stream(StreamKind::Compute);
    dev_.cast(cs, wide.ref(), b.ref());
    cs.synchronize();
    return b;
  }

  Device& dev_;
  Communicator* comm_;
  const ProfilerOptions& args_;
};

struct Point {
  int micro_batch = 0;
  Sample forward, backward, recompute;
};

costmodels::MeasuredPoint measured(const Point& p, bool with_recompute, int repeats) {
  return {p.micro_batch,
          p.forward.value_ms,
          p.backward.value_ms,
          with_recompute ? p.recompute.value_ms : -1.0,
          repeats,
          std::max({p.forward.stddev_ms, p.backward.stddev_ms, p.recompute.stddev_ms})};
}

}  // namespace

costmodels::MeasuredProfile profile_model(Device& dev, Communicator& comm, const GptConfig& cfg,
                                          const ProfilerOptions& o,
                                          const std::function<void(const std::string&)>& say) {
  Profiler prof(dev, comm, o);
  auto& cs = dev.stream(StreamKind::Compute);
  GptModel model(cfg);
  // Parameters and activations in the compute type, gradients in fp32 (a job's default reduce
  // type), exactly as the executor runs such a job.
  const ElemType ct = elem_type_of(o.dtype);
  const int world = comm.size(), rank = comm.rank();
  costmodels::MeasuredProfile out;
  costmodels::MeasuredRow row{o.model_name, o.record_as, cfg.seq, o.dtype, {}, {}, {}, {}};
  row.implementation = executed_implementation();

  // ---- compute: one layer, the embedding, the head, per micro-batch size ----
  if (!dev.supports(ct))
    throw InfeasibleError("device " + dev.name() + " cannot compute in " + to_string(o.dtype));
  Buffer layer_params = prof.unit_params(model, 1, ct);
  Buffer layer_grads = prof.zeros(model.unit_numel(1));
  Buffer emb_params = prof.unit_params(model, 0, ct);
  Buffer emb_grads = prof.zeros(model.unit_numel(0));
  Buffer head_params = prof.unit_params(model, model.head_unit(), ct);
  Buffer head_grads = prof.zeros(model.unit_numel(model.head_unit()));
  const float grad_scale = 1.0f / static_cast<float>(cfg.seq * 64);
  for (int m : o.micro_batches) {
    const std::int64_t rows = static_cast<std::int64_t>(m) * cfg.seq;
    const std::int64_t n = rows * cfg.hidden;
    Buffer x = prof.random(n, 11 + static_cast<std::uint64_t>(m), 1.0f, ct);
    Buffer y = prof.zeros(n, ct), dy = prof.random(n, 97, 1e-3f, ct), dx = prof.zeros(n, ct);
    Buffer tok = prof.tokens(cfg, m, false), tgt = prof.tokens(cfg, m, true);
    LayerActivations acts, acts2;
    Point lp{m, {}, {}, {}};
    // Forward of the layered schedule: activations go to a scratch set that the next op reuses.
    lp.forward = prof.time_compute(
        [&] { model.layer_forward(dev, layer_params.ref(), x.ref(), y.ref(), acts, rows); });
    lp.recompute = prof.time_compute(
        [&] { model.layer_forward(dev, layer_params.ref(), x.ref(), y.ref(), acts2, rows); });
    lp.backward = prof.time_compute([&] {
      model.layer_backward(dev, layer_params.ref(), layer_grads.ref(), x.ref(), acts2, dy.ref(),
                           dx.ref(), rows);
    });
    row.layer.push_back(measured(lp, true, o.repeats));
    Point ep{m, {}, {}, {}};
    ep.forward = prof.time_compute(
        [&] { model.embedding_forward(dev, emb_params.ref(), tok.ref(), y.ref(), rows); });
    ep.backward = prof.time_compute(
        [&] { model.embedding_backward(dev, emb_grads.ref(), tok.ref(), dy.ref(), rows); });
    row.embedding.push_back(measured(ep, false, o.repeats));
    Point hp{m, {}, {}, {}};
    hp.forward = prof.time_compute([&] {
      model.head_forward_backward(dev, head_params.ref(), emb_params.ref(), x.ref(), tgt.ref(),
                                  rows, 0.0f, {}, {}, {});
    });
    hp.backward = prof.time_compute([&] {
      model.head_forward_backward(dev, head_params.ref(), emb_params.ref(), x.ref(), tgt.ref(),
                                  rows, grad_scale, dx.ref(), head_grads.ref(), emb_grads.ref());
    });
    row.head.push_back(measured(hp, false, o.repeats));
    say("micro-batch " + std::to_string(m) + ": layer F " + fixed(lp.forward.value_ms, 3) +
        " ms, RC " + fixed(lp.recompute.value_ms, 3) + " ms, B " + fixed(lp.backward.value_ms, 3) +
        " ms; embedding F+B " + fixed(ep.forward.value_ms + ep.backward.value_ms, 3) +
        " ms; head F " + fixed(hp.forward.value_ms, 3) + " ms, F+B " +
        fixed(hp.backward.value_ms, 3) + " ms");
  }

  out.rows.push_back(row);

  // ---- optimizer: AdamW over shards of 1/8 .. 1 of the model ----
  const double total_params = static_cast<double>(model.total_parameters());
  for (double frac : {0.125, 0.25, 0.5, 1.0}) {
    const auto n = static_cast<std::int64_t>(std::max(1.0, std::round(total_params * frac)));
    Buffer p = prof.random(n, 5, 0.02f), g = prof.random(n, 6, 1e-3f);
    Buffer mom = prof.zeros(n), var = prof.zeros(n);
    std::int64_t step = 0;
    Sample s = prof.time_compute([&] {
      AdamWParams ap;
      ap.step = ++step;
      dev.adamw_step(cs, p.ref(), g.ref(), mom.ref(), var.ref(), ap);
    });
    out.optimizer.push_back({o.record_as, static_cast<double>(n), s.value_ms});
    say("optimizer over " + std::to_string(n) + " parameters: " + fixed(s.value_ms, 3) + " ms");
  }

  // ---- device<->host copies (offload) ----
  for (double bytes = 64 * 1024; bytes <= o.max_bytes; bytes *= 4) {
    const auto n = static_cast<std::int64_t>(bytes / 4);
    Buffer d = prof.random(n, 9);
    Buffer h = dev.allocate(static_cast<std::size_t>(n), ElemType::F32, MemorySpace::PinnedHost);
    auto& copy = dev.stream(StreamKind::Copy);
    for (int dir = 0; dir < 2; ++dir) {
      Sample s = prof.time_host([&] {
        if (dir == 0)
          dev.copy(copy, h.ref(), d.ref());
        else
          dev.copy(copy, d.ref(), h.ref());
        copy.synchronize();
      });
      out.copies.push_back({dir == 0 ? "d2h" : "h2d", static_cast<double>(n) * 4, s.value_ms});
    }
  }
  say("copies: " + std::to_string(out.copies.size()) + " points");

  // ---- collectives with 2+ ranks ----
  if (world < 2 || !o.collectives) return out;
  std::vector<int> ranks(static_cast<std::size_t>(world));
  std::iota(ranks.begin(), ranks.end(), 0);
  // Uneven shares 1:2:...:n (normalised): the shape of a heterogeneous plan.
  std::vector<double> shares(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) shares[static_cast<std::size_t>(r)] = r + 1.0;
  const double share_sum = std::accumulate(shares.begin(), shares.end(), 0.0);
  for (double& s : shares) s /= share_sum;
  // The compute load for the under-load points: the layer's MLP up-projection at the largest
  // profiled micro-batch (a GEMM the training step runs while collectives overlap).
  const std::int64_t gm = static_cast<std::int64_t>(o.micro_batches.back()) * cfg.seq,
                     gk = cfg.hidden, gn = cfg.ffn;
  Buffer ga = prof.random(gm * gk, 41, 1.0f, ct), gb = prof.random(gk * gn, 42, 0.02f, ct);
  Buffer gc = prof.zeros(gm * gn, ct);
  auto load = [&] {
    dev.gemm(cs, Transpose::No, Transpose::No, gm, gn, gk, 1.0f, ga.ref(), gb.ref(), 0.0f,
             gc.ref());
  };
  for (double bytes = 4 * 1024; bytes <= o.max_bytes; bytes *= 4) {
    const std::int64_t total = static_cast<std::int64_t>(bytes / 4) / world * world;
    const std::int64_t even = total / world;
    // The uneven slices exactly as a plan with these shares cuts a unit.
    const auto offsets = shard_offsets(total, shares);
    std::vector<std::int64_t> counts;
    for (int r = 0; r < world; ++r)
      counts.push_back(offsets[static_cast<std::size_t>(r) + 1] -
                       offsets[static_cast<std::size_t>(r)]);
    const std::int64_t mine = counts[static_cast<std::size_t>(rank)];
    Buffer full = prof.random(total, 21 + static_cast<std::uint64_t>(rank));
    Buffer part = prof.random(std::max(even, mine), 31);
    struct Case {
      costmodels::CollectiveKind kind;
      bool uneven;
      std::function<void(Stream&)> call;
    };
    const std::vector<Case> cases = {
        {costmodels::CollectiveKind::AllGather, false,
         [&](Stream& s) { comm.all_gather(s, part.slice(0, even), full.ref()); }},
        {costmodels::CollectiveKind::ReduceScatter, false,
         [&](Stream& s) {
           comm.reduce_scatter(s, full.ref(), part.slice(0, even), ReduceOp::Sum);
         }},
        {costmodels::CollectiveKind::AllGather, true,
         [&](Stream& s) {
           comm.all_gather_v(s, part.slice(0, mine), full.ref(), counts, kProfiledUneven);
         }},
        {costmodels::CollectiveKind::ReduceScatter, true,
         [&](Stream& s) {
           comm.reduce_scatter_v(s, full.ref(), part.slice(0, mine), counts, ReduceOp::Sum,
                                 kProfiledUneven);
         }},
    };
    for (const Case& c : cases)
      for (bool under_load : {false, true}) {
        const double sec = under_load ? prof.time_collective_under_load(c.call, load)
                                      : prof.time_collective(c.call);
        const double tb = static_cast<double>(total) * 4;
        const double algbw = tb / sec;
        costmodels::MeasuredCollective point;
        point.collective =
            c.kind == costmodels::CollectiveKind::AllGather ? "all_gather" : "reduce_scatter";
        point.ranks = ranks;
        point.bytes = tb;
        point.time_us = sec * 1e6;
        point.algbw_GBps = algbw / 1e9;
        point.busbw_GBps = algbw * costmodels::bus_bandwidth_factor(c.kind, world) / 1e9;
        point.uneven = c.uneven;
        if (c.uneven) point.shares = shares;
        point.under_compute = under_load;
        out.collectives.push_back(point);
      }
    say("collectives at " + format_bytes(static_cast<double>(total) * 4) + " done");
  }
  return out;
}

void stamp_provenance(costmodels::MeasuredProfile& profile, const std::string& tool,
                      const std::string& device_name, int ranks, const ProfilerOptions& options) {
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  char host[256] = {0};
  profile.tool = tool;
  profile.date = date;
  profile.host = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  profile.source = "measured by cephalo profile on " + device_name + ", " + std::to_string(ranks) +
                   " rank(s), " + options.statistic + " of " + std::to_string(options.repeats) +
                   " after " + std::to_string(options.warmup) + " warm-up";
}

std::string sweep_file_beside(const std::string& calibration_file) {
  if (calibration_file.empty()) return "";
  const std::filesystem::path p = calibration_file;
  return (p.parent_path() / (p.stem().string() + ".sweep.json")).string();
}

}  // namespace cephalo::backend

// `cephalo profile`: measures what the cost models need on this machine's device, with the
// backend's own kernels (so the numbers are the ones `cephalo run` will see), and writes a
// calibration file in the project's profile format ("format": "cephalo-profile", read by
// costmodels::ProfileTables::load_own; the format is documented in tests/accuracy/README.md and
// costmodels/README.md):
//  * per transformer layer, for each micro-batch size: forward (the checkpointed forward the
//    executor runs), recompute (the forward re-run right before the backward) and backward;
//  * the embedding and head units the same way (head "backward" is the fused
//    forward+backward+loss the executor runs as the head's backward op);
//  * the AdamW step per shard size; device<->host copies per size;
//  * under `mpirun -np N` (N ≥ 2): sweeps of even and uneven all-gather and reduce-scatter over
//    sizes, through the backend's Communicator on the comm stream. The even points are also
//    written as an nccl-tests-like sweep ("cephalo-collective-sweep", --sweep-out) that
//    costmodels::calibrate_comm fits. Every point is measured twice: on otherwise idle ranks,
//    and under compute load (`"under_compute": true`: every rank keeps its compute stream
//    busy with a layer GEMM until the collective completes, as prefetch and overlapped
//    reduce-scatters do in training); the comm model fits the two separately.
// Every point is the median of --repeats timed calls after --warmup untimed ones; under mpirun
// every rank measures at once (as in training) and the compute numbers are averaged over ranks.
// Progress goes to stderr; rank 0 prints and writes.
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/single_rank_communicator.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#ifdef CEPHALO_HAVE_CUDA
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/nccl_communicator.hpp"
#endif

namespace cephalo::cli {
namespace {

using backend::Buffer;
using backend::Device;
using backend::ElemType;
using backend::StreamKind;

struct ProfileArgs {
  std::string device = "cpu";
  std::string model;
  int seq = 0;
  std::string micro_batches = "1..4";
  std::string as_gpu;          // catalog name recorded in the rows (default: CPU-core / the GPU)
  std::string dtype = "fp32";  // compute type of parameters and activations (as a job's)
  int threads = 1;
  int repeats = 5;
  int warmup = 1;
  std::string statistic = "median";  // of the timed repeats: median, or min (least disturbed)
  std::string output;
  std::string sweep_output;
  std::string max_collective_bytes = "16MiB";
  bool no_collectives = false;
  bool json = false;
};

// "1..K", "K" (= 1..K) or "1,2,4,8".
std::vector<int> parse_micro_batches(const std::string& text) {
  auto bad = [&]() -> std::vector<int> {
    throw CLI::ValidationError(
        "--micro-batches",
        "expected 1..K, K or a list like 1,2,4 of sizes >= 1, got \"" + text + "\"");
  };
  std::vector<int> out;
  try {
    auto dots = text.find("..");
    if (dots != std::string::npos) {
      int lo = std::stoi(text.substr(0, dots)), hi = std::stoi(text.substr(dots + 2));
      if (lo < 1 || hi < lo || hi > 4096) return bad();
      for (int m = lo; m <= hi; ++m) out.push_back(m);
      return out;
    }
    std::size_t pos = 0;
    while (pos < text.size()) {
      auto comma = text.find(',', pos);
      std::string part =
          text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      std::size_t used = 0;
      int m = std::stoi(part, &used);
      if (used != part.size() || m < 1 || m > 4096) return bad();
      out.push_back(m);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } catch (const std::logic_error&) {
    return bad();
  }
  if (out.empty()) return bad();
  if (out.size() == 1 && text.find(',') == std::string::npos) {
    int k = out[0];
    out.clear();
    for (int m = 1; m <= k; ++m) out.push_back(m);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

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
  double value_ms = 0;  // the --statistic of the repeats
  double stddev_ms = 0;
};

// The statistic of a point's repeats. `min` is the op's cost when nothing else ran on its core
// (what the cost model represents); `median` also absorbs typical interference.
double summarise(const std::vector<double>& v, const std::string& statistic) {
  return statistic == "min" ? *std::min_element(v.begin(), v.end()) : median(v);
}

class Profiler {
 public:
  Profiler(Device& dev, backend::Communicator* comm, const ProfileArgs& a)
      : dev_(dev), comm_(comm), args_(a) {}

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
      comm_->all_reduce_host(v, 2, backend::ReduceOp::Sum);
      out.value_ms = v[0] / comm_->size();
      out.stddev_ms = v[1] / comm_->size();
    }
    return out;
  }

  // Times one collective call (enqueued on the comm stream, then synchronised), all ranks
  // starting together after a barrier; the slowest rank's time is the call's time.
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
      auto t0 = std::chrono::steady_clock::now();
      fn(s);
      s.synchronize();
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      comm_->all_reduce_host(&t, 1, backend::ReduceOp::Max);
      sec.push_back(t);
    }
    return summarise(sec, args_.statistic);
  }

  // The same call under compute load, as in training (prefetch, overlapped reduce-scatter):
  // all ranks start together after a barrier, enqueue the collective on the comm stream and,
  // until it has completed, keep their compute stream busy with `load` (one GEMM per call; at
  // most two in flight on a GPU, inline on the CPU device), polling the comm stream's event
  // between them. The time is from the comm stream's start event to its stop event (stamped
  // where the stream runs them, so not rounded to a GEMM), the slowest rank's.
  template <class Fn, class Load>
  double time_collective_under_load(Fn&& fn, Load&& load) {
    auto& s = dev_.stream(StreamKind::Comm);
    auto& cs = dev_.stream(StreamKind::Compute);
    auto start = dev_.create_event();
    auto stop = dev_.create_event();
    std::unique_ptr<backend::Event> done[2] = {dev_.create_event(), dev_.create_event()};
    auto once = [&]() -> double {
      comm_->barrier();
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
      return stop->seconds_since(*start);
    };
    for (int i = 0; i < args_.warmup; ++i) once();
    std::vector<double> sec;
    for (int i = 0; i < args_.repeats; ++i) {
      double t = once();
      comm_->all_reduce_host(&t, 1, backend::ReduceOp::Max);
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
  Buffer unit_params(const backend::GptModel& model, int unit, ElemType type) {
    return upload(model.initial_unit(unit), type);
  }
  Buffer zeros(std::int64_t n, ElemType type = ElemType::F32) {
    Buffer b = dev_.allocate(static_cast<std::size_t>(n), type);
    dev_.fill(dev_.stream(StreamKind::Compute), b.ref(), 0.0f);
    return b;
  }
  Buffer tokens(const backend::GptConfig& cfg, int micro_batch, bool targets) {
    const std::int64_t rows = static_cast<std::int64_t>(micro_batch) * cfg.seq;
    std::vector<std::int32_t> tok(static_cast<std::size_t>(rows)), tgt(tok.size());
    for (int i = 0; i < micro_batch; ++i)
      backend::synthetic_sample(cfg, 7, 0, i, tok.data() + i * cfg.seq, tgt.data() + i * cfg.seq);
    Buffer b = dev_.allocate(static_cast<std::size_t>(rows), ElemType::I32);
    dev_.upload(b.ref(), targets ? tgt.data() : tok.data(), tok.size() * 4);
    return b;
  }

  Device& dev() { return dev_; }
  backend::Communicator* comm() { return comm_; }

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
  backend::Communicator* comm_;
  const ProfileArgs& args_;
};

struct Point {
  int micro_batch = 0;
  Sample forward, backward, recompute;
};

Json point_json(const Point& p, bool with_recompute, int repeats) {
  Json j = {{"micro_batch", p.micro_batch},
            {"forward_ms", p.forward.value_ms},
            {"backward_ms", p.backward.value_ms}};
  if (with_recompute) j["recompute_ms"] = p.recompute.value_ms;
  j["repeats"] = repeats;
  j["stddev_ms"] = std::max({p.forward.stddev_ms, p.backward.stddev_ms, p.recompute.stddev_ms});
  return j;
}

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// The collective sweep's default file beside the calibration file ("" without one).
std::string sweep_file_of(const std::string& output) {
  if (output.empty()) return "";
  const std::filesystem::path p = output;
  return (p.parent_path() / (p.stem().string() + ".sweep.json")).string();
}

void run_profile(const ProfileArgs& a) {
  if (a.device != "cpu" && a.device != "cuda")
    throw CLI::ValidationError("--device", "expected cpu or cuda, got \"" + a.device + "\"");
  if (a.seq < 1) throw CLI::ValidationError("--seq", "expected a sequence length >= 1");
  if (a.statistic != "median" && a.statistic != "min")
    throw CLI::ValidationError("--statistic",
                               "expected median or min, got \"" + a.statistic + "\"");
  if (a.repeats < 1 || a.warmup < 0)
    throw CLI::ValidationError("--repeats/--warmup", "expected repeats >= 1 and warmup >= 0");
  const std::vector<int> micro_batches = parse_micro_batches(a.micro_batches);
  const ModelSpec& spec = costmodels::ModelCatalog::builtin().get(a.model);
  if (spec.max_positions > 0 && a.seq > spec.max_positions)
    throw CLI::ValidationError("--seq", "at most the model's max_positions (" +
                                            std::to_string(spec.max_positions) + "), got " +
                                            std::to_string(a.seq));
  const backend::GptConfig cfg = backend::GptConfig::from_spec(spec, a.seq);
  const auto dtype = parse_dtype(a.dtype);
  if (!dtype)
    throw CLI::ValidationError("--dtype",
                               "expected fp32, tf32, bf16 or fp16, got \"" + a.dtype + "\"");
  // Parameters and activations in the compute type, gradients in fp32 (a job's default reduce
  // type), exactly as the executor runs such a job.
  const ElemType ct = backend::elem_type_of(*dtype);
  const auto max_bytes = parse_quantity(a.max_collective_bytes, Quantity::Bytes);
  if (!max_bytes || *max_bytes < 64 * 1024)
    throw CLI::ValidationError("--max-bytes",
                               "expected a size of at least 64KiB such as "
                               "\"16MiB\", got \"" +
                                   a.max_collective_bytes + "\"");
  const double max_coll_bytes = *max_bytes;

  // Without mpirun a single process profiles without initialising MPI (no collective sweep).
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi.world_rank(), world = mpi.world_size();
  const bool lead = rank == 0;
  // Output locations before measuring (output_file.hpp); the sweep file as written below.
  check_outputs({{"--output", a.output},
                 {"--sweep-out", !a.sweep_output.empty() || world == 1 || a.no_collectives
                                     ? a.sweep_output
                                     : sweep_file_of(a.output)}});
  auto say = [&](const std::string& line) {
    if (lead) std::cerr << "profile: " << line << std::endl;
  };

  std::unique_ptr<Device> device;
  std::unique_ptr<backend::Communicator> mpi_comm, nccl, single;
  if (mpi.initialized()) mpi_comm = backend::make_mpi_communicator();
  std::string gpu_name = a.as_gpu;
  if (a.device == "cuda") {
#ifdef CEPHALO_HAVE_CUDA
    cuda::CudaDeviceOptions o;
    o.device = cuda::local_device_index();
    o.allow_tf32 = *dtype == Dtype::TF32;  // fp32 rows are measured without tensor-core TF32
    device = cuda::make_cuda_device(o);
    if (mpi_comm && world > 1) nccl = cuda::make_nccl_communicator(*device, *mpi_comm);
#else
    throw RuntimeFailure(
        "this build of cephalo has no CUDA backend (configure with a CUDA "
        "toolkit and NCCL; see backend/cuda/)");
#endif
    if (gpu_name.empty())
      throw CLI::ValidationError("--as",
                                 "--device cuda needs --as GPU: the catalog name the "
                                 "measurements are recorded under (e.g. h100)");
  } else {
    backend::CpuDeviceOptions o;
    o.ordinal = rank;
    o.threads = a.threads;
    device = backend::make_cpu_device(o);
    if (gpu_name.empty()) gpu_name = "cpu";
  }
  const DeviceSpec& dspec = costmodels::GpuCatalog::builtin().get(gpu_name);
  if (!mpi_comm) single = backend::make_single_rank_communicator(*device);
  backend::Communicator* comm = nccl ? nccl.get() : mpi_comm ? mpi_comm.get() : single.get();
  Profiler prof(*device, comm, a);
  Device& dev = *device;
  auto& cs = dev.stream(StreamKind::Compute);
  backend::GptModel model(cfg);
  const int L = cfg.layers;
  say(device->name() + ", model " + spec.name + " (" + std::to_string(L) + " layers, hidden " +
      std::to_string(cfg.hidden) + "), sequence " + std::to_string(a.seq) + ", " +
      std::to_string(world) + " rank(s), recorded as " + dspec.name);

  // ---- compute: one layer, the embedding, the head, per micro-batch size ----
  if (!dev.supports(ct))
    throw InfeasibleError("device " + dev.name() + " cannot compute in " + a.dtype);
  Buffer layer_params = prof.unit_params(model, 1, ct);
  Buffer layer_grads = prof.zeros(model.unit_numel(1));
  Buffer emb_params = prof.unit_params(model, 0, ct);
  Buffer emb_grads = prof.zeros(model.unit_numel(0));
  Buffer head_params = prof.unit_params(model, model.head_unit(), ct);
  Buffer head_grads = prof.zeros(model.unit_numel(model.head_unit()));
  std::vector<Point> layer_pts, emb_pts, head_pts;
  const float grad_scale = 1.0f / static_cast<float>(cfg.seq * 64);
  for (int m : micro_batches) {
    const std::int64_t rows = static_cast<std::int64_t>(m) * cfg.seq;
    const std::int64_t n = rows * cfg.hidden;
    Buffer x = prof.random(n, 11 + static_cast<std::uint64_t>(m), 1.0f, ct);
    Buffer y = prof.zeros(n, ct), dy = prof.random(n, 97, 1e-3f, ct), dx = prof.zeros(n, ct);
    Buffer tok = prof.tokens(cfg, m, false), tgt = prof.tokens(cfg, m, true);
    backend::LayerActivations acts, acts2;
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
    layer_pts.push_back(lp);
    Point ep{m, {}, {}, {}};
    ep.forward = prof.time_compute(
        [&] { model.embedding_forward(dev, emb_params.ref(), tok.ref(), y.ref(), rows); });
    ep.backward = prof.time_compute(
        [&] { model.embedding_backward(dev, emb_grads.ref(), tok.ref(), dy.ref(), rows); });
    emb_pts.push_back(ep);
    Point hp{m, {}, {}, {}};
    hp.forward = prof.time_compute([&] {
      model.head_forward_backward(dev, head_params.ref(), emb_params.ref(), x.ref(), tgt.ref(),
                                  rows, 0.0f, {}, {}, {});
    });
    hp.backward = prof.time_compute([&] {
      model.head_forward_backward(dev, head_params.ref(), emb_params.ref(), x.ref(), tgt.ref(),
                                  rows, grad_scale, dx.ref(), head_grads.ref(), emb_grads.ref());
    });
    head_pts.push_back(hp);
    say("micro-batch " + std::to_string(m) + ": layer F " + fixed(lp.forward.value_ms, 3) +
        " ms, RC " + fixed(lp.recompute.value_ms, 3) + " ms, B " + fixed(lp.backward.value_ms, 3) +
        " ms; embedding F+B " + fixed(ep.forward.value_ms + ep.backward.value_ms, 3) +
        " ms; head F " + fixed(hp.forward.value_ms, 3) + " ms, F+B " +
        fixed(hp.backward.value_ms, 3) + " ms");
  }

  // ---- optimizer: AdamW over shards of 1/8 .. 1 of the model ----
  Json optimizer = Json::array();
  {
    const double total = static_cast<double>(model.total_parameters());
    for (double frac : {0.125, 0.25, 0.5, 1.0}) {
      const auto n = static_cast<std::int64_t>(std::max(1.0, std::round(total * frac)));
      Buffer p = prof.random(n, 5, 0.02f), g = prof.random(n, 6, 1e-3f);
      Buffer mom = prof.zeros(n), var = prof.zeros(n);
      std::int64_t step = 0;
      Sample s = prof.time_compute([&] {
        backend::AdamWParams ap;
        ap.step = ++step;
        dev.adamw_step(cs, p.ref(), g.ref(), mom.ref(), var.ref(), ap);
      });
      optimizer.push_back(
          {{"gpu", dspec.name}, {"parameters", static_cast<double>(n)}, {"ms", s.value_ms}});
      say("optimizer over " + std::to_string(n) + " parameters: " + fixed(s.value_ms, 3) + " ms");
    }
  }

  // ---- device<->host copies (offload) ----
  Json copies = Json::array();
  for (double bytes = 64 * 1024; bytes <= max_coll_bytes; bytes *= 4) {
    const auto n = static_cast<std::int64_t>(bytes / 4);
    Buffer d = prof.random(n, 9);
    Buffer h =
        dev.allocate(static_cast<std::size_t>(n), ElemType::F32, backend::MemorySpace::PinnedHost);
    auto& copy = dev.stream(StreamKind::Copy);
    for (int dir = 0; dir < 2; ++dir) {
      Sample s = prof.time_host([&] {
        if (dir == 0)
          dev.copy(copy, h.ref(), d.ref());
        else
          dev.copy(copy, d.ref(), h.ref());
        copy.synchronize();
      });
      copies.push_back({{"direction", dir == 0 ? "d2h" : "h2d"},
                        {"bytes", static_cast<double>(n) * 4},
                        {"ms", s.value_ms}});
    }
  }
  say("copies: " + std::to_string(copies.size()) + " points");

  // ---- collectives under mpirun ----
  Json collectives = Json::array();
  Json sweep_results = Json::array();
  if (world > 1 && !a.no_collectives) {
    std::vector<int> ranks(static_cast<std::size_t>(world));
    std::iota(ranks.begin(), ranks.end(), 0);
    // Uneven shares 1:2:...:n (normalised): the shape of a heterogeneous plan.
    std::vector<double> shares(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) shares[static_cast<std::size_t>(r)] = r + 1.0;
    double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
    for (double& s : shares) s /= sum;
    // The compute load for the under-load points: the layer's MLP up-projection at the
    // largest profiled micro-batch (a GEMM the training step runs while collectives overlap).
    const std::int64_t gm = static_cast<std::int64_t>(micro_batches.back()) * cfg.seq,
                       gk = cfg.hidden, gn = cfg.ffn;
    Buffer ga = prof.random(gm * gk, 41, 1.0f, ct), gb = prof.random(gk * gn, 42, 0.02f, ct);
    Buffer gc = prof.zeros(gm * gn, ct);
    auto load = [&] {
      dev.gemm(cs, backend::Transpose::No, backend::Transpose::No, gm, gn, gk, 1.0f, ga.ref(),
               gb.ref(), 0.0f, gc.ref());
    };
    for (double bytes = 4 * 1024; bytes <= max_coll_bytes; bytes *= 4) {
      const std::int64_t total = static_cast<std::int64_t>(bytes / 4) / world * world;
      const std::int64_t even = total / world;
      std::vector<std::int64_t> counts(static_cast<std::size_t>(world));
      std::int64_t acc = 0;
      for (int r = 0; r < world; ++r) {
        counts[static_cast<std::size_t>(r)] =
            r + 1 == world ? total - acc
                           : static_cast<std::int64_t>(
                                 std::floor(total * shares[static_cast<std::size_t>(r)]));
        acc += counts[static_cast<std::size_t>(r)];
      }
      const std::int64_t mine = counts[static_cast<std::size_t>(rank)];
      Buffer full = prof.random(total, 21 + static_cast<std::uint64_t>(rank));
      Buffer part = prof.random(std::max(even, mine), 31);
      struct Case {
        const char* kind;
        bool uneven;
        std::function<void(backend::Stream&)> call;
      };
      std::vector<Case> cases = {
          {"all_gather", false,
           [&](backend::Stream& s) { comm->all_gather(s, part.slice(0, even), full.ref()); }},
          {"reduce_scatter", false,
           [&](backend::Stream& s) {
             comm->reduce_scatter(s, full.ref(), part.slice(0, even), backend::ReduceOp::Sum);
           }},
          {"all_gather", true,
           [&](backend::Stream& s) {
             comm->all_gather_v(s, part.slice(0, mine), full.ref(), counts);
           }},
          {"reduce_scatter", true,
           [&](backend::Stream& s) {
             comm->reduce_scatter_v(s, full.ref(), part.slice(0, mine), counts,
                                    backend::ReduceOp::Sum);
           }},
      };
      for (const Case& c : cases)
        for (bool under_load : {false, true}) {
          double sec = under_load ? prof.time_collective_under_load(c.call, load)
                                  : prof.time_collective(c.call);
          const double tb = static_cast<double>(total) * 4;
          const double algbw = tb / sec;
          const double busbw = algbw * (world - 1.0) / world;
          Json point = {{"collective", c.kind},
                        {"ranks", ranks},
                        {"bytes", tb},
                        {"time_us", sec * 1e6},
                        {"algbw_GBps", algbw / 1e9},
                        {"busbw_GBps", busbw / 1e9},
                        {"uneven", c.uneven}};
          if (c.uneven) point["shares"] = shares;
          if (under_load) point["under_compute"] = true;
          collectives.push_back(point);
          if (!c.uneven) {
            Json sp = point;
            sp.erase("uneven");
            sweep_results.push_back(sp);
          }
        }
      say("collectives at " + format_bytes(static_cast<double>(total) * 4) + " done");
    }
  } else if (world == 1 && lead) {
    std::cerr << "profile: single process: no collective sweep (run under mpirun -np N for one)"
              << std::endl;
  }

  if (!lead) return;
  Json row = {
      {"model", spec.name}, {"gpu", dspec.name}, {"seq", a.seq}, {"dtype", to_string(*dtype)}};
  Json lj = Json::array(), ej = Json::array(), hj = Json::array();
  for (const auto& p : layer_pts) lj.push_back(point_json(p, true, a.repeats));
  for (const auto& p : emb_pts) ej.push_back(point_json(p, false, a.repeats));
  for (const auto& p : head_pts) hj.push_back(point_json(p, false, a.repeats));
  row["layer"] = lj;
  row["embedding"] = ej;
  row["head"] = hj;
  const std::string source = "measured by cephalo profile on " + device->name() + ", " +
                             std::to_string(world) + " rank(s), " + a.statistic + " of " +
                             std::to_string(a.repeats) + " after " + std::to_string(a.warmup) +
                             " warm-up";
  Json record = {
      {"format", "cephalo-profile"}, {"version", 1},           {"tool", "cephalo profile 0.1.0"},
      {"date", iso_now()},           {"host", host_name()},    {"source", source},
      {"rows", Json::array({row})},  {"optimizer", optimizer}, {"copies", copies}};
  if (!collectives.empty()) record["collectives"] = collectives;

  if (!a.output.empty()) {
    write_file_atomically(a.output, record.dump(2) + "\n");
    std::cerr << "profile: wrote " << a.output << std::endl;
  }
  if (!sweep_results.empty()) {
    std::string sweep_file = a.sweep_output.empty() ? sweep_file_of(a.output) : a.sweep_output;
    if (!sweep_file.empty()) {
      Json sweep = {{"format", "cephalo-collective-sweep"},
                    {"version", 1},
                    {"tool", "cephalo profile 0.1.0"},
                    {"date", iso_now()},
                    {"device", device->name()},
                    {"results", sweep_results}};
      write_file_atomically(sweep_file, sweep.dump(2) + "\n");
      std::cerr << "profile: wrote " << sweep_file << std::endl;
    }
  }
  if (a.json) {
    std::cout << record.dump(2) << "\n";
    return;
  }
  std::cout << "profile of " << spec.name << " at sequence " << a.seq << " on " << device->name()
            << " (recorded as " << dspec.name << ")\n\n";
  TextTable t({"micro-batch", "layer F ms", "layer RC ms", "layer B ms", "emb F ms", "emb B ms",
               "head F ms", "head F+B ms"});
  for (std::size_t i = 0; i < layer_pts.size(); ++i)
    t.add_row({std::to_string(layer_pts[i].micro_batch), fixed(layer_pts[i].forward.value_ms, 3),
               fixed(layer_pts[i].recompute.value_ms, 3), fixed(layer_pts[i].backward.value_ms, 3),
               fixed(emb_pts[i].forward.value_ms, 3), fixed(emb_pts[i].backward.value_ms, 3),
               fixed(head_pts[i].forward.value_ms, 3), fixed(head_pts[i].backward.value_ms, 3)});
  std::cout << t.render() << "\n";
  TextTable o({"optimizer parameters", "ms"});
  for (const Json& p : optimizer)
    o.add_row({fixed(p["parameters"].get<double>(), 0), fixed(p["ms"].get<double>(), 3)});
  std::cout << o.render();
  if (!collectives.empty()) {
    TextTable c({"collective", "uneven", "under compute", "bytes", "time", "busbw GB/s"});
    for (const Json& p : collectives)
      c.add_row({p["collective"].get<std::string>(), p["uneven"].get<bool>() ? "yes" : "no",
                 p.value("under_compute", false) ? "yes" : "no",
                 format_bytes(p["bytes"].get<double>()),
                 format_seconds(p["time_us"].get<double>() * 1e-6),
                 fixed(p["busbw_GBps"].get<double>(), 2)});
    std::cout << "\n" << c.render();
  }
}

// `cephalo profile validate`: how well the calibrated compute model predicts profiles it was
// not fitted to (leave-one-GPU-out and leave-one-model-out over the shipped profiles plus any
// given profile files). The numbers come from costmodels::validate_compute_models; this is its
// command-line face, used by notebooks/costmodel_validation.ipynb.
struct ValidateArgs {
  std::vector<std::string> profiles;
  bool json = false;
};

Json group_json(const std::vector<costmodels::GroupError>& groups) {
  Json out = Json::array();
  for (const auto& g : groups)
    out.push_back({{"gpu", g.name},
                   {"rows", g.rows},
                   {"mape_pct", g.mape},
                   {"median_ape_pct", g.median_ape}});
  return out;
}

void run_validate(const ValidateArgs& a) {
  costmodels::ProfileTables tables = costmodels::ProfileTables::builtin();
  for (const auto& f : a.profiles) tables.merge(costmodels::ProfileTables::load(f));
  const costmodels::ValidationReport rep = costmodels::validate_compute_models(tables);
  Json rows = Json::array();
  for (const auto& r : rep.logo_rows)
    rows.push_back({{"model", r.model},
                    {"gpu", r.gpu},
                    {"seq", r.seq},
                    {"dtype", to_string(r.dtype)},
                    {"ape_pct", r.ape}});
  Json inconsistent = Json::array();
  for (const auto& i : rep.inconsistent)
    inconsistent.push_back({{"model", i.row->file_model},
                            {"gpu", i.row->file_gpu},
                            {"seq", i.row->seq},
                            {"dtype", to_string(i.row->dtype)},
                            {"reason", i.reason}});
  Json record = {{"leave_one_gpu_out", group_json(rep.leave_one_gpu_out)},
                 {"logo_median_over_gpus_pct", rep.logo_median_over_gpus},
                 {"logo_overall_pct", rep.logo_overall},
                 {"leave_one_model_out", group_json(rep.leave_one_model_out)},
                 {"lomo_median_over_gpus_pct", rep.lomo_median_over_gpus},
                 {"lomo_overall_pct", rep.lomo_overall},
                 {"roofline_overall_pct", rep.roofline_overall},
                 {"logo_rows", rows},
                 {"inconsistent_rows", inconsistent}};
  if (a.json) {
    std::cout << record.dump(2) << "\n";
    return;
  }
  TextTable t({"held-out GPU", "rows", "LOGO MAPE %", "LOGO median %"});
  for (const auto& g : rep.leave_one_gpu_out)
    t.add_row({g.name, std::to_string(g.rows), fixed(g.mape, 1), fixed(g.median_ape, 1)});
  std::cout << "leave-one-GPU-out (calibrated model fitted without the GPU)\n"
            << t.render() << "\nmedian over GPUs " << fixed(rep.logo_median_over_gpus, 1)
            << " % (target 15 %), "
            << "all rows " << fixed(rep.logo_overall, 1) << " %; leave-one-model-out median "
            << fixed(rep.lomo_median_over_gpus, 1) << " % (target 8 %); uncalibrated roofline "
            << fixed(rep.roofline_overall, 1) << " %; " << rep.inconsistent.size()
            << " inconsistent rows left out\n";
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand(
      "profile", "Measure per-layer compute, optimizer, copies and (under mpirun) collectives");
  cmd->add_option("--device", a->device, "cpu or cuda")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--model", a->model, "catalog model (required to measure)")
      ->check(catalog_model());
  cmd->add_option("--seq", a->seq, "sequence length (required to measure)")
      ->check(integer_in(1, 1 << 22));
  cmd->add_option("--micro-batches", a->micro_batches, "sizes: 1..K, K or a list 1,2,4")
      ->capture_default_str();
  cmd->add_option("--as", a->as_gpu,
                  "catalog device the rows are recorded under (default: cpu for --device cpu)");
  cmd->add_option("--dtype", a->dtype, "compute type of the layer timings: fp32, tf32, bf16, fp16")
      ->capture_default_str()
      ->check(dtype_name());
  cmd->add_option("--threads", a->threads, "CPU threads per rank")
      ->capture_default_str()
      ->check(integer_in(1, 1024));
  cmd->add_option("--repeats", a->repeats, "timed calls per point (median)")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  cmd->add_option("--warmup", a->warmup, "untimed calls before each point")
      ->capture_default_str()
      ->check(integer_in(0, 100000));
  cmd->add_option("--statistic", a->statistic, "of the repeats: median or min")
      ->capture_default_str()
      ->check(one_of({"median", "min"}));
  cmd->add_option("--max-bytes", a->max_collective_bytes, "largest collective and copy size")
      ->capture_default_str();
  cmd->add_flag("--no-collectives", a->no_collectives, "skip the collective sweep under mpirun");
  cmd->add_option("-o,--output", a->output, "write the calibration file (cephalo-profile)");
  cmd->add_option("--sweep-out", a->sweep_output,
                  "collective sweep file (default: <output stem>.sweep.json under mpirun)");
  cmd->add_flag("--json", a->json, "print the calibration record as JSON");
  auto v = std::make_shared<ValidateArgs>();
  auto* val = cmd->add_subcommand(
      "validate", "Leave-one-GPU-out / leave-one-model-out errors of the calibrated model");
  val->add_option("--profiles", v->profiles, "extra profile files (either format)");
  val->add_flag("--json", v->json, "print the record as JSON");
  val->callback([v] { run_validate(*v); });
  cmd->require_subcommand(0, 1);
  cmd->callback([a, cmd, val] {
    if (cmd->got_subcommand(val)) return;
    if (a->model.empty()) throw CLI::RequiredError("--model");
    if (a->seq == 0) throw CLI::RequiredError("--seq");
    run_profile(*a);
  });
}

}  // namespace cephalo::cli

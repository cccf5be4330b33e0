// mpi_split_check: run under `mpirun -np N`. The pieces of a split model the backend builds on,
// across real processes:
//
//   tp        the tensor-parallel GPT math (gpt.hpp) with T = N: on every rank, a layer, the
//             embedding and the head (tied and untied) forward and backward in TP rank r's
//             slice, against the single-rank model computed on the same rank from the same
//             inputs: outputs and input gradients (replicated) and every parameter gradient
//             (the slice of the single-rank gradient) within 1e-5 of the tensor's largest
//             value; the number of TP collectives each op issued; initial values = the slice of
//             the single-rank ones. Prints the worst relative error.
//   p2p       point-to-point send / recv on the send and receive streams (N even): every rank
//             sends first, three messages of 1-4 MB to its partner (larger than MPI's eager
//             limit, so a send waits for its receive), then receives; again on a two-rank
//             sub-communicator per pair (split), with bf16 data; a send to itself or to a rank
//             outside the communicator is refused naming the peer.
//   short     (N = 2) rank 1 receives 10 elements where rank 0 sends 8: refused naming both.
//   truncate  (N = 2) rank 1 receives 8 where rank 0 sends 10: MPI's own error, with the call.
//
// `--corrupt` (tp, p2p) alters one compared value on rank 1, so the test sees a mismatch
// reported. Exit 0 when every check holds on every rank, 1 on a mismatch, 2 on a failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "half.hpp"

using namespace cephalo::backend;

namespace {

std::vector<float> randn(std::size_t n, float scale, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    // Sum of four uniforms: roughly normal, deterministic on every rank.
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      z += 0x9e3779b97f4a7c15ull;
      std::uint64_t y = z;
      y = (y ^ (y >> 30)) * 0xbf58476d1ce4e5b9ull;
      y = (y ^ (y >> 27)) * 0x94d049bb133111ebull;
      y ^= y >> 31;
      s += static_cast<float>(y >> 40) / static_cast<float>(1ull << 24) - 0.5f;
    }
    x = scale * s * 1.7f;
  }
  return v;
}

class Checks {
 public:
  Checks(int rank, bool corrupt) : rank_(rank), corrupt_(corrupt && rank == 1) {}
  // |got - want| <= 1e-5 * max|want| over the tensor (the oracle's convention: an element near
  // zero is judged at its tensor's scale).
  void close(const std::string& what, std::vector<float> got, const std::vector<float>& want) {
    ++checks_;
    if (corrupt_ && !got.empty()) {
      got[got.size() / 2] += 1.0f;
      corrupt_ = false;
    }
    if (got.size() != want.size()) {
      fail(what + ": " + std::to_string(got.size()) + " values, expected " +
           std::to_string(want.size()));
      return;
    }
    double scale = 0, worst = 0;
    for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
    std::size_t at = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
      if (!(e <= worst) || std::isnan(got[i])) {
        worst = std::isnan(got[i]) ? INFINITY : e;
        at = i;
      }
    }
    const double rel = scale > 0 ? worst / scale : worst;
    worst_ = std::max(worst_, rel);
    if (!(rel <= 1e-5))
      fail(what + ": element " + std::to_string(at) + " is " + std::to_string(got[at]) +
           ", single-rank " + std::to_string(want[at]) + " (relative error " + std::to_string(rel) +
           ")");
  }
  void equal(const std::string& what, std::int64_t got, std::int64_t want) {
    ++checks_;
    if (got != want) fail(what + ": " + std::to_string(got) + ", expected " + std::to_string(want));
  }
  void fail(const std::string& message) {
    ++bad_;
    std::printf("rank %d: mismatch: %s\n", rank_, message.c_str());
  }
  int checks() const { return checks_; }
  int bad() const { return bad_; }
  double worst() const { return worst_; }

 private:
  int rank_;
  bool corrupt_;
  int checks_ = 0, bad_ = 0;
  double worst_ = 0;
};

Buffer upload(Device& dev, const std::vector<float>& v) {
  Buffer b = dev.allocate(std::max<std::size_t>(v.size(), 1), ElemType::F32);
  if (!v.empty()) dev.upload(b.ref(), v.data(), v.size() * 4);
  return b;
}
Buffer upload_i32(Device& dev, const std::vector<std::int32_t>& v) {
  Buffer b = dev.allocate(v.size(), ElemType::I32);
  dev.upload(b.ref(), v.data(), v.size() * 4);
  return b;
}
std::vector<float> download(Device& dev, const Buffer& b, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  if (n) dev.download(v.data(), b.ref(), v.size() * 4);
  return v;
}
Buffer zeros(Device& dev, std::int64_t n) {
  Buffer b = dev.allocate(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), ElemType::F32);
  dev.fill(dev.stream(StreamKind::Compute), b.ref(), 0.0f);
  return b;
}

// Full (single-rank) parameters of a unit: the initial values plus noise, so norms and biases
// are not at their trivial values.
std::vector<float> full_params(const GptModel& full, int unit, std::uint64_t seed) {
  auto p = full.initial_unit(unit);
  auto noise = randn(p.size(), 0.05f, seed);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

void check_tp(Device& dev, Communicator& comm, GptConfig cfg, Checks& checks) {
  const int T = comm.size(), t = comm.rank();
  const GptModel full(cfg);
  const GptModel tp(cfg, TensorParallel{T, t, &comm});
  const std::string tag = std::string(cfg.tied_head ? "tied" : "untied") +
                          " T=" + std::to_string(T) + " rank " + std::to_string(t) + ": ";
  const auto& c = full.config();
  const std::int64_t B = 2, rows = B * c.seq, C = c.hidden;
  for (int u = 0; u < full.num_units(); ++u) {
    checks.close(tag + "initial values of unit " + std::to_string(u), tp.initial_unit(u),
                 tp.slice_of(u, full.initial_unit(u)));
    checks.equal(
        tag + "slice runs of unit " + std::to_string(u) + " cover the slice",
        [&] {
          std::int64_t n = 0;
          for (const auto& r : tp.slice_runs(u)) n += r.count;
          return n;
        }(),
        tp.unit_numel(u));
  }
  std::vector<std::int32_t> tok(static_cast<std::size_t>(rows)), tgt(tok.size());
  for (std::size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<std::int32_t>((i * 97 + 13) % static_cast<std::size_t>(c.vocab));
    tgt[i] = static_cast<std::int32_t>((i * 61 + 250) % static_cast<std::size_t>(c.vocab));
  }
  Buffer tokens = upload_i32(dev, tok), targets = upload_i32(dev, tgt);
  auto calls = [&](const char* what, std::size_t want) {
    auto taken = tp.take_tp_calls();
    checks.equal(tag + what + " TP collectives", static_cast<std::int64_t>(taken.size()),
                 static_cast<std::int64_t>(want));
    for (auto& call : taken)
      if (!(call.end->seconds_since(*call.start) >= 0))
        checks.fail(tag + what + ": a TP call ends before it starts");
  };

  {  // embedding
    const auto pf = full_params(full, 0, 11);
    const auto pt = tp.slice_of(0, pf);
    Buffer bf = upload(dev, pf), bt = upload(dev, pt);
    Buffer yf = zeros(dev, rows * C), yt = zeros(dev, rows * C);
    full.embedding_forward(dev, bf.ref(), tokens.ref(), yf.ref(), rows);
    tp.embedding_forward(dev, bt.ref(), tokens.ref(), yt.ref(), rows);
    calls("embedding forward", T > 1 ? 1 : 0);
    checks.close(tag + "embedding output", download(dev, yt, rows * C),
                 download(dev, yf, rows * C));
    auto dy = randn(static_cast<std::size_t>(rows * C), 1.0f, 12);
    Buffer dyb = upload(dev, dy);
    Buffer gf = zeros(dev, full.unit_numel(0)), gt = zeros(dev, tp.unit_numel(0));
    full.embedding_backward(dev, gf.ref(), tokens.ref(), dyb.ref(), rows);
    tp.embedding_backward(dev, gt.ref(), tokens.ref(), dyb.ref(), rows);
    calls("embedding backward", 0);
    checks.close(tag + "embedding gradient", download(dev, gt, tp.unit_numel(0)),
                 tp.slice_of(0, download(dev, gf, full.unit_numel(0))));
  }
  {  // one layer
    const auto pf = full_params(full, 1, 21);
    Buffer bf = upload(dev, pf), bt = upload(dev, tp.slice_of(1, pf));
    auto x = randn(static_cast<std::size_t>(rows * C), 1.0f, 22);
    Buffer xb = upload(dev, x), yf = zeros(dev, rows * C), yt = zeros(dev, rows * C);
    LayerActivations af, at;
    full.layer_forward(dev, bf.ref(), xb.ref(), yf.ref(), af, rows);
    tp.layer_forward(dev, bt.ref(), xb.ref(), yt.ref(), at, rows);
    calls("layer forward", T > 1 ? 2 : 0);
    checks.close(tag + "layer output", download(dev, yt, rows * C), download(dev, yf, rows * C));
    auto dy = randn(static_cast<std::size_t>(rows * C), 1.0f, 23);
    Buffer dyb = upload(dev, dy), dxf = zeros(dev, rows * C), dxt = zeros(dev, rows * C);
    Buffer gf = zeros(dev, full.unit_numel(1)), gt = zeros(dev, tp.unit_numel(1));
    full.layer_backward(dev, bf.ref(), gf.ref(), xb.ref(), af, dyb.ref(), dxf.ref(), rows);
    tp.layer_backward(dev, bt.ref(), gt.ref(), xb.ref(), at, dyb.ref(), dxt.ref(), rows);
    calls("layer backward", T > 1 ? 2 : 0);
    checks.close(tag + "layer input gradient", download(dev, dxt, rows * C),
                 download(dev, dxf, rows * C));
    // Every named tensor apart, so a wrong slot cannot hide behind a larger one.
    const auto gfull = tp.slice_of(1, download(dev, gf, full.unit_numel(1)));
    const auto gtp = download(dev, gt, tp.unit_numel(1));
    for (const auto& slot : tp.unit_slots(1))
      checks.close(tag + "layer gradient " + slot.name,
                   {gtp.begin() + slot.offset, gtp.begin() + slot.offset + slot.numel},
                   {gfull.begin() + slot.offset, gfull.begin() + slot.offset + slot.numel});
  }
  {  // head (and, tied, the embedding's wte through it)
    const int hu = full.head_unit();
    const auto hf = full_params(full, hu, 31), ef = full_params(full, 0, 32);
    Buffer hfb = upload(dev, hf), efb = upload(dev, ef);
    Buffer htb = upload(dev, tp.slice_of(hu, hf)), etb = upload(dev, tp.slice_of(0, ef));
    auto x = randn(static_cast<std::size_t>(rows * C), 1.0f, 33);
    Buffer xb = upload(dev, x);
    const double lf = full.head_forward_backward(dev, hfb.ref(), efb.ref(), xb.ref(), targets.ref(),
                                                 rows, 0.0f, {}, {}, {});
    const double lt = tp.head_forward_backward(dev, htb.ref(), etb.ref(), xb.ref(), targets.ref(),
                                               rows, 0.0f, {}, {}, {});
    calls("head forward", T > 1 ? 3 : 0);
    checks.close(tag + "head loss", {static_cast<float>(lt)}, {static_cast<float>(lf)});
    Buffer dxf = zeros(dev, rows * C), dxt = zeros(dev, rows * C);
    Buffer ghf = zeros(dev, full.unit_numel(hu)), ght = zeros(dev, tp.unit_numel(hu));
    Buffer gef = zeros(dev, full.unit_numel(0)), get = zeros(dev, tp.unit_numel(0));
    const float scale = 1.0f / static_cast<float>(rows);
    full.head_forward_backward(dev, hfb.ref(), efb.ref(), xb.ref(), targets.ref(), rows, scale,
                               dxf.ref(), ghf.ref(), gef.ref());
    tp.head_forward_backward(dev, htb.ref(), etb.ref(), xb.ref(), targets.ref(), rows, scale,
                             dxt.ref(), ght.ref(), get.ref());
    calls("head forward + backward", T > 1 ? 4 : 0);
    checks.close(tag + "head input gradient", download(dev, dxt, rows * C),
                 download(dev, dxf, rows * C));
    checks.close(tag + "head gradient", download(dev, ght, tp.unit_numel(hu)),
                 tp.slice_of(hu, download(dev, ghf, full.unit_numel(hu))));
    checks.close(tag + "head's embedding gradient", download(dev, get, tp.unit_numel(0)),
                 tp.slice_of(0, download(dev, gef, full.unit_numel(0))));
  }
}

// Deterministic message `k` from `from` to `to`.
std::vector<float> message(int from, int to, int k, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(from * 1000 + to * 100 + k) + static_cast<float>(i % 977) * 0.5f;
  return v;
}

// Every rank sends its messages to `peer` first, then receives the peer's: with sends and
// receives on separate streams neither blocks the other, whatever the protocol.
void exchange(Device& dev, Communicator& comm, int peer, ElemType type, Checks& checks,
              const std::string& tag) {
  const std::size_t sizes[] = {1u << 20, (1u << 18) + 3, 1u << 19};  // 4 MB, 1 MB, 2 MB in fp32
  auto& send_stream = dev.stream(StreamKind::Send);
  auto& recv_stream = dev.stream(StreamKind::Recv);
  const std::size_t es = element_size(type);
  std::vector<Buffer> out, in;
  for (int k = 0; k < 3; ++k) {
    const auto v = message(comm.rank(), peer, k, sizes[k]);
    std::vector<std::uint8_t> bytes(v.size() * es);
    store_f32(v.data(), bytes.data(), type, v.size());
    out.push_back(dev.allocate(v.size(), type));
    dev.upload(out.back().ref(), bytes.data(), bytes.size());
    comm.send(send_stream, out.back().ref(), peer);
  }
  for (int k = 0; k < 3; ++k) {
    in.push_back(dev.allocate(sizes[k], type));
    comm.recv(recv_stream, in.back().ref(), peer);
  }
  recv_stream.synchronize();
  send_stream.synchronize();
  for (int k = 0; k < 3; ++k) {
    std::vector<std::uint8_t> bytes(sizes[k] * es);
    dev.download(bytes.data(), in[static_cast<std::size_t>(k)].ref(), bytes.size());
    std::vector<float> got(sizes[k]);
    load_f32(bytes.data(), type, got.data(), got.size());
    auto want = message(peer, comm.rank(), k, sizes[k]);
    for (float& w : want) w = round_to(w, type);
    checks.close(tag + " message " + std::to_string(k) + " from rank " + std::to_string(peer), got,
                 want);
  }
}

// A send or receive naming a peer that is not another rank of the communicator is refused
// before anything is enqueued.
void refused_peers(Device& dev, Communicator& comm, Checks& checks) {
  Buffer b = dev.allocate(4, ElemType::F32);
  for (int peer : {comm.rank(), comm.size(), -1}) {
    for (int recv = 0; recv < 2; ++recv) {
      try {
        if (recv)
          comm.recv(dev.stream(StreamKind::Recv), b.ref(), peer);
        else
          comm.send(dev.stream(StreamKind::Send), b.ref(), peer);
        checks.fail("a transfer with peer " + std::to_string(peer) + " was accepted");
      } catch (const cephalo::RuntimeFailure& e) {
        const std::string want = "peer " + std::to_string(peer) + " is not another rank of " +
                                 std::to_string(comm.size());
        checks.equal(std::string("refusal names the peer: ") + e.what(),
                     std::string(e.what()).find(want) != std::string::npos, 1);
      }
    }
  }
}

void check_p2p(Device& dev, Communicator& world, Checks& checks) {
  if (world.size() % 2 != 0) throw cephalo::RuntimeFailure("p2p needs an even number of ranks");
  const int r = world.rank();
  exchange(dev, world, r ^ 1, ElemType::F32, checks, "world fp32");
  // The executor's way: a two-rank communicator per pipeline pair (here ranks r and r ^ 1 with
  // the two pairs' colours), bf16 as the compute type moves it.
  auto pair = world.split(r / 2, r % 2);
  exchange(dev, *pair, 1 - pair->rank(), ElemType::BF16, checks, "pair bf16");
  refused_peers(dev, world, checks);
}

// Rank 0 sends `sent` elements, rank 1 receives `received`: the failure surfaces at the
// receive stream's synchronize, and the rank prints it.
void mismatched(Device& dev, Communicator& comm, std::int64_t sent, std::int64_t received) {
  if (comm.rank() == 0) {
    Buffer b = dev.allocate(static_cast<std::size_t>(sent), ElemType::F32);
    dev.fill(dev.stream(StreamKind::Compute), b.ref(), 1.0f);
    comm.send(dev.stream(StreamKind::Send), b.ref(), 1);
    dev.stream(StreamKind::Send).synchronize();
  } else if (comm.rank() == 1) {
    Buffer b = dev.allocate(static_cast<std::size_t>(received), ElemType::F32);
    comm.recv(dev.stream(StreamKind::Recv), b.ref(), 0);
    dev.stream(StreamKind::Recv).synchronize();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool corrupt = argc > 2 && std::string(argv[2]) == "--corrupt";
  try {
    MpiRuntime mpi(&argc, &argv);
    auto comm = make_mpi_communicator();
    auto dev = make_cpu_device({});
    Checks checks(comm->rank(), corrupt);
    try {
      if (mode == "tp") {
        GptConfig cfg;
        cfg.layers = 1;
        cfg.hidden = 32;
        cfg.heads = 4;
        cfg.ffn = 64;
        cfg.vocab = 251;  // not a multiple of 2 or 4: uneven vocabulary rows
        cfg.seq = 8;
        for (bool tied : {true, false}) {
          cfg.tied_head = tied;
          check_tp(*dev, *comm, cfg, checks);
        }
      } else if (mode == "p2p") {
        check_p2p(*dev, *comm, checks);
      } else if (mode == "short") {
        mismatched(*dev, *comm, 8, 10);
      } else if (mode == "truncate") {
        mismatched(*dev, *comm, 10, 8);
      } else {
        std::fprintf(stderr, "usage: mpi_split_check tp|p2p|short|truncate [--corrupt]\n");
        return 2;
      }
    } catch (const std::exception& e) {
      // The other ranks may be blocked in a transfer this rank will never join.
      std::fprintf(stderr, "mpi_split_check: rank %d: error: %s\n", comm->rank(), e.what());
      std::fflush(stderr);
      comm->abort(2);
    }
    double totals[2] = {static_cast<double>(checks.bad()), static_cast<double>(checks.checks())};
    comm->all_reduce_host(totals, 2, ReduceOp::Sum);
    double worst = checks.worst();
    comm->all_reduce_host(&worst, 1, ReduceOp::Max);
    if (comm->rank() == 0)
      std::printf(
          "mpi_split_check %s: %d checks on %d ranks, %d mismatches, worst relative "
          "error %.3g\n",
          mode.c_str(), static_cast<int>(totals[1]), comm->size(), static_cast<int>(totals[0]),
          worst);
    return totals[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_split_check: error: %s\n", e.what());
    return 2;
  }
}

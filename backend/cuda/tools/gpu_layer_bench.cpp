// gpu_layer_bench: the numbers scripts/gpu-check reports on a GPU.
//  1. cuBLAS bf16 GEMM peak on this device (8192^3, random data, median of timed runs);
//  2. one GPT-2.7B transformer layer (hidden 2560, 32 heads, ffn 10240, seq 2048) in bf16,
//     forward and backward, micro-batch 1..8: time, achieved TFLOP/s, and the layer's GEMMs
//     alone (per-op CUDA events) as a fraction of the measured peak;
//  3. full training steps of a ~1.3B GPT (24 layers, hidden 2048, 16 heads, vocab 49152,
//     untied head, seq 2048) on one GPU: layer-boundary checkpointing with recompute in
//     backward, bf16 compute, fp32 gradients, AdamW on fp32 master weights; MFU.
// Everything runs through backend::Device (the CUDA device the executor uses) plus the
// kernels it is built from. Exits non-zero (4) with the reason when no GPU is usable.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/gemm.hpp"
#include "cephalo/backend/cuda/kernels.hpp"
#include "cephalo/backend/cuda/memory.hpp"
#include "cephalo/core/error.hpp"

namespace {

using namespace cephalo;
using backend::Buffer;
using backend::Device;
using backend::ElemType;
using backend::StreamKind;
using backend::TensorRef;
using backend::Transpose;

constexpr ElemType kBf16 = ElemType::BF16;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Arch {
  int layers, hidden, heads, ffn, vocab, seq;
};

// Offsets of one layer's tensors inside its flat buffer (the layout of backend/gpt.hpp).
struct LayerSlots {
  std::int64_t ln1_g, ln1_b, w_qkv, b_qkv, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out,
      total;
  explicit LayerSlots(const Arch& a) {
    const std::int64_t C = a.hidden, F = a.ffn;
    std::int64_t o = 0;
    auto take = [&](std::int64_t n) {
      const std::int64_t at = o;
      o += n;
      return at;
    };
    ln1_g = take(C);
    ln1_b = take(C);
    w_qkv = take(C * 3 * C);
    b_qkv = take(3 * C);
    w_proj = take(C * C);
    b_proj = take(C);
    ln2_g = take(C);
    ln2_b = take(C);
    w_fc = take(C * F);
    b_fc = take(F);
    w_out = take(F * C);
    b_out = take(C);
    total = o;
  }
};

// Per-op timing is optional: when `timer` is set every op is bracketed by events and tagged
// "gemm" or "other" so the GEMM share of a layer can be measured.
struct Timed {
  cuda::OpTimer* timer = nullptr;
  cudaStream_t stream = nullptr;
  void run(const char* kind, const std::function<void()>& f) const {
    if (timer) timer->begin(kind, stream);
    f();
    if (timer) timer->end(stream);
  }
};

// Activations of one layer for N = B * seq rows (reused across layers: recompute).
struct Acts {
  Buffer ln1, ln1_m, ln1_r, qkv, att, lse, mid, ln2, ln2_m, ln2_r, fc, act;
  Buffer d_act, d_c1, d_c2, d_qkv;  // backward scratch
  Acts(Device& d, const Arch& a, std::int64_t B) {
    const std::int64_t N = B * a.seq, C = a.hidden, F = a.ffn;
    ln1 = d.allocate(N * C, kBf16);
    ln1_m = d.allocate(N, ElemType::F32);
    ln1_r = d.allocate(N, ElemType::F32);
    qkv = d.allocate(N * 3 * C, kBf16);
    att = d.allocate(N * C, kBf16);
    lse = d.allocate(B * a.heads * a.seq, ElemType::F32);
    mid = d.allocate(N * C, kBf16);
    ln2 = d.allocate(N * C, kBf16);
    ln2_m = d.allocate(N, ElemType::F32);
    ln2_r = d.allocate(N, ElemType::F32);
    fc = d.allocate(N * F, kBf16);
    act = d.allocate(N * F, kBf16);
    d_act = d.allocate(N * F, kBf16);
    d_c1 = d.allocate(N * C, kBf16);
    d_c2 = d.allocate(N * C, kBf16);
    d_qkv = d.allocate(N * 3 * C, kBf16);
  }
};

class GptLayer {
 public:
  GptLayer(Device& d, const Arch& a) : d_(d), a_(a), s_(a) {}

  // x -> y; fills `acts`.
  void forward(TensorRef p, TensorRef x, TensorRef y, Acts& t, std::int64_t B,
               const Timed& tm) const {
    auto& s = d_.stream(StreamKind::Compute);
    const std::int64_t N = B * a_.seq, C = a_.hidden, F = a_.ffn;
    tm.run("other", [&] {
      d_.layer_norm_forward(s, x, sl(p, s_.ln1_g, C), sl(p, s_.ln1_b, C), t.ln1.ref(),
                            t.ln1_m.ref(), t.ln1_r.ref(), N, C, 1e-5f);
    });
    linear(p, s_.w_qkv, s_.b_qkv, t.ln1.ref(), t.qkv.ref(), N, C, 3 * C, tm);
    tm.run("attention", [&] {
      d_.attention_forward(s, {B, a_.seq, a_.heads, C / a_.heads}, t.qkv.ref(), t.att.ref(),
                           t.lse.ref());
    });
    linear(p, s_.w_proj, s_.b_proj, t.att.ref(), t.mid.ref(), N, C, C, tm);
    tm.run("other", [&] { d_.axpy(s, 1.0f, x, t.mid.ref()); });  // mid = x + proj
    tm.run("other", [&] {
      d_.layer_norm_forward(s, t.mid.ref(), sl(p, s_.ln2_g, C), sl(p, s_.ln2_b, C), t.ln2.ref(),
                            t.ln2_m.ref(), t.ln2_r.ref(), N, C, 1e-5f);
    });
    linear(p, s_.w_fc, s_.b_fc, t.ln2.ref(), t.fc.ref(), N, C, F, tm);
    tm.run("other", [&] { d_.gelu_forward(s, t.fc.ref(), t.act.ref()); });
    linear(p, s_.w_out, s_.b_out, t.act.ref(), y, N, F, C, tm);
    tm.run("other", [&] { d_.axpy(s, 1.0f, t.mid.ref(), y); });  // y = mid + mlp
  }

  // dy -> dx (dx may not alias dy); weight gradients (fp32) accumulated into g.
  void backward(TensorRef p, TensorRef g, TensorRef x, Acts& t, TensorRef dy, TensorRef dx,
                std::int64_t B, const Timed& tm) const {
    auto& s = d_.stream(StreamKind::Compute);
    const std::int64_t N = B * a_.seq, C = a_.hidden, F = a_.ffn;
    // MLP out: dact = dy W_out^T
    linear_backward(p, g, s_.w_out, s_.b_out, t.act.ref(), dy, t.d_act.ref(), N, F, C, tm);
    tm.run("other", [&] { d_.gelu_backward(s, t.fc.ref(), t.d_act.ref(), t.d_act.ref()); });
    linear_backward(p, g, s_.w_fc, s_.b_fc, t.ln2.ref(), t.d_act.ref(), t.d_c1.ref(), N, C, F, tm);
    // dmid = LN2'(dln2) + dy
    tm.run("other", [&] {
      d_.layer_norm_backward(s, t.mid.ref(), sl(p, s_.ln2_g, C), t.ln2_m.ref(), t.ln2_r.ref(),
                             t.d_c1.ref(), t.d_c2.ref(), sl(g, s_.ln2_g, C), sl(g, s_.ln2_b, C), N,
                             C);
      d_.axpy(s, 1.0f, dy, t.d_c2.ref());
    });
    linear_backward(p, g, s_.w_proj, s_.b_proj, t.att.ref(), t.d_c2.ref(), t.d_c1.ref(), N, C, C,
                    tm);
    tm.run("attention", [&] {
      d_.attention_backward(s, {B, a_.seq, a_.heads, C / a_.heads}, t.qkv.ref(), t.att.ref(),
                            t.lse.ref(), t.d_c1.ref(), t.d_qkv.ref());
    });
    linear_backward(p, g, s_.w_qkv, s_.b_qkv, t.ln1.ref(), t.d_qkv.ref(), t.d_c1.ref(), N, C, 3 * C,
                    tm);
    tm.run("other", [&] {
      d_.layer_norm_backward(s, x, sl(p, s_.ln1_g, C), t.ln1_m.ref(), t.ln1_r.ref(), t.d_c1.ref(),
                             dx, sl(g, s_.ln1_g, C), sl(g, s_.ln1_b, C), N, C);
      d_.axpy(s, 1.0f, t.d_c2.ref(), dx);
    });
  }

  // Matmul FLOPs (forward) and attention FLOPs (forward, full T x T as computed).
  double gemm_flops_fwd(std::int64_t B) const {
    const double N = double(B) * a_.seq, C = a_.hidden, F = a_.ffn;
    return 2.0 * N * (3 * C * C + C * C + 2 * C * F);
  }
  double attention_flops_fwd(std::int64_t B) const {
    return 4.0 * double(B) * a_.seq * double(a_.seq) * a_.hidden;
  }
  const LayerSlots& slots() const { return s_; }

 private:
  static TensorRef sl(TensorRef t, std::int64_t off, std::int64_t n) { return t.slice(off, n); }
  void linear(TensorRef p, std::int64_t w, std::int64_t b, TensorRef x, TensorRef y, std::int64_t N,
              std::int64_t in, std::int64_t out, const Timed& tm) const {
    auto& s = d_.stream(StreamKind::Compute);
    tm.run("gemm", [&] {
      d_.gemm(s, Transpose::No, Transpose::No, N, out, in, 1.0f, x, sl(p, w, in * out), 0.0f, y);
    });
    tm.run("other", [&] { d_.add_bias(s, y, sl(p, b, out), N, out); });
  }
  void linear_backward(TensorRef p, TensorRef g, std::int64_t w, std::int64_t b, TensorRef x,
                       TensorRef dy, TensorRef dx, std::int64_t N, std::int64_t in,
                       std::int64_t out, const Timed& tm) const {
    auto& s = d_.stream(StreamKind::Compute);
    tm.run("gemm", [&] {  // dW[in, out] += x^T dy  (fp32 accumulate)
      d_.gemm(s, Transpose::Yes, Transpose::No, in, out, N, 1.0f, x, dy, 1.0f, sl(g, w, in * out));
    });
    tm.run("other", [&] { d_.bias_backward(s, dy, sl(g, b, out), N, out); });
    tm.run("gemm", [&] {  // dx = dy W^T
      d_.gemm(s, Transpose::No, Transpose::Yes, N, in, out, 1.0f, dy, sl(p, w, in * out), 0.0f, dx);
    });
  }

  Device& d_;
  Arch a_;
  LayerSlots s_;
};

double datasheet_bf16_tflops(const std::string& name) {
  // Dense bf16 tensor-core peaks from vendor datasheets (SXM parts); 0 when unknown.
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return 989.4;
  if (name.find("A100") != std::string::npos) return 312.0;
  if (name.find("L4") != std::string::npos) return 121.0;
  if (name.find("A6000") != std::string::npos) return 154.8;
  return 0.0;
}

// ---- 1. cuBLAS peak -------------------------------------------------------------------------
double measure_gemm_peak(Device& d, int n, int reps) {
  auto& s = d.stream(StreamKind::Compute);
  const cudaStream_t st = cuda::native_stream(s);
  // Two operand sets rotate so repeated runs do not sit in L2 (METHOD.md).
  std::vector<Buffer> bufs;
  for (int i = 0; i < 6; ++i) bufs.push_back(d.allocate(std::size_t(n) * n, kBf16));
  for (int i = 0; i < 6; ++i)
    cuda::fill_uniform(bufs[i].ref().slice(0, std::int64_t(n) * n), 100 + i, -1.0f, 1.0f, st);
  auto a = d.create_event(), b = d.create_event();
  std::vector<double> times;
  for (int r = 0; r < reps + 3; ++r) {
    const int k = (r % 2) * 3;
    a->record(s);
    d.gemm(s, Transpose::No, Transpose::No, n, n, n, 1.0f, bufs[k].ref(), bufs[k + 1].ref(), 0.0f,
           bufs[k + 2].ref());
    b->record(s);
    b->synchronize();
    if (r >= 3) times.push_back(b->seconds_since(*a));
  }
  return 2.0 * n * double(n) * n / median(times) / 1e12;
}

struct LayerRow {
  int B;
  double fwd_ms, bwd_ms, fwd_tflops, bwd_tflops, gemm_tflops, gemm_share;
};

// ---- 2. one GPT-2.7B layer ------------------------------------------------------------------
LayerRow bench_layer(Device& d, const Arch& a, int B, int reps) {
  GptLayer layer(d, a);
  auto& s = d.stream(StreamKind::Compute);
  const cudaStream_t st = cuda::native_stream(s);
  const std::int64_t N = std::int64_t(B) * a.seq, C = a.hidden;
  auto params = d.allocate(layer.slots().total, kBf16);
  auto grads = d.allocate(layer.slots().total, ElemType::F32);
  cuda::fill_uniform(params.ref().slice(0, layer.slots().total), 7, -0.02f, 0.02f, st);
  d.fill(s, grads.ref(), 0.0f);
  auto x = d.allocate(N * C, kBf16), y = d.allocate(N * C, kBf16), dy = d.allocate(N * C, kBf16),
       dx = d.allocate(N * C, kBf16);
  cuda::fill_uniform(x.ref().slice(0, N * C), 11, -1.0f, 1.0f, st);
  cuda::fill_uniform(dy.ref().slice(0, N * C), 12, -1e-3f, 1e-3f, st);
  Acts acts(d, a, B);
  auto e0 = d.create_event(), e1 = d.create_event(), e2 = d.create_event();
  std::vector<double> tf, tb;
  const Timed plain;
  for (int r = 0; r < reps + 2; ++r) {
    e0->record(s);
    layer.forward(params.ref(), x.ref(), y.ref(), acts, B, plain);
    e1->record(s);
    layer.backward(params.ref(), grads.ref(), x.ref(), acts, dy.ref(), dx.ref(), B, plain);
    e2->record(s);
    e2->synchronize();
    if (r >= 2) {
      tf.push_back(e1->seconds_since(*e0));
      tb.push_back(e2->seconds_since(*e1));
    }
  }
  // One more pass with per-op events: GEMM time alone.
  cuda::OpTimer timer;
  const Timed timed{&timer, st};
  layer.forward(params.ref(), x.ref(), y.ref(), acts, B, timed);
  layer.backward(params.ref(), grads.ref(), x.ref(), acts, dy.ref(), dx.ref(), B, timed);
  double gemm_s = 0, all_s = 0;
  for (const auto& rec : timer.collect()) {
    all_s += rec.milliseconds * 1e-3;
    if (rec.op == "gemm") gemm_s += rec.milliseconds * 1e-3;
  }
  d.synchronize();
  float probe = 0;
  d.download(&probe, grads.ref(), 4);
  if (!std::isfinite(probe)) throw RuntimeFailure("layer bench: non-finite gradient");
  LayerRow row{};
  row.B = B;
  row.fwd_ms = median(tf) * 1e3;
  row.bwd_ms = median(tb) * 1e3;
  const double ff = layer.gemm_flops_fwd(B) + layer.attention_flops_fwd(B);
  row.fwd_tflops = ff / median(tf) / 1e12;
  row.bwd_tflops = 2 * ff / median(tb) / 1e12;
  row.gemm_tflops = 3 * layer.gemm_flops_fwd(B) / gemm_s / 1e12;
  row.gemm_share = gemm_s / all_s;
  return row;
}

// ---- 3. full training steps of a ~1.3B GPT --------------------------------------------------
struct StepResult {
  double params, step_s, tokens_per_s, model_tflops, loss, peak_gib;
};

StepResult bench_steps(Device& d, const Arch& a, int B, int steps) {
  GptLayer layer(d, a);
  auto& s = d.stream(StreamKind::Compute);
  const cudaStream_t st = cuda::native_stream(s);
  const std::int64_t N = std::int64_t(B) * a.seq, C = a.hidden, V = a.vocab, L = a.layers;
  // Flat parameters: [wte V*C | wpe T*C | layers | lnf g,b | head V*C].
  const std::int64_t per_layer = layer.slots().total;
  const std::int64_t o_wte = 0, o_wpe = V * C, o_layers = o_wpe + std::int64_t(a.seq) * C,
                     o_lnf = o_layers + L * per_layer, o_head = o_lnf + 2 * C, P = o_head + V * C;
  d.reset_peak();
  auto master = d.allocate(P, ElemType::F32), m = d.allocate(P, ElemType::F32),
       v = d.allocate(P, ElemType::F32), grads = d.allocate(P, ElemType::F32),
       params = d.allocate(P, kBf16);
  cuda::fill_uniform(master.ref().slice(0, P), 21, -0.03f, 0.03f, st);
  // Norm gains start at 1 (as GPT-2), so activations keep their scale through the stack.
  auto ones = [&](std::int64_t off) { d.fill(s, master.slice(off, C), 1.0f); };
  for (std::int64_t l = 0; l < L; ++l) {
    ones(o_layers + l * per_layer + layer.slots().ln1_g);
    ones(o_layers + l * per_layer + layer.slots().ln2_g);
  }
  ones(o_lnf);
  d.fill(s, m.ref(), 0.0f);
  d.fill(s, v.ref(), 0.0f);
  d.cast(s, master.ref(), params.ref());
  std::vector<std::int32_t> tok(N + 1);
  std::uint64_t z = 12345;
  for (auto& t : tok) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<std::int32_t>((z >> 33) % std::uint64_t(V));
  }
  auto tokens = d.allocate(N, ElemType::I32), targets = d.allocate(N, ElemType::I32);
  d.upload(tokens.ref(), tok.data(), N * 4);
  d.upload(targets.ref(), tok.data() + 1, N * 4);
  std::vector<Buffer> xs;
  for (std::int64_t l = 0; l <= L; ++l) xs.push_back(d.allocate(N * C, kBf16));
  Acts acts(d, a, B);
  auto lnf = d.allocate(N * C, kBf16), lnf_m = d.allocate(N, ElemType::F32),
       lnf_r = d.allocate(N, ElemType::F32), logits = d.allocate(N * V, kBf16),
       losses = d.allocate(N, ElemType::F32), lse = d.allocate(N, ElemType::F32),
       dlnf = d.allocate(N * C, kBf16), dxa = d.allocate(N * C, kBf16),
       dxb = d.allocate(N * C, kBf16), loss = d.allocate(1, ElemType::F32);
  const Timed plain;
  auto pl = [&](std::int64_t l) { return params.slice(o_layers + l * per_layer, per_layer); };
  auto gl = [&](std::int64_t l) { return grads.slice(o_layers + l * per_layer, per_layer); };
  auto e0 = d.create_event(), e1 = d.create_event();
  std::vector<double> times;
  float last_loss = NAN;
  for (int step = 1; step <= steps + 1; ++step) {
    e0->record(s);
    d.fill(s, grads.ref(), 0.0f);
    d.embedding_forward(s, tokens.ref(), params.slice(o_wte, V * C), params.slice(o_wpe, a.seq * C),
                        xs[0].ref(), N, a.seq, C);
    for (std::int64_t l = 0; l < L; ++l)  // boundaries kept, layer activations discarded
      layer.forward(pl(l), xs[l].ref(), xs[l + 1].ref(), acts, B, plain);
    d.layer_norm_forward(s, xs[L].ref(), params.slice(o_lnf, C), params.slice(o_lnf + C, C),
                         lnf.ref(), lnf_m.ref(), lnf_r.ref(), N, C, 1e-5f);
    d.gemm(s, Transpose::No, Transpose::Yes, N, V, C, 1.0f, lnf.ref(), params.slice(o_head, V * C),
           0.0f, logits.ref());
    d.cross_entropy_forward(s, logits.ref(), targets.ref(), losses.ref(), lse.ref(), N, V);
    d.sum(s, losses.ref(), loss.ref());
    d.cross_entropy_backward(s, logits.ref(), targets.ref(), lse.ref(), logits.ref(), N, V,
                             1.0f / float(N));
    d.gemm(s, Transpose::Yes, Transpose::No, V, C, N, 1.0f, logits.ref(), lnf.ref(), 1.0f,
           grads.slice(o_head, V * C));
    d.gemm(s, Transpose::No, Transpose::No, N, C, V, 1.0f, logits.ref(),
           params.slice(o_head, V * C), 0.0f, dlnf.ref());
    d.layer_norm_backward(s, xs[L].ref(), params.slice(o_lnf, C), lnf_m.ref(), lnf_r.ref(),
                          dlnf.ref(), dxa.ref(), grads.slice(o_lnf, C), grads.slice(o_lnf + C, C),
                          N, C);
    TensorRef dcur = dxa.ref(), dnext = dxb.ref();
    for (std::int64_t l = L - 1; l >= 0; --l) {
      layer.forward(pl(l), xs[l].ref(), xs[l + 1].ref(), acts, B, plain);  // recompute
      layer.backward(pl(l), gl(l), xs[l].ref(), acts, dcur, dnext, B, plain);
      std::swap(dcur, dnext);
    }
    d.embedding_backward(s, tokens.ref(), dcur, grads.slice(o_wte, V * C),
                         grads.slice(o_wpe, a.seq * C), N, a.seq, C);
    cuda::AdamWParams hp;
    hp.lr = 1e-4f;
    hp.weight_decay = 0.1f;
    hp.step = step;
    cuda::adamw_step(static_cast<float*>(master.data()), static_cast<const float*>(grads.data()),
                     static_cast<float*>(m.data()), static_cast<float*>(v.data()), P, hp, 1.0f,
                     params.ref().slice(0, P), st);
    e1->record(s);
    e1->synchronize();
    if (step > 1) times.push_back(e1->seconds_since(*e0));
    float l = 0;
    d.download(&l, loss.ref(), 4);
    last_loss = l / float(N);
  }
  d.synchronize();
  StepResult r{};
  const double matmul_params = double(L) * (12.0 * C * C) + double(V) * C;
  r.params = double(P);
  r.step_s = median(times);
  r.tokens_per_s = N / r.step_s;
  // Model FLOPs (PaLM appendix B): 6 x matmul parameters + 12 L C T per token; recompute and the
  // masked half of attention are not credited.
  const double flops = N * (6.0 * matmul_params + 12.0 * L * C * double(a.seq));
  r.model_tflops = flops / r.step_s / 1e12;
  r.loss = last_loss;
  r.peak_gib = d.memory_stats().peak / double(1ull << 30);
  if (!std::isfinite(r.loss)) throw RuntimeFailure("training-step bench: loss is not finite");
  return r;
}

int run(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;  // smoke run: fewer reps/sizes
  }
  auto dev = cuda::make_cuda_device({});
  Device& d = *dev;
  std::printf("device: %s\n", d.name().c_str());
  const double peak = measure_gemm_peak(d, 8192, quick ? 3 : 20);
  const double sheet = datasheet_bf16_tflops(d.name());
  std::printf("cuBLAS bf16 GEMM 8192^3: %.1f TFLOP/s measured", peak);
  if (sheet > 0) std::printf(" (datasheet dense bf16 %.1f)", sheet);
  std::printf("\n\n");

  const Arch gpt27{32, 2560, 32, 10240, 49152, 2048};
  std::printf("GPT-2.7B layer (hidden 2560, 32 heads, ffn 10240, seq 2048), bf16\n");
  std::printf("%3s %9s %9s %10s %10s %11s %9s %9s\n", "mb", "fwd ms", "bwd ms", "fwd TF/s",
              "bwd TF/s", "GEMM TF/s", "GEMM/pk", "GEMM tm");
  std::vector<int> sizes =
      quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8};
  auto print_row = [&](const std::string& label, const LayerRow& r) {
    std::printf("%3s %9.2f %9.2f %10.1f %10.1f %11.1f %8.0f%% %8.0f%%\n", label.c_str(), r.fwd_ms,
                r.bwd_ms, r.fwd_tflops, r.bwd_tflops, r.gemm_tflops, 100 * r.gemm_tflops / peak,
                100 * r.gemm_share);
    std::fflush(stdout);
  };
  for (int B : sizes) print_row(std::to_string(B), bench_layer(d, gpt27, B, quick ? 2 : 10));
  {
    // The same layer with attention scores stored in bf16 instead of fp32 (rows marked *):
    // what the fp32 scores cost in time.
    cuda::CudaDeviceOptions bf16_scores;
    bf16_scores.attention_scores_fp32 = false;
    auto d2 = cuda::make_cuda_device(bf16_scores);
    for (int B : quick ? std::vector<int>{2} : std::vector<int>{1, 8})
      print_row(std::to_string(B) + "*", bench_layer(*d2, gpt27, B, quick ? 2 : 10));
  }
  std::printf("(* attention scores in bf16; default fp32)\n\n");

  const Arch gpt13{24, 2048, 16, 8192, 49152, 2048};
  const int B = quick ? 1 : 8;
  const StepResult st = bench_steps(d, gpt13, B, quick ? 1 : 4);
  std::printf(
      "GPT-1.3B full training step, 1 GPU (%.2fB params, micro-batch %d x seq 2048, "
      "bf16 + fp32 master, AdamW, layer recompute)\n",
      st.params / 1e9, B);
  std::printf("step %.3f s, %.0f tokens/s, %.1f model TFLOP/s, loss %.3f, peak memory %.1f GiB\n",
              st.step_s, st.tokens_per_s, st.model_tflops, st.loss, st.peak_gib);
  std::printf("MFU %.1f%% of measured cuBLAS peak", 100 * st.model_tflops / peak);
  if (sheet > 0) std::printf(", %.1f%% of datasheet", 100 * st.model_tflops / sheet);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const cephalo::RuntimeFailure& e) {
    std::fprintf(stderr, "gpu_layer_bench: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_layer_bench: %s\n", e.what());
    return 1;
  }
}

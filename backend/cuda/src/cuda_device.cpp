// backend::Device on CUDA. See cuda_device.hpp and the ordering model in device.hpp.
// The streams and events are in cuda_streams.hpp. Over 500 lines on purpose: one class whose
// stream-ordered allocation and kernel dispatch share private state (the three streams, the
// pool, deferred frees); splitting the class would expose that state in a header, and a split
// of the class is only safe to make with the GPU tests run, which no session here has had.
#include "cephalo/backend/cuda/cuda_device.hpp"

#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/gemm.hpp"
#include "cephalo/backend/cuda/kernels.hpp"
#include "cephalo/backend/cuda/memory.hpp"
#include "cephalo/core/error.hpp"
#include "cuda_streams.hpp"

namespace cephalo::cuda {

using backend::AttentionShape;
using backend::ElemType;
using backend::MemorySpace;
using backend::MemoryStats;
using backend::StreamKind;
using backend::TensorRef;
using backend::Transpose;

namespace {

using device_detail::as_int;
using device_detail::CudaEvent;
using device_detail::CudaStream;
using device_detail::dtype_of;
using device_detail::expect;

class CudaDevice final : public backend::Device {
 public:
  explicit CudaDevice(const CudaDeviceOptions& options)
      : ordinal_(options.device),
        scores_fp32_(options.attention_scores_fp32),
        allocator_(options.device) {
    CEPHALO_CUDA_CHECK(cudaGetDeviceProperties(&props_, ordinal_));
    // Comm work gets the higher priority: a prefetch all-gather or reduce-scatter should not
    // queue behind a burst of compute kernels (lower number = higher priority).
    int least = 0, greatest = 0;
    CEPHALO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // Pipeline sends and receives share the comm stream's priority: a stage's neighbour waits
    // on them.
    for (StreamKind k : {StreamKind::Compute, StreamKind::Comm, StreamKind::Copy, StreamKind::Send,
                         StreamKind::Recv}) {
      const bool urgent = k == StreamKind::Comm || k == StreamKind::Send || k == StreamKind::Recv;
      streams_[static_cast<std::size_t>(k)] =
          std::make_unique<CudaStream>(k, urgent ? greatest : least);
    }
    CEPHALO_CUDA_CHECK(cudaStreamCreateWithFlags(&memory_stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<Gemm>(options.allow_tf32);
    CEPHALO_CUDA_CHECK(cudaMalloc(&bad_token_flag_, sizeof(int)));
    CEPHALO_CUDA_CHECK(cudaMemset(bad_token_flag_, 0, sizeof(int)));
    std::size_t free_bytes = 0;
    CEPHALO_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes_));
  }

  ~CudaDevice() override {
    cudaDeviceSynchronize();
    try {
      flush_frees(true);
    } catch (...) {
    }
    for (auto e : free_events_) cudaEventDestroy(e);
    for (auto& [bytes, p] : pinned_cache_) cudaFreeHost(p);
    if (memory_stream_) cudaStreamDestroy(memory_stream_);
    if (bad_token_flag_) cudaFree(bad_token_flag_);
  }

  int ordinal() const { return ordinal_; }

  std::string kind() const override { return "cuda"; }
  std::string name() const override {
    return "cuda:" + std::to_string(ordinal_) + " (" + props_.name + ")";
  }
  bool supports(ElemType type) const override { return type != ElemType::I32; }

  backend::Stream& stream(StreamKind kind) override {
    return *streams_.at(static_cast<std::size_t>(kind));
  }
  std::unique_ptr<backend::Event> create_event() override { return std::make_unique<CudaEvent>(); }
  void synchronize() override {
    CEPHALO_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& st : streams_) st->rethrow();
    flush_frees(true);
    int bad = 0;
    CEPHALO_CUDA_CHECK(cudaMemcpy(&bad, bad_token_flag_, sizeof(int), cudaMemcpyDeviceToHost));
    if (bad) {
      CEPHALO_CUDA_CHECK(cudaMemset(bad_token_flag_, 0, sizeof(int)));
      throw RuntimeFailure("cuda device: a token id outside [0, vocab) reached the embedding");
    }
  }

  MemoryStats memory_stats(MemorySpace space) const override {
    MemoryStats s;
    if (space == MemorySpace::Device) {
      s.current = allocator_.in_use();
      s.peak = allocator_.peak();
      s.capacity = total_bytes_;
    } else {
      s.current = pinned_current_;
      s.peak = pinned_peak_;
    }
    return s;
  }
  void reset_peak() override {
    allocator_.reset_peak();
    pinned_peak_ = pinned_current_;
  }

 protected:
  void do_copy(backend::Stream& s, TensorRef dst, TensorRef src) override {
    if (src.bytes() == 0) return;
    CEPHALO_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, native(s)));
  }
  void do_upload(TensorRef dst, const void* host, std::size_t bytes) override {
    synchronize_streams();  // blocking copy: must not race queued work on `dst`
    CEPHALO_CUDA_CHECK(cudaMemcpy(dst.data, host, bytes, cudaMemcpyHostToDevice));
  }
  void do_download(void* host, TensorRef src, std::size_t bytes) override {
    synchronize_streams();
    CEPHALO_CUDA_CHECK(cudaMemcpy(host, src.data, bytes, cudaMemcpyDeviceToHost));
  }

  void do_fill(backend::Stream& s, TensorRef x, float value) override {
    cuda::fill(x, value, native(s));
  }
  void do_scale(backend::Stream& s, TensorRef x, float alpha) override {
    cuda::scale(x, alpha, native(s));
  }
  void do_axpy(backend::Stream& s, float alpha, TensorRef x, TensorRef y) override {
    cuda::axpy(alpha, x, y, native(s));
  }
  void do_cast(backend::Stream& s, TensorRef src, TensorRef dst) override {
    cuda::cast(src, dst, native(s));
  }
  void do_sum(backend::Stream& s, TensorRef x, TensorRef out) override {
    if (x.type == ElemType::F32) {
      sum_fp32(static_cast<const float*>(x.data), std::size_t(x.numel),
               static_cast<float*>(out.data), native(s));
      return;
    }
    // Lower-precision inputs are widened first so the reduction itself stays fp32/fp64.
    float* tmp = static_cast<float*>(allocator_.allocate(std::size_t(x.numel) * 4, native(s)));
    cuda::cast(x, TensorRef{tmp, x.numel, ElemType::F32}, native(s));
    sum_fp32(tmp, std::size_t(x.numel), static_cast<float*>(out.data), native(s));
    allocator_.deallocate(tmp, native(s));
  }

  void do_gemm(backend::Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
               std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
               TensorRef c) override {
    GemmShape shape{as_int(m, "m"), as_int(n, "n"), as_int(k, "k"), ta == Transpose::Yes,
                    tb == Transpose::Yes};
    gemm_->run(native(s), shape, alpha, a.data, b.data, beta, c.data, dtype_of(a.type),
               dtype_of(c.type));
  }
  void do_add_bias(backend::Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                   std::int64_t cols) override {
    cuda::add_bias(y, bias, as_int(rows, "rows"), as_int(cols, "cols"), native(s));
  }
  void do_bias_backward(backend::Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                        std::int64_t cols) override {
    float* target = f32_target(s, dbias, cols);
    cuda::bias_backward(dy, target, as_int(rows, "rows"), as_int(cols, "cols"), native(s));
    f32_commit(s, dbias, target, cols);
  }

  void do_layer_norm_forward(backend::Stream& s, TensorRef x, TensorRef gamma, TensorRef beta,
                             TensorRef y, TensorRef mean, TensorRef rstd, std::int64_t rows,
                             std::int64_t cols, float eps) override {
    cuda::layernorm_forward(x, gamma, beta, y, static_cast<float*>(mean.data),
                            static_cast<float*>(rstd.data), as_int(rows, "rows"),
                            as_int(cols, "cols"), eps, native(s));
  }
  void do_layer_norm_backward(backend::Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                              TensorRef rstd, TensorRef dy, TensorRef dx, TensorRef dgamma,
                              TensorRef dbeta, std::int64_t rows, std::int64_t cols) override {
    float* g = f32_target(s, dgamma, cols);
    float* b = f32_target(s, dbeta, cols);
    cuda::layernorm_backward(dy, x, gamma, static_cast<const float*>(mean.data),
                             static_cast<const float*>(rstd.data), dx, g, b, as_int(rows, "rows"),
                             as_int(cols, "cols"), native(s));
    f32_commit(s, dgamma, g, cols);
    f32_commit(s, dbeta, b, cols);
  }
  void do_gelu_forward(backend::Stream& s, TensorRef x, TensorRef y) override {
    cuda::gelu_forward(x, y, native(s));
  }
  void do_gelu_backward(backend::Stream& s, TensorRef x, TensorRef dy, TensorRef dx) override {
    cuda::gelu_backward(x, dy, dx, native(s));
  }

  // Attention by materialised scores: two batched cuBLAS GEMMs around a causal softmax, with
  // head permutations. By default scores and their gradient are kept in fp32 (the GEMMs write
  // fp32 C from bf16/fp16 operands), so neither the softmax exponent nor dP - rowsum(P dP) sees
  // bf16 rounding; probabilities and dS are stored in the compute type as GEMM operands. Scratch
  // comes from the stream-ordered pool on the op's stream, so it counts in the peak and is reused
  // across layers without driver calls. Backward recomputes the probabilities from the saved
  // log-sum-exp (one pass, no reductions).
  void do_attention_forward(backend::Stream& s, const AttentionShape& shape, TensorRef qkv,
                            TensorRef out, TensorRef lse) override {
    const Attn a = attn(shape, qkv);
    const cudaStream_t st = native(s);
    const bool same = a.sdt == a.dt;
    Scratch q(allocator_, a.head_bytes, st), k(allocator_, a.head_bytes, st),
        v(allocator_, a.head_bytes, st), y(allocator_, a.head_bytes, st),
        sc(allocator_, a.score_s_bytes, st), pr(allocator_, same ? 0 : a.score_bytes, st);
    void* probs = same ? sc.ptr : pr.ptr;  // one type: softmax in place
    split_qkv_heads(qkv, a.heads(q.ptr), a.heads(k.ptr), a.heads(v.ptr), a.B, a.T, a.H, a.D, st);
    scores(st, a, q.ptr, k.ptr, sc.ptr);
    causal_softmax_forward(a.scores_of(sc.ptr), a.probs(probs), static_cast<float*>(lse.data),
                           a.B * a.H, a.T, a.scale, st);
    // y = P V: [T x T] [T x D]
    gemm_->run_batched(st, GemmShape{a.T, a.D, a.T, false, false}, 1.0f, probs, a.tt, v.ptr, a.td,
                       0.0f, y.ptr, a.td, a.B * a.H, a.dt, a.dt);
    merge_heads(a.heads(y.ptr), out, a.B, a.T, a.H, a.D, st);
  }
  void do_attention_backward(backend::Stream& s, const AttentionShape& shape, TensorRef qkv,
                             TensorRef /*out*/, TensorRef lse, TensorRef dout,
                             TensorRef dqkv) override {
    const Attn a = attn(shape, qkv);
    const cudaStream_t st = native(s);
    Scratch q(allocator_, a.head_bytes, st), k(allocator_, a.head_bytes, st),
        v(allocator_, a.head_bytes, st), dy(allocator_, a.head_bytes, st),
        dq(allocator_, a.head_bytes, st), dk(allocator_, a.head_bytes, st),
        dv(allocator_, a.head_bytes, st), sc(allocator_, a.score_s_bytes, st),
        pr(allocator_, a.score_bytes, st), dp(allocator_, a.score_s_bytes, st);
    const int batch = a.B * a.H;
    split_qkv_heads(qkv, a.heads(q.ptr), a.heads(k.ptr), a.heads(v.ptr), a.B, a.T, a.H, a.D, st);
    scores(st, a, q.ptr, k.ptr, sc.ptr);
    // The scores are in a.sdt (fp32 only with attention_scores_fp32): reading compute-type
    // scores as fp32 would run past the end of `sc` and recompute garbage probabilities.
    causal_softmax_recompute(a.scores_of(sc.ptr), static_cast<const float*>(lse.data),
                             a.probs(pr.ptr), batch, a.T, a.scale, st);
    split_heads(dout, a.heads(dy.ptr), a.B, a.T, a.H, a.D, st);
    // dP = dY V^T (fp32)
    gemm_->run_batched(st, GemmShape{a.T, a.T, a.D, false, true}, 1.0f, dy.ptr, a.td, v.ptr, a.td,
                       0.0f, dp.ptr, a.tt, batch, a.dt, a.sdt);
    // dV = P^T dY
    gemm_->run_batched(st, GemmShape{a.T, a.D, a.T, true, false}, 1.0f, pr.ptr, a.tt, dy.ptr, a.td,
                       0.0f, dv.ptr, a.td, batch, a.dt, a.dt);
    // dS = scale * P (dP - rowsum(P dP)), in the compute type, into the (dead) scores buffer
    void* ds = sc.ptr;
    causal_softmax_backward(a.probs(pr.ptr), a.scores_of(dp.ptr), a.probs(ds), batch, a.T, a.scale,
                            st);
    // dQ = dS K ; dK = dS^T Q
    gemm_->run_batched(st, GemmShape{a.T, a.D, a.T, false, false}, 1.0f, ds, a.tt, k.ptr, a.td,
                       0.0f, dq.ptr, a.td, batch, a.dt, a.dt);
    gemm_->run_batched(st, GemmShape{a.T, a.D, a.T, true, false}, 1.0f, ds, a.tt, q.ptr, a.td, 0.0f,
                       dk.ptr, a.td, batch, a.dt, a.dt);
    merge_qkv_heads(a.heads(dq.ptr), a.heads(dk.ptr), a.heads(dv.ptr), dqkv, a.B, a.T, a.H, a.D,
                    st);
  }

  void do_embedding_forward(backend::Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                            TensorRef out, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                            backend::VocabSlice vocab) override {
    expect(rows % seq == 0, "embedding_forward: rows must be a multiple of seq");
    const int local = as_int(wte.numel / hidden, "vocabulary rows");
    cuda::embedding_forward(static_cast<const std::int32_t*>(tokens.data), wte,
                            wpe.empty() ? TensorRef{} : wpe, out, as_int(rows / seq, "batch"),
                            as_int(seq, "seq"), as_int(hidden, "hidden"),
                            as_int(vocab.size, "vocab"), bad_token_flag_, native(s),
                            as_int(vocab.begin, "vocab_begin"), local);
  }
  void do_embedding_backward(backend::Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                             TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                             std::int64_t hidden, backend::VocabSlice vocab) override {
    expect(rows % seq == 0, "embedding_backward: rows must be a multiple of seq");
    const int local = as_int(dwte.numel / hidden, "vocabulary rows");
    float* te = f32_target(s, dwte, dwte.numel);
    float* pe = dwpe.empty() ? nullptr : f32_target(s, dwpe, seq * hidden);
    cuda::embedding_backward(static_cast<const std::int32_t*>(tokens.data), dout, te, pe,
                             as_int(rows / seq, "batch"), as_int(seq, "seq"),
                             as_int(hidden, "hidden"), as_int(vocab.size, "vocab"), native(s),
                             as_int(vocab.begin, "vocab_begin"), local);
    f32_commit(s, dwte, te, dwte.numel);
    if (pe) f32_commit(s, dwpe, pe, seq * hidden);
  }
  void do_cross_entropy_forward(backend::Stream& s, TensorRef logits, TensorRef targets,
                                TensorRef losses, TensorRef lse, std::int64_t rows,
                                std::int64_t vocab) override {
    cuda::cross_entropy_forward(logits, static_cast<const std::int32_t*>(targets.data),
                                static_cast<float*>(losses.data), static_cast<float*>(lse.data),
                                as_int(rows, "rows"), as_int(vocab, "vocab"), 1.0f, native(s));
  }
  void do_cross_entropy_backward(backend::Stream& s, TensorRef logits, TensorRef targets,
                                 TensorRef lse, TensorRef dlogits, std::int64_t rows,
                                 std::int64_t vocab, float grad_scale,
                                 std::int64_t vocab_begin) override {
    cuda::cross_entropy_backward(logits, static_cast<const std::int32_t*>(targets.data),
                                 static_cast<const float*>(lse.data), dlogits, as_int(rows, "rows"),
                                 as_int(vocab, "vocab"), grad_scale, native(s),
                                 as_int(vocab_begin, "vocab_begin"));
  }
  void do_cross_entropy_row_max(backend::Stream& s, TensorRef logits, TensorRef row_max,
                                std::int64_t rows, std::int64_t vocab) override {
    cuda::cross_entropy_row_max(logits, static_cast<float*>(row_max.data), as_int(rows, "rows"),
                                as_int(vocab, "vocab"), native(s));
  }
  void do_cross_entropy_partial_sums(backend::Stream& s, TensorRef logits, TensorRef targets,
                                     TensorRef row_max, TensorRef sum_exp, TensorRef target_logit,
                                     std::int64_t rows, std::int64_t vocab,
                                     std::int64_t vocab_begin) override {
    cuda::cross_entropy_partial_sums(
        logits, static_cast<const std::int32_t*>(targets.data),
        static_cast<const float*>(row_max.data), static_cast<float*>(sum_exp.data),
        static_cast<float*>(target_logit.data), as_int(rows, "rows"), as_int(vocab, "vocab"),
        as_int(vocab_begin, "vocab_begin"), native(s));
  }
  void do_cross_entropy_combine(backend::Stream& s, TensorRef row_max, TensorRef sum_exp,
                                TensorRef target_logit, TensorRef losses, TensorRef lse,
                                std::int64_t rows) override {
    cuda::cross_entropy_combine(
        static_cast<const float*>(row_max.data), static_cast<const float*>(sum_exp.data),
        static_cast<const float*>(target_logit.data), static_cast<float*>(losses.data),
        static_cast<float*>(lse.data), as_int(rows, "rows"), native(s));
  }

  void do_adamw_step(backend::Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                     const backend::AdamWParams& p) override {
    cuda::adamw_step(static_cast<float*>(param.data), static_cast<const float*>(grad.data),
                     static_cast<float*>(m.data), static_cast<float*>(v.data),
                     std::size_t(param.numel), p, 1.0f, TensorRef{}, native(s));
  }

  // Buffers are shared by all three streams, so allocation and free are ordered against all of
  // them without making any stream wait for another: allocations come from a private memory
  // stream (the streams wait for that, which is instantaneous), and frees are deferred until
  // events recorded on every stream at free time have completed.
  void* raw_allocate(std::size_t bytes, MemorySpace space) override {
    flush_frees(false);
    if (space == MemorySpace::PinnedHost) {
      void* p = nullptr;
      // cudaHostAlloc costs milliseconds for large blocks and the executor asks for the same
      // offload sizes every step: reuse a cached block of exactly this size when there is one.
      const auto hit = pinned_cache_.find(bytes);
      if (hit != pinned_cache_.end()) {
        p = hit->second;
        pinned_cache_.erase(hit);
      } else {
        CEPHALO_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
      }
      pinned_current_ += bytes;
      if (pinned_current_ > pinned_peak_) pinned_peak_ = pinned_current_;
      return p;
    }
    void* p = allocator_.allocate(bytes, memory_stream_);
    cudaEvent_t ready = take_event();
    CEPHALO_CUDA_CHECK(cudaEventRecord(ready, memory_stream_));
    for (auto& st : streams_) CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(st->native(), ready, 0));
    free_events_.push_back(ready);  // reusable once recorded: waits captured its state
    return p;
  }
  void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept override {
    try {
      PendingFree f{data, bytes, space, {}};
      int i = 0;
      for (auto& st : streams_) {
        f.events[static_cast<std::size_t>(i)] = take_event();
        CEPHALO_CUDA_CHECK(cudaEventRecord(f.events[static_cast<std::size_t>(i)], st->native()));
        ++i;
      }
      if (space == MemorySpace::PinnedHost) pinned_current_ -= bytes;
      pending_frees_.push_back(f);
      flush_frees(false);
    } catch (...) {
      // A failing free means the context is already broken; the error surfaces at the next
      // synchronize(). Leaking is the only safe choice here (noexcept by contract).
    }
  }

 private:
  struct Scratch {
    Scratch(DeviceAllocator& a, std::size_t bytes, cudaStream_t s)
        : alloc(a), stream(s), ptr(a.allocate(bytes, s)) {}
    ~Scratch() {
      try {
        alloc.deallocate(ptr, stream);
      } catch (...) {
      }
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    DeviceAllocator& alloc;
    cudaStream_t stream;
    void* ptr;
  };
  struct Attn {
    int B, T, H, D;
    Dtype dt;
    float scale;
    long long td, tt;
    Dtype sdt;  // scores and dP: fp32, or the compute type (attention_scores_fp32 = false)
    std::size_t head_bytes, score_bytes, score_s_bytes;
    // Scratch buffers as the kernels take them: one head tensor [B, H, T, D] of the compute
    // type; scores or dP [B*H, T, T] of the score type; probabilities or dS of the compute type.
    TensorRef heads(void* p) const {
      return {p, std::int64_t(B) * H * td, backend::elem_type_of(dt)};
    }
    TensorRef scores_of(void* p) const {
      return {p, std::int64_t(B) * H * tt, backend::elem_type_of(sdt)};
    }
    TensorRef probs(void* p) const {
      return {p, std::int64_t(B) * H * tt, backend::elem_type_of(dt)};
    }
  };
  // Shapes and scratch sizes; the tensors' types and sizes were checked by the front function.
  Attn attn(const AttentionShape& shape, TensorRef qkv) const {
    Attn a{};
    a.B = as_int(shape.batch, "attention batch");
    a.T = as_int(shape.seq, "attention seq");
    a.H = as_int(shape.heads, "attention heads");
    a.D = as_int(shape.head_dim, "attention head_dim");
    a.dt = dtype_of(qkv.type);
    a.scale = 1.0f / std::sqrt(static_cast<float>(a.D));
    a.td = static_cast<long long>(a.T) * a.D;
    a.tt = static_cast<long long>(a.T) * a.T;
    const std::size_t es = backend::element_size(qkv.type);
    a.head_bytes = std::size_t(a.B) * a.H * a.td * es;
    a.score_bytes = std::size_t(a.B) * a.H * a.tt * es;
    a.sdt = scores_fp32_ ? Dtype::FP32 : a.dt;
    a.score_s_bytes = std::size_t(a.B) * a.H * a.tt * (a.sdt == Dtype::FP32 ? 4 : es);
    return a;
  }
  // S = Q K^T per (sample, head): [T x D] [D x T], written in the score type; the softmax
  // applies the 1/sqrt(D) scale.
  void scores(cudaStream_t st, const Attn& a, const void* q, const void* k, void* s) const {
    gemm_->run_batched(st, GemmShape{a.T, a.T, a.D, false, true}, 1.0f, q, a.td, k, a.td, 0.0f, s,
                       a.tt, a.B * a.H, a.dt, a.sdt);
  }

  // Parameter gradients are fp32 in the kernels; a gradient buffer in bf16/fp16 is accumulated
  // through an fp32 temporary so the contract (+=) holds for every element type.
  float* f32_target(backend::Stream& s, TensorRef grad, std::int64_t n) {
    if (grad.type == ElemType::F32) return static_cast<float*>(grad.data);
    float* tmp = static_cast<float*>(allocator_.allocate(std::size_t(n) * 4, native(s)));
    CEPHALO_CUDA_CHECK(cudaMemsetAsync(tmp, 0, std::size_t(n) * 4, native(s)));
    return tmp;
  }
  void f32_commit(backend::Stream& s, TensorRef grad, float* target, std::int64_t n) {
    if (grad.type == ElemType::F32) return;
    cuda::axpy(1.0f, TensorRef{target, n, ElemType::F32}, grad.slice(0, n), native(s));
    allocator_.deallocate(target, native(s));
  }

  static cudaStream_t native(backend::Stream& s) { return native_stream(s); }

  void synchronize_streams() {
    for (auto& st : streams_) st->synchronize();
  }

  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CEPHALO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  struct PendingFree {
    void* data;
    std::size_t bytes;
    MemorySpace space;
    std::array<cudaEvent_t, backend::kNumStreamKinds> events;
  };
  // Releases deferred frees whose stream events have completed (all of them when `all`, after
  // a device synchronisation). Frees are queued in time order and each stream completes its
  // events in order, so the scan stops at the first one still pending: O(released) per call.
  void flush_frees(bool all) {
    while (!pending_frees_.empty()) {
      PendingFree& f = pending_frees_.front();
      if (!all)
        for (cudaEvent_t e : f.events) {
          const cudaError_t status = cudaEventQuery(e);
          if (status == cudaErrorNotReady) return;
          CEPHALO_CUDA_CHECK(status);
        }
      for (cudaEvent_t e : f.events) free_events_.push_back(e);
      const PendingFree done = f;
      pending_frees_.pop_front();
      if (done.space == MemorySpace::PinnedHost)
        pinned_cache_.emplace(done.bytes, done.data);
      else
        allocator_.deallocate(done.data, memory_stream_);
    }
  }

  int ordinal_;
  bool scores_fp32_;
  cudaDeviceProp props_{};
  std::size_t total_bytes_ = 0;
  DeviceAllocator allocator_;
  std::array<std::unique_ptr<CudaStream>, backend::kNumStreamKinds> streams_;  // by StreamKind
  cudaStream_t memory_stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  int* bad_token_flag_ = nullptr;
  std::vector<cudaEvent_t> free_events_;
  std::deque<PendingFree> pending_frees_;
  std::size_t pinned_current_ = 0, pinned_peak_ = 0;
  std::multimap<std::size_t, void*> pinned_cache_;  // freed pinned blocks by size, for reuse
};

}  // namespace

std::unique_ptr<backend::Device> make_cuda_device(const CudaDeviceOptions& options) {
  std::string why;
  const int count = device_count(&why);
  if (count == 0) throw RuntimeFailure("no CUDA device is usable on this machine (" + why + ")");
  if (options.device < 0 || options.device >= count)
    throw RuntimeFailure("CUDA device " + std::to_string(options.device) + " requested but only " +
                         std::to_string(count) + " visible");
  CEPHALO_CUDA_CHECK(cudaSetDevice(options.device));
  return std::make_unique<CudaDevice>(options);
}

int local_device_index() {
  int local = 0;
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  }
  const int count = device_count();
  return count > 0 && local >= 0 ? local % count : 0;
}

cudaStream_t native_stream(backend::Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (s == nullptr) throw RuntimeFailure("expected a stream of a CUDA device");
  return s->native();
}

int native_device(const backend::Device& device) {
  auto* d = dynamic_cast<const CudaDevice*>(&device);
  if (d == nullptr) throw RuntimeFailure("expected a CUDA device");
  return d->ordinal();
}

}  // namespace cephalo::cuda

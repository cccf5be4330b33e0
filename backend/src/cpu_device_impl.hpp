#pragma once
// CPU device: Eigen GEMMs and straightforward fp32 loops for the transformer kernels. The
// kernels are written for clarity and exact fp32 semantics (they are the reference the CUDA
// device is tested against), not for peak CPU speed; GEMMs, which dominate, use Eigen.
//
// Mixed precision (device.hpp's element-type contract): every kernel body is the fp32 kernel.
// A bf16/fp16 input is widened into an fp32 copy, a bf16/fp16 output is computed into fp32
// scratch and rounded into the tensor once at the end (accumulated outputs start from their
// current values, so the += is in fp32). F32 tensors are used in place, so the all-fp32 path
// runs exactly the reference kernels with no copies. Conversions run inside the enqueued work,
// so they are ordered on the stream like the kernel itself.
//
// Private to the CPU device's files: the element-type helpers every kernel uses and the
// CpuDevice class, with its runtime part (streams, events, allocation; cpu_runtime.hpp) and the
// BLAS-like kernels (copy, fill, cast, axpy, GEMM, bias) defined here;
// cpu_transformer_kernels.cpp defines the layer norm, GELU, attention, embedding,
// cross-entropy and AdamW kernels; cpu_device.cpp the factory.
#include "cephalo/backend/cpu_device.hpp"
#include "cpu_runtime.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "cephalo/backend/half.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::backend::cpu_detail {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using StridedMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

// Floating element types: the compute types (device.hpp); I32 holds token ids.
inline bool floating(ElemType t) { return t != ElemType::I32; }

// fp32 view of the first n elements of an input tensor: the tensor's own memory when it is F32
// (zero-copy), otherwise a widened copy (exact).
class Fp32In {
 public:
  Fp32In(const TensorRef& t, std::int64_t n) {
    if (t.type == ElemType::F32) {
      p_ = t.f32();
      return;
    }
    copy_.resize(static_cast<std::size_t>(n));
    load_f32(t.data, t.type, copy_.data(), copy_.size());
    p_ = copy_.data();
  }
  float* get() const { return p_; }

 private:
  std::vector<float> copy_;
  float* p_ = nullptr;
};

// What an fp32 output target holds before the kernel runs: nothing useful (overwritten
// outputs), or the tensor's current values (accumulated gradients, in-place updates).
enum class Start { Undefined, Current };

// fp32 target for the first n elements of an output tensor: the tensor itself when it is F32,
// otherwise scratch that commit() rounds into the tensor (once per element per call).
class Fp32Out {
 public:
  Fp32Out(const TensorRef& t, std::int64_t n, Start start) : t_(t) {
    if (t.type == ElemType::F32) {
      p_ = t.f32();
      return;
    }
    scratch_.resize(static_cast<std::size_t>(n));
    if (start == Start::Current) load_f32(t.data, t.type, scratch_.data(), scratch_.size());
    p_ = scratch_.data();
  }
  float* get() const { return p_; }
  void commit() const {
    if (t_.type != ElemType::F32) store_f32(scratch_.data(), t_.data, t_.type, scratch_.size());
  }

 private:
  TensorRef t_;
  std::vector<float> scratch_;
  float* p_ = nullptr;
};

// Shared state of one recorded event.

inline float gelu(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
inline float gelu_grad(float x) {
  constexpr float k = 0.7978845608028654f;
  float u = k * (x + 0.044715f * x * x * x);
  float t = std::tanh(u);
  float du = k * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& o)
      : options_(o),
        compute_(StreamKind::Compute, false),
        comm_(StreamKind::Comm, true),
        copy_(StreamKind::Copy, true) {
    Eigen::setNbThreads(std::max(1, o.threads));
  }
  ~CpuDevice() override {
    // Drain the worker streams before their buffers go away.
    try {
      comm_.synchronize();
      copy_.synchronize();
    } catch (...) {
    }
  }

  std::string kind() const override { return "cpu"; }
  std::string name() const override {
    return "cpu:" + std::to_string(options_.ordinal) + " (" + std::to_string(options_.threads) +
           (options_.threads == 1 ? " thread)" : " threads)");
  }
  // Every floating compute type; I32 (token ids) is not a compute type.
  bool supports(ElemType t) const override { return floating(t); }

  Stream& stream(StreamKind k) override {
    switch (k) {
      case StreamKind::Compute:
        return compute_;
      case StreamKind::Comm:
        return comm_;
      case StreamKind::Copy:
        return copy_;
    }
    return compute_;
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  void synchronize() override {
    comm_.synchronize();
    copy_.synchronize();
  }

  MemoryStats memory_stats(MemorySpace space) const override {
    const auto& c = counter(space);
    return {c.current.load(), c.peak.load(), space == MemorySpace::Device ? options_.capacity : 0};
  }
  void reset_peak() override {
    for (auto* c : {&device_mem_, &host_mem_}) c->peak.store(c->current.load());
  }

 protected:
  void do_copy(Stream& s, TensorRef dst, TensorRef src) override {
    s.enqueue_host([dst, src] { std::memcpy(dst.data, src.data, src.bytes()); });
  }
  void do_upload(TensorRef dst, const void* host, std::size_t bytes) override {
    std::memcpy(dst.data, host, bytes);
  }
  void do_download(void* host, TensorRef src, std::size_t bytes) override {
    std::memcpy(host, src.data, bytes);
  }

  void do_fill(Stream& s, TensorRef x, float value) override {
    if (x.type == ElemType::F32) {
      s.enqueue_host([=] { std::fill(x.f32(), x.f32() + x.numel, value); });
      return;
    }
    const std::uint16_t bits = float_to_half_bits(value, x.type);
    s.enqueue_host([=] {
      auto* h = static_cast<std::uint16_t*>(x.data);
      std::fill(h, h + x.numel, bits);
    });
  }
  void do_scale(Stream& s, TensorRef x, float alpha) override {
    s.enqueue_host([=] {
      Fp32Out y(x, x.numel, Start::Current);
      for (std::int64_t i = 0; i < x.numel; ++i) y.get()[i] *= alpha;
      y.commit();
    });
  }
  void do_axpy(Stream& s, float alpha, TensorRef x, TensorRef y) override {
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel);
      Fp32Out yf(y, x.numel, Start::Current);
      for (std::int64_t i = 0; i < x.numel; ++i) yf.get()[i] += alpha * xf.get()[i];
      yf.commit();
    });
  }
  void do_cast(Stream& s, TensorRef src, TensorRef dst) override {
    if (src.type == dst.type) {
      copy(s, dst, src);
      return;
    }
    s.enqueue_host([=] {
      const auto n = static_cast<std::size_t>(src.numel);
      if (src.type == ElemType::F32) {
        store_f32(src.f32(), dst.data, dst.type, n);
      } else if (dst.type == ElemType::F32) {
        load_f32(src.data, src.type, dst.f32(), n);
      } else {  // bf16 <-> fp16 goes through fp32, which holds both exactly
        Fp32In wide(src, src.numel);
        store_f32(wide.get(), dst.data, dst.type, n);
      }
    });
  }
  void do_sum(Stream& s, TensorRef x, TensorRef out) override {
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel);
      double acc = 0;  // double: the loss sum must not depend on accumulation order much
      for (std::int64_t i = 0; i < x.numel; ++i) acc += xf.get()[i];
      out.f32()[0] = static_cast<float>(acc);
    });
  }

  void do_gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
               std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
               TensorRef c) override {
    s.enqueue_host([=] {
      Fp32In af(a, m * k), bf(b, k * n);
      // beta == 0 overwrites C (which may hold NaN), so its old values are not needed.
      Fp32Out cf(c, m * n, beta == 0.0f ? Start::Undefined : Start::Current);
      MapMat A(af.get(), ta == Transpose::No ? m : k, ta == Transpose::No ? k : m);
      MapMat B(bf.get(), tb == Transpose::No ? k : n, tb == Transpose::No ? n : k);
      MapMat C(cf.get(), m, n);
      if (beta == 0.0f)
        C.setZero();
      else if (beta != 1.0f)
        C *= beta;
      if (ta == Transpose::No && tb == Transpose::No)
        C.noalias() += alpha * A * B;
      else if (ta == Transpose::No)
        C.noalias() += alpha * A * B.transpose();
      else if (tb == Transpose::No)
        C.noalias() += alpha * A.transpose() * B;
      else
        C.noalias() += alpha * A.transpose() * B.transpose();
      cf.commit();
    });
  }
  void do_add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                   std::int64_t cols) override {
    s.enqueue_host([=] {
      Fp32In bf(bias, cols);
      Fp32Out yf(y, rows * cols, Start::Current);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) yf.get()[r * cols + j] += bf.get()[j];
      yf.commit();
    });
  }
  void do_bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                        std::int64_t cols) override {
    s.enqueue_host([=] {
      Fp32In dyf(dy, rows * cols);
      Fp32Out db(dbias, cols, Start::Current);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) db.get()[j] += dyf.get()[r * cols + j];
      db.commit();
    });
  }

  void do_layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                             TensorRef mean, TensorRef rstd, std::int64_t rows, std::int64_t cols,
                             float eps) override;
  void do_layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                              TensorRef rstd, TensorRef dy, TensorRef dx, TensorRef dgamma,
                              TensorRef dbeta, std::int64_t rows, std::int64_t cols) override;
  void do_gelu_forward(Stream& s, TensorRef x, TensorRef y) override;
  void do_gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) override;

  void do_attention_forward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                            TensorRef lse) override;
  void do_attention_backward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                             TensorRef lse, TensorRef dout, TensorRef dqkv) override;

  void do_embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                            TensorRef out, std::int64_t rows, std::int64_t seq,
                            std::int64_t hidden) override;
  void do_embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                             TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                             std::int64_t hidden) override;
  void do_cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets, TensorRef losses,
                                TensorRef lse, std::int64_t rows, std::int64_t vocab) override;
  void do_cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets, TensorRef lse,
                                 TensorRef dlogits, std::int64_t rows, std::int64_t vocab,
                                 float grad_scale) override;
  void do_adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                     const AdamWParams& p) override;

  void* raw_allocate(std::size_t bytes, MemorySpace space) override {
    if (bytes == 0) return nullptr;
    void* p = cache(space).take(bytes);
    if (!p)
      throw RuntimeFailure("cpu device: out of memory allocating " + std::to_string(bytes) +
                           " bytes");
    counter(space).add(bytes);
    return p;
  }
  void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept override {
    cache(space).give(data, bytes);
    counter(space).sub(bytes);
  }

 private:
  SpaceCounter& counter(MemorySpace s) {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }
  BlockCache& cache(MemorySpace s) {
    return s == MemorySpace::Device ? device_cache_ : host_cache_;
  }
  const SpaceCounter& counter(MemorySpace s) const {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }

  CpuDeviceOptions options_;
  CpuStream compute_, comm_, copy_;
  SpaceCounter device_mem_, host_mem_;
  BlockCache device_cache_{options_.cache_bytes}, host_cache_{options_.cache_bytes};
};

}  // namespace cephalo::backend::cpu_detail

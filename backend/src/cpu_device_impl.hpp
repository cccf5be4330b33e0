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
// so they are ordered on the stream like the kernel itself. Types and sizes were checked by the
// interface's front functions (src/device.cpp) before any do_* here runs.
//
// Private to the CPU device's files, which define what this declares: cpu_device.cpp the
// factory, the runtime part (over cpu_runtime.hpp's streams, events and block cache), the
// element-type helpers and the BLAS-like kernels (copy, fill, cast, axpy, GEMM, bias);
// cpu_transformer_kernels.cpp the layer norm, GELU, attention, embedding, cross-entropy and
// AdamW kernels.
#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
#include "cpu_runtime.hpp"

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
  Fp32In(const TensorRef& t, std::int64_t n);
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
  Fp32Out(const TensorRef& t, std::int64_t n, Start start);
  float* get() const { return p_; }
  void commit() const;

 private:
  TensorRef t_;
  std::vector<float> scratch_;
  float* p_ = nullptr;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& o);
  ~CpuDevice() override;

  std::string kind() const override { return "cpu"; }
  std::string name() const override;
  // Every floating compute type; I32 (token ids) is not a compute type.
  bool supports(ElemType t) const override { return floating(t); }

  Stream& stream(StreamKind k) override;
  std::unique_ptr<Event> create_event() override;
  void synchronize() override;
  MemoryStats memory_stats(MemorySpace space) const override;
  void reset_peak() override;

 protected:
  void do_copy(Stream& s, TensorRef dst, TensorRef src) override;
  void do_upload(TensorRef dst, const void* host, std::size_t bytes) override;
  void do_download(void* host, TensorRef src, std::size_t bytes) override;

  void do_fill(Stream& s, TensorRef x, float value) override;
  void do_scale(Stream& s, TensorRef x, float alpha) override;
  void do_axpy(Stream& s, float alpha, TensorRef x, TensorRef y) override;
  void do_cast(Stream& s, TensorRef src, TensorRef dst) override;
  void do_sum(Stream& s, TensorRef x, TensorRef out) override;
  void do_gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
               std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
               TensorRef c) override;
  void do_add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                   std::int64_t cols) override;
  void do_bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                        std::int64_t cols) override;

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
                            TensorRef out, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                            VocabSlice vocab) override;
  void do_embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                             TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                             std::int64_t hidden, VocabSlice vocab) override;
  void do_cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets, TensorRef losses,
                                TensorRef lse, std::int64_t rows, std::int64_t vocab) override;
  void do_cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets, TensorRef lse,
                                 TensorRef dlogits, std::int64_t rows, std::int64_t vocab,
                                 float grad_scale, std::int64_t vocab_begin) override;
  void do_cross_entropy_row_max(Stream& s, TensorRef logits, TensorRef row_max, std::int64_t rows,
                                std::int64_t vocab) override;
  void do_cross_entropy_partial_sums(Stream& s, TensorRef logits, TensorRef targets,
                                     TensorRef row_max, TensorRef sum_exp, TensorRef target_logit,
                                     std::int64_t rows, std::int64_t vocab,
                                     std::int64_t vocab_begin) override;
  void do_cross_entropy_combine(Stream& s, TensorRef row_max, TensorRef sum_exp,
                                TensorRef target_logit, TensorRef losses, TensorRef lse,
                                std::int64_t rows) override;
  void do_adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                     const AdamWParams& p) override;

  void* raw_allocate(std::size_t bytes, MemorySpace space) override;
  void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept override;

 private:
  SpaceCounter& counter(MemorySpace s) {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }
  const SpaceCounter& counter(MemorySpace s) const {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }
  BlockCache& cache(MemorySpace s) {
    return s == MemorySpace::Device ? device_cache_ : host_cache_;
  }

  CpuDeviceOptions options_;
  CpuStream compute_, comm_, copy_, send_, recv_;
  SpaceCounter device_mem_, host_mem_;
  BlockCache device_cache_{options_.cache_bytes}, host_cache_{options_.cache_bytes};
};

}  // namespace cephalo::backend::cpu_detail

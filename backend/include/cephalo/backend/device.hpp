#pragma once
// The device API of the execution backend (DESIGN §7). Header-only abstract classes so that
// the CPU device (this library) and the CUDA device (backend/cuda/, a separate library) both
// implement them without a dependency cycle. The executor only ever talks to these interfaces;
// switching from CPU to CUDA means handing it a different Device and Communicator.
//
// Ordering model (the same on both devices):
//   * A Stream is an in-order queue. Work submitted to one stream runs in submission order.
//     Work on different streams may overlap; order across streams only via Events.
//   * CPU: the compute stream runs kernels inline on the calling thread (so "submitted" means
//     "done" when the call returns); the comm and copy streams are worker threads.
//     CUDA: streams are cudaStream_t, kernels are launched asynchronously.
//   * Event::record(stream) marks a point in a stream; stream.wait(event) makes later work on
//     that stream wait for it; event.synchronize() blocks the host. Events also time: the
//     seconds between two recorded events (steady clock on CPU, cudaEvent on GPU).
//   * Errors raised by queued work (an MPI failure on the comm thread, a CUDA error) are
//     re-thrown as RuntimeFailure by the next synchronize() of that stream or event.
//
// Memory model: every allocation goes through Device::allocate, which accounts bytes per
// memory space, so the executor reports the true peak of what it allocated (weights, gathered
// units, gradients, activations, optimizer state). Buffers are RAII and free on destruction.
//
// Kernels: row-major, contiguous. All take a Stream (CPU ignores it for compute kernels, which
// run inline) and TensorRef views. Kernels named "..._backward" that produce parameter
// gradients ACCUMULATE into them (+=), because gradients of one layer are summed over
// micro-batches; input gradients are OVERWRITTEN.
//
// Element types (mixed precision, the same contract on every device). A call has one
// "compute type" T in {F32, BF16, F16}: activations, gathered parameters, input gradients and
// logits are T. Arithmetic is fp32 whatever T is; each output element is rounded to its storage
// type once per call. Exceptions to "everything is T":
//   * statistics are always F32: layer-norm mean/rstd, attention and cross-entropy lse, losses,
//     the output of sum(); token ids and targets are I32;
//   * parameter-gradient outputs (gemm C when it accumulates a weight gradient, dbias, dgamma,
//     dbeta, dwte, dwpe) are T or F32 — the += happens in fp32, so an F32 gradient buffer
//     sums micro-batches without bf16 rounding;
//   * gemm: A and B share T; C is T or F32;
//   * axpy: x and y may have different floating types; cast: any floating -> any floating;
//     fill/scale: any floating type;
//   * adamw_step: all F32 (master weights, gradient shard, moments).
// A device that cannot run a combination throws RuntimeFailure naming the kernel and types.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cephalo/backend/tensor.hpp"

namespace cephalo::backend {

class Device;
class Event;

enum class MemorySpace {
  Device,      // the device's own memory (CPU: ordinary heap of the rank process)
  PinnedHost,  // page-locked host memory for async host<->device copies (CPU: heap)
};

enum class StreamKind {
  Compute,  // kernels
  Comm,     // collectives (prefetch all-gathers, reduce-scatters)
  Copy,     // device<->host copies (activation offload)
};

inline const char* to_string(StreamKind k) {
  switch (k) {
    case StreamKind::Compute:
      return "compute";
    case StreamKind::Comm:
      return "comm";
    case StreamKind::Copy:
      return "copy";
  }
  return "?";
}

class Stream {
 public:
  virtual ~Stream() = default;
  virtual StreamKind kind() const = 0;
  // Blocks the host until all work submitted so far has completed; rethrows queued failures.
  virtual void synchronize() = 0;
  // Runs `fn` on the host once all earlier work of this stream has completed, in stream order
  // (CPU: on the stream's thread, or inline for the compute stream; CUDA: cudaLaunchHostFunc
  // or equivalent). Used by host-side collectives (MPI) and bookkeeping. `fn` may throw; the
  // exception surfaces at the next synchronize().
  virtual void enqueue_host(std::function<void()> fn) = 0;
  // Later work on this stream waits until `event` has completed.
  virtual void wait(Event& event) = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // Marks the current end of `stream`; completes when everything before it on `stream` has.
  virtual void record(Stream& stream) = 0;
  virtual bool query() = 0;        // completed?
  virtual void synchronize() = 0;  // block the host until completed; rethrows stream failures
  // Seconds from `start` to this event; both must have completed. Used for per-op timing.
  virtual double seconds_since(Event& start) = 0;
};

struct MemoryStats {
  std::size_t current = 0;   // bytes currently allocated through this device
  std::size_t peak = 0;      // highest `current` since the last reset_peak()
  std::size_t capacity = 0;  // usable capacity (0 = unknown / unlimited)
};

// Owned allocation. Move-only; frees through its device on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* owner, void* data, std::size_t bytes, ElemType type, MemorySpace space)
      : owner_(owner), data_(data), bytes_(bytes), type_(type), space_(space) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  void reset();  // defined after Device
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  ElemType type() const { return type_; }
  MemorySpace space() const { return space_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(bytes_ / element_size(type_)); }
  TensorRef ref() const { return {data_, numel(), type_}; }
  TensorRef slice(std::int64_t offset, std::int64_t count) const {
    return ref().slice(offset, count);
  }
  explicit operator bool() const { return data_ != nullptr || bytes_ != 0; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(type_, o.type_);
    std::swap(space_, o.space_);
  }
  Device* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  ElemType type_ = ElemType::F32;
  MemorySpace space_ = MemorySpace::Device;
};

enum class Transpose { No, Yes };

// Shapes of the fused attention kernels: input qkv is [batch*seq, 3*heads*head_dim] with the
// q, k, v blocks side by side (as produced by one QKV GEMM); output [batch*seq, heads*head_dim].
struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
};

struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  std::int64_t step = 1;  // 1-based, for bias correction
};

class Device {
 public:
  virtual ~Device() = default;

  // Identity, e.g. kind "cpu" / "cuda", name "cpu:0 (4 threads)" / "cuda:0 (NVIDIA H100)".
  virtual std::string kind() const = 0;
  virtual std::string name() const = 0;
  // Floating element types the kernels accept as compute type T (see the contract above).
  virtual bool supports(ElemType type) const = 0;

  // ---- streams, events, synchronisation ----
  virtual Stream& stream(StreamKind kind) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void synchronize() = 0;  // all streams

  // ---- memory ----
  Buffer allocate(std::size_t numel, ElemType type, MemorySpace space = MemorySpace::Device) {
    std::size_t bytes = numel * element_size(type);
    return Buffer(this, raw_allocate(bytes, space), bytes, type, space);
  }
  virtual MemoryStats memory_stats(MemorySpace space = MemorySpace::Device) const = 0;
  virtual void reset_peak() = 0;
  // Byte copy between any two spaces of this device, ordered on `stream` (host<->device copies
  // for offload go on the Copy stream). dst and src must not overlap.
  virtual void copy(Stream& stream, TensorRef dst, TensorRef src) = 0;
  // Blocking copies between ordinary host memory and device memory (setup, checkpoints).
  virtual void upload(TensorRef dst, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, TensorRef src, std::size_t bytes) = 0;

  // ---- elementwise and utility kernels ----
  virtual void fill(Stream& s, TensorRef x, float value) = 0;
  virtual void scale(Stream& s, TensorRef x, float alpha) = 0;              // x *= alpha
  virtual void axpy(Stream& s, float alpha, TensorRef x, TensorRef y) = 0;  // y += alpha x
  virtual void cast(Stream& s, TensorRef src, TensorRef dst) = 0;           // element types differ
  // out[0] = sum(x) in fp32 (out is a 1-element F32 tensor on the device).
  virtual void sum(Stream& s, TensorRef x, TensorRef out) = 0;

  // ---- dense algebra ----
  // C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k (A stored k x m
  // when transposed), op(B) is k x n. A, B, C share an element type; fp32 accumulation.
  virtual void gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
                    std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
                    TensorRef c) = 0;
  // y[rows x cols] += bias[cols] broadcast over rows.
  virtual void add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                        std::int64_t cols) = 0;
  // dbias[cols] += column sums of dy[rows x cols].
  virtual void bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                             std::int64_t cols) = 0;

  // ---- transformer kernels ----
  // y = (x - mean) * rstd * gamma + beta per row; saves mean[rows], rstd[rows] (F32).
  virtual void layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta,
                                  TensorRef y, TensorRef mean, TensorRef rstd, std::int64_t rows,
                                  std::int64_t cols, float eps) = 0;
  // dx = overwritten; dgamma, dbeta accumulated.
  virtual void layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                                   TensorRef rstd, TensorRef dy, TensorRef dx, TensorRef dgamma,
                                   TensorRef dbeta, std::int64_t rows, std::int64_t cols) = 0;
  // GELU, tanh approximation (as GPT-2). y and dx overwritten.
  virtual void gelu_forward(Stream& s, TensorRef x, TensorRef y) = 0;
  virtual void gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) = 0;
  // Causal multi-head attention, softmax scale 1/sqrt(head_dim). Saves the per-row
  // log-sum-exp lse[batch*heads*seq] (F32) so backward recomputes probabilities.
  virtual void attention_forward(Stream& s, const AttentionShape& shape, TensorRef qkv,
                                 TensorRef out, TensorRef lse) = 0;
  // dqkv overwritten.
  virtual void attention_backward(Stream& s, const AttentionShape& shape, TensorRef qkv,
                                  TensorRef out, TensorRef lse, TensorRef dout, TensorRef dqkv) = 0;
  // out[n, :] = wte[tokens[n], :] + wpe[n % seq, :]; tokens I32[rows].
  virtual void embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                                 TensorRef out, std::int64_t rows, std::int64_t seq,
                                 std::int64_t hidden) = 0;
  // dwte[tokens[n]] += dout[n]; dwpe[n % seq] += dout[n].
  virtual void embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                                  TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                                  std::int64_t hidden) = 0;
  // Per-row softmax cross-entropy of logits[rows x vocab] against targets I32[rows]:
  // losses[rows] (F32) = lse - logit[target]; lse[rows] (F32) saved for backward.
  virtual void cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets,
                                     TensorRef losses, TensorRef lse, std::int64_t rows,
                                     std::int64_t vocab) = 0;
  // dlogits = (softmax(logits) - onehot(target)) * grad_scale, overwritten (may alias logits).
  virtual void cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets, TensorRef lse,
                                      TensorRef dlogits, std::int64_t rows, std::int64_t vocab,
                                      float grad_scale) = 0;

  // ---- optimizer ----
  // Decoupled-weight-decay Adam on fp32 param/grad/m/v of equal length.
  virtual void adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                          const AdamWParams& p) = 0;

 protected:
  // Allocation hooks: the implementation accounts `bytes` in `space` (current and peak).
  virtual void* raw_allocate(std::size_t bytes, MemorySpace space) = 0;
  virtual void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept = 0;
  friend class Buffer;
};

inline void Buffer::reset() {
  if (owner_ && (data_ || bytes_)) owner_->raw_free(data_, bytes_, space_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace cephalo::backend

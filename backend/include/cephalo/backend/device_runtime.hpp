#pragma once
// The runtime half of the device API (device.hpp): identity, streams, events, allocation with
// per-space accounting, copies. The ordering and memory models are described in device.hpp.
// Public functions with preconditions are non-virtual: they check once, for every device, and
// call the protected do_* implementation; the rest is plain virtual.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cephalo/backend/tensor.hpp"

namespace cephalo::backend {

class DeviceRuntime;
class Event;

enum class MemorySpace {
  Device,      // the device's own memory (CPU: ordinary heap of the rank process)
  PinnedHost,  // page-locked host memory for async host<->device copies (CPU: heap)
};

enum class StreamKind {
  Compute,  // kernels
  Comm,     // collectives (prefetch all-gathers, reduce-scatters)
  Copy,     // device<->host copies (activation offload)
  // Pipeline transfers (DESIGN §4 "Pipeline transfers"): sends on one stream, receives on
  // another, so that a receive never waits behind a send whose receiver is itself waiting to
  // send (two neighbouring stages each sending first), and neither waits for compute.
  Send,
  Recv,
};
constexpr int kNumStreamKinds = 5;

inline const char* to_string(StreamKind k) {
  switch (k) {
    case StreamKind::Compute:
      return "compute";
    case StreamKind::Comm:
      return "comm";
    case StreamKind::Copy:
      return "copy";
    case StreamKind::Send:
      return "send";
    case StreamKind::Recv:
      return "recv";
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
  Buffer(DeviceRuntime* owner, void* data, std::size_t bytes, ElemType type, MemorySpace space)
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
  DeviceRuntime* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  ElemType type_ = ElemType::F32;
  MemorySpace space_ = MemorySpace::Device;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Identity, e.g. kind "cpu" / "cuda", name "cpu:0 (4 threads)" / "cuda:0 (NVIDIA H100)".
  virtual std::string kind() const = 0;
  virtual std::string name() const = 0;

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
  // Byte copy of src.bytes() between any two spaces of this device, ordered on `stream`
  // (host<->device copies for offload go on the Copy stream). dst must hold at least as many
  // bytes; dst and src must not overlap.
  void copy(Stream& stream, TensorRef dst, TensorRef src);
  // Blocking copies of `bytes` between ordinary host memory and device memory (setup,
  // checkpoints); the device tensor must hold at least `bytes`.
  void upload(TensorRef dst, const void* host, std::size_t bytes);
  void download(void* host, TensorRef src, std::size_t bytes);

 protected:
  virtual void do_copy(Stream& stream, TensorRef dst, TensorRef src) = 0;
  virtual void do_upload(TensorRef dst, const void* host, std::size_t bytes) = 0;
  virtual void do_download(void* host, TensorRef src, std::size_t bytes) = 0;
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

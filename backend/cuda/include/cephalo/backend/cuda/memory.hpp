#pragma once
// Device memory with byte accounting, per-op event timing, and pinned host buffers for
// activation offload.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace cephalo::cuda {

// Stream-ordered device allocator on a private CUDA memory pool (cudaMallocFromPoolAsync) that
// keeps freed memory cached (release threshold = max) so steady-state iterations do not call
// into the driver. It counts the bytes the program holds (`in_use`, `peak`) and reports what
// the pool reserved from the device (`reserved`, `reserved_peak`): the difference is the
// allocator's fragmentation, which the memory cost model calibrates against.
class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device = 0);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Memory is usable on `stream` in stream order; use on another stream needs an event.
  void* allocate(std::size_t bytes, cudaStream_t stream);
  // Freed in stream order: the memory is reused only after work already on `stream` ends.
  void deallocate(void* ptr, cudaStream_t stream);

  std::size_t in_use() const { return in_use_; }
  std::size_t peak() const { return peak_; }
  void reset_peak() { peak_ = in_use_; }
  std::size_t reserved() const;       // bytes the pool holds from the device now
  std::size_t reserved_peak() const;  // high-water mark of reserved()
  std::size_t live_allocations() const { return sizes_.size(); }

 private:
  int device_ = 0;
  cudaMemPool_t pool_ = nullptr;
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
};

// Per-op timing with CUDA events: begin/end bracket an op on a stream; after the stream is
// synchronised, `collect` returns each op's elapsed device time. Events are pooled and reused
// across iterations.
class OpTimer {
 public:
  struct Record {
    std::string op;
    double milliseconds = 0.0;
  };
  OpTimer() = default;
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  void begin(const std::string& op, cudaStream_t stream);
  void end(cudaStream_t stream);  // closes the most recent open op on any stream (LIFO)
  // Synchronises on the last event and returns the records in begin order; clears them.
  std::vector<Record> collect();

 private:
  cudaEvent_t take_event();
  struct Pending {
    std::string op;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  std::vector<cudaEvent_t> free_events_;
  std::vector<Pending> pending_;
  std::vector<std::size_t> open_;
};

// Host offload of layer-boundary activations: pinned host slots and a dedicated copy stream.
// Ordering (all on the device, the host never blocks):
//  * offload(slot, src, bytes, producer): the copy stream waits for an event recorded on the
//    producer stream AFTER the producing kernel, so no copy starts before its input is written;
//  * release(slot, stream): `stream` waits until the device->host copy has finished, so the
//    device buffer may be overwritten or freed afterwards;
//  * prefetch(slot, dst): host->device copy on the copy stream after the offload finished;
//  * wait_prefetched(slot, consumer): the consumer stream waits for the prefetch.
class HostOffloader {
 public:
  // `slot_bytes` per slot; the pinned memory is allocated once (cudaHostAlloc).
  HostOffloader(std::size_t slots, std::size_t slot_bytes);
  ~HostOffloader();
  HostOffloader(const HostOffloader&) = delete;
  HostOffloader& operator=(const HostOffloader&) = delete;

  void offload(std::size_t slot, const void* device_src, std::size_t bytes, cudaStream_t producer);
  void release(std::size_t slot, cudaStream_t stream);
  void prefetch(std::size_t slot, void* device_dst);
  void wait_prefetched(std::size_t slot, cudaStream_t consumer);

  cudaStream_t copy_stream() const { return copy_stream_; }
  const void* host_data(std::size_t slot) const;  // valid after the offload completed
  std::size_t pinned_bytes() const { return slots_.size() * slot_bytes_; }

 private:
  struct Slot {
    void* host = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t produced = nullptr, offloaded = nullptr, prefetched = nullptr;
  };
  Slot& at(std::size_t slot);
  std::vector<Slot> slots_;
  std::size_t slot_bytes_ = 0;
  cudaStream_t copy_stream_ = nullptr;
};

}  // namespace cephalo::cuda

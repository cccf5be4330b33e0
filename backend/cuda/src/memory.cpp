#include "cephalo/backend/cuda/memory.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::cuda {

// ---- DeviceAllocator ---------------------------------------------------------------------------
DeviceAllocator::DeviceAllocator(int device) : device_(device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  CEPHALO_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  // Keep freed memory in the pool: returning it to the driver at every synchronisation would
  // make each iteration pay cudaMalloc costs again.
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  CEPHALO_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  // No hidden cross-stream waits: memory freed on one stream is reused by an allocation on
  // another only once the free has completed (opportunistic reuse), never by making the
  // allocating stream wait for the freeing one, which would silently serialise the comm and
  // compute streams.
  int no = 0;
  CEPHALO_CUDA_CHECK(
      cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &no));
}

DeviceAllocator::~DeviceAllocator() {
  if (pool_) {
    cudaDeviceSynchronize();  // stream-ordered frees must have run before the pool goes
    cudaMemPoolDestroy(pool_);
  }
}

void* DeviceAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) bytes = 1;  // distinct, valid pointers for empty buffers
  void* ptr = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr, bytes, pool_, stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw RuntimeFailure("CUDA out of memory on device " + std::to_string(device_) +
                         ": asked for " + std::to_string(bytes) + " bytes with " +
                         std::to_string(in_use_) + " in use and " + std::to_string(reserved()) +
                         " reserved");
  }
  CEPHALO_CUDA_CHECK(status);
  sizes_[ptr] = bytes;
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  const auto it = sizes_.find(ptr);
  if (it == sizes_.end()) throw Error("DeviceAllocator: freeing a pointer it did not allocate");
  in_use_ -= it->second;
  sizes_.erase(it);
  CEPHALO_CUDA_CHECK(cudaFreeAsync(ptr, stream));
}

std::size_t DeviceAllocator::reserved() const {
  std::uint64_t v = 0;
  CEPHALO_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v));
  return static_cast<std::size_t>(v);
}

std::size_t DeviceAllocator::reserved_peak() const {
  std::uint64_t v = 0;
  CEPHALO_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &v));
  return static_cast<std::size_t>(v);
}

// ---- OpTimer --------------------------------------------------------------------------------
OpTimer::~OpTimer() {
  for (auto& p : pending_) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  for (auto e : free_events_) cudaEventDestroy(e);
}

cudaEvent_t OpTimer::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CEPHALO_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void OpTimer::begin(const std::string& op, cudaStream_t stream) {
  Pending p;
  p.op = op;
  p.start = take_event();
  CEPHALO_CUDA_CHECK(cudaEventRecord(p.start, stream));
  pending_.push_back(std::move(p));
  open_.push_back(pending_.size() - 1);
}

void OpTimer::end(cudaStream_t stream) {
  if (open_.empty()) throw Error("OpTimer::end without a matching begin");
  Pending& p = pending_[open_.back()];
  open_.pop_back();
  p.stop = take_event();
  CEPHALO_CUDA_CHECK(cudaEventRecord(p.stop, stream));
}

std::vector<OpTimer::Record> OpTimer::collect() {
  if (!open_.empty()) throw Error("OpTimer::collect with ops still open");
  std::vector<Record> out;
  out.reserve(pending_.size());
  for (auto& p : pending_) {
    CEPHALO_CUDA_CHECK(cudaEventSynchronize(p.stop));
    float ms = 0.0f;
    CEPHALO_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    out.push_back({p.op, ms});
    free_events_.push_back(p.start);
    free_events_.push_back(p.stop);
  }
  pending_.clear();
  return out;
}

// ---- HostOffloader --------------------------------------------------------------------------
HostOffloader::HostOffloader(std::size_t slots, std::size_t slot_bytes)
    : slots_(slots), slot_bytes_(slot_bytes) {
  CEPHALO_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  for (auto& s : slots_) {
    CEPHALO_CUDA_CHECK(
        cudaHostAlloc(&s.host, slot_bytes_ == 0 ? 1 : slot_bytes_, cudaHostAllocDefault));
    // Timing is not needed on ordering events; disabling it makes record/wait cheaper.
    CEPHALO_CUDA_CHECK(cudaEventCreateWithFlags(&s.produced, cudaEventDisableTiming));
    CEPHALO_CUDA_CHECK(cudaEventCreateWithFlags(&s.offloaded, cudaEventDisableTiming));
    CEPHALO_CUDA_CHECK(cudaEventCreateWithFlags(&s.prefetched, cudaEventDisableTiming));
  }
}

HostOffloader::~HostOffloader() {
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (auto& s : slots_) {
    if (s.host) cudaFreeHost(s.host);
    if (s.produced) cudaEventDestroy(s.produced);
    if (s.offloaded) cudaEventDestroy(s.offloaded);
    if (s.prefetched) cudaEventDestroy(s.prefetched);
  }
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

HostOffloader::Slot& HostOffloader::at(std::size_t slot) {
  if (slot >= slots_.size())
    throw Error("HostOffloader: slot " + std::to_string(slot) + " out of " +
                std::to_string(slots_.size()));
  return slots_[slot];
}

const void* HostOffloader::host_data(std::size_t slot) const {
  if (slot >= slots_.size()) throw Error("HostOffloader: slot out of range");
  return slots_[slot].host;
}

void HostOffloader::offload(std::size_t slot, const void* device_src, std::size_t bytes,
                            cudaStream_t producer) {
  Slot& s = at(slot);
  if (bytes > slot_bytes_)
    throw Error("HostOffloader: " + std::to_string(bytes) + " bytes exceed the slot size " +
                std::to_string(slot_bytes_));
  s.bytes = bytes;
  CEPHALO_CUDA_CHECK(cudaEventRecord(s.produced, producer));
  CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, s.produced, 0));
  CEPHALO_CUDA_CHECK(
      cudaMemcpyAsync(s.host, device_src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
  CEPHALO_CUDA_CHECK(cudaEventRecord(s.offloaded, copy_stream_));
}

void HostOffloader::release(std::size_t slot, cudaStream_t stream) {
  CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(stream, at(slot).offloaded, 0));
}

void HostOffloader::prefetch(std::size_t slot, void* device_dst) {
  Slot& s = at(slot);
  // Same stream as the offload, so it is already ordered after it; the explicit wait keeps
  // that true if prefetches ever move to their own stream.
  CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, s.offloaded, 0));
  CEPHALO_CUDA_CHECK(
      cudaMemcpyAsync(device_dst, s.host, s.bytes, cudaMemcpyHostToDevice, copy_stream_));
  CEPHALO_CUDA_CHECK(cudaEventRecord(s.prefetched, copy_stream_));
}

void HostOffloader::wait_prefetched(std::size_t slot, cudaStream_t consumer) {
  CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(consumer, at(slot).prefetched, 0));
}

}  // namespace cephalo::cuda

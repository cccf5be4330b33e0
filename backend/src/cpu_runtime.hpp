#pragma once
// Private to the CPU device: its streams (the compute stream inline on the calling thread, comm
// and copy streams on worker threads), events (steady-clock stamps), per-space byte counters and
// the exact-size cache of freed blocks. Defined in cpu_runtime.cpp.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "cephalo/backend/device.hpp"

namespace cephalo::backend::cpu_detail {

using Clock = std::chrono::steady_clock;

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = true;  // an event never recorded counts as complete (CUDA semantics)
  Clock::time_point when{};
  std::exception_ptr error;
};

class CpuStream final : public Stream {
 public:
  CpuStream(StreamKind kind, bool threaded);
  ~CpuStream() override;
  StreamKind kind() const override { return kind_; }
  void enqueue_host(std::function<void()> fn) override;
  void synchronize() override;
  void wait(Event& event) override;
  // Failure of earlier queued work, if any (checked by events recorded behind it).
  std::exception_ptr error();

 private:
  void run();  // the worker thread's loop

  StreamKind kind_;
  bool threaded_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

class CpuEvent final : public Event {
 public:
  void record(Stream& stream) override;
  bool query() override;
  void synchronize() override;
  double seconds_since(Event& start) override;
  std::shared_ptr<EventState> state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
  CpuStream* stream_ = nullptr;
};

struct SpaceCounter {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t b);
  void sub(std::size_t b) { current.fetch_sub(b); }
};

// Freed blocks kept for reuse, by exact (rounded) size. Returning every buffer to the C heap
// made each step's gathered units, activations and temporaries fresh mmap'd pages (glibc maps
// blocks above 128 KiB), so every first write page-faulted: collectives on new buffers ran
// several times slower than the profile's warm ones, and compute paid too. The executor's
// sizes repeat from step to step, so an exact-size cache (what a GPU caching allocator does)
// turns them into reuse. Bounded: beyond `limit` cached bytes a freed block goes back to the
// heap. Accounting is unaffected (it counts what is allocated, not what is cached).
class BlockCache {
 public:
  explicit BlockCache(std::size_t limit) : limit_(limit) {}
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static std::size_t rounded(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
  void* take(std::size_t bytes);                   // a cached block of this size, or a new one
  void give(void* p, std::size_t bytes) noexcept;  // cache it, or free it beyond the limit

 private:
  std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_ = 0;
  std::size_t limit_;
};

}  // namespace cephalo::backend::cpu_detail

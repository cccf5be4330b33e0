#pragma once
// Private to the CPU device: its streams (the compute stream inline on the calling thread, comm
// and copy streams on worker threads), events (steady-clock stamps), per-space byte counters and
// the exact-size cache of freed blocks.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "cephalo/backend/device.hpp"
#include "cephalo/core/error.hpp"

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
  CpuStream(StreamKind kind, bool threaded) : kind_(kind), threaded_(threaded) {
    if (threaded_) worker_ = std::thread([this] { run(); });
  }
  ~CpuStream() override {
    if (threaded_) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
  }
  StreamKind kind() const override { return kind_; }

  void enqueue_host(std::function<void()> fn) override {
    if (!threaded_) {
      fn();  // the compute stream is the calling thread: in order by construction
      return;
    }
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
      ++submitted_;
    }
    cv_.notify_all();
  }

  void synchronize() override {
    if (!threaded_) return;
    std::unique_lock lock(mu_);
    std::uint64_t target = submitted_;
    done_cv_.wait(lock, [&] { return completed_ >= target; });
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  void wait(Event& event) override;

  // Failure of earlier queued work, if any (checked by events recorded behind it).
  std::exception_ptr error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr failure;
      // After a failure the stream is poisoned: later work is skipped (it would read garbage)
      // but still counted so that synchronize() returns and reports the first error.
      bool poisoned;
      {
        std::lock_guard lock(mu_);
        poisoned = error_ != nullptr;
      }
      if (!poisoned) {
        try {
          fn();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      {
        std::lock_guard lock(mu_);
        if (failure && !error_) error_ = failure;
        ++completed_;
      }
      done_cv_.notify_all();
    }
  }

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
  void record(Stream& stream) override {
    auto state = std::make_shared<EventState>();
    state->done = false;
    state_ = state;
    stream.enqueue_host([state] {
      std::lock_guard lock(state->mu);
      state->when = Clock::now();
      state->done = true;
      state->cv.notify_all();
    });
    stream_ = static_cast<CpuStream*>(&stream);
  }
  bool query() override {
    std::lock_guard lock(state_->mu);
    return state_->done;
  }
  void synchronize() override {
    {
      std::unique_lock lock(state_->mu);
      state_->cv.wait(lock, [&] { return state_->done; });
    }
    if (stream_)
      if (auto e = stream_->error()) std::rethrow_exception(e);
  }
  double seconds_since(Event& start) override {
    auto& s = static_cast<CpuEvent&>(start);
    synchronize();
    s.synchronize();
    return std::chrono::duration<double>(state_->when - s.state_->when).count();
  }
  std::shared_ptr<EventState> state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
  CpuStream* stream_ = nullptr;
};

inline void CpuStream::wait(Event& event) {
  auto state = static_cast<CpuEvent&>(event).state();
  auto block = [state] {
    std::unique_lock lock(state->mu);
    state->cv.wait(lock, [&] { return state->done; });
  };
  if (!threaded_)
    block();
  else
    enqueue_host(block);
}

struct SpaceCounter {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t b) {
    std::size_t now = current.fetch_add(b) + b;
    std::size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
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
  ~BlockCache() {
    for (auto& [bytes, p] : free_) std::free(p);
  }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static std::size_t rounded(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

  void* take(std::size_t bytes) {
    const std::size_t r = rounded(bytes);
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(r);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= r;
        return p;
      }
    }
    // 64-byte alignment for vectorised Eigen kernels (4 KiB: page-aligned blocks).
    return std::aligned_alloc(4096, r);
  }
  void give(void* p, std::size_t bytes) noexcept {
    const std::size_t r = rounded(bytes);
    {
      std::lock_guard lock(mu_);
      if (cached_ + r <= limit_) {
        try {
          free_.emplace(r, p);
          cached_ += r;
          return;
        } catch (...) {  // no memory for the map node: release the block instead
        }
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_ = 0;
  std::size_t limit_;
};

}  // namespace cephalo::backend::cpu_detail

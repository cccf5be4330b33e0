// The CPU device's streams, events, byte counters and block cache (cpu_runtime.hpp).
#include "cpu_runtime.hpp"

#include <cstdlib>
#include <utility>

namespace cephalo::backend::cpu_detail {

CpuStream::CpuStream(StreamKind kind, bool threaded) : kind_(kind), threaded_(threaded) {
  if (threaded_) worker_ = std::thread([this] { run(); });
}

CpuStream::~CpuStream() {
  if (threaded_) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

void CpuStream::enqueue_host(std::function<void()> fn) {
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

void CpuStream::synchronize() {
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

void CpuStream::wait(Event& event) {
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

std::exception_ptr CpuStream::error() {
  std::lock_guard lock(mu_);
  return error_;
}

void CpuStream::run() {
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

void CpuEvent::record(Stream& stream) {
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

bool CpuEvent::query() {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

void CpuEvent::synchronize() {
  {
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done; });
  }
  if (stream_)
    if (auto e = stream_->error()) std::rethrow_exception(e);
}

double CpuEvent::seconds_since(Event& start) {
  auto& s = static_cast<CpuEvent&>(start);
  synchronize();
  s.synchronize();
  return std::chrono::duration<double>(state_->when - s.state_->when).count();
}

void SpaceCounter::add(std::size_t b) {
  std::size_t now = current.fetch_add(b) + b;
  std::size_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {
  }
}

BlockCache::~BlockCache() {
  for (auto& [bytes, p] : free_) std::free(p);
}

void* BlockCache::take(std::size_t bytes) {
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

void BlockCache::give(void* p, std::size_t bytes) noexcept {
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

}  // namespace cephalo::backend::cpu_detail

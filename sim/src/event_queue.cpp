#include "cephalo/sim/event_queue.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::sim {

Time to_ticks(double seconds) {
  if (!(seconds >= 0))
    throw std::invalid_argument("duration out of range: " + std::to_string(seconds) + " s");
  // Finite but too long (valid hardware numbers at their extremes, not a bug): the user hears
  // it as an infeasible request (exit 3), not a crash (exit 4). One op is at most 1e9 s and the
  // clock at most kMaxTime (about 146 years), so `now + duration` cannot overflow.
  if (seconds > kMaxDurationSeconds)
    throw InfeasibleError("an op would take " + format_seconds(seconds) +
                          ", more than the simulator's 1e9 s (31 years) per op; check the "
                          "cluster's bandwidths, FLOP rates and slowdowns");
  return static_cast<Time>(std::llround(seconds * 1e9));
}

// ----- binary heap ---------------------------------------------------------------------------

void BinaryHeapQueue::push(const Event& e) {
  heap_.push_back(e);
  std::size_t i = heap_.size() - 1;
  while (i > 0) {
    std::size_t parent = (i - 1) / 2;
    if (!earlier(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

const Event& BinaryHeapQueue::top() const {
  if (heap_.empty()) throw std::out_of_range("pop from an empty event queue");
  return heap_.front();
}

Event BinaryHeapQueue::pop() {
  if (heap_.empty()) throw std::out_of_range("pop from an empty event queue");
  Event result = heap_.front();
  Event last = heap_.back();
  heap_.pop_back();
  const std::size_t n = heap_.size();
  if (n == 0) return result;
  std::size_t i = 0;
  for (;;) {
    std::size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && earlier(heap_[c + 1], heap_[c])) ++c;
    if (!earlier(heap_[c], last)) break;
    heap_[i] = heap_[c];
    i = c;
  }
  heap_[i] = last;
  return result;
}

// ----- pairing heap --------------------------------------------------------------------------

std::int32_t PairingHeapQueue::meld(std::int32_t a, std::int32_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (earlier(events_[b], events_[a])) std::swap(a, b);
  // b becomes a's first child. Ties keep `a` (the earlier-inserted side) on top.
  sibling_[b] = child_[a];
  child_[a] = b;
  return a;
}

void PairingHeapQueue::push(const Event& e) {
  std::int32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
    events_[n] = e;
    child_[n] = -1;
    sibling_[n] = -1;
  } else {
    n = static_cast<std::int32_t>(events_.size());
    events_.push_back(e);
    child_.push_back(-1);
    sibling_.push_back(-1);
  }
  root_ = meld(root_, n);
  ++size_;
}

const Event& PairingHeapQueue::top() const {
  if (root_ < 0) throw std::out_of_range("pop from an empty event queue");
  return events_[root_];
}

Event PairingHeapQueue::pop() {
  if (root_ < 0) throw std::out_of_range("pop from an empty event queue");
  Event result = events_[root_];
  std::int32_t first = child_[root_];
  free_.push_back(root_);
  --size_;
  // Two-pass pairing: meld neighbours left to right, then fold the pairs right to left.
  pairs_.clear();
  while (first >= 0) {
    std::int32_t a = first, b = sibling_[a];
    if (b < 0) {
      sibling_[a] = -1;
      pairs_.push_back(a);
      break;
    }
    first = sibling_[b];
    sibling_[a] = -1;
    sibling_[b] = -1;
    pairs_.push_back(meld(a, b));
  }
  std::int32_t r = -1;
  for (auto it = pairs_.rbegin(); it != pairs_.rend(); ++it) r = meld(*it, r);
  root_ = r;
  return result;
}

void PairingHeapQueue::clear() {
  events_.clear();
  child_.clear();
  sibling_.clear();
  free_.clear();
  root_ = -1;
  size_ = 0;
}

// ----- factory and engine --------------------------------------------------------------------

const std::vector<std::string>& event_queue_names() {
  static const std::vector<std::string> names{"binary-heap", "pairing-heap"};
  return names;
}

std::unique_ptr<EventQueue> make_event_queue(const std::string& name) {
  if (name == "binary-heap") return std::make_unique<BinaryHeapQueue>();
  if (name == "pairing-heap") return std::make_unique<PairingHeapQueue>();
  throw NotFoundError("event queue", name, event_queue_names());
}

Engine::Engine(std::unique_ptr<EventQueue> queue) : queue_(std::move(queue)) {
  if (!queue_) throw std::invalid_argument("Engine needs an event queue");
}

void Engine::schedule_at(Time time, std::uint32_t kind, std::uint32_t target, std::uint64_t data) {
  if (time > kMaxTime)
    throw InfeasibleError("the simulated iteration would last more than " +
                          format_seconds(to_seconds(kMaxTime)) +
                          ", beyond the simulator's clock; check the cluster's bandwidths, FLOP "
                          "rates and slowdowns");
  if (time < now_)
    throw std::logic_error("event scheduled in the past: t=" + std::to_string(time) +
                           " ns < now=" + std::to_string(now_) + " ns");
  queue_->push(Event{time, next_seq_++, kind, target, data});
}

void Engine::advance_to(Time t) {
  if (t < now_)
    throw std::logic_error("simulated time ran backwards: " + std::to_string(t) + " ns after " +
                           std::to_string(now_) + " ns");
  now_ = t;
}

}  // namespace cephalo::sim

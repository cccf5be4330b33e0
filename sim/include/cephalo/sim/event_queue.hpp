#pragma once
// The discrete-event engine's core: integer simulated time, events ordered by (time, sequence)
// so that runs are bit-for-bit reproducible, and the priority queue behind a small interface
// with more than one implementation (all tested by one typed suite, measured by a hold-model
// benchmark).
//
// Time resolution: 1 ns (`Time` counts nanoseconds in an int64: ±292 years). Durations from
// the cost models (double seconds) are rounded to the nearest nanosecond once, when the op or
// flow is scheduled.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cephalo::sim {

using Time = std::int64_t;  // nanoseconds
constexpr Time kNanosecond = 1;
constexpr Time kMicrosecond = 1000;
constexpr Time kSecond = 1000000000;

// Bounds of the clock: one duration at most 1e9 s, an event at most 2^62 ns (~146 years), so
// adding a duration to any scheduled time never overflows.
constexpr double kMaxDurationSeconds = 1e9;
constexpr Time kMaxTime = Time{1} << 62;
// Seconds to ticks, rounded to the nearest nanosecond; throws std::invalid_argument for a
// negative or NaN duration, InfeasibleError for one beyond kMaxDurationSeconds.
Time to_ticks(double seconds);
inline double to_seconds(Time t) { return static_cast<double>(t) * 1e-9; }

struct Event {
  Time time = 0;
  std::uint64_t seq = 0;     // assigned by the engine; breaks ties in insertion order
  std::uint32_t kind = 0;    // meaning defined by the user of the engine
  std::uint32_t target = 0;  // e.g. an op or flow id
  std::uint64_t data = 0;    // e.g. a version stamp for lazy cancellation
};

inline bool earlier(const Event& a, const Event& b) {
  return a.time < b.time || (a.time == b.time && a.seq < b.seq);
}

class EventQueue {
 public:
  virtual ~EventQueue() = default;
  virtual void push(const Event& event) = 0;
  // Removes and returns the earliest event; std::out_of_range when empty.
  virtual Event pop() = 0;
  virtual const Event& top() const = 0;  // std::out_of_range when empty
  virtual bool empty() const = 0;
  virtual std::size_t size() const = 0;
  virtual void clear() = 0;
  virtual const char* name() const = 0;
};

// Implicit binary min-heap in a vector.
class BinaryHeapQueue final : public EventQueue {
 public:
  void push(const Event& event) override;
  Event pop() override;
  const Event& top() const override;
  bool empty() const override { return heap_.empty(); }
  std::size_t size() const override { return heap_.size(); }
  void clear() override { heap_.clear(); }
  const char* name() const override { return "binary-heap"; }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  std::vector<Event> heap_;
};

// Pairing heap with nodes in a pool (indices, free list): O(1) push, amortised O(log n) pop.
class PairingHeapQueue final : public EventQueue {
 public:
  void push(const Event& event) override;
  Event pop() override;
  const Event& top() const override;
  bool empty() const override { return root_ < 0; }
  std::size_t size() const override { return size_; }
  void clear() override;
  const char* name() const override { return "pairing-heap"; }

 private:
  std::int32_t meld(std::int32_t a, std::int32_t b);
  std::vector<Event> events_;
  std::vector<std::int32_t> child_, sibling_, free_, pairs_;
  std::int32_t root_ = -1;
  std::size_t size_ = 0;
};

const std::vector<std::string>& event_queue_names();  // {"binary-heap", "pairing-heap"}
// NotFoundError for an unknown name.
std::unique_ptr<EventQueue> make_event_queue(const std::string& name);

// The engine: owns the queue and the clock, stamps sequence numbers, and checks in every build
// type that time never runs backwards (std::logic_error).
class Engine {
 public:
  explicit Engine(std::unique_ptr<EventQueue> queue = std::make_unique<BinaryHeapQueue>());
  Time now() const { return now_; }
  std::uint64_t processed() const { return processed_; }
  std::size_t pending() const { return queue_->size(); }
  const EventQueue& queue() const { return *queue_; }

  // Schedules at an absolute time >= now().
  void schedule_at(Time time, std::uint32_t kind, std::uint32_t target, std::uint64_t data = 0);
  void schedule_in(Time delay, std::uint32_t kind, std::uint32_t target, std::uint64_t data = 0) {
    schedule_at(now_ + delay, kind, target, data);
  }
  // Pops events in (time, seq) order and calls handler(const Event&) until the queue is empty.
  template <class Handler>
  void run(Handler&& handler) {
    while (!queue_->empty()) {
      Event e = queue_->pop();
      advance_to(e.time);
      ++processed_;
      handler(e);
    }
  }

 private:
  void advance_to(Time t);
  std::unique_ptr<EventQueue> queue_;
  Time now_ = 0;
  std::uint64_t next_seq_ = 0;
  std::uint64_t processed_ = 0;
};

}  // namespace cephalo::sim

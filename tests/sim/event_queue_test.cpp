#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/sim/event_queue.hpp"

namespace cephalo::sim {
namespace {

// One suite run over every queue implementation.
template <class Q>
class EventQueueTest : public ::testing::Test {
 protected:
  Q queue;
};
using Queues = ::testing::Types<BinaryHeapQueue, PairingHeapQueue>;
TYPED_TEST_SUITE(EventQueueTest, Queues);

TYPED_TEST(EventQueueTest, StartsEmptyAndRefusesToPopWhenEmpty) {
  EXPECT_TRUE(this->queue.empty());
  EXPECT_EQ(this->queue.size(), 0u);
  EXPECT_THROW(this->queue.pop(), std::out_of_range);
  EXPECT_THROW(this->queue.top(), std::out_of_range);
}

TYPED_TEST(EventQueueTest, PopsInTimeThenSequenceOrder) {
  std::mt19937_64 rng(42);
  std::vector<Event> events;
  for (std::uint64_t i = 0; i < 5000; ++i) {
    // Few distinct times, so ties are frequent and the sequence number must decide.
    Event e{static_cast<Time>(rng() % 50), i, 0, static_cast<std::uint32_t>(i), 0};
    events.push_back(e);
    this->queue.push(e);
  }
  EXPECT_EQ(this->queue.size(), events.size());
  std::stable_sort(events.begin(), events.end(), earlier);
  for (const Event& expected : events) {
    ASSERT_EQ(this->queue.top().seq, expected.seq);
    Event got = this->queue.pop();
    ASSERT_EQ(got.time, expected.time);
    ASSERT_EQ(got.seq, expected.seq);
    ASSERT_EQ(got.target, expected.target);
  }
  EXPECT_TRUE(this->queue.empty());
}

TYPED_TEST(EventQueueTest, InterleavedHoldOperationsMatchAReferenceQueue) {
  std::mt19937_64 rng(7);
  std::vector<Event> reference;
  std::uint64_t seq = 0;
  Time now = 0;
  for (int i = 0; i < 200; ++i) {
    Event e{static_cast<Time>(rng() % 1000), seq++, 0, 0, 0};
    reference.push_back(e);
    this->queue.push(e);
  }
  for (int step = 0; step < 20000; ++step) {
    auto it = std::min_element(reference.begin(), reference.end(), earlier);
    Event expected = *it;
    reference.erase(it);
    Event got = this->queue.pop();
    ASSERT_EQ(got.time, expected.time);
    ASSERT_EQ(got.seq, expected.seq);
    ASSERT_GE(got.time, now);
    now = got.time;
    int pushes = static_cast<int>(rng() % 3);  // population drifts up and down
    if (reference.empty()) pushes = 1;
    for (int k = 0; k < pushes && reference.size() < 400; ++k) {
      Event e{now + static_cast<Time>(rng() % 100), seq++, 0, 0, 0};
      reference.push_back(e);
      this->queue.push(e);
    }
    ASSERT_EQ(this->queue.size(), reference.size());
    if (reference.empty()) break;
  }
}

TYPED_TEST(EventQueueTest, ClearEmptiesAndTheQueueStaysUsable) {
  for (std::uint64_t i = 0; i < 10; ++i) this->queue.push({10 - static_cast<Time>(i), i, 0, 0, 0});
  this->queue.clear();
  EXPECT_TRUE(this->queue.empty());
  this->queue.push({5, 0, 0, 0, 0});
  this->queue.push({3, 1, 0, 0, 0});
  EXPECT_EQ(this->queue.pop().time, 3);
  EXPECT_EQ(this->queue.pop().time, 5);
}

TEST(Engine, RunsEventsInOrderAndStampsSequenceNumbers) {
  for (const auto& name : event_queue_names()) {
    Engine engine(make_event_queue(name));
    std::vector<std::uint32_t> seen;
    engine.schedule_at(20, 0, 1);
    engine.schedule_at(10, 0, 2);
    engine.schedule_at(10, 0, 3);  // same time as 2: inserted later, runs later
    engine.run([&](const Event& e) {
      seen.push_back(e.target);
      if (e.target == 2) engine.schedule_in(5, 0, 4);  // t = 15
      if (e.target == 4) engine.schedule_in(0, 0, 5);  // same time, after 4
    });
    EXPECT_EQ(seen, (std::vector<std::uint32_t>{2, 3, 4, 5, 1})) << name;
    EXPECT_EQ(engine.now(), 20);
    EXPECT_EQ(engine.processed(), 5u);
  }
}

TEST(Engine, RefusesEventsInThePast) {
  Engine engine;
  engine.schedule_at(100, 0, 0);
  bool threw = false;
  engine.run([&](const Event&) {
    try {
      engine.schedule_at(99, 0, 1);
    } catch (const std::logic_error&) {
      threw = true;
    }
  });
  EXPECT_TRUE(threw);
  EXPECT_EQ(engine.processed(), 1u);
}

TEST(Engine, UnknownQueueNameIsNotFound) {
  EXPECT_THROW(make_event_queue("calendar"), NotFoundError);
}

TEST(Time, SecondsRoundToTheNearestNanosecond) {
  EXPECT_EQ(to_ticks(1e-3), 1000000);
  EXPECT_EQ(to_ticks(1.4e-9), 1);
  EXPECT_EQ(to_ticks(0.0), 0);
  EXPECT_THROW(to_ticks(-1.0), std::invalid_argument);
  EXPECT_THROW(to_ticks(std::nan("")), std::invalid_argument);
}

}  // namespace
}  // namespace cephalo::sim

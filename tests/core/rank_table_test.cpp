// Cluster::ranks(): the rank table built once per shape of the node list (core/scenario.hpp's
// NodeList: read-only access, every change through its mutators, each dropping the table).
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "cephalo/core/scenario.hpp"

namespace cephalo {
namespace {

Node node_of(const std::string& name, const std::vector<std::string>& gpus) {
  Node n;
  n.name = name;
  for (const auto& g : gpus) {
    DeviceSlot slot;
    slot.type = g;
    slot.spec.name = g;
    n.devices.push_back(slot);
  }
  return n;
}

Cluster three_nodes() {
  Cluster c;
  c.nodes = {node_of("a", {"x", "y"}), node_of("b", {"z"}), node_of("c", {"u", "v", "w"})};
  return c;
}

// Every entry names the slot it should, node-major, as the plan numbers ranks.
void expect_numbered(const Cluster& c) {
  const auto& ranks = c.ranks();
  std::size_t r = 0;
  for (std::size_t n = 0; n < c.nodes.size(); ++n)
    for (std::size_t d = 0; d < c.nodes[n].devices.size(); ++d, ++r) {
      ASSERT_LT(r, ranks.size());
      EXPECT_EQ(ranks[r].rank, static_cast<int>(r));
      EXPECT_EQ(ranks[r].node, static_cast<int>(n));
      EXPECT_EQ(ranks[r].local_index, static_cast<int>(d));
      EXPECT_EQ(ranks[r].slot, &c.nodes[n].devices[d]);
    }
  EXPECT_EQ(ranks.size(), r);
  EXPECT_EQ(c.num_ranks(), static_cast<int>(r));
}

TEST(RankTable, NumbersDevicesNodeMajor) {
  const Cluster c = three_nodes();
  expect_numbered(c);
  EXPECT_EQ(c.ranks()[2].slot->spec.name, "z");
  EXPECT_EQ(c.ranks()[5].slot->spec.name, "w");
}

// The list cannot be changed behind the table's back: every way to reach a node is const.
template <class T>
constexpr bool is_const_ref = std::is_const_v<std::remove_reference_t<T>>;
static_assert(is_const_ref<decltype(std::declval<NodeList&>()[0])>);
static_assert(is_const_ref<decltype(std::declval<NodeList&>().at(0))>);
static_assert(is_const_ref<decltype(std::declval<NodeList&>().front())>);
static_assert(is_const_ref<decltype(std::declval<NodeList&>().back())>);
static_assert(is_const_ref<decltype(*std::declval<NodeList&>().begin())>);
static_assert(is_const_ref<decltype(std::declval<Cluster&>().nodes.vector())>);

TEST(RankTable, IsBuiltOnceAndSharedByQueries) {
  const Cluster c = three_nodes();
  const auto* first = &c.ranks();
  EXPECT_EQ(&c.ranks(), first);  // the same table, not a fresh list per call
  EXPECT_EQ(c.num_ranks(), 6);
  EXPECT_EQ(&c.ranks(), first);
}

TEST(RankTable, ACopyNumbersItsOwnSlots) {
  const Cluster original = three_nodes();
  expect_numbered(original);
  const Cluster copy = original;
  expect_numbered(copy);  // pointers into the copy's nodes, not the original's
  EXPECT_NE(copy.ranks()[0].slot, original.ranks()[0].slot);
  Cluster assigned;
  assigned.nodes = {node_of("q", {"x"})};
  EXPECT_EQ(assigned.num_ranks(), 1);
  assigned = original;
  expect_numbered(assigned);
  Cluster moved = std::move(assigned);
  expect_numbered(moved);
}

TEST(RankTable, FollowsNodesAddedRemovedOrReplaced) {
  Cluster c = three_nodes();
  expect_numbered(c);
  c.nodes.push_back(node_of("d", {"s", "t"}));
  expect_numbered(c);
  EXPECT_EQ(c.num_ranks(), 8);
  c.nodes.edit([](std::vector<Node>& n) { n.erase(n.begin()); });
  expect_numbered(c);
  EXPECT_EQ(c.ranks()[0].slot->spec.name, "z");
  c.nodes = {node_of("only", {"k"})};
  expect_numbered(c);
  c.nodes.clear();
  EXPECT_TRUE(c.ranks().empty());
  EXPECT_EQ(c.num_ranks(), 0);
}

TEST(RankTable, FollowsDevicesAddedToTheLastNode) {
  // The way builders grow a cluster: devices appended to the node being built.
  Cluster c;
  c.nodes.push_back(node_of("a", {"x"}));
  expect_numbered(c);
  for (int i = 0; i < 20; ++i) {
    c.nodes.edit(
        [](std::vector<Node>& n) { n.back().devices.push_back(n.back().devices.front()); });
    expect_numbered(c);
  }
  c.nodes.edit([](std::vector<Node>& n) { n.back().devices.pop_back(); });
  expect_numbered(c);
}

TEST(RankTable, FollowsDevicesAddedOrRemovedOnAnInnerNode) {
  // Not how builders work, but a stale table here would number every later rank wrongly.
  Cluster c = three_nodes();
  c.nodes.edit([](std::vector<Node>& n) { n[0].devices.reserve(8); });  // grows in place next
  expect_numbered(c);
  c.nodes.edit([](std::vector<Node>& n) { n[0].devices.push_back(n[0].devices.front()); });
  expect_numbered(c);
  EXPECT_EQ(c.num_ranks(), 7);
  c.nodes.edit([](std::vector<Node>& n) { n[1].devices.clear(); });
  expect_numbered(c);
  EXPECT_EQ(c.ranks()[3].node, 2);
  // The same shapes rebuilt from scratch (buffers freed and allocated again, possibly at the
  // same addresses) number as they should.
  for (int i = 0; i < 5; ++i) {
    c.nodes.clear();
    c.nodes.push_back(node_of("a", {"x", "y"}));
    c.nodes.push_back(node_of(
        "b", i % 2 ? std::vector<std::string>{"z"} : std::vector<std::string>{"z", "t", "s"}));
    c.nodes.push_back(node_of("c", {"u"}));
    expect_numbered(c);
  }
}

TEST(RankTable, AnEditThatThrowsStillDropsTheTable) {
  Cluster c = three_nodes();
  expect_numbered(c);
  EXPECT_THROW(c.nodes.edit([](std::vector<Node>& n) {
    n.pop_back();
    throw std::runtime_error("half done");
  }),
               std::runtime_error);
  expect_numbered(c);
  EXPECT_EQ(c.num_ranks(), 3);
}

TEST(RankTable, ReservingKeepsTheTable) {
  // Moving the nodes keeps their device slots where they are, so the table stays right.
  Cluster c = three_nodes();
  const auto* before = &c.ranks();
  c.nodes.reserve(64);
  EXPECT_EQ(&c.ranks(), before);
  expect_numbered(c);
}

TEST(RankTable, ConcurrentFirstQueriesAgree) {
  const Cluster c = three_nodes();
  std::vector<const std::vector<RankDevice>*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&c, &seen, t] { seen[t] = &c.ranks(); });
  for (auto& t : threads) t.join();
  for (const auto* s : seen) EXPECT_EQ(s, seen.front());
  expect_numbered(c);
}

}  // namespace
}  // namespace cephalo

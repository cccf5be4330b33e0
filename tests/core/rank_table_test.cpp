// Cluster::ranks(): the rank table built once per shape of the node list (core/scenario.hpp's
// NodeList: read-only access, every change through its mutators, each dropping the table).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cephalo/core/plan.hpp"
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

// A random cluster whose slots differ, when they do, in one field at a time: the type as
// written (an alias), the spec's name, a spec number, the slowdown, the threads; nodes of two
// link kinds. Alike slots sit on different nodes (each node its own copy), and in runs.
Cluster random_alike_cluster(std::mt19937& rng) {
  std::vector<DeviceSlot> pool;
  for (int i = 0; i < 6; ++i) {
    DeviceSlot slot;
    slot.type = "H100";
    slot.spec.name = "H100-SXM";
    slot.spec.memory_bytes = 80e9;
    slot.spec.peak_bf16 = 989e12;
    switch (i) {
      case 1:
        slot.type = "H100-SXM";
        break;  // the same device, named otherwise
      case 2:
        slot.spec.peak_bf16 = 900e12;
        break;  // an inline spec of the same name
      case 3:
        slot.slowdown = 2.0;
        break;  // emulated
      case 4:
        slot.threads = 4;
        break;  // a CPU device's threads
      case 5:
        slot.spec.name = slot.type = "A100";
        break;
      default:
        break;
    }
    pool.push_back(slot);
  }
  Cluster c;
  const int nodes = std::uniform_int_distribution<int>(1, 12)(rng);
  for (int n = 0; n < nodes; ++n) {
    Node node;
    node.name = "n" + std::to_string(n);
    node.intra_link.kind = rng() % 3 == 0 ? "pcie" : "nvlink";
    const int devices = std::uniform_int_distribution<int>(1, 6)(rng);
    const std::size_t run = rng() % pool.size();
    for (int d = 0; d < devices; ++d)
      node.devices.push_back(pool[rng() % 4 == 0 ? rng() % pool.size() : run]);
    c.nodes.push_back(std::move(node));
  }
  return c;
}

// The kinds are numbered by first rank, and two ranks share one exactly when what the kind
// stands for is equal: every slot field for slot_kind; spec name, slowdown and the node's
// link kind for device_kind (compared here rank pair by rank pair, the strings themselves).
TEST(RankTable, KindsJoinExactlyTheAlikeRanks) {
  std::mt19937 rng(20261207);
  for (int trial = 0; trial < 300; ++trial) {
    const Cluster c = random_alike_cluster(rng);
    const auto& ranks = c.ranks();
    int next_slot = 0, next_device = 0;
    for (const RankDevice& d : ranks) {
      ASSERT_LE(d.slot_kind, next_slot);
      ASSERT_LE(d.device_kind, next_device);
      next_slot = std::max(next_slot, d.slot_kind + 1);
      next_device = std::max(next_device, d.device_kind + 1);
    }
    for (const RankDevice& a : ranks)
      for (const RankDevice& b : ranks) {
        const DeviceSlot& x = *a.slot;
        const DeviceSlot& y = *b.slot;
        const bool same_slot = x.type == y.type && x.slowdown == y.slowdown &&
                               x.threads == y.threads && x.spec.name == y.spec.name &&
                               x.spec.peak_bf16 == y.spec.peak_bf16 &&
                               x.spec.memory_bytes == y.spec.memory_bytes;
        ASSERT_EQ(a.slot_kind == b.slot_kind, same_slot) << "ranks " << a.rank << ", " << b.rank;
        const bool same_device = x.spec.name == y.spec.name && x.slowdown == y.slowdown &&
                                 c.nodes[static_cast<std::size_t>(a.node)].intra_link.kind ==
                                     c.nodes[static_cast<std::size_t>(b.node)].intra_link.kind;
        ASSERT_EQ(a.device_kind == b.device_kind, same_device)
            << "ranks " << a.rank << ", " << b.rank;
      }
  }
}

TEST(RankTable, KindsFollowAChangedSlot) {
  Cluster c;
  c.nodes = {node_of("a", {"x", "x"}), node_of("b", {"x"})};
  EXPECT_EQ(c.ranks()[2].slot_kind, 0);
  c.nodes.edit([](std::vector<Node>& n) { n[1].devices[0].slowdown = 3.0; });
  EXPECT_EQ(c.ranks()[1].slot_kind, 0);
  EXPECT_EQ(c.ranks()[2].slot_kind, 1);
  EXPECT_EQ(c.ranks()[2].device_kind, 1);
}

// The plan bound's classes by kind count what classes by the device's strings count: the
// passes of one rank of every distinct (spec name, slowdown, node link kind, row).
TEST(RankTable, UnitPassesByKindAreThoseByName) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Scenario s;
    s.cluster = random_alike_cluster(rng);
    s.job.model.num_layers = std::uniform_int_distribution<int>(1, 40)(rng);
    Plan plan;
    for (const RankDevice& d : s.cluster.ranks()) {
      PlanRank r;
      r.rank = d.rank;
      r.node = d.node;
      r.batch = 1 + static_cast<int>(rng() % 2);
      r.micro_batch = 1;
      r.micro_batches = r.batch;
      r.state_share = rng() % 5 == 0 ? 0.5 : 0.25;
      plan.ranks.push_back(r);
    }
    using Key = std::tuple<std::string, double, std::string, int, int, int, double>;
    std::set<Key> seen;
    std::int64_t want = 0;
    for (const RankDevice& d : s.cluster.ranks()) {
      const PlanRank& r = plan.ranks[static_cast<std::size_t>(d.rank)];
      if (seen.emplace(d.slot->spec.name, d.slot->slowdown,
                       s.cluster.nodes[static_cast<std::size_t>(d.node)].intra_link.kind, r.batch,
                       r.micro_batch, r.micro_batches, r.state_share)
              .second)
        want += (s.job.model.num_layers + 2) * r.micro_batches;
    }
    ASSERT_EQ(class_unit_passes(plan, s), want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace cephalo

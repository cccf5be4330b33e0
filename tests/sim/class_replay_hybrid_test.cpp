// The class-representative replay equals the full replay under hybrid sharding: over random
// small multi-node clusters split into groups of k consecutive nodes (groups of alike and unlike
// nodes, equal and uneven shares within a group, layered / standard / no_sync, prefetch, host
// offload, forced OOMs), sim::simulate_plan's report equals the full replay's field for field
// (all but `events`, the replay's own work), and every op of every representative starts and
// ends at the same nanosecond. Ranks are alike only if their groups are alike too
// (sim/class_replay.hpp), so the test also checks that classes did compress.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/report.hpp"
#include "class_replay_support.hpp"

namespace cephalo::sim {
namespace {

struct HybridInstance {
  Scenario scenario;
  Plan plan;
};

// A random instance written as the user would write it (scenario and plan JSON), parsed and
// checked by core: nodes whose size and link depend on their GPU type only (so groups of
// same-type nodes are alike), groups of k consecutive nodes with shares normalised per group.
// `loose`: NICs of two speeds drawn per node, and groups of k consecutive ranks (a node may
// hold several groups, a group may hold parts of nodes).
HybridInstance random_hybrid(std::mt19937& rng, bool loose = false) {
  const std::vector<std::string> gpu = {"a100x80", "l4", "a6000"};
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int> size_of, batch_of, split_of;
  std::vector<Json> link_of;
  for (std::size_t t = 0; t < gpu.size(); ++t) {
    size_of.push_back(pick(1, 3));
    batch_of.push_back(pick(1, 2));
    split_of.push_back(pick(1, 2));
    link_of.push_back(t == 0 && pick(0, 1)
                          ? Json{{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "3us"}}
                          : Json{{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}});
  }
  const int nodes = pick(2, 5);
  const bool uneven = pick(0, 1) == 1;
  Json node_list = Json::array(), ranks = Json::array();
  std::vector<std::vector<double>> weights_of_node;
  int total = 0;
  for (int n = 0; n < nodes; ++n) {
    const auto t = static_cast<std::size_t>(n < 2 || pick(0, 1) ? pick(0, 1) : pick(0, 2));
    std::string name = std::to_string(n);  // (GCC 12 -Wrestrict false positive on "n" + ...)
    name.insert(name.begin(), 'n');
    node_list.push_back({{"name", name},
                         {"gpus", Json::array({{{"type", gpu[t]}, {"count", size_of[t]}}})},
                         {"intra_link", link_of[t]},
                         {"nic",
                          {{"kind", "ethernet"},
                           {"bandwidth", loose && pick(0, 1) ? "25Gbit/s" : "100Gbit/s"},
                           {"latency", "8us"}}}});
    weights_of_node.emplace_back(static_cast<std::size_t>(size_of[t]), uneven ? 1.0 + t : 1.0);
    for (int g = 0; g < size_of[t]; ++g) {
      const int mb = batch_of[t], count = split_of[t];
      ranks.push_back({{"rank", static_cast<int>(ranks.size())},
                       {"node", n},
                       {"gpu", gpu[t]},
                       {"batch", mb * count},
                       {"micro_batch", mb},
                       {"micro_batches", count}});
      total += mb * count;
    }
  }
  // Groups as lists of consecutive ranks, each with its ranks' weights.
  std::vector<std::vector<double>> group_weights;
  if (loose) {
    std::vector<double> all;
    for (const auto& w : weights_of_node) all.insert(all.end(), w.begin(), w.end());
    const int k = pick(1, std::max(1, static_cast<int>(all.size()) / 2));
    for (std::size_t first = 0; first < all.size(); first += static_cast<std::size_t>(k))
      group_weights.emplace_back(
          all.begin() + static_cast<std::ptrdiff_t>(first),
          all.begin() + static_cast<std::ptrdiff_t>(
                            std::min(all.size(), first + static_cast<std::size_t>(k))));
    if (group_weights.size() < 2) group_weights = {{all.front()}, {all.begin() + 1, all.end()}};
  } else {
    const int k = pick(1, nodes - 1);
    for (int first = 0; first < nodes; first += k) {
      group_weights.emplace_back();
      for (int n = first; n < std::min(nodes, first + k); ++n)
        for (double w : weights_of_node[static_cast<std::size_t>(n)])
          group_weights.back().push_back(w);
    }
  }
  Json groups = Json::array();
  int rank = 0;
  for (const auto& weights : group_weights) {
    Json group = Json::array();
    double sum = 0;
    for (double w : weights) sum += w;
    double assigned = 0;
    for (double w : weights) {
      group.push_back(rank);
      ranks[static_cast<std::size_t>(rank++)]["state_share"] = w / sum;
      assigned += w / sum;
    }
    ranks[static_cast<std::size_t>(rank - 1)]["state_share"] =
        ranks[static_cast<std::size_t>(rank - 1)]["state_share"].get<double>() + (1 - assigned);
    groups.push_back(group);
  }
  const std::vector<std::string> accumulations = {"layered", "standard", "no_sync"};
  const Json plan = {{"version", 1},
                     {"accumulation", accumulations[static_cast<std::size_t>(pick(0, 2))]},
                     {"offload", pick(0, 1) ? "host" : "none"},
                     {"prefetch", pick(0, 1) == 1},
                     {"uneven_collective", pick(0, 1) ? "grouped" : "padded"},
                     {"sharding", {{"kind", "hybrid"}, {"groups", groups}}},
                     {"ranks", ranks}};
  HybridInstance in;
  in.scenario = testing::class_test_scenario("class-replay-hybrid", node_list, 2, total);
  JsonReader pr(plan, "<hybrid plan>");
  in.plan = parse_plan(pr);
  validate_plan_for(in.plan, in.scenario, "<hybrid plan>");
  return in;
}

// Both replays of one instance: the full one over its whole graph, and sim::simulate_plan's.
struct BothReplays {
  traces::TrainingGraph graph;
  SimResult full, byclass;
};

BothReplays replay_both_ways(const HybridInstance& in, double usable_fraction) {
  const auto models = costmodels::make_cost_models(in.scenario, "roofline");
  SimOptions options;
  options.usable_fraction = usable_fraction;
  BothReplays out{traces::build_training_graph(in.plan, in.scenario), {}, {}};
  out.full = simulate(out.graph, in.scenario, in.plan, *models.compute, *models.comm, options);
  out.byclass = simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, options);
  return out;
}

TEST(ClassReplayHybrid, EqualsTheFullReplayOnRandomHybridPlans) {
  std::mt19937 rng(20261201);
  std::vector<HybridInstance> instances;
  while (instances.size() < 120) instances.push_back(random_hybrid(rng));
  int compressed = 0, cross_node_groups = 0, ooms = 0, trial = 0;
  for (const HybridInstance& in : instances) {
    // Every 9th with 2 % of the memory usable: out-of-memory verdicts must agree too.
    const auto [graph, full, byclass] = replay_both_ways(in, trial++ % 9 == 0 ? 0.02 : -1);
    ASSERT_TRUE(graph.layout().hybrid());
    const int ranks = in.scenario.cluster.num_ranks();
    SCOPED_TRACE("trial " + std::to_string(trial - 1) + ", " + std::to_string(ranks) +
                 " ranks in " + std::to_string(in.plan.sharding.groups.size()) + " groups, " +
                 std::to_string(byclass.replayed_ranks) + " replayed");
    ooms += full.report.oom;
    for (const auto& g : in.plan.sharding.groups)
      cross_node_groups += in.plan.ranks[static_cast<std::size_t>(g.front())].node !=
                           in.plan.ranks[static_cast<std::size_t>(g.back())].node;
    EXPECT_EQ(full.iteration_ns, byclass.iteration_ns);
    EXPECT_EQ(testing::comparable(full.report).dump(), testing::comparable(byclass.report).dump());
    if (byclass.replayed_ranks == ranks) continue;
    ++compressed;
    const auto classes = rank_classes(graph, in.scenario, in.plan);
    const auto small =
        traces::build_training_graph_of_ranks(in.plan, in.scenario, classes.representatives);
    // Every representative's program in both replays.
    for (int r : classes.representatives)
      ASSERT_EQ(testing::program_times(graph, full, r), testing::program_times(small, byclass, r))
          << "representative " << r;
  }
  EXPECT_GE(compressed, 40);
  EXPECT_GE(cross_node_groups, 20);
  EXPECT_GE(ooms, 5);
}

// Groups that share nodes (and nodes with NICs of two speeds, so alike groups of GPUs are not
// alike groups of links): the same equality, and alike positions of one group share a class.
TEST(ClassReplayHybrid, EqualsTheFullReplayWithGroupsAcrossNodesAndNics) {
  std::mt19937 rng(20261206);
  int compressed = 0, merged_positions = 0, trial = 0;
  for (int i = 0; i < 80; ++i) {
    const HybridInstance in = random_hybrid(rng, true);
    const auto [graph, full, byclass] = replay_both_ways(in, trial++ % 9 == 0 ? 0.02 : -1);
    SCOPED_TRACE("loose trial " + std::to_string(trial - 1));
    EXPECT_EQ(full.iteration_ns, byclass.iteration_ns);
    EXPECT_EQ(testing::comparable(full.report).dump(), testing::comparable(byclass.report).dump());
    compressed += byclass.replayed_ranks < in.scenario.cluster.num_ranks();
    // The planner's bound on a replay refuses it exactly above what it builds, saying that.
    const int built = byclass.replayed_ranks;
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    EXPECT_EQ(testing::refused_above(in.plan, in.scenario, models, built), 0);
    if (built > 1) {
      EXPECT_EQ(testing::refused_above(in.plan, in.scenario, models, built - 1), built);
    }
    const auto classes = rank_classes(graph, in.scenario, in.plan);
    for (std::size_t r = 0; r < classes.representative.size(); ++r) {
      const int rep = classes.representative[r];
      merged_positions +=
          rep != static_cast<int>(r) &&
          graph.layout().group_of(rep) == graph.layout().group_of(static_cast<int>(r));
    }
  }
  EXPECT_GE(compressed, 20);
  EXPECT_GE(merged_positions, 20);
}

}  // namespace
}  // namespace cephalo::sim

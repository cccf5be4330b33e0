// Hybrid sharding in the graph (traces/README.md "Hybrid sharding"): the layout's slices and
// cross-group pieces computed by hand, every gather/reduce-scatter spanning exactly one group,
// one cross-group reduction per unit after its last reduce-scatter, each rank's state charged
// at its group's share; and the plan key's bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

using testing::tiny_plan;
using testing::tiny_scenario;

Sharding hybrid(std::vector<std::vector<int>> groups) {
  Sharding s;
  s.kind = ShardingKind::Hybrid;
  s.groups = std::move(groups);
  return s;
}

TEST(ShardLayout, SlicesPerGroupAndPiecesAtTheIntersections) {
  const ShardLayout l(hybrid({{0, 1}, {2, 3}}), {0.3, 0.7, 0.6, 0.4}, {1000, 10});
  ASSERT_EQ(l.num_groups(), 2);
  EXPECT_TRUE(l.hybrid());
  EXPECT_EQ(l.group_of(3), 1);
  EXPECT_EQ(l.position(3), 1);
  EXPECT_EQ(l.slice(0, 0).offset, 0);
  EXPECT_EQ(l.slice(0, 0).count, 300);
  EXPECT_EQ(l.slice(0, 1).offset, 300);
  EXPECT_EQ(l.slice(0, 1).count, 700);
  EXPECT_EQ(l.slice(0, 2).offset, 0);
  EXPECT_EQ(l.slice(0, 2).count, 600);
  EXPECT_EQ(l.slice(0, 3).offset, 600);
  EXPECT_EQ(l.slice(0, 3).count, 400);
  // Pieces: [0,300) {0,2}, [300,600) {1,2}, [600,1000) {1,3}.
  const auto pieces = l.pieces(0);
  ASSERT_EQ(pieces.size(), 3u);
  const std::vector<std::vector<int>> owners = {{0, 2}, {1, 2}, {1, 3}};
  const std::vector<std::int64_t> bounds = {0, 300, 600, 1000};
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].offset, bounds[i]);
    EXPECT_EQ(pieces[i].count, bounds[i + 1] - bounds[i]);
    auto o = l.owners(pieces[i]);
    EXPECT_EQ(std::vector<int>(o.begin(), o.end()), owners[i]) << i;
  }
  // The checkpoint records group 0's copy, a partition in rank order.
  EXPECT_EQ(l.checkpoint_offsets(0), (std::vector<std::int64_t>{0, 300, 1000, 1000, 1000}));
  EXPECT_EQ(l.owned_elements(1), 700 + 7);
  EXPECT_EQ(l.group_counts(0, 1), (std::vector<std::int64_t>{600, 400}));
}

TEST(ShardLayout, FullShardingIsOneGroupWithoutPieces) {
  const ShardLayout l(Sharding{}, {0.5, 0.25, 0.25}, {100});
  EXPECT_EQ(l.num_groups(), 1);
  EXPECT_FALSE(l.hybrid());
  EXPECT_TRUE(l.pieces(0).empty());
  EXPECT_EQ(l.checkpoint_offsets(0), (std::vector<std::int64_t>{0, 50, 75, 100}));
}

// Units of one element count share their cut (the layout stores one row for them): every
// unit reads exactly what a layout of that unit alone holds, slices, pieces and their owners,
// and each rank's owned elements sum over every unit, repeated ones included.
TEST(ShardLayout, RepeatedUnitsReadAsIfCutAlone) {
  const std::vector<std::int64_t> numel = {1000, 77, 1000, 77, 1000, 5};
  const std::vector<double> shares = {0.3, 0.7, 0.6, 0.4, 0.25, 0.25, 0.5};
  const Sharding sharding = hybrid({{0, 1}, {2, 3}, {4, 5, 6}});
  const ShardLayout all(sharding, shares, numel);
  std::vector<std::int64_t> owned(shares.size(), 0);
  for (int u = 0; u < static_cast<int>(numel.size()); ++u) {
    const ShardLayout alone(sharding, shares, {numel[static_cast<std::size_t>(u)]});
    EXPECT_EQ(all.numel(u), alone.numel(0));
    for (int r = 0; r < all.num_ranks(); ++r) {
      EXPECT_EQ(all.slice(u, r).offset, alone.slice(0, r).offset) << u << " " << r;
      EXPECT_EQ(all.slice(u, r).count, alone.slice(0, r).count) << u << " " << r;
      owned[static_cast<std::size_t>(r)] += alone.slice(0, r).count;
    }
    const auto a = all.pieces(u), b = alone.pieces(0);
    ASSERT_EQ(a.size(), b.size()) << u;
    ASSERT_FALSE(a.empty());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].offset, b[i].offset);
      EXPECT_EQ(a[i].count, b[i].count);
      const auto oa = all.owners(a[i]), ob = alone.owners(b[i]);
      EXPECT_EQ(std::vector<int>(oa.begin(), oa.end()), std::vector<int>(ob.begin(), ob.end()));
    }
    EXPECT_EQ(all.checkpoint_offsets(u), alone.checkpoint_offsets(0)) << u;
  }
  for (int r = 0; r < all.num_ranks(); ++r)
    EXPECT_EQ(all.owned_elements(r), owned[static_cast<std::size_t>(r)]) << r;
}

// 4 ranks in two groups with uneven shares and different boundaries.
Plan hybrid_plan(const Scenario& s, Accumulation acc = Accumulation::Layered) {
  Plan p = tiny_plan(s, 2, acc);
  p.sharding = hybrid({{0, 1}, {2, 3}});
  const double shares[] = {0.3, 0.7, 0.6, 0.4};
  for (int r = 0; r < 4; ++r) p.ranks[static_cast<std::size_t>(r)].state_share = shares[r];
  return p;
}

void expect_hybrid_graph(const Scenario& s, const Plan& p) {
  const TrainingGraph g = build_training_graph(p, s);
  const int units = g.summary().num_units;
  const auto& layout = g.layout();
  std::vector<int> cross_per_unit(static_cast<std::size_t>(units), 0);
  for (const Collective& c : g.collectives()) {
    std::set<int> members;
    for (const auto& m : g.members(c)) {
      members.insert(m.rank);
      std::int64_t elements = 0;
      for (const auto& seg : g.segments(c)) elements += g.slice(seg.unit, m.rank).count;
      EXPECT_EQ(m.elements, elements);
      EXPECT_NE(m.op, kNoOp);
      EXPECT_EQ(g.op(m.op).rank, m.rank);
      EXPECT_EQ(g.op(m.op).collective, c.id);
    }
    if (c.kind == OpKind::AllReduce) {
      EXPECT_EQ(c.group, -1);
      EXPECT_EQ(members.size(), 4u);
      ASSERT_EQ(c.segments_count, 1u);
      ++cross_per_unit[static_cast<std::size_t>(g.segments(c)[0].unit)];
    } else {
      ASSERT_GE(c.group, 0);
      auto group = layout.group(c.group);
      EXPECT_EQ(members, std::set<int>(group.begin(), group.end()));
    }
  }
  for (int u = 0; u < units; ++u) EXPECT_EQ(cross_per_unit[static_cast<std::size_t>(u)], 1) << u;
  const double state_bytes_per_element =
      bytes_per_element(s.job.precision.params) + bytes_per_element(s.job.precision.reduce) + 8.0;
  for (int r = 0; r < 4; ++r) {
    // The unit's cross reduction follows the last reduce-scatter carrying the unit; the
    // optimizer follows every cross reduction (comm stream order + its wait).
    auto prog = g.program(r);
    std::vector<int> last_rs(static_cast<std::size_t>(units), -1);
    int step = -1;
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const Op& o = prog[i];
      if (o.kind == OpKind::ReduceScatter || o.kind == OpKind::ReduceScatterV)
        for (const auto& seg : g.segments(g.collectives()[o.collective]))
          last_rs[static_cast<std::size_t>(seg.unit)] = static_cast<int>(i);
      if (o.kind == OpKind::AllReduce) {
        EXPECT_GT(static_cast<int>(i), last_rs[static_cast<std::size_t>(o.unit)]);
        EXPECT_EQ(o.stream, Stream::Comm);
        EXPECT_EQ(o.mem_alloc, 0.0);
      }
      if (o.kind == OpKind::OptimizerStep) step = static_cast<int>(i);
    }
    for (std::size_t i = 0; i < prog.size(); ++i)
      if (prog[i].kind == OpKind::AllReduce) {
        EXPECT_LT(static_cast<int>(i), step);
      }
    // The group's share of every unit: the rank's state.
    double owned = 0;
    for (int u = 0; u < units; ++u) {
      const auto n = std::llround(costmodels::unit_parameters(s.job.model, u));
      owned += static_cast<double>(g.slice(u, r).count);
      EXPECT_NEAR(static_cast<double>(g.slice(u, r).count),
                  static_cast<double>(n) * p.ranks[static_cast<std::size_t>(r)].state_share, 1.0);
    }
    EXPECT_DOUBLE_EQ(g.static_bytes(r), owned * state_bytes_per_element);
  }
  EXPECT_NO_THROW(g.topological_order());
}

TEST(HybridGraph, GroupCollectivesAndOneCrossReductionPerUnit) {
  const Scenario s = tiny_scenario(4, 3);
  expect_hybrid_graph(s, hybrid_plan(s));
  expect_hybrid_graph(s, hybrid_plan(s, Accumulation::Standard));
}

// A graph of some ranks holds only the collectives they join, FSDP as split: rank 2 alone
// joins its own group's (every member of which but itself is unbuilt) and the cross reductions;
// group 0, none of whose ranks is built, has none. The layout without a graph is the graph's.
TEST(HybridGraph, AGraphOfSomeRanksHasOnlyItsGroupsCollectives) {
  const Scenario s = tiny_scenario(4, 3);
  const Plan p = hybrid_plan(s);
  const int only[] = {2};
  const TrainingGraph some = build_training_graph_of_ranks(p, s, only);
  const TrainingGraph all = build_training_graph(p, s);
  int group1 = 0, cross = 0;
  for (const Collective& c : some.collectives()) {
    ASSERT_EQ(some.members(c).size(), 1u) << c.id;
    EXPECT_EQ(some.members(c).front().rank, 2);
    EXPECT_NE(c.group, 0) << c.id;
    (c.group < 0 ? cross : group1) += 1;
  }
  int all_group1 = 0, all_cross = 0;
  for (const Collective& c : all.collectives())
    if (c.group != 0) (c.group < 0 ? all_cross : all_group1) += 1;
  EXPECT_GT(group1, 0);
  EXPECT_EQ(group1, all_group1);
  EXPECT_EQ(cross, all_cross);
  const ShardLayout layout = shard_layout_of(p, s);
  ASSERT_EQ(layout.num_groups(), all.layout().num_groups());
  for (int u = 0; u < layout.num_units(); ++u) {
    EXPECT_EQ(layout.numel(u), all.layout().numel(u)) << u;
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(layout.slice(u, r).offset, all.layout().slice(u, r).offset) << u << " " << r;
      EXPECT_EQ(layout.slice(u, r).count, all.layout().slice(u, r).count) << u << " " << r;
    }
  }
}

// A graph built on the layout its caller cut already (sim's class replay forms its classes from
// it first) is the graph that cuts its own: every op, collective and static byte, full and
// hybrid sharding, some ranks or all.
TEST(HybridGraph, AGraphOnAGivenLayoutIsTheGraphThatCutsItsOwn) {
  const Scenario s = tiny_scenario(4, 3);
  for (const Plan& p : {hybrid_plan(s), hybrid_plan(s, Accumulation::Standard), tiny_plan(s, 2)})
    for (const std::vector<int>& only :
         {std::vector<int>{2}, std::vector<int>{0, 3}, std::vector<int>{0, 1, 2, 3}}) {
      const TrainingGraph own = build_training_graph_of_ranks(p, s, only);
      const TrainingGraph given = build_training_graph_of_ranks(p, s, only, shard_layout_of(p, s));
      ASSERT_EQ(given.num_ops(), own.num_ops());
      for (OpId i = 0; i < own.num_ops(); ++i) {
        const Op &a = own.op(i), &b = given.op(i);
        EXPECT_EQ(a.kind, b.kind) << i;
        EXPECT_EQ(a.rank, b.rank) << i;
        EXPECT_EQ(a.unit, b.unit) << i;
        EXPECT_EQ(a.collective, b.collective) << i;
        EXPECT_EQ(a.bytes, b.bytes) << i;
        EXPECT_EQ(a.shard_bytes, b.shard_bytes) << i;
        EXPECT_EQ(a.shard_parameters, b.shard_parameters) << i;
        EXPECT_EQ(a.mem_alloc, b.mem_alloc) << i;
        EXPECT_EQ(a.mem_free, b.mem_free) << i;
      }
      ASSERT_EQ(given.collectives().size(), own.collectives().size());
      for (std::size_t c = 0; c < own.collectives().size(); ++c) {
        const Collective &a = own.collectives()[c], &b = given.collectives()[c];
        EXPECT_EQ(a.kind, b.kind) << c;
        EXPECT_EQ(a.group, b.group) << c;
        EXPECT_EQ(a.variant, b.variant) << c;
        EXPECT_EQ(a.total_bytes, b.total_bytes) << c;
        EXPECT_EQ(a.members_count, b.members_count) << c;
      }
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(given.static_bytes(r), own.static_bytes(r)) << r;
        for (int u = 0; u < own.layout().num_units(); ++u)
          EXPECT_EQ(given.slice(u, r).count, own.slice(u, r).count) << u << " " << r;
      }
    }
}

TEST(HybridGraph, FullShardingHasNoCrossReduction) {
  const Scenario s = tiny_scenario(4, 2);
  const TrainingGraph g = build_training_graph(tiny_plan(s, 1), s);
  for (const Collective& c : g.collectives()) {
    EXPECT_NE(c.kind, OpKind::AllReduce);
    EXPECT_EQ(c.group, 0);
    EXPECT_EQ(c.members_count, 4u);
  }
}

// ----- the plan key ---------------------------------------------------------------------------

std::string plan_text(const std::string& sharding, const std::vector<double>& shares) {
  std::string ranks;
  for (std::size_t r = 0; r < shares.size(); ++r)
    ranks += std::string(r ? "," : "") + "{\"rank\":" + std::to_string(r) +
             ",\"node\":0,\"gpu\":\"cpu\",\"batch\":1,\"micro_batch\":1,\"micro_batches\":1,"
             "\"state_share\":" +
             std::to_string(shares[r]) + "}";
  return "{\"version\":1,\"sharding\":" + sharding + ",\"ranks\":[" + ranks + "]}";
}

ValidationError parse_error(const std::string& text) {
  const Json j = Json::parse(text);
  JsonReader r(j, "plan.json");
  try {
    parse_plan(r);
  } catch (const ValidationError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << text;
  return ValidationError("", "", "", "");
}

TEST(ShardingKey, ParsesAndRoundTrips) {
  const Json j =
      Json::parse(plan_text(R"({"kind":"hybrid","groups":[[0,1],[2,3]]})", {0.3, 0.7, 0.6, 0.4}));
  JsonReader r(j, "plan.json");
  const Plan p = parse_plan(r);
  ASSERT_TRUE(p.sharding.hybrid());
  EXPECT_EQ(p.sharding.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  const Json back = to_json(p);
  JsonReader r2(back, "back.json");
  EXPECT_EQ(parse_plan(r2).sharding, p.sharding);
  // Full is the default and is not written.
  const Json f = Json::parse(plan_text("\"full\"", {0.5, 0.5}));
  JsonReader r3(f, "plan.json");
  const Plan full = parse_plan(r3);
  EXPECT_FALSE(full.sharding.hybrid());
  EXPECT_FALSE(to_json(full).contains("sharding"));
}

TEST(ShardingKey, BadGroupsNameTheGroup) {
  const std::vector<double> shares = {0.5, 0.5, 0.5, 0.5};
  auto overlap = parse_error(plan_text(R"({"kind":"hybrid","groups":[[0,1],[1,2,3]]})", shares));
  EXPECT_EQ(overlap.json_path(), "sharding.groups[1][0]");
  EXPECT_NE(overlap.expected().find("already in group 0"), std::string::npos) << overlap.what();
  auto missing = parse_error(plan_text(R"({"kind":"hybrid","groups":[[0,1],[2]]})", shares));
  EXPECT_NE(missing.value().find("rank 3"), std::string::npos) << missing.what();
  auto outside = parse_error(plan_text(R"({"kind":"hybrid","groups":[[0,1],[2,7]]})", shares));
  EXPECT_EQ(outside.json_path(), "sharding.groups[1][1]");
  auto order = parse_error(plan_text(R"({"kind":"hybrid","groups":[[1,0],[2,3]]})", shares));
  EXPECT_NE(order.expected().find("ascending"), std::string::npos) << order.what();
  auto sum =
      parse_error(plan_text(R"({"kind":"hybrid","groups":[[0,1],[2,3]]})", {0.5, 0.5, 0.7, 0.5}));
  EXPECT_NE(sum.value().find("group 1 [2, 3]"), std::string::npos) << sum.what();
  EXPECT_NE(sum.value().find("1.2"), std::string::npos) << sum.what();
  auto kind = parse_error(plan_text(R"({"kind":"zero3","groups":[[0,1,2,3]]})", shares));
  EXPECT_EQ(kind.json_path(), "sharding.kind");
  auto word = parse_error(plan_text(R"("hybrid")", shares));
  EXPECT_EQ(word.json_path(), "sharding");
  // Full sharding keeps its rule: shares sum to 1 over all ranks.
  auto full = parse_error(plan_text("\"full\"", shares));
  EXPECT_EQ(full.json_path(), "ranks");
}

}  // namespace
}  // namespace cephalo::traces

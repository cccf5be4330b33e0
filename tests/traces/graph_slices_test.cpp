// The decisions the graph carries for its consumers (the replay and the executor), on awkward
// shapes: unit sizes not divisible by the rank count, zero shares, tied heads, offload. Every
// expectation is derived here from the plan's shares and the model's closed forms, not read
// back from the builder.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

using testing::tiny_plan;
using testing::tiny_scenario;

std::int64_t numel(const Scenario& s, int unit) {
  return std::llround(costmodels::unit_parameters(s.job.model, unit));
}

// Rank r's slice of a unit of n elements under `shares`, computed independently of
// shard_offsets: [round(n × prefix_r), round(n × prefix_{r+1})), the last ending at n.
std::pair<std::int64_t, std::int64_t> expected_slice(std::int64_t n,
                                                     const std::vector<double>& shares, int r) {
  double before = 0;
  for (int i = 0; i < r; ++i) before += shares[static_cast<std::size_t>(i)];
  const double after = before + shares[static_cast<std::size_t>(r)];
  const auto lo = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * before + 0.5));
  const auto hi = r + 1 == static_cast<int>(shares.size())
                      ? n
                      : static_cast<std::int64_t>(std::floor(static_cast<double>(n) * after + 0.5));
  return {lo, hi - lo};
}

std::vector<double> shares_of(const Plan& p) {
  std::vector<double> v;
  for (const auto& r : p.ranks) v.push_back(r.state_share);
  return v;
}

// Every collective's members move exactly their slices of each segment, in element_bytes.
void expect_collectives_move_the_slices(const TrainingGraph& g, const Scenario& s, const Plan& p) {
  const auto shares = shares_of(p);
  const double compute = bytes_per_element(s.job.precision.compute);
  const double reduce = bytes_per_element(s.job.precision.reduce);
  for (const Collective& c : g.collectives()) {
    const bool gather = c.kind == OpKind::AllGather || c.kind == OpKind::AllGatherV;
    EXPECT_EQ(c.element_bytes, gather ? compute : reduce);
    std::int64_t total = 0;
    for (const auto& seg : g.segments(c)) {
      EXPECT_EQ(seg.numel, numel(s, seg.unit));
      total += seg.numel;
    }
    EXPECT_DOUBLE_EQ(c.total_bytes, static_cast<double>(total) * c.element_bytes);
    for (const auto& m : g.members(c)) {
      std::int64_t elements = 0;
      for (const auto& seg : g.segments(c)) {
        auto [offset, count] = expected_slice(seg.numel, shares, m.rank);
        EXPECT_EQ(g.slice(seg.unit, m.rank).offset, offset);
        EXPECT_EQ(g.slice(seg.unit, m.rank).count, count);
        elements += count;
      }
      EXPECT_EQ(m.elements, elements);
      EXPECT_DOUBLE_EQ(m.shard_bytes, static_cast<double>(elements) * c.element_bytes);
      const Op& op = g.op(m.op);
      EXPECT_EQ(op.kind, c.kind);
      EXPECT_DOUBLE_EQ(op.shard_bytes, m.shard_bytes);
      EXPECT_DOUBLE_EQ(op.bytes, c.total_bytes);
    }
  }
}

// The variant an uneven unit runs: the plan's, or under auto the comm model's decision on the
// unit's all-gather over every rank (costmodels::uneven_variant, the scenario's own model).
CollectiveVariant expected_uneven(const TrainingGraph& g, const Scenario& s, int unit,
                                  UnevenCollective uneven) {
  if (uneven == UnevenCollective::Padded) return CollectiveVariant::Padded;
  if (uneven == UnevenCollective::Grouped) return CollectiveVariant::Grouped;
  costmodels::CollectiveRequest req;
  req.kind = costmodels::CollectiveKind::AllGather;
  for (int r = 0; r < g.num_ranks(); ++r) {
    req.ranks.push_back(r);
    req.shard_bytes.push_back(static_cast<double>(g.slice(unit, r).count) *
                              bytes_per_element(s.job.precision.compute));
  }
  const auto comm = costmodels::make_comm_model(s);
  return costmodels::uneven_variant(*comm, s.cluster, req) == UnevenCollective::Padded
             ? CollectiveVariant::Padded
             : CollectiveVariant::Grouped;
}

// Even iff every member of every segment moves the same count; the op kinds say the same.
void expect_variants(const TrainingGraph& g, const Scenario& s, UnevenCollective uneven) {
  for (const Collective& c : g.collectives()) {
    bool all_even = true;
    for (const auto& seg : g.segments(c)) {
      bool equal = true;
      for (int r = 1; r < g.num_ranks(); ++r)
        equal &= g.slice(seg.unit, r).count == g.slice(seg.unit, 0).count;
      const CollectiveVariant want =
          equal ? CollectiveVariant::Even : expected_uneven(g, s, seg.unit, uneven);
      EXPECT_EQ(seg.variant, want) << "unit " << seg.unit;
      all_even &= equal;
    }
    EXPECT_EQ(c.variant == CollectiveVariant::Even, all_even);
    const bool v = c.kind == OpKind::AllGatherV || c.kind == OpKind::ReduceScatterV;
    EXPECT_EQ(v, !all_even);
  }
}

// The graph of a one-micro-batch plan on `s` with the given state shares, after checking that
// its collectives move the slices the shares give and carry the variants they imply.
TrainingGraph checked_graph(const Scenario& s, const std::vector<double>& shares) {
  Plan p = tiny_plan(s, 1);
  for (std::size_t r = 0; r < shares.size(); ++r) p.ranks[r].state_share = shares[r];
  TrainingGraph g = build_training_graph(p, s);
  expect_collectives_move_the_slices(g, s, p);
  expect_variants(g, s, p.uneven_collective);
  return g;
}

TEST(GraphSlices, EqualSharesOfAnIndivisibleUnitRunTheVVariant) {
  // Find a rank count that does not divide the layer size: equal shares then give unequal
  // integer slices, which is what the backend runs (the -v collective), so the graph says so.
  Scenario probe = tiny_scenario(2, 2, 840);
  const std::int64_t layer = numel(probe, 1);
  int ranks = 0;
  for (int n : {3, 5, 7, 11, 13})
    if (layer % n != 0) {
      ranks = n;
      break;
    }
  ASSERT_GT(ranks, 0) << "layer numel " << layer << " divisible by every candidate";
  Scenario s = tiny_scenario(ranks, 2, 840);
  for (UnevenCollective uneven :
       {UnevenCollective::Grouped, UnevenCollective::Padded, UnevenCollective::Auto}) {
    Plan p = tiny_plan(s, 1);
    p.uneven_collective = uneven;
    ASSERT_TRUE(p.even_shares());
    TrainingGraph g = build_training_graph(p, s);
    expect_collectives_move_the_slices(g, s, p);
    expect_variants(g, s, uneven);
    bool some_v = false;
    for (const Collective& c : g.collectives()) some_v |= c.variant != CollectiveVariant::Even;
    EXPECT_TRUE(some_v);
  }
}

TEST(GraphSlices, EqualSharesOfDivisibleUnitsStayEven) {
  Scenario s = tiny_scenario(2, 2, 8);
  for (int u = 0; u < 4; ++u) ASSERT_EQ(numel(s, u) % 2, 0) << "unit " << u;
  Plan p = tiny_plan(s, 2);
  TrainingGraph g = build_training_graph(p, s);
  expect_collectives_move_the_slices(g, s, p);
  for (const Collective& c : g.collectives()) {
    EXPECT_EQ(c.variant, CollectiveVariant::Even);
    EXPECT_TRUE(c.kind == OpKind::AllGather || c.kind == OpKind::ReduceScatter);
  }
}

TEST(GraphSlices, AZeroShareOwnsNothingButStillJoinsEveryCollective) {
  Scenario s = tiny_scenario(3, 2, 9);
  const std::vector<double> shares = {0.5, 0.0, 0.5};
  TrainingGraph g = checked_graph(s, shares);
  for (const Collective& c : g.collectives()) {
    ASSERT_EQ(g.members(c).size(), 3u);
    EXPECT_EQ(g.members(c)[1].elements, 0);
    EXPECT_EQ(g.op(g.members(c)[1].op).shard_bytes, 0.0);
  }
  EXPECT_EQ(g.static_bytes(1), 0.0);
  for (const Op& o : g.program(1))
    if (o.kind == OpKind::OptimizerStep) {
      EXPECT_EQ(o.shard_parameters, 0.0);
    }
  // The sharded state is the owned slices: fp32 master + fp32 gradient + Adam m, v.
  std::int64_t owned0 = 0;
  for (int u = 0; u < g.summary().num_units; ++u)
    owned0 += expected_slice(numel(s, u), shares, 0).second;
  EXPECT_DOUBLE_EQ(g.static_bytes(0), static_cast<double>(owned0) * 16.0);
}

TEST(GraphSlices, ATiedHeadMovesTheEmbeddingFirstAndAnUntiedOneOnlyItself) {
  for (bool tied : {true, false}) {
    Scenario s = tiny_scenario(3, 2, 9);
    s.job.model.tied_embeddings = tied;
    TrainingGraph g = checked_graph(s, {0.6, 0.3, 0.1});
    const int head = g.summary().num_units - 1;
    for (const Collective& c : g.collectives()) {
      auto segs = g.segments(c);
      if (c.unit == head && tied) {
        ASSERT_EQ(segs.size(), 2u);
        EXPECT_EQ(segs[0].unit, 0);
        EXPECT_EQ(segs[1].unit, head);
      } else {
        ASSERT_EQ(segs.size(), 1u);
        EXPECT_EQ(segs[0].unit, c.unit);
      }
    }
  }
}

// Exactly one op per (rank, phase) releases the gathered parameters: the last op of the phase
// that uses them (its last compute op, else its gather), and its mem_free includes them.
TEST(GraphSlices, TheGatheredPhaseIsReleasedByItsLastUserWithOffloadAndStandard) {
  Scenario s = tiny_scenario(2, 2, 12);
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard})
    for (Offload off : {Offload::None, Offload::Host}) {
      Plan p = tiny_plan(s, 2, acc, true, off);
      p.ranks[0].batch = 9;
      p.ranks[0].micro_batch = 3;
      p.ranks[0].micro_batches = 3;
      p.ranks[1].batch = 3;
      p.ranks[1].micro_batch = 3;
      p.ranks[1].micro_batches = 1;
      TrainingGraph g = build_training_graph(p, s);
      for (int r = 0; r < 2; ++r) {
        std::map<int, OpId> last_user, freer;
        for (const Op& o : g.program(r)) {
          if (o.phase >= 0 &&
              (is_compute(o.kind) || o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV))
            last_user[o.phase] = o.id;
          if (o.frees_gathered) {
            EXPECT_FALSE(freer.count(o.phase)) << g.op_name(o.id);
            freer[o.phase] = o.id;
            EXPECT_GE(o.mem_free, g.unit_sizes(o.unit).gathered_bytes) << g.op_name(o.id);
          }
        }
        EXPECT_EQ(freer, last_user) << "rank " << r;
      }
      if (off == Offload::Host) {
        int copies = 0;
        for (const Op& o : g.ops())
          if (is_copy(o.kind)) {
            ++copies;
            EXPECT_DOUBLE_EQ(o.bytes, costmodels::boundary_activation_bytes(
                                          s.job.model, s.job.sequence_length, o.micro_batch_size,
                                          s.job.precision.compute));
          }
        EXPECT_GT(copies, 0);
      }
    }
}

}  // namespace
}  // namespace cephalo::traces

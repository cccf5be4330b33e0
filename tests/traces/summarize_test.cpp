// summarize(): every field of the shared record from hand-placed intervals (no replay, no
// executor), so each definition in report.hpp is checked on numbers worked out here.
#include <gtest/gtest.h>

#include "cephalo/traces/report.hpp"
#include "cephalo/traces/summarize.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

using testing::tiny_plan;
using testing::tiny_scenario;

struct Hand {
  Scenario s = tiny_scenario(2, 2, 8);
  Plan p = tiny_plan(s, 1, Accumulation::Layered, true, Offload::Host);
  TrainingGraph g;
  std::vector<std::int64_t> start, end;
  Hand() {
    g = build_training_graph(p, s);
    start.assign(g.num_ops(), -1);
    end.assign(g.num_ops(), -1);
  }
  // The k-th op of `rank` on `stream`, placed at [a, b).
  void place(int rank, Stream stream, std::size_t k, std::int64_t a, std::int64_t b) {
    OpId id = g.stream_program(rank, stream)[k];
    start[id] = a;
    end[id] = b;
  }
  IterationMeasurements measured() const {
    IterationMeasurements m;
    m.source = "cpu";
    m.start_ns = start;
    m.end_ns = end;
    m.peak_memory_bytes = {1e9, 2e9};
    m.events = 7;
    return m;
  }
};

TEST(Summarize, RankTimesFollowTheUnionDefinitionsAgainstTheGlobalEnd) {
  Hand h;
  // Rank 0: compute [0,10) and [20,30); a collective [5,25); a copy [30,35) (not comm).
  h.place(0, Stream::Compute, 0, 0, 10);
  h.place(0, Stream::Compute, 1, 20, 30);
  h.place(0, Stream::Comm, 0, 5, 25);
  h.place(0, Stream::D2H, 0, 30, 35);
  // Rank 1: one compute op [0, 40): the global end.
  h.place(1, Stream::Compute, 0, 0, 40);
  IterationReport r = summarize(h.g, h.s, h.p, h.measured());
  EXPECT_EQ(r.source, "cpu");
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 40e-9);
  const RankReport& a = r.ranks[0];
  EXPECT_DOUBLE_EQ(a.compute_s, 20e-9);
  EXPECT_DOUBLE_EQ(a.comm_s, 20e-9);
  EXPECT_DOUBLE_EQ(a.copy_s, 5e-9);
  EXPECT_DOUBLE_EQ(a.exposed_comm_s, 10e-9);  // [10, 20)
  EXPECT_DOUBLE_EQ(a.idle_s, 10e-9);          // [30, 40): the copy does not make it busy
  const RankReport& b = r.ranks[1];
  EXPECT_DOUBLE_EQ(b.compute_s, 40e-9);
  EXPECT_DOUBLE_EQ(b.idle_s, 0);
  EXPECT_EQ(r.events, 7u);
  EXPECT_TRUE(r.ops.empty());
}

TEST(Summarize, ThroughputMfuAndAMeasuredIterationEnd) {
  Hand h;
  h.place(0, Stream::Compute, 0, 0, 1000);
  auto m = h.measured();
  m.iteration_end_ns = 2'000'000;  // the backend's host-measured step: 2 ms
  m.record_ops = true;
  IterationReport r = summarize(h.g, h.s, h.p, m);
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 2e-3);
  EXPECT_DOUBLE_EQ(r.samples_per_s, 8 / 2e-3);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 8 * 128 / 2e-3);
  // FLOPs from costmodels::unit_flops (the graph's summary), peak fp16 of two TinyGPUs.
  EXPECT_DOUBLE_EQ(r.mfu, h.g.summary().model_flops_per_iteration / (2e-3 * 2 * 80e12));
  EXPECT_DOUBLE_EQ(r.ranks[0].idle_s, 2e-3 - 1e-6);
  ASSERT_EQ(r.ops.size(), 1u);  // only ops that ran
  EXPECT_DOUBLE_EQ(r.ops[0].end_s, 1e-6);

  // A slot emulating a 4× slower device counts a quarter of its peak.
  h.s.cluster.nodes.edit([](std::vector<Node>& n) { n[0].devices[1].slowdown = 4; });
  IterationReport slow = summarize(h.g, h.s, h.p, m);
  EXPECT_DOUBLE_EQ(slow.mfu,
                   h.g.summary().model_flops_per_iteration / (2e-3 * (80e12 + 80e12 / 4)));
  EXPECT_DOUBLE_EQ(slow.ranks[1].slowdown, 4);
  EXPECT_EQ(slow.ranks[1].gpu, "TinyGPU");
}

TEST(Summarize, CapacityIsUsableMemoryAndAPeakAboveItIsAnOom) {
  Hand h;
  h.place(0, Stream::Compute, 0, 0, 10);
  auto m = h.measured();
  m.usable_fraction = 0.1;  // 1.6 GB usable of 16 GB: rank 1's 2 GB peak is over
  IterationReport r = summarize(h.g, h.s, h.p, m);
  EXPECT_DOUBLE_EQ(r.ranks[0].capacity_bytes, 1.6e9);
  ASSERT_TRUE(r.oom);
  ASSERT_TRUE(r.oom_detail);
  EXPECT_EQ(r.oom_detail->rank, 1);
  EXPECT_EQ(r.oom_detail->op, -1);
  EXPECT_DOUBLE_EQ(r.oom_detail->bytes, 2e9);
  m.usable_fraction = -1;  // default: the whole 16 GB
  EXPECT_FALSE(summarize(h.g, h.s, h.p, m).oom);
  EXPECT_DOUBLE_EQ(summarize(h.g, h.s, h.p, m).ranks[0].capacity_bytes, 16e9);
  // The simulator's first excess wins over the peak rule.
  m.oom = OomDetail{0, 3, "F u1 r0", 5e9, 4e9, 1e9};
  IterationReport s = summarize(h.g, h.s, h.p, m);
  ASSERT_TRUE(s.oom);
  EXPECT_EQ(s.oom_detail->op, 3);
}

// Rows that repeat their predecessor's batch, micro-batches and share are hashed from the text
// kept for it: a change of any of those fields in a rank among alike ones changes the hash,
// and undoing it restores the hash.
TEST(Summarize, PlanHashSeesAChangeInOneRankAmongAlikeOnes) {
  Hand h;
  Plan q = h.p;
  const PlanRank row = q.ranks[0];
  q.ranks.clear();
  for (int r = 0; r < 6; ++r) {
    q.ranks.push_back(row);
    q.ranks.back().rank = r;
  }
  const std::string base = plan_hash(q);
  std::vector<void (*)(PlanRank&)> changes = {
      [](PlanRank& r) { ++r.batch; }, [](PlanRank& r) { ++r.micro_batch; },
      [](PlanRank& r) { ++r.micro_batches; }, [](PlanRank& r) { r.state_share *= 1.5; }};
  for (std::size_t i = 0; i < changes.size(); ++i) {
    Plan changed = q;
    changes[i](changed.ranks[4]);
    EXPECT_NE(plan_hash(changed), base) << "field " << i;
    changed.ranks[4] = q.ranks[4];
    EXPECT_EQ(plan_hash(changed), base) << "field " << i;
  }
}

TEST(Summarize, PlanHashNamesThePlanNotItsProvenance) {
  Hand h;
  Plan q = h.p;
  q.strategy = "someone else";
  EXPECT_EQ(plan_hash(q), plan_hash(h.p));
  EXPECT_EQ(plan_hash(h.p).size(), 16u);
  q.ranks[0].state_share = 0.6;
  q.ranks[1].state_share = 0.4;
  EXPECT_NE(plan_hash(q), plan_hash(h.p));
  Plan std_plan = h.p;
  std_plan.accumulation = Accumulation::Standard;
  EXPECT_NE(plan_hash(std_plan), plan_hash(h.p));
  auto m = h.measured();
  EXPECT_EQ(summarize(h.g, h.s, h.p, m).plan_hash, plan_hash(h.p));
}

TEST(Summarize, MismatchedInputsAreRefused) {
  Hand h;
  auto m = h.measured();
  m.peak_memory_bytes = {1e9};
  EXPECT_THROW(summarize(h.g, h.s, h.p, m), std::exception);
  std::vector<std::int64_t> short_start(3, 0);
  m = h.measured();
  m.start_ns = short_start;
  EXPECT_THROW(summarize(h.g, h.s, h.p, m), std::exception);
}

}  // namespace
}  // namespace cephalo::traces

namespace cephalo::traces {
namespace {

// The rank table leaves out a column that could only repeat one value (output people read:
// "node 0" on every row of a one-node cluster, "copies 0 s" on every row without offload),
// and prints it as soon as a row differs. The JSON record keeps both fields.
TEST(RenderTable, LeavesOutColumnsThatCannotVary) {
  IterationReport r;
  r.iteration_time_s = 1;
  for (int k = 0; k < 2; ++k) {
    RankReport rank;
    rank.rank = k;
    rank.gpu = k ? "L4" : "A100";
    rank.compute_s = 0.5;
    rank.idle_s = 0.5;
    r.ranks.push_back(rank);
  }
  const auto header = [](const std::string& table) {
    const auto at = table.find("ranks ");
    return table.substr(at, table.find('\n', at) - at);
  };
  std::string t = render_table(r);
  EXPECT_EQ(header(t).find("node"), std::string::npos) << t;
  EXPECT_EQ(header(t).find("copies"), std::string::npos) << t;
  EXPECT_EQ(t.find("copies are apart"), std::string::npos) << t;
  r.ranks[1].node = 1;
  r.ranks[0].copy_s = 0.25;
  t = render_table(r);
  EXPECT_NE(header(t).find("node"), std::string::npos) << t;
  EXPECT_NE(header(t).find("copies"), std::string::npos) << t;
  EXPECT_NE(t.find("copies are apart"), std::string::npos) << t;
  // A split plan's table too ("node"; it has no copies column).
  for (auto& k : r.ranks) k.stage = k.rank;
  EXPECT_NE(header(render_table(r)).find("node"), std::string::npos);
  r.ranks[1].node = 0;
  EXPECT_EQ(header(render_table(r)).find("node"), std::string::npos) << render_table(r);
}

}  // namespace
}  // namespace cephalo::traces

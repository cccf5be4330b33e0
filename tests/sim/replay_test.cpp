#include <gtest/gtest.h>

#include <map>

#include "../support/fixed_models.hpp"
#include "../traces/tiny_scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/sim/replay.hpp"

namespace cephalo::sim {
namespace {

using testing::tiny_plan;
using testing::tiny_scenario;
using traces::build_training_graph;

// Fixed durations (ms): forward 1, recompute 1, backward 2, optimizer 0.5, all-gather 1,
// reduce-scatter 1, copy 0.5. The tiny model has 2 layers, so 4 units (embedding, 2 layers,
// head). The expected times below are worked out by hand in sim/README.md ("hand-computed
// scenarios").
struct Fixture {
  FixedComputeModel compute;
  FixedCommModel comm;
  Fixture() {
    compute.forward_s = 1e-3;
    compute.backward_s = 2e-3;
    compute.optimizer_s = 0.5e-3;
    comm.all_gather_s = 1e-3;
    comm.reduce_scatter_s = 1e-3;
    comm.copy_s = 0.5e-3;
  }
  SimResult run(int micro_batches, Accumulation acc, bool prefetch, Offload off,
                bool sharing = false, SimOptions opt = {}) {
    scenario = tiny_scenario(2, 2, 8);
    plan = tiny_plan(scenario, micro_batches, acc, prefetch, off);
    graph = build_training_graph(plan, scenario);
    opt.link_sharing = sharing;
    return simulate(graph, scenario, plan, compute, comm, opt);
  }
  Scenario scenario;
  Plan plan;
  traces::TrainingGraph graph;
};

Time ms(double v) { return static_cast<Time>(v * 1e6 + 0.5); }

// The hand-computed iteration times of sim/README.md, one row per scenario.
struct HandComputed {
  const char* name;
  int micro_batches;
  Accumulation accumulation;
  bool prefetch;
  Offload offload;
  bool link_sharing;
  double iteration_ms;
};

const HandComputed kHandComputed[] = {
    {"LayeredWithoutPrefetchOneMicroBatch", 1, Accumulation::Layered, false, Offload::None, false,
     25.5},
    {"LayeredWithoutPrefetchTwoMicroBatches", 2, Accumulation::Layered, false, Offload::None, false,
     41.5},
    {"LayeredWithPrefetchOneMicroBatch", 1, Accumulation::Layered, true, Offload::None, false,
     18.5},
    {"StandardWithoutPrefetchTwoMicroBatches", 2, Accumulation::Standard, false, Offload::None,
     false, 49.5},
    {"OffloadWithoutPrefetchHidesCopiesWhenLinksAreNotShared", 1, Accumulation::Layered, false,
     Offload::Host, false, 25.5},
    {"OffloadWithPrefetchExposesTheFirstCopyBack", 1, Accumulation::Layered, true, Offload::Host,
     false, 19.5},
    {"CopiesSharingPcieWithGathersSlowBothDown", 1, Accumulation::Layered, false, Offload::Host,
     true, 28.5},
    // Without copies nothing shares a link, so sharing changes nothing.
    {"SharingWithoutCopiesChangesNothing", 1, Accumulation::Layered, false, Offload::None, true,
     25.5},
};

class ReplayHandComputed : public ::testing::TestWithParam<HandComputed> {};

TEST_P(ReplayHandComputed, IterationTime) {
  const HandComputed& c = GetParam();
  Fixture f;
  EXPECT_EQ(
      f.run(c.micro_batches, c.accumulation, c.prefetch, c.offload, c.link_sharing).iteration_ns,
      ms(c.iteration_ms));
}

INSTANTIATE_TEST_SUITE_P(Replay, ReplayHandComputed, ::testing::ValuesIn(kHandComputed),
                         [](const ::testing::TestParamInfo<HandComputed>& info) {
                           return std::string(info.param.name);
                         });

// A comm model whose collectives take 3× as long when the request says they overlap compute,
// so each collective's simulated duration tells which way the replay flagged it.
class OverlapAwareComm final : public costmodels::CommModel {
 public:
  FixedCommModel base;
  costmodels::CollectiveEstimate collective(const Cluster& c,
                                            const costmodels::CollectiveRequest& r) const override {
    auto e = base.collective(c, r);
    if (r.overlaps_compute) e.seconds *= 3;
    return e;
  }
  double copy_time(const Cluster& c, int rank, double bytes) const override {
    return base.copy_time(c, rank, bytes);
  }
};

// The rule (sim/README.md): a collective overlaps compute when, as it starts, the compute
// stream of any member rank is running an op. Checked against the replay's own op times: a
// compute op [start, end) on a member rank containing the collective's start.
TEST(Replay, FlagsCollectivesThatStartWhileAMemberComputes) {
  int flagged_total = 0, plain_total = 0;
  for (bool prefetch : {false, true})
    for (auto acc : {Accumulation::Layered, Accumulation::Standard})
      for (int mbs : {1, 2}) {
        Scenario s = tiny_scenario(2, 2, 8);
        Plan p = tiny_plan(s, mbs, acc, prefetch, Offload::None);
        auto g = build_training_graph(p, s);
        FixedComputeModel compute;
        OverlapAwareComm comm;
        SimOptions opt;
        opt.link_sharing = false;  // durations are exactly the comm model's
        SimResult r = simulate(g, s, p, compute, comm, opt);
        for (const auto& c : g.collectives()) {
          const auto members = g.members(c);
          const Time t0 = r.start_ns[members[0].op];
          bool busy = false;
          for (const auto& m : members)
            for (const auto& op : g.ops())
              if (op.rank == m.rank && op.stream == traces::Stream::Compute &&
                  r.start_ns[op.id] <= t0 && t0 < r.end_ns[op.id])
                busy = true;
          const bool gather =
              c.kind == traces::OpKind::AllGather || c.kind == traces::OpKind::AllGatherV;
          const Time base =
              ms(1e3 * (gather ? comm.base.all_gather_s : comm.base.reduce_scatter_s));
          const Time took = r.end_ns[members[0].op] - t0;
          EXPECT_EQ(took, busy ? 3 * base : base)
              << "collective " << c.id << " (unit " << c.unit << ", " << traces::to_string(c.kind)
              << ") prefetch " << prefetch << " mbs " << mbs;
          (busy ? flagged_total : plain_total) += 1;
        }
      }
  // Both kinds occur: prefetched gathers and reduce-scatters overlap compute, the first gather
  // and the last reduce-scatter of an iteration do not.
  EXPECT_GT(flagged_total, 0);
  EXPECT_GT(plain_total, 0);
}

TEST(Replay, FirstGatherIsIdleAndPrefetchedGathersOverlap) {
  Scenario s = tiny_scenario(2, 2, 8);
  Plan p = tiny_plan(s, 1, Accumulation::Layered, true, Offload::None);
  auto g = build_training_graph(p, s);
  FixedComputeModel compute;
  OverlapAwareComm comm;
  SimOptions opt;
  opt.link_sharing = false;
  SimResult r = simulate(g, s, p, compute, comm, opt);
  std::map<int, Time> first_gather;  // unit -> duration of its first (forward) gather
  for (const auto& c : g.collectives())
    if (c.kind == traces::OpKind::AllGather && !first_gather.count(c.unit)) {
      auto m = g.members(c)[0].op;
      first_gather[c.unit] = r.end_ns[m] - r.start_ns[m];
    }
  EXPECT_EQ(first_gather.at(0), ms(1));  // nothing computes before the embedding's gather
  EXPECT_EQ(first_gather.at(1), ms(3));  // prefetched while the embedding's forward runs
  EXPECT_EQ(first_gather.at(2), ms(3));
}

TEST(Replay, PrefetchAndLayeredBeatTheirAlternatives) {
  for (int mbs : {1, 2, 4}) {
    Fixture a, b, c;
    Time layered = a.run(mbs, Accumulation::Layered, true, Offload::None).iteration_ns;
    Time standard = b.run(mbs, Accumulation::Standard, true, Offload::None).iteration_ns;
    Time no_prefetch = c.run(mbs, Accumulation::Layered, false, Offload::None).iteration_ns;
    EXPECT_LE(layered, standard) << mbs;
    EXPECT_LT(layered, no_prefetch) << mbs;
    if (mbs > 1) {
      EXPECT_LT(layered, standard) << mbs;
    }
  }
}

TEST(Replay, PerRankBreakdownAddsUp) {
  Fixture f;
  SimResult r = f.run(2, Accumulation::Layered, false, Offload::None);
  ASSERT_EQ(r.report.ranks.size(), 2u);
  for (const auto& k : r.report.ranks) {
    // Compute: 4 units × 2 micro-batches × (F 1 + RC 1 + B 2) + OPT 0.5 = 32.5 ms.
    EXPECT_NEAR(k.compute_s, 32.5e-3, 1e-12);
    // 8 gathers + 4 reduce-scatters of 1 ms each.
    EXPECT_NEAR(k.comm_s, 12e-3, 1e-12);
    // Without prefetch every gather is exposed; the reduce-scatters overlap compute except
    // the last one (8 + 1 = 9 ms).
    EXPECT_NEAR(k.exposed_comm_s, 9e-3, 1e-12);
    // Both ranks run the same schedule: no rank ever waits for the other.
    EXPECT_NEAR(k.idle_s, 0, 1e-12);
    EXPECT_NEAR(k.copy_s, 0, 1e-12);
  }
  EXPECT_NEAR(r.report.samples_per_s, 8 / 41.5e-3, 1e-9);
  EXPECT_NEAR(r.report.tokens_per_s, 8 * 128 / 41.5e-3, 1e-6);
  EXPECT_GT(r.report.mfu, 0);
}

// Rank 1 runs its 4 samples as one micro-batch, rank 0 as two: rank 0 sets the pace and rank 1
// waits at every gather. Worked by hand (no prefetch, durations per op, not per sample):
//  * a forward phase takes AG 1 + rank 0's 2 × F 1 = 3 ms, a backward phase AG 1 + 2 × (RC 1 +
//    B 2) = 7 ms; then the last RS 1 and OPT 0.5: 4 × 3 + 4 × 7 + 1.5 = 41.5 ms;
//  * rank 1 computes 4 × F 1 + 4 × (RC 1 + B 2) + OPT 0.5 = 16.5 ms; its collectives are rank
//    0's (they start when the last member arrives): 8 AG + 4 RS = 12 ms, of which every AG and
//    the last RS are exposed (each other RS runs under rank 1's next RC + B): 9 ms; idle is the
//    rest of the iteration: 41.5 − 16.5 − 9 = 16 ms.
TEST(Replay, ARankWithLessWorkIdlesAgainstTheGlobalEnd) {
  Fixture f;
  f.scenario = tiny_scenario(2, 2, 8);
  f.plan = tiny_plan(f.scenario, 2, Accumulation::Layered, false, Offload::None);
  f.plan.ranks[1].micro_batch = 4;
  f.plan.ranks[1].micro_batches = 1;
  f.graph = build_training_graph(f.plan, f.scenario);
  SimOptions opt;
  opt.link_sharing = false;
  SimResult r = simulate(f.graph, f.scenario, f.plan, f.compute, f.comm, opt);
  EXPECT_EQ(r.iteration_ns, ms(41.5));
  const auto& r0 = r.report.ranks[0];
  const auto& r1 = r.report.ranks[1];
  EXPECT_NEAR(r0.compute_s, 32.5e-3, 1e-12);
  EXPECT_NEAR(r0.idle_s, 0, 1e-12);
  EXPECT_NEAR(r1.compute_s, 16.5e-3, 1e-12);
  EXPECT_NEAR(r1.comm_s, 12e-3, 1e-12);
  EXPECT_NEAR(r1.exposed_comm_s, 9e-3, 1e-12);
  EXPECT_NEAR(r1.idle_s, 16e-3, 1e-12);
}

TEST(Replay, TwoRunsGiveByteIdenticalJsonWhateverTheQueue) {
  std::string first;
  for (const auto& q : event_queue_names())
    for (int i = 0; i < 2; ++i) {
      Fixture f;
      SimOptions o;
      o.record_ops = true;
      o.queue = q;
      SimResult r = f.run(3, Accumulation::Layered, true, Offload::Host, true, o);
      std::string json = traces::render_json(r.report);
      if (first.empty()) first = json;
      EXPECT_EQ(json, first) << q;
    }
  EXPECT_NE(first.find("\"ops\""), std::string::npos);
}

TEST(Replay, OverCapacityNamesTheRankOpAndBytes) {
  Fixture probe;
  SimOptions o;
  o.reserve_bytes = 0;
  SimResult fits = probe.run(2, Accumulation::Layered, true, Offload::None, false, o);
  ASSERT_FALSE(fits.report.oom);
  const double peak1 = fits.report.ranks[1].peak_memory_bytes;

  Scenario s = tiny_scenario(2, 2, 8);
  // rank 1 misses by one byte
  s.cluster.nodes.edit(
      [&](std::vector<Node>& n) { n[0].devices[1].spec.memory_bytes = peak1 - 1; });
  Plan p = tiny_plan(s, 2, Accumulation::Layered, true, Offload::None);
  auto g = build_training_graph(p, s);
  SimResult r = simulate(g, s, p, probe.compute, probe.comm, o);
  ASSERT_TRUE(r.report.oom);
  ASSERT_TRUE(r.report.oom_detail.has_value());
  EXPECT_EQ(r.report.oom_detail->rank, 1);
  ASSERT_GE(r.report.oom_detail->op, 0);
  EXPECT_EQ(g.op(static_cast<traces::OpId>(r.report.oom_detail->op)).rank, 1);
  EXPECT_DOUBLE_EQ(r.report.oom_detail->bytes, peak1);
  EXPECT_DOUBLE_EQ(r.report.oom_detail->capacity_bytes, peak1 - 1);
  Json j = traces::to_json(r.report);
  EXPECT_TRUE(j["oom"].get<bool>());
  EXPECT_EQ(j["oom_detail"]["rank"], 1);
}

TEST(Replay, OffloadLowersPeakMemory) {
  Fixture a, b;
  SimResult none = a.run(4, Accumulation::Layered, true, Offload::None);
  SimResult host = b.run(4, Accumulation::Layered, true, Offload::Host);
  EXPECT_LT(host.report.ranks[0].peak_memory_bytes, none.report.ranks[0].peak_memory_bytes);
}

TEST(ChromeTraceOfASimulation, IsValidJsonWithNamedRanksAndNonOverlappingLanes) {
  Fixture f;
  SimOptions o;
  o.record_memory = true;
  SimResult r = f.run(2, Accumulation::Layered, true, Offload::Host, true, o);
  Json trace = Json::parse(traces::render_chrome_trace(trace_input(r, f.graph, f.scenario)));
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::vector<std::pair<Time, Time>>> lanes;
  int counters = 0;
  for (const Json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (ph == "C") {
      ++counters;
      EXPECT_TRUE(e["args"].contains("bytes"));
    }
    if (ph == "X") {
      // ts/dur are µs with 3 decimals: back to integer ns exactly.
      Time ts = static_cast<Time>(e["ts"].get<double>() * 1000 + 0.5);
      Time dur = static_cast<Time>(e["dur"].get<double>() * 1000 + 0.5);
      lanes[{e["pid"], e["tid"]}].emplace_back(ts, ts + dur);
      EXPECT_TRUE(e["args"].contains("op"));
    }
  }
  ASSERT_EQ(process_names.size(), 2u);
  EXPECT_EQ(process_names[1], "rank 1 (TinyGPU, node 0)");
  EXPECT_GT(counters, 10);
  EXPECT_GE(lanes.size(), 6u);  // compute + comm on both ranks, copies too
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first) << "lane " << lane.first << "/" << lane.second;
  }
}

}  // namespace
}  // namespace cephalo::sim

namespace cephalo::sim {
namespace {

// The replay's memory timeline and costmodels::predict_memory are independent accounts of the
// same plan; their peaks must agree closely (the replay sees which buffers really coexist).
TEST(ReplayMemory, PeakAgreesWithTheMemoryModelOnTheShippedScenario) {
  const std::string src = CEPHALO_SOURCE_DIR;
  Scenario s = costmodels::load_scenario(src + "/scenarios/default.json");
  auto models = costmodels::make_cost_models(s, "roofline");
  for (const std::string& file : {src + "/scenarios/plans/default-even.json",
                                  src + "/tests/data/sim/default-p40-oom.plan.json"}) {
    Plan p = load_plan(file);
    validate_plan_for(p, s, file);
    auto g = traces::build_training_graph(p, s);
    SimResult r = simulate(g, s, p, *models.compute, *models.comm);
    for (int rank = 0; rank < 4; ++rank) {
      const double predicted = costmodels::predict_memory(s, p, rank).total;
      const double simulated = r.report.ranks[rank].peak_memory_bytes;
      EXPECT_NEAR(simulated / predicted, 1.0, 0.10) << file << " rank " << rank;
    }
    if (file.find("oom") != std::string::npos) {
      ASSERT_TRUE(r.report.oom);
      EXPECT_EQ(r.report.oom_detail->rank, 3);
    } else {
      EXPECT_FALSE(r.report.oom);
    }
  }
}

}  // namespace
}  // namespace cephalo::sim

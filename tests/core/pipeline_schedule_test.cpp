// The pipeline schedule module (core/pipeline_schedule.hpp): the orders against their
// definitions, the activations held against the closed forms, and the exact evaluation against
// the closed forms of GPipe / 1F1B / interleaved 1F1B (Narayanan et al., SC'21) and against a
// brute-force longest path over every path of the step graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"

using namespace cephalo;
using namespace cephalo::pipeline;

namespace {

using Kind = PipelineSchedule::Kind;

PipelineSchedule gpipe() { return {Kind::GPipe, 1}; }
PipelineSchedule one_f_one_b() { return {Kind::OneFOneB, 1}; }
PipelineSchedule interleaved(int v) { return {Kind::Interleaved, v}; }

int v_of(const PipelineSchedule& s) { return s.kind == Kind::Interleaved ? s.virtual_stages : 1; }

// Every (schedule, p, m) the schedule accepts on a small grid.
struct Case {
  PipelineSchedule schedule;
  int p = 1;
  int m = 1;
};
std::vector<Case> small_cases() {
  std::vector<Case> out;
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 12; ++m) {
      out.push_back({gpipe(), p, m});
      out.push_back({one_f_one_b(), p, m});
      if (p >= 2 && m % p == 0)
        for (int v : {2, 3, 4}) out.push_back({interleaved(v), p, m});
    }
  return out;
}

std::string name(const Case& c) {
  return to_string(c.schedule) + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m);
}

std::string join(const std::vector<Step>& order, bool chunks = false) {
  std::string s;
  for (const auto& step : order) s += (s.empty() ? "" : " ") + to_string(step, chunks);
  return s;
}

// Relative closeness for sums of a few hundred doubles.
void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::fabs(want))) << what;
}

}  // namespace

TEST(PipelineSchedule, SpellingsRoundTripAndBadOnesNameFileFieldAndValue) {
  for (const auto& s : {gpipe(), one_f_one_b(), interleaved(2), interleaved(7)})
    EXPECT_EQ(parse_pipeline_schedule(to_string(s), "p.json", "x"), s) << to_string(s);
  EXPECT_EQ(to_string(interleaved(3)), "interleaved:3");
  for (const std::string bad : {"interleaved:1", "interleaved:0", "interleaved:x", "2f2b",
                                "interleaved:", "interleaved:1025", "GPipe"}) {
    try {
      parse_pipeline_schedule(bad, "plan.json", "model_split.schedule");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ValidationError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("plan.json"), std::string::npos) << what;
      EXPECT_NE(what.find("model_split.schedule"), std::string::npos) << what;
      EXPECT_NE(what.find("\"" + bad + "\""), std::string::npos) << what;
      EXPECT_NE(what.find("from 2 to " + std::to_string(kMaxVirtualStages)), std::string::npos)
          << what;
    }
  }
}

TEST(PipelineOrders, EveryStageRunsEachPassOfEachMicroBatchAndChunkOnceForwardFirst) {
  for (const auto& c : small_cases()) {
    const auto orders = stage_orders(c.p, c.m, c.schedule);
    ASSERT_EQ(orders.size(), static_cast<std::size_t>(c.p)) << name(c);
    const int v = v_of(c.schedule);
    for (int s = 0; s < c.p; ++s) {
      const auto& order = orders[static_cast<std::size_t>(s)];
      EXPECT_EQ(order.size(), static_cast<std::size_t>(2 * c.m * v)) << name(c);
      std::map<std::pair<int, int>, int> forward_at, backward_at;
      for (std::size_t i = 0; i < order.size(); ++i) {
        const auto& st = order[i];
        ASSERT_GE(st.micro_batch, 0);
        ASSERT_LT(st.micro_batch, c.m) << name(c);
        ASSERT_GE(st.chunk, 0);
        ASSERT_LT(st.chunk, v) << name(c);
        auto& seen = st.pass == Pass::Forward ? forward_at : backward_at;
        EXPECT_TRUE(seen.emplace(std::pair{st.micro_batch, st.chunk}, static_cast<int>(i)).second)
            << name(c) << " stage " << s << " runs " << to_string(st, true) << " twice";
      }
      EXPECT_EQ(stage_order(s, c.p, c.m, c.schedule), order) << name(c);
      EXPECT_EQ(forward_at.size(), static_cast<std::size_t>(c.m * v)) << name(c);
      EXPECT_EQ(backward_at.size(), static_cast<std::size_t>(c.m * v)) << name(c);
      for (const auto& [key, at] : backward_at)
        EXPECT_LT(forward_at.at(key), at) << name(c) << " stage " << s << ": backward of "
                                          << key.first << "." << key.second << " first";
    }
  }
}

TEST(PipelineOrders, GPipeRunsEveryForwardThenEveryBackward) {
  for (int p : {1, 3}) {
    const auto orders = stage_orders(p, 4, gpipe());
    for (const auto& o : orders) EXPECT_EQ(join(o), "F0 F1 F2 F3 B0 B1 B2 B3");
  }
}

TEST(PipelineOrders, OneFOneBWarmsUpThenAlternatesThenCoolsDown) {
  // PipeDream-flush, written out for p = 4, m = 6: stage s starts with p − s − 1 forwards.
  const auto o = stage_orders(4, 6, one_f_one_b());
  EXPECT_EQ(join(o[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(join(o[1]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(join(o[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(join(o[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // The structure on the grid: warm-up min(p − s − 1, m) forwards, then forward/backward pairs
  // while forwards remain, then only backwards; both passes in micro-batch order.
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 9; ++m) {
      const auto orders = stage_orders(p, m, one_f_one_b());
      for (int s = 0; s < p; ++s) {
        const auto& order = orders[static_cast<std::size_t>(s)];
        const int warmup = std::min(p - s - 1, m);
        int f = 0, b = 0;
        for (std::size_t i = 0; i < order.size(); ++i) {
          const auto& st = order[i];
          const int idx = static_cast<int>(i);
          Pass want;
          if (idx < warmup)
            want = Pass::Forward;
          else if (idx < warmup + 2 * (m - warmup))
            want = (idx - warmup) % 2 == 0 ? Pass::Forward : Pass::Backward;
          else
            want = Pass::Backward;
          EXPECT_EQ(st.pass, want) << "p=" << p << " m=" << m << " s=" << s << " step " << i;
          EXPECT_EQ(st.micro_batch, st.pass == Pass::Forward ? f++ : b++);
        }
      }
    }
}

TEST(PipelineOrders, InterleavedFollowsMegatronsGroupingOfMicroBatchesAndChunks) {
  // Megatron-Core: virtual micro-batch j is micro-batch (j div pV)·p + j mod p on chunk
  // (j mod pV) div p going forward, on the reverse chunk going backward; warm-up
  // 2(p − s − 1) + (V − 1)·p forwards (at most m·V), then pairs, then the remaining backwards.
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 3 * p; m += p) {
        const auto orders = stage_orders(p, m, interleaved(v));
        for (int s = 0; s < p; ++s) {
          const auto& order = orders[static_cast<std::size_t>(s)];
          std::vector<Step> forwards, backwards;
          for (const auto& st : order)
            (st.pass == Pass::Forward ? forwards : backwards).push_back(st);
          for (int j = 0; j < m * v; ++j) {
            const int mb = (j / (p * v)) * p + j % p, chunk = (j % (p * v)) / p;
            EXPECT_EQ(forwards[static_cast<std::size_t>(j)], (Step{Pass::Forward, mb, chunk}))
                << "p=" << p << " v=" << v << " m=" << m << " s=" << s << " j=" << j;
            EXPECT_EQ(backwards[static_cast<std::size_t>(j)],
                      (Step{Pass::Backward, mb, v - 1 - chunk}))
                << "p=" << p << " v=" << v << " m=" << m << " s=" << s << " j=" << j;
          }
          const int warmup = std::min(2 * (p - s - 1) + (v - 1) * p, m * v);
          for (int i = 0; i < warmup; ++i)
            EXPECT_EQ(order[static_cast<std::size_t>(i)].pass, Pass::Forward);
          for (int i = warmup; i < warmup + 2 * (m * v - warmup); ++i)
            EXPECT_EQ(order[static_cast<std::size_t>(i)].pass,
                      (i - warmup) % 2 == 0 ? Pass::Forward : Pass::Backward)
                << "p=" << p << " v=" << v << " m=" << m << " s=" << s << " step " << i;
        }
      }
}

TEST(PipelineOrders, RefusesWhatNoScheduleCanRun) {
  EXPECT_THROW(stage_orders(0, 4, one_f_one_b()), std::invalid_argument);
  EXPECT_THROW(stage_orders(2, 0, gpipe()), std::invalid_argument);
  EXPECT_THROW(stage_orders(1, 4, interleaved(2)), std::invalid_argument);
  EXPECT_THROW(stage_orders(4, 6, interleaved(2)), std::invalid_argument);  // 6 % 4 != 0
  EXPECT_THROW(stage_orders(2, 4, (PipelineSchedule{Kind::OneFOneB, 2})), std::invalid_argument);
  EXPECT_THROW(stage_orders(2, 4, interleaved(1)), std::invalid_argument);
  EXPECT_THROW(stage_order(2, 2, 4, gpipe()), std::invalid_argument);
  EXPECT_THROW(stage_order(-1, 2, 4, gpipe()), std::invalid_argument);
}

TEST(PipelineMemory, PeakInFlightMatchesTheClosedFormOfEachSchedule) {
  // Counted from the order itself on a hand-written order first.
  const std::vector<Step> order{{Pass::Forward, 0, 0},  {Pass::Forward, 1, 0},
                                {Pass::Backward, 0, 0}, {Pass::Forward, 2, 0},
                                {Pass::Forward, 3, 0},  {Pass::Backward, 1, 0},
                                {Pass::Backward, 2, 0}, {Pass::Backward, 3, 0}};
  EXPECT_EQ(peak_in_flight(order), 3);
  for (const auto& c : small_cases()) {
    const int v = v_of(c.schedule);
    for (int s = 0; s < c.p; ++s) {
      int want = 0;
      switch (c.schedule.kind) {
        case Kind::GPipe:
          want = c.m;
          break;
        case Kind::OneFOneB:
          want = std::min(c.m, c.p - s);
          break;
        case Kind::Interleaved:
          want = std::min(c.m * v, 2 * (c.p - s - 1) + (v - 1) * c.p + 1);
          break;
      }
      EXPECT_EQ(peak_in_flight(s, c.p, c.m, c.schedule), want) << name(c) << " stage " << s;
    }
  }
  // Interleaving's first stage holds p·(1 + (p − 1)/(pV)) micro-batches of its layers once the
  // pipeline is long enough (m >= 2p here).
  for (int p : {2, 4, 8})
    for (int v : {2, 4}) {
      const double held = peak_in_flight(0, p, 4 * p, interleaved(v)) / static_cast<double>(v);
      EXPECT_DOUBLE_EQ(held, p * (1.0 + (p - 1.0) / (p * v))) << "p=" << p << " v=" << v;
    }
  EXPECT_THROW(peak_in_flight(4, 4, 8, one_f_one_b()), std::invalid_argument);
}

TEST(PipelineMakespan, EqualStagesMatchTheClosedFormsOfGPipeAnd1F1B) {
  // (m + p − 1)(t_f + t_b), each stage idle (p − 1)(t_f + t_b), bubble (p − 1)/(m + p − 1),
  // for any forward / backward ratio.
  for (const auto& [tf, tb] : std::vector<std::pair<double, double>>{{1, 2}, {0.3, 0.3}, {2, 0.5}})
    for (const auto& schedule : {gpipe(), one_f_one_b()})
      for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 10; ++m) {
          const std::vector<StageTimes> times(static_cast<std::size_t>(p), StageTimes{tf, tb});
          const auto t = pipeline_makespan(p, m, schedule, times);
          const std::string what = to_string(schedule) + " p=" + std::to_string(p) +
                                   " m=" + std::to_string(m) + " tf=" + std::to_string(tf);
          expect_close(t.makespan, (m + p - 1) * (tf + tb), what);
          for (int s = 0; s < p; ++s) {
            expect_close(t.busy[static_cast<std::size_t>(s)], m * (tf + tb), what);
            expect_close(t.bubble[static_cast<std::size_t>(s)], (p - 1) * (tf + tb), what);
          }
          expect_close(t.bubble_fraction(), (p - 1.0) / (m + p - 1.0), what);
        }
}

TEST(PipelineMakespan, InterleavingCutsTheBubbleByTheVirtualStages) {
  // Narayanan et al. (SC'21): with V chunks per stage the bubble is (p − 1)(t_f + t_b)/V, i.e.
  // (p − 1)/(V·m) of the ideal m(t_f + t_b).
  for (int p = 2; p <= 5; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        const double tf = 1.5, tb = 3.25;
        const std::vector<StageTimes> times(static_cast<std::size_t>(p), StageTimes{tf, tb});
        const auto t = pipeline_makespan(p, m, interleaved(v), times);
        const std::string what =
            "p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m);
        const double ideal = m * (tf + tb);
        expect_close(t.makespan, ideal + (p - 1) * (tf + tb) / v, what);
        for (int s = 0; s < p; ++s)
          expect_close(t.bubble[static_cast<std::size_t>(s)] / ideal, (p - 1.0) / (v * m), what);
        // Per-virtual-stage times that are the per-stage ones cut in V give the same timeline.
        std::vector<StageTimes> chunked(static_cast<std::size_t>(p * v),
                                        StageTimes{tf / v, tb / v});
        expect_close(pipeline_makespan(p, m, interleaved(v), chunked).makespan, t.makespan, what);
      }
}

TEST(PipelineMakespan, GPipeWithTransfersPaysTheirLatencyOnTheWayInAndOut) {
  // The first micro-batch crosses p − 1 links forward and the last crosses them back; the
  // stages in between stay pipelined (each transfer overlaps the next compute).
  for (int p = 2; p <= 5; ++p)
    for (int m = 1; m <= 6; ++m) {
      const double tf = 1, tb = 2, c = 0.25;
      const std::vector<StageTimes> times(static_cast<std::size_t>(p), StageTimes{tf, tb});
      expect_close(pipeline_makespan(p, m, gpipe(), times, c).makespan,
                   (m + p - 1) * (tf + tb) + 2 * (p - 1) * c,
                   "p=" + std::to_string(p) + " m=" + std::to_string(m));
    }
}

TEST(PipelineMakespan, TransfersWithoutLinksAreTheScalarForm) {
  // One transfer per boundary, none holding a link, each the scalar p2p: the same timing.
  for (int p = 2; p <= 4; ++p)
    for (int m = p; m <= 8; m += p)
      for (const PipelineSchedule& schedule :
           {gpipe(), PipelineSchedule{Kind::OneFOneB, 1}, PipelineSchedule{Kind::Interleaved, 2}}) {
        std::vector<StageTimes> times;
        for (int s = 0; s < p; ++s) times.push_back({1.0 + 0.3 * s, 2.0 + 0.1 * s});
        const int v = schedule.virtual_stages;
        const std::vector<Transfer> transfers(static_cast<std::size_t>(p * v - 1),
                                              Transfer{0.4, {}, 0});
        const auto a = pipeline_makespan(p, m, schedule, times, 0.4);
        const auto b = pipeline_makespan(p, m, schedule, times, transfers);
        const std::string what =
            "p=" + std::to_string(p) + " m=" + std::to_string(m) + " " + to_string(schedule);
        expect_close(b.makespan, a.makespan, what);
        for (int s = 0; s < p; ++s) expect_close(b.busy[s], a.busy[s], what);
      }
}

TEST(PipelineMakespan, TransfersOnOneLinkTakeItInTurn) {
  // Two stages with free compute and transfers of x seconds on one link (a NIC both
  // directions share). GPipe: the m activations cross one after another (the last arrives at
  // m·x), then the m gradients (the last at 2m·x). Without the link they overlap: 2x.
  const std::vector<StageTimes> times(2, StageTimes{0, 0});
  for (int m = 1; m <= 6; ++m) {
    const double x = 0.5;
    const std::string what = "m=" + std::to_string(m);
    expect_close(
        pipeline_makespan(2, m, gpipe(), times, std::vector<Transfer>{{x, {0}, 0}}).makespan,
        2 * m * x, what);
    expect_close(
        pipeline_makespan(2, m, gpipe(), times, std::vector<Transfer>{{x, {}, 0}}).makespan, 2 * x,
        what);
  }
  // Another number of transfers, a negative time or link: refused.
  const std::vector<StageTimes> two(2, StageTimes{1, 1});
  EXPECT_THROW(pipeline_makespan(2, 2, gpipe(), two, std::vector<Transfer>{}),
               std::invalid_argument);
  EXPECT_THROW(pipeline_makespan(2, 2, gpipe(), two, std::vector<Transfer>{{-1, {}, 0}}),
               std::invalid_argument);
  EXPECT_THROW(pipeline_makespan(2, 2, gpipe(), two, std::vector<Transfer>{{1, {-1}, 0}}),
               std::invalid_argument);
}

TEST(PipelineMakespan, TheSlowestStageDominates) {
  // One stage k slower than every other in forward and backward. GPipe: the first micro-batch
  // reaches k, k runs all m forwards, the last leaves for the end and the first gradient comes
  // back, k runs all m backwards, the last gradient leaves: Σ_{s≠k}(t_f,s + t_b,s) +
  // m(t_f,k + t_b,k). 1F1B: in steady state every further micro-batch costs the slowest
  // stage's t_f + t_b.
  const std::vector<std::vector<StageTimes>> cases = {
      {{1, 2}, {3, 5}, {1, 1.5}},
      {{4, 9}, {1, 2}, {0.5, 1}, {1, 1}},
      {{1, 2}, {0.5, 1}, {1.5, 2.5}, {2, 6}},
  };
  for (const auto& times : cases) {
    const int p = static_cast<int>(times.size());
    int k = 0;
    for (int s = 1; s < p; ++s)
      if (times[static_cast<std::size_t>(s)].forward > times[static_cast<std::size_t>(k)].forward)
        k = s;
    double others = 0;
    for (int s = 0; s < p; ++s)
      if (s != k)
        others += times[static_cast<std::size_t>(s)].forward +
                  times[static_cast<std::size_t>(s)].backward;
    const double slowest =
        times[static_cast<std::size_t>(k)].forward + times[static_cast<std::size_t>(k)].backward;
    for (int m = 1; m <= 8; ++m) {
      const std::string what =
          "p=" + std::to_string(p) + " k=" + std::to_string(k) + " m=" + std::to_string(m);
      expect_close(pipeline_makespan(p, m, gpipe(), times).makespan, others + m * slowest, what);
      // No order beats the slowest stage's own work plus the first micro-batch's forwards and
      // the last one's backwards on the stages before it.
      double before = 0;
      for (int s = 0; s < k; ++s)
        before += times[static_cast<std::size_t>(s)].forward +
                  times[static_cast<std::size_t>(s)].backward;
      EXPECT_GE(pipeline_makespan(p, m, one_f_one_b(), times).makespan, m * slowest + before - 1e-9)
          << what;
    }
    const int m = 6 * p;
    const double step = pipeline_makespan(p, m + 1, one_f_one_b(), times).makespan -
                        pipeline_makespan(p, m, one_f_one_b(), times).makespan;
    expect_close(step, slowest, "1F1B steady state, p=" + std::to_string(p));
    // Under GPipe the slowest stage idles only while the others run the first and last passes.
    const auto g = pipeline_makespan(p, m, gpipe(), times);
    expect_close(g.bubble[static_cast<std::size_t>(k)], others, "GPipe bubble of the slowest");
  }
}

namespace {

// The brute-force reference: the makespan of fixed orders whose steps start as soon as they
// can is the heaviest path through the graph of steps (edges: the next step of the same stage;
// a forward to the next virtual stage's forward and a backward to the previous one's backward,
// each crossing stages costing p2p; the last virtual stage's forward to its backward). Every
// path is walked, without memoisation, on small cases.
double brute_force_makespan(int p, int m, const PipelineSchedule& schedule,
                            const std::vector<StageTimes>& times, double p2p) {
  const auto orders = stage_orders(p, m, schedule);
  const int v = v_of(schedule);
  struct Node {
    int stage, index, k;
    Step step;
  };
  std::vector<Node> nodes;
  std::map<std::tuple<int, int, int>, int> id;  // (pass, k, mb) -> node
  for (int s = 0; s < p; ++s)
    for (std::size_t i = 0; i < orders[static_cast<std::size_t>(s)].size(); ++i) {
      const auto& st = orders[static_cast<std::size_t>(s)][i];
      const int k = st.chunk * p + s;
      id[{st.pass == Pass::Forward ? 0 : 1, k, st.micro_batch}] = static_cast<int>(nodes.size());
      nodes.push_back({s, static_cast<int>(i), k, st});
    }
  auto duration = [&](const Node& n) {
    const auto& t = times[static_cast<std::size_t>(
        times.size() == static_cast<std::size_t>(p) ? n.stage : n.k)];
    const double d = n.step.pass == Pass::Forward ? t.forward : t.backward;
    return times.size() == static_cast<std::size_t>(p) ? d / v : d;
  };
  // Successors with the extra delay of the edge.
  std::vector<std::vector<std::pair<int, double>>> next(nodes.size());
  for (std::size_t a = 0; a < nodes.size(); ++a) {
    const auto& n = nodes[a];
    const auto& order = orders[static_cast<std::size_t>(n.stage)];
    if (static_cast<std::size_t>(n.index) + 1 < order.size()) {
      const auto& st = order[static_cast<std::size_t>(n.index) + 1];
      next[a].push_back(
          {id.at({st.pass == Pass::Forward ? 0 : 1, st.chunk * p + n.stage, st.micro_batch}), 0.0});
    }
    const int mb = n.step.micro_batch;
    auto link = [&](int to_k) { return (to_k % p) == n.stage ? 0.0 : p2p; };
    if (n.step.pass == Pass::Forward) {
      if (n.k + 1 < p * v)
        next[a].push_back({id.at({0, n.k + 1, mb}), link(n.k + 1)});
      else
        next[a].push_back({id.at({1, n.k, mb}), 0.0});
    } else if (n.k > 0) {
      next[a].push_back({id.at({1, n.k - 1, mb}), link(n.k - 1)});
    }
  }
  std::function<double(int)> heaviest_from = [&](int a) {
    double best = 0;
    for (const auto& [b, delay] : next[static_cast<std::size_t>(a)])
      best = std::max(best, delay + heaviest_from(b));
    return duration(nodes[static_cast<std::size_t>(a)]) + best;
  };
  // Sources: the first step of every stage (every path can start there).
  double best = 0;
  for (std::size_t a = 0; a < nodes.size(); ++a)
    if (nodes[a].index == 0) best = std::max(best, heaviest_from(static_cast<int>(a)));
  return best;
}

}  // namespace

TEST(PipelineMakespan, EqualsTheBruteForceHeaviestPathWithUnevenTimesAndTransfers) {
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  std::vector<Case> cases;
  for (int p = 1; p <= 3; ++p)
    for (int m = 1; m <= 4; ++m) {
      cases.push_back({gpipe(), p, m});
      cases.push_back({one_f_one_b(), p, m});
    }
  cases.push_back({interleaved(2), 2, 2});
  cases.push_back({interleaved(2), 2, 4});
  cases.push_back({interleaved(3), 2, 2});
  cases.push_back({interleaved(2), 3, 3});
  for (const auto& c : cases)
    for (int trial = 0; trial < 3; ++trial) {
      const int v = v_of(c.schedule);
      // Per stage, and for interleaved also per virtual stage.
      for (const int entries : v > 1 ? std::vector<int>{c.p, c.p * v} : std::vector<int>{c.p}) {
        std::vector<StageTimes> times;
        for (int i = 0; i < entries; ++i) times.push_back({u(rng), u(rng)});
        const double p2p = trial == 0 ? 0.0 : u(rng) / 2;
        const auto t = pipeline_makespan(c.p, c.m, c.schedule, times, p2p);
        expect_close(
            t.makespan, brute_force_makespan(c.p, c.m, c.schedule, times, p2p),
            name(c) + " trial " + std::to_string(trial) + " entries " + std::to_string(entries));
        // Busy + bubble is the makespan on every stage, and no step runs before the previous
        // one of its stage ends.
        for (int s = 0; s < c.p; ++s) {
          const auto su = static_cast<std::size_t>(s);
          expect_close(t.busy[su] + t.bubble[su], t.makespan, name(c));
          for (std::size_t i = 1; i < t.start[su].size(); ++i)
            EXPECT_GE(t.start[su][i], t.end[su][i - 1] - 1e-12) << name(c);
        }
      }
    }
}

// A stage whose first forward waits for its parameters' gathers: that forward ends at its
// floor, the stage's next forward runs right after it, and the other stage's steps that do not
// need it are not held (GPipe, 2 stages × 2 micro-batches, forward 1, backward 2, no transfers).
TEST(PipelineMakespan, TheFirstForwardsFloorHoldsThatStepAlone) {
  const std::vector<StageTimes> plain{{1, 2}, {1, 2}};
  const PipelineTiming free = pipeline_makespan(2, 2, gpipe(), plain);
  EXPECT_DOUBLE_EQ(free.makespan, 9);  // F0 F1 on stage 0, then stage 1's F F B B, stage 0's B B
  std::vector<StageTimes> floored = plain;
  floored[1].first_forward_end = 5;  // stage 1's F0 starts at 1 and ends at 5, not 2
  const PipelineTiming t = pipeline_makespan(2, 2, gpipe(), floored);
  EXPECT_DOUBLE_EQ(t.end[1][0], 5);
  EXPECT_DOUBLE_EQ(t.end[1][1], 6);     // its F1 (arrived at 2) right after
  EXPECT_DOUBLE_EQ(t.end[0][1], 2);     // stage 0's F1 is not held
  EXPECT_DOUBLE_EQ(t.makespan, 9 + 3);  // what the floor adds to stage 1's F0, on the critical path
  EXPECT_DOUBLE_EQ(t.busy[1], 6);       // the wait is not compute
  // A floor below the step's own end changes nothing.
  floored[1].first_forward_end = 1.5;
  EXPECT_DOUBLE_EQ(pipeline_makespan(2, 2, gpipe(), floored).makespan, free.makespan);
  floored[1].first_forward_end = -1;
  EXPECT_THROW(pipeline_makespan(2, 2, gpipe(), floored), std::invalid_argument);
}

TEST(PipelineMakespan, RefusesTimesThatDoNotFitTheStages) {
  const std::vector<StageTimes> three(3, StageTimes{1, 2});
  try {
    pipeline_makespan(2, 4, one_f_one_b(), three);
    ADD_FAILURE() << "3 times for 2 stages accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 stage times for 2 stages"), std::string::npos)
        << e.what();
  }
  const std::vector<StageTimes> negative{{1, 2}, {-1, 2}};
  EXPECT_THROW(pipeline_makespan(2, 4, gpipe(), negative), std::invalid_argument);
  const std::vector<StageTimes> two(2, StageTimes{1, 2});
  EXPECT_THROW(pipeline_makespan(2, 4, gpipe(), two, -0.5), std::invalid_argument);
  EXPECT_THROW(pipeline_makespan(2, 4, gpipe(), two, std::nan("")), std::invalid_argument);
}

TEST(PipelineDescribe, OneLineWithTheFirstStagesActivationsAndTheBubble) {
  // The numbers come from the closed forms: 1F1B's stage 0 holds min(m, p), bubble
  // (p − 1)/(m + p − 1).
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{4, 8}, {2, 16}, {8, 8}, {3, 40}}) {
    // Whole percent, or one decimal below 10 %.
    const double bubble = 100.0 * (p - 1) / (m + p - 1);
    char pct[16];
    std::snprintf(pct, sizeof pct, bubble < 9.95 ? "%.1f" : "%.0f", bubble);
    const std::string want = "1F1B, " + std::to_string(p) + " stages x " + std::to_string(m) +
                             " micro-batches: stage 0 holds " + std::to_string(std::min(m, p)) +
                             " in flight, bubble " + pct + " %";
    EXPECT_EQ(describe(p, m, one_f_one_b()), want);
  }
  const std::string line = describe(4, 8, interleaved(2));
  EXPECT_NE(line.find("interleaved 1F1B (V=2), 4 stages x 8 micro-batches"), std::string::npos)
      << line;
  // 2(p − 1) + (V − 1)p + 1 = 11 chunk passes of 1/2 stage each.
  EXPECT_NE(line.find("holds 11 chunk passes (5.5 micro-batches)"), std::string::npos) << line;
  // With times: a stage twice as slow as the others raises the bubble above the equal case.
  const std::vector<StageTimes> uneven{{1, 2}, {2, 4}, {1, 2}, {1, 2}};
  const auto t = pipeline_makespan(4, 8, one_f_one_b(), uneven);
  EXPECT_GT(t.bubble_fraction(), 3.0 / 11.0);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.0f %%", 100 * t.bubble_fraction());
  EXPECT_NE(describe(4, 8, one_f_one_b(), uneven).find(pct), std::string::npos);
}

TEST(PipelineDeferredWgrad, MegatronDefersTheFirstLimitMicroBatchesOnlyWithAPipeline) {
  EXPECT_EQ(deferred_wgrad_micro_batches(true, 0, 8, 16), 16);  // limit 0: every one
  EXPECT_EQ(deferred_wgrad_micro_batches(true, 22, 8, 16), 16);
  EXPECT_EQ(deferred_wgrad_micro_batches(true, 5, 8, 16), 5);
  EXPECT_EQ(deferred_wgrad_micro_batches(false, 5, 8, 16), 0);
  EXPECT_EQ(deferred_wgrad_micro_batches(true, 0, 1, 16), 0);  // no pipeline, no flush
  EXPECT_THROW(deferred_wgrad_micro_batches(true, -1, 8, 16), std::invalid_argument);
}

TEST(PipelineDeferredWgrad, TheLastStagesDeferredWorkMovesIntoTheFlush) {
  // 1F1B, 2 stages, 3 micro-batches; stage 0 forward 1, backward 2; the last stage forward 1,
  // backward 3 of which 1 is the deferrable weight gradient. By hand:
  //   none deferred: s1 B0 [2,5], B1 [6,9], B2 [10,13]; s0 B2 [13,15]            -> 15
  //   all 3:        s1 B0 [2,4], B1 [5,7], B2 [8,10], flush 3 to 13; s0 B2 [10,12] -> 13
  //   the first 2:  s1 B2 [8,11], flush 2 to 13; s0 B2 [11,13]                     -> 13
  //   the first 1:  s1 B1 [5,8], B2 [9,12], flush 1 to 13; s0 B2 [12,14]          -> 14
  const auto timing = [](int deferred) {
    std::vector<StageTimes> times{{1, 2}, {1, 3}};
    times[1].deferred_wgrad = 1;
    times[1].deferred_micro_batches = deferred;
    return pipeline_makespan(2, 3, one_f_one_b(), times);
  };
  // Per number deferred: the makespan and stage 0's finish.
  const std::map<int, std::pair<double, double>> expected{
      {0, {15, 15}}, {3, {13, 12}}, {2, {13, 13}}, {1, {14, 14}}};
  for (const auto& [n, want] : expected) {
    const PipelineTiming t = timing(n);
    EXPECT_DOUBLE_EQ(t.makespan, want.first) << n << " deferred";
    EXPECT_DOUBLE_EQ(t.finish[0], want.second) << n << " deferred";
    EXPECT_DOUBLE_EQ(t.finish[1], 13) << n << " deferred";
    EXPECT_DOUBLE_EQ(t.busy[1], 12) << n << " deferred";  // the same work, moved
  }
  // The deferred micro-batches' backwards are the shorter ones, in micro-batch order.
  const PipelineTiming two = timing(2);
  EXPECT_DOUBLE_EQ(two.end[1][1] - two.start[1][1], 2);  // B0
  EXPECT_DOUBLE_EQ(two.end[1][5] - two.start[1][5], 3);  // B2, inline
  EXPECT_DOUBLE_EQ(two.end[1].back(), 11);               // the flush is not a step
}

TEST(PipelineDeferredWgrad, RefusesDeferredWorkThatCannotBe) {
  std::vector<StageTimes> times{{1, 2}, {1, 3}};
  times[1].deferred_wgrad = 4;  // above the backward it leaves
  times[1].deferred_micro_batches = 1;
  EXPECT_THROW(pipeline_makespan(2, 3, one_f_one_b(), times), std::invalid_argument);
  times[1].deferred_wgrad = 1;
  times[1].deferred_micro_batches = 4;  // more than m
  EXPECT_THROW(pipeline_makespan(2, 3, one_f_one_b(), times), std::invalid_argument);
  // Interleaved with one entry per stage: which chunk defers is not said.
  std::vector<StageTimes> per_stage{{1, 2}, {1, 3}};
  per_stage[1].deferred_wgrad = 1;
  per_stage[1].deferred_micro_batches = 2;
  EXPECT_THROW(pipeline_makespan(2, 2, interleaved(2), per_stage), std::invalid_argument);
}

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

using testing::tiny_plan;
using testing::tiny_scenario;

std::map<std::pair<int, int>, int> count_collectives(const TrainingGraph& g, int rank,
                                                     bool gather) {
  std::map<std::pair<int, int>, int> n;  // (unit, pass) -> count
  for (const Op& o : g.program(rank)) {
    bool ag = o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV;
    bool rs = o.kind == OpKind::ReduceScatter || o.kind == OpKind::ReduceScatterV;
    if ((gather && ag) || (!gather && rs)) ++n[{o.unit, static_cast<int>(o.pass)}];
  }
  return n;
}

TEST(TrainingGraph, LayeredGathersTwiceAndReducesOncePerUnitWhateverTheMicroBatches) {
  Scenario s = tiny_scenario(2, 3, 24);
  for (int mbs : {1, 2, 3, 4, 6}) {
    Plan p = tiny_plan(s, mbs);
    TrainingGraph g = build_training_graph(p, s);
    for (int r = 0; r < 2; ++r) {
      auto ag = count_collectives(g, r, true);
      auto rs = count_collectives(g, r, false);
      for (int u = 0; u < g.summary().num_units; ++u) {
        EXPECT_EQ((ag[{u, 0}]), 1) << "forward gather, unit " << u << ", mbs " << mbs;
        EXPECT_EQ((ag[{u, 1}]), 1) << "backward gather, unit " << u << ", mbs " << mbs;
        EXPECT_EQ((rs[{u, 1}]), 1) << "reduce-scatter, unit " << u << ", mbs " << mbs;
      }
      int computes = 0;
      for (const Op& o : g.program(r)) computes += o.kind == OpKind::Backward;
      EXPECT_EQ(computes, g.summary().num_units * mbs);
    }
  }
}

TEST(TrainingGraph, StandardGathersGrowWithMicroBatches) {
  Scenario s = tiny_scenario(2, 2, 24);
  const int units = 4;
  for (int mbs : {1, 2, 4}) {
    Plan p = tiny_plan(s, mbs, Accumulation::Standard);
    TrainingGraph g = build_training_graph(p, s);
    int ag = 0, rs = 0;
    for (const Op& o : g.program(0)) {
      ag += o.kind == OpKind::AllGather;
      rs += o.kind == OpKind::ReduceScatter;
    }
    EXPECT_EQ(ag, 2 * units * mbs);
    EXPECT_EQ(rs, units * mbs);
  }
}

TEST(TrainingGraph, StandardWithUnequalMicroBatchCountsKeepsCollectivesAligned) {
  Scenario s = tiny_scenario(2, 2, 12);
  Plan p = tiny_plan(s, 1, Accumulation::Standard);
  p.ranks[0].micro_batches = 3;
  p.ranks[0].micro_batch = 2;
  TrainingGraph g = build_training_graph(p, s);
  for (const Collective& c : g.collectives()) {
    auto m = g.members(c);
    ASSERT_EQ(m.size(), 2u);
    for (const auto& member : m) {
      ASSERT_NE(member.op, kNoOp);
      EXPECT_EQ(g.op(member.op).collective, c.id);
      EXPECT_EQ(g.op(member.op).rank, member.rank);
    }
  }
  int f1 = 0;
  for (const Op& o : g.program(1)) f1 += o.kind == OpKind::Forward;
  EXPECT_EQ(f1, 4);  // one micro-batch × 4 units; the other two rounds are collectives only
}

TEST(TrainingGraph, ProgramsAreContiguousAndDependenciesPointBackwardsAcrossStreams) {
  Scenario s = tiny_scenario(2, 2, 8);
  for (bool prefetch : {true, false})
    for (Offload off : {Offload::None, Offload::Host})
      for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard}) {
        TrainingGraph g = build_training_graph(tiny_plan(s, 2, acc, prefetch, off), s);
        OpId next = 0;
        for (int r = 0; r < g.num_ranks(); ++r) {
          std::size_t per_stream = 0;
          for (int st = 0; st < kNumStreams; ++st)
            per_stream += g.stream_program(r, Stream(st)).size();
          EXPECT_EQ(per_stream, g.program(r).size());
          for (const Op& o : g.program(r)) {
            EXPECT_EQ(o.id, next++);
            EXPECT_EQ(o.rank, r);
            EXPECT_EQ(o.stream, stream_of(o.kind));
            for (OpId d : g.waits_on(o.id)) {
              EXPECT_LT(d, o.id);
              EXPECT_EQ(g.op(d).rank, r);
              EXPECT_NE(g.op(d).stream, o.stream);
            }
          }
        }
        auto order = g.topological_order();
        EXPECT_EQ(order.size(), g.num_ops());
        EXPECT_GT(g.boost_num_edges(), g.num_ops());
      }
}

TEST(TrainingGraph, EveryTransientAllocationIsFreedWithinTheIteration) {
  Scenario s = tiny_scenario(2, 2, 12);
  for (Offload off : {Offload::None, Offload::Host})
    for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard}) {
      TrainingGraph g = build_training_graph(tiny_plan(s, 3, acc, true, off), s);
      for (int r = 0; r < 2; ++r) {
        double alloc = 0, freed = 0;
        for (const Op& o : g.program(r)) {
          alloc += o.mem_alloc;
          freed += o.mem_free;
        }
        EXPECT_GT(alloc, 0);
        EXPECT_NEAR(alloc, freed, 1e-6 * alloc);
      }
    }
}

TEST(TrainingGraph, OffloadCopiesEveryLayerInputOutAndBack) {
  Scenario s = tiny_scenario(2, 2, 12);
  TrainingGraph none = build_training_graph(tiny_plan(s, 3), s);
  TrainingGraph host =
      build_training_graph(tiny_plan(s, 3, Accumulation::Layered, true, Offload::Host), s);
  int d2h = 0, h2d = 0;
  for (const Op& o : host.program(0)) {
    d2h += o.kind == OpKind::CopyD2H;
    h2d += o.kind == OpKind::CopyH2D;
    if (o.kind == OpKind::CopyH2D) {
      EXPECT_EQ(o.bytes, costmodels::boundary_activation_bytes(s.job.model, 128, o.micro_batch_size,
                                                               s.job.precision.compute));
    }
  }
  EXPECT_EQ(d2h, 3 * 3);  // units 1..3 (layers and head) × 3 micro-batches
  EXPECT_EQ(h2d, 3 * 3);
  for (const Op& o : none.program(0)) EXPECT_FALSE(is_copy(o.kind));
}

TEST(TrainingGraph, UnevenSharesUseVariantCollectivesWithPerRankShards) {
  Scenario s = tiny_scenario(2, 2, 8);
  Plan p = tiny_plan(s, 1);
  p.ranks[0].state_share = 0.75;
  p.ranks[1].state_share = 0.25;
  TrainingGraph g = build_training_graph(p, s);
  for (const Collective& c : g.collectives()) {
    EXPECT_TRUE(c.kind == OpKind::AllGatherV || c.kind == OpKind::ReduceScatterV);
    double sum = 0;
    for (const auto& m : g.members(c)) sum += m.shard_bytes;
    EXPECT_NEAR(sum, c.total_bytes, 1e-9 * c.total_bytes);
    EXPECT_DOUBLE_EQ(g.members(c)[0].shard_bytes, 3 * g.members(c)[1].shard_bytes);
  }
  EXPECT_DOUBLE_EQ(g.static_bytes(0), 3 * g.static_bytes(1));
}

TEST(TrainingGraph, PrefetchLetsTheNextGatherWaitOnlyForThePhaseBeforeLast) {
  Scenario s = tiny_scenario(2, 2, 8);
  TrainingGraph on = build_training_graph(tiny_plan(s, 1, Accumulation::Layered, true), s);
  TrainingGraph off = build_training_graph(tiny_plan(s, 1, Accumulation::Layered, false), s);
  // Phase 1's gather: with prefetch it waits on nothing; without, on phase 0's forward.
  auto gather_of_phase = [](const TrainingGraph& g, int phase) {
    for (const Op& o : g.program(0))
      if (o.phase == phase && is_collective(o.kind)) return o.id;
    return kNoOp;
  };
  EXPECT_TRUE(on.waits_on(gather_of_phase(on, 1)).empty());
  ASSERT_EQ(off.waits_on(gather_of_phase(off, 1)).size(), 1u);
  EXPECT_EQ(off.op(off.waits_on(gather_of_phase(off, 1))[0]).kind, OpKind::Forward);
  EXPECT_EQ(off.op(off.waits_on(gather_of_phase(off, 1))[0]).unit, 0);
}

TEST(IterationReport, RoundTripsThroughJson) {
  IterationReport r;
  r.iteration_time_s = 1.25;
  r.samples_per_s = 51.2;
  r.tokens_per_s = 51.2 * 512;
  r.mfu = 0.41;
  r.oom = true;
  r.oom_detail = OomDetail{1, 17, "B u2 mb0 r1", 25e9, 24e9, 1e9};
  r.events = 1234;
  r.implementation = "eager, unfused";
  r.ranks.push_back({0, "L4", 0, 1.0, 0.5, 0.1, 0.15, 20e9, 22e9});
  r.ranks.push_back({1, "P40", 0, 1.1, 0.4, 0.05, 0.1, 25e9, 24e9});
  r.ops.push_back({0, 0.0, 0.25});
  Json j = to_json(r);
  JsonReader reader(j, "report.json");
  IterationReport back = parse_iteration_report(reader);
  EXPECT_EQ(to_json(back), j);
  EXPECT_NE(render_table(r).find("rank 1 at B u2 mb0 r1"), std::string::npos);
  EXPECT_EQ(back.implementation, "eager, unfused");
  EXPECT_NE(render_table(r).find("implementation  eager, unfused"), std::string::npos);
  Json bad = j;
  bad["ranks"][0]["surprise"] = 1;
  JsonReader bad_reader(bad, "bad.json");
  try {
    parse_iteration_report(bad_reader);
    FAIL() << "unknown key accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "bad.json");
  }
}

TEST(ChromeTrace, SequentialTimingsRenderValidLanesAndRejectOverlaps) {
  Scenario s = tiny_scenario(2, 2, 8);
  TrainingGraph g = build_training_graph(tiny_plan(s, 2), s);
  // Walk each rank's program one op at a time: a valid (if slow) execution.
  std::vector<std::int64_t> start(g.num_ops()), end(g.num_ops());
  for (int r = 0; r < 2; ++r) {
    std::int64_t t = 0;
    for (const Op& o : g.program(r)) {
      start[o.id] = t;
      t += 1500;
      end[o.id] = t;
    }
  }
  TraceInput in;
  in.graph = &g;
  in.start_ns = &start;
  in.end_ns = &end;
  in.rank_labels = {"TinyGPU, node 0", "TinyGPU, node 0"};
  in.memory = {{{0, 1e9}, {1500, 2e9}}, {}};
  Json trace = Json::parse(render_chrome_trace(in));
  int names = 0, x = 0, counters = 0;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      ++names;
      EXPECT_EQ(e["args"]["name"].get<std::string>().rfind("rank ", 0), 0u);
    }
    if (e["ph"] == "X") {
      ++x;
      EXPECT_TRUE(e["args"].contains("op"));
      EXPECT_TRUE(e["args"].contains("bytes"));
      EXPECT_TRUE(e["args"].contains("flops"));
    }
    counters += e["ph"] == "C";
  }
  EXPECT_EQ(names, 2);
  EXPECT_EQ(x, static_cast<int>(g.num_ops()));
  EXPECT_EQ(counters, 2);
  auto lane = g.stream_program(0, Stream::Compute);
  end[lane[0]] = start[lane[1]] + 1;  // the first compute op now runs into the second
  EXPECT_THROW(render_chrome_trace(in), std::invalid_argument);
}

// Eager attention on a GPU holds the s×s scores and their gradient while a layer's backward
// runs: the backward's transient grows by exactly eager_attention_bytes (the closed form's term);
// flash attention and CPU devices add nothing.
TEST(TrainingGraph, EagerAttentionScoresAreHeldByTheLayerBackwardOnAGpu) {
  auto backward_allocs = [](const Scenario& sc) {
    TrainingGraph g = build_training_graph(tiny_plan(sc, 2), sc);
    std::vector<double> out;
    for (const Op& o : g.program(0))
      if (o.kind == OpKind::Backward) out.push_back(o.mem_alloc - o.mem_free);
    return out;
  };
  Scenario flash = tiny_scenario(2, 2, 8);
  flash.job.implementation.attention = AttentionKernel::Flash;
  Scenario eager = flash;
  eager.job.implementation.attention = AttentionKernel::Eager;
  const ModelSpec& m = flash.job.model;
  TrainingGraph g = build_training_graph(tiny_plan(flash, 2), flash);
  std::vector<const Op*> backs;
  for (const Op& o : g.program(0))
    if (o.kind == OpKind::Backward) backs.push_back(&o);
  TrainingGraph ge = build_training_graph(tiny_plan(eager, 2), eager);
  std::vector<const Op*> backs_e;
  for (const Op& o : ge.program(0))
    if (o.kind == OpKind::Backward) backs_e.push_back(&o);
  ASSERT_EQ(backs.size(), backs_e.size());
  int layers = 0;
  for (std::size_t i = 0; i < backs.size(); ++i) {
    const double extra = costmodels::eager_attention_bytes(
        m, backs[i]->unit, 128, backs[i]->micro_batch_size, eager.job.implementation);
    EXPECT_DOUBLE_EQ(backs_e[i]->mem_alloc - backs[i]->mem_alloc, extra);
    EXPECT_DOUBLE_EQ(backs_e[i]->mem_free - backs[i]->mem_free, extra);
    if (extra > 0) ++layers;
  }
  EXPECT_EQ(layers, 2 * 2);  // every layer backward (2 layers × 2 micro-batches), nothing else
  Scenario cpu = eager;
  const auto on_cpu = [](std::vector<Node>& n) {
    for (auto& d : n[0].devices) d.spec.kind = "cpu";
  };
  cpu.cluster.nodes.edit(on_cpu);
  Scenario cpu_flash = flash;
  cpu_flash.cluster.nodes.edit(on_cpu);
  EXPECT_EQ(backward_allocs(cpu), backward_allocs(cpu_flash));
}

}  // namespace
}  // namespace cephalo::traces

namespace cephalo::traces {
namespace {

TEST(TrainingGraph, LayeredCollectiveCountsHoldWithDifferentMicroBatchCountsPerRank) {
  Scenario s = testing::tiny_scenario(3, 2, 18);
  Plan p = testing::tiny_plan(s, 1);
  p.ranks[0].micro_batches = 6;  // 6 × 1
  p.ranks[0].micro_batch = 1;
  p.ranks[1].micro_batches = 2;  // 4 + 2
  p.ranks[1].micro_batch = 4;
  TrainingGraph g = build_training_graph(p, s);
  EXPECT_EQ(g.collectives().size(), 3u * 4u);  // per unit: forward gather, backward gather, RS
  for (int r = 0; r < 3; ++r) {
    int ag = 0, rs = 0, backward = 0;
    // Equal thirds of units whose sizes are mostly not divisible by 3: those collectives are
    // the -v variants (graph_slices_test.cpp checks which); counted together here.
    for (const Op& o : g.program(r)) {
      ag += o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV;
      rs += o.kind == OpKind::ReduceScatter || o.kind == OpKind::ReduceScatterV;
      backward += o.kind == OpKind::Backward;
    }
    EXPECT_EQ(ag, 8) << r;
    EXPECT_EQ(rs, 4) << r;
    EXPECT_EQ(backward, 4 * p.ranks[r].micro_batches) << r;
  }
  // The last micro-batch of rank 1 is the smaller one.
  for (const Op& o : g.program(1))
    if (o.kind == OpKind::Forward) {
      EXPECT_EQ(o.micro_batch_size, o.micro_batch == 1 ? 2 : 4);
    }
}

}  // namespace
}  // namespace cephalo::traces

namespace cephalo::traces {
namespace {

// A head tied to the token embedding computes its logits with the embedding's weight, so the
// backend's head phases gather the whole embedding unit with the head and reduce its gradient
// with the head's: the graph charges those bytes, to memory and to the collectives. A gather
// also holds the rank's master shard cast to the compute dtype until it ends, and a
// reduce-scatter the shard it receives.
TEST(TrainingGraph, HeadPhasesOfATiedModelGatherAndReduceTheEmbeddingToo) {
  Scenario s = tiny_scenario(2, 2, 8);  // fp32 master and reduce, fp16 compute, even shares
  const ModelSpec& m = s.job.model;
  ASSERT_TRUE(m.tied_embeddings);
  const int head = m.num_layers + 1;
  const double own = costmodels::head_parameters(m);               // final norm: 2 × 256
  const double phase = own + costmodels::embedding_parameters(m);  // + (1000 + 128) × 256
  EXPECT_DOUBLE_EQ(phase, 512 + 1128 * 256);
  TrainingGraph g = build_training_graph(tiny_plan(s, 2), s);
  EXPECT_DOUBLE_EQ(g.unit_sizes(head).parameters, own);
  EXPECT_DOUBLE_EQ(g.unit_sizes(head).gathered_bytes, phase * 2);
  EXPECT_DOUBLE_EQ(g.unit_sizes(head).gradient_bytes, phase * 4);
  int gathers = 0, reduces = 0;
  for (const Op& o : g.program(0)) {
    if (o.unit != head) continue;
    if (o.kind == OpKind::AllGather) {
      ++gathers;
      EXPECT_DOUBLE_EQ(o.bytes, phase * 2);
      EXPECT_DOUBLE_EQ(o.shard_bytes, phase * 2 * 0.5);
      // The gathered phase (freed by the phase's last compute op) and the fp16 send shard.
      EXPECT_DOUBLE_EQ(o.mem_alloc, phase * 2 * 1.5);
      EXPECT_DOUBLE_EQ(o.mem_free, phase * 2 * 0.5);
    }
    if (o.kind == OpKind::ReduceScatter) {
      ++reduces;
      EXPECT_DOUBLE_EQ(o.bytes, phase * 4);
      EXPECT_DOUBLE_EQ(o.mem_alloc, phase * 4 * 0.5);  // the received shard
      EXPECT_DOUBLE_EQ(o.mem_free, phase * 4 * 1.5);   // and the phase's gradient buffer
    }
  }
  EXPECT_EQ(gathers, 2);
  EXPECT_EQ(reduces, 1);
  for (const Collective& c : g.collectives()) {
    if (c.unit != head) continue;
    EXPECT_DOUBLE_EQ(c.total_bytes, phase * (c.kind == OpKind::AllGather ? 2 : 4));
  }

  // An untied head owns its weight (vocabulary × hidden): its phases are its own parameters.
  Scenario untied = s;
  untied.job.model.tied_embeddings = false;
  TrainingGraph gu = build_training_graph(tiny_plan(untied, 2), untied);
  EXPECT_DOUBLE_EQ(gu.unit_sizes(head).gathered_bytes, (512 + 1000 * 256) * 2.0);
}

// A layer's backward holds, besides the saved activations of its recompute and its input and
// output gradients, its own input-gradient temporaries: max(h + 2f, 5h) elements per token at
// its high-water mark (GptModel::layer_backward), here (256 + 2 × 1024) × 2 B per token.
TEST(TrainingGraph, LayerBackwardsHoldTheirInputGradientTemporaries) {
  Scenario s = tiny_scenario(2, 2, 8);
  s.job.precision.reduce = Dtype::BF16;
  const ModelSpec& m = s.job.model;
  TrainingGraph g = build_training_graph(tiny_plan(s, 2), s);
  int checked = 0;
  for (const Op& o : g.program(0)) {
    if (o.kind == OpKind::OptimizerStep) {
      // AdamW widens the bf16 gradient shard of one unit at a time into fp32.
      EXPECT_DOUBLE_EQ(o.mem_alloc, costmodels::layer_parameters(m) * 0.5 * 4);
      EXPECT_DOUBLE_EQ(o.mem_free, o.mem_alloc);
    }
    if (o.kind != OpKind::Backward || o.unit < 1 || o.unit > m.num_layers) continue;
    const double tokens = 128.0 * o.micro_batch_size;
    const double transient = tokens * (256 + 2 * 1024) * 2;
    EXPECT_DOUBLE_EQ(
        costmodels::unit_backward_transient_bytes(m, o.unit, 128, o.micro_batch_size, Dtype::FP16),
        transient);
    const double boundary = tokens * 256 * 2;
    // Layered: micro-batches run backwards, the first one (index 1) allocates the gradient.
    const double gradient = o.micro_batch == 1 ? g.unit_sizes(o.unit).gradient_bytes : 0.0;
    EXPECT_DOUBLE_EQ(o.mem_alloc, boundary + gradient + transient);
    const double saved =
        costmodels::unit_working_bytes(m, o.unit, 128, o.micro_batch_size, Dtype::FP16);
    // The phase's last backward (micro-batch 0) also releases the gathered layer.
    const double gathered = o.micro_batch == 0 ? g.unit_sizes(o.unit).gathered_bytes : 0.0;
    EXPECT_DOUBLE_EQ(o.mem_free, saved + transient + 2 * boundary + gathered);
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 2);  // 2 layers × 2 micro-batches
}

// One spelling of a rank's label for every trace: the catalog name, the node and, for an
// emulated slot, the slowdown.
TEST(TraceLabels, RankLabelNamesTheDeviceNodeAndEmulation) {
  Scenario s = tiny_scenario(2);
  s.cluster.nodes.edit([](std::vector<Node>& n) { n[0].devices[1].slowdown = 2.5; });
  EXPECT_EQ(
      rank_labels(s.cluster),
      (std::vector<std::string>{"TinyGPU, node 0", "TinyGPU, node 0, emulated 2.50x slowdown"}));
  EXPECT_EQ(rank_label(s.cluster.ranks()[0]), "TinyGPU, node 0");
}

}  // namespace
}  // namespace cephalo::traces

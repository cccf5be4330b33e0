// The training graph of a plan with a model split (DESIGN §4, "A split in the plan and the
// graph"): every rank walks its stage's pipeline order, TP collectives follow their compute ops,
// transfers pair sends with receives, each data-parallel domain shards its stage's units, and
// the memory every op allocates is released by the iteration's end.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "tiny_scenario.hpp"

namespace cephalo::traces {
namespace {

using testing::tiny_scenario;

ModelSplit pipeline_split(int tp, const std::vector<std::vector<int>>& ranks,
                          const std::vector<LayerRange>& layers, int micro_batches,
                          pipeline::PipelineSchedule schedule = {},
                          ShardingKind sharding = ShardingKind::Full) {
  ModelSplit s;
  s.tensor_parallel = tp;
  s.micro_batches = micro_batches;
  s.schedule = schedule;
  s.sharding = sharding;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    PipelineStage st;
    st.chunks = {layers[i]};
    st.ranks = ranks[i];
    s.stages.push_back(st);
  }
  return s;
}

int count(const TrainingGraph& g, int rank, OpKind kind) {
  int n = 0;
  for (const Op& o : g.program(rank)) n += o.kind == kind ? 1 : 0;
  return n;
}

// Every collective has all its members' ops, every op's waits come earlier, and the whole DAG
// (stream order, waits, rendezvous) has a topological order.
void expect_well_formed(const TrainingGraph& g) {
  for (const Collective& c : g.collectives())
    for (const CollectiveMember& m : g.members(c)) {
      ASSERT_NE(m.op, kNoOp) << to_string(c.kind) << " collective " << c.id;
      EXPECT_EQ(g.op(m.op).rank, m.rank);
      EXPECT_EQ(g.op(m.op).collective, c.id);
    }
  for (const Op& o : g.ops())
    for (OpId d : g.waits_on(o.id)) EXPECT_LT(d, o.id);
  EXPECT_EQ(g.topological_order().size(), g.num_ops());
}

// What every op allocates is freed by the end of the iteration: the device holds its static
// state again.
void expect_memory_balanced(const TrainingGraph& g) {
  for (int r = 0; r < g.num_ranks(); ++r) {
    double balance = 0;
    for (const Op& o : g.program(r)) balance += o.mem_alloc - o.mem_free;
    EXPECT_NEAR(balance, 0.0, 1e-6 * std::max(1.0, g.static_bytes(r))) << "rank " << r;
  }
}

TEST(SplitGraph, ADefaultSplitIsTheFsdpGraph) {
  const Scenario s = tiny_scenario(4, 4, 8);
  Plan plain = testing::tiny_plan(s, 2);
  Plan with = plain;
  with.model_split.tensor_parallel = 1;  // the default, spelt out
  const TrainingGraph a = build_training_graph(plain, s);
  const TrainingGraph b = build_training_graph(with, s);
  EXPECT_FALSE(b.summary().split);
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (std::size_t i = 0; i < a.num_ops(); ++i) {
    EXPECT_EQ(a.ops()[i].kind, b.ops()[i].kind);
    EXPECT_EQ(a.ops()[i].rank, b.ops()[i].rank);
  }
}

// The one builder reads an FSDP plan as its one-stage split: one stage holding every unit, a TP
// group of each rank, one data-parallel domain of every rank at its own position (the plan's
// rank order, which its sharding key numbers, whatever order a spelt-out stage lists), read
// through the same tables a split's ranks are. A one-stage split with other sharding is a
// split: it runs the pipeline order over its micro-batches.
TEST(SplitGraph, AnFsdpPlanIsOneStageWithOneDomainInPlanOrder) {
  const Scenario s = tiny_scenario(4, 4, 8);
  const Plan plain = testing::tiny_plan(s, 2);
  Plan listed = plain;  // the default split spelt out, its ranks listed backwards
  listed.model_split.stages = {PipelineStage{{LayerRange{0, 4}}, {3, 2, 1, 0}, 1}};
  ASSERT_TRUE(listed.model_split.is_default());
  const TrainingGraph a = build_training_graph(plain, s);
  const TrainingGraph b = build_training_graph(listed, s);
  for (const TrainingGraph* g : {&a, &b}) {
    EXPECT_FALSE(g->summary().split);
    EXPECT_EQ(g->summary().pipeline_micro_batches, 0);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(g->place(r).stage, 0);
      EXPECT_EQ(g->place(r).replica, r);
      EXPECT_EQ(g->place(r).tp_rank, 0);
      EXPECT_EQ(g->place(r).tensor_parallel, 1);
      EXPECT_EQ(g->layout_position(r), r);
      EXPECT_EQ(&g->layout_of(r), &g->layout());
      const auto ranks = g->layout_ranks(r);
      EXPECT_EQ(std::vector<int>(ranks.begin(), ranks.end()), (std::vector<int>{0, 1, 2, 3}));
      for (int u = 0; u < g->summary().num_units; ++u) EXPECT_TRUE(g->holds(r, u));
    }
  }
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (std::size_t i = 0; i < a.num_ops(); ++i) {
    EXPECT_EQ(a.ops()[i].kind, b.ops()[i].kind);
    EXPECT_EQ(a.ops()[i].rank, b.ops()[i].rank);
    EXPECT_EQ(a.ops()[i].shard_bytes, b.ops()[i].shard_bytes);
  }
  // The phase order: layered, every unit gathered twice (forward, backward), 2 micro-batches.
  EXPECT_EQ(count(a, 0, OpKind::Forward), 2 * 6);
  EXPECT_EQ(count(a, 0, OpKind::AllGather) + count(a, 0, OpKind::AllGatherV), 2 * 6);

  Plan zero1 = plain;  // one stage, optimizer sharding: a split, the pipeline order
  zero1.model_split.sharding = ShardingKind::Optimizer;
  zero1.model_split.micro_batches = 2;
  for (auto& r : zero1.ranks) r.micro_batch = r.batch / 2;
  const TrainingGraph c = build_training_graph(zero1, s);
  EXPECT_TRUE(c.summary().split);
  EXPECT_EQ(c.summary().pipeline_micro_batches, 2);
  EXPECT_EQ(count(c, 0, OpKind::Forward), 2 * 6);
  // ZeRO-1: each unit's updated parameters gathered once, after the optimizer step.
  int gathers_after_step = 0;
  bool stepped = false;
  for (const Op& o : c.program(0)) {
    stepped = stepped || o.kind == OpKind::OptimizerStep;
    if (o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV)
      gathers_after_step += stepped ? 1 : -100;
  }
  EXPECT_EQ(gathers_after_step, 6);
  expect_well_formed(c);
  expect_memory_balanced(c);
}

TEST(SplitGraph, EveryRankRunsItsStageOrderOverItsChunk) {
  const Scenario s = tiny_scenario(4, 4, 8);  // 4 layers: units 0..5
  const ModelSplit split = pipeline_split(1, {{0, 1}, {2, 3}}, {{0, 2}, {2, 4}}, 4);
  const Plan plan = even_split_plan(s, split);
  const TrainingGraph g = build_training_graph(plan, s);
  expect_well_formed(g);
  expect_memory_balanced(g);
  ASSERT_TRUE(g.summary().split);
  EXPECT_EQ(g.summary().pipeline_stages, 2);
  // Stage 0 holds the embedding and layers 1-2; stage 1 layers 3-4 and the head.
  for (int r : {0, 1}) {
    EXPECT_EQ(g.place(r).stage, 0);
    EXPECT_TRUE(g.holds(r, 0));
    EXPECT_TRUE(g.holds(r, 2));
    EXPECT_FALSE(g.holds(r, 3));
    EXPECT_EQ(count(g, r, OpKind::Forward), 4 * 3);  // m × units
    EXPECT_EQ(count(g, r, OpKind::Backward), 4 * 3);
    EXPECT_EQ(count(g, r, OpKind::Send), 4);  // activations forward, none back (stage 0)
    EXPECT_EQ(count(g, r, OpKind::Recv), 4);  // gradients from stage 1
  }
  for (int r : {2, 3}) {
    EXPECT_EQ(g.place(r).stage, 1);
    EXPECT_TRUE(g.holds(r, 5));
    EXPECT_EQ(count(g, r, OpKind::Recv), 4);
    EXPECT_EQ(count(g, r, OpKind::Send), 4);
  }
  // The compute order of stage 1 follows pipeline::stage_order: per micro-batch, F then B
  // alternating after one warm-up forward on stage 0; stage 1 (the last) runs F0 B0 F1 B1 ...
  std::vector<std::pair<Pass, int>> seen;
  for (const Op& o : g.program(2))
    if (o.kind == OpKind::Forward && o.unit == 3)
      seen.emplace_back(Pass::Forward, o.micro_batch);
    else if (o.kind == OpKind::Backward && o.unit == 3)
      seen.emplace_back(Pass::Backward, o.micro_batch);
  const auto order = pipeline::stage_order(1, 2, 4, {});
  ASSERT_EQ(seen.size(), order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(seen[i].first == Pass::Forward, order[i].pass == pipeline::Pass::Forward);
    EXPECT_EQ(seen[i].second, order[i].micro_batch);
  }
}

TEST(SplitGraph, TensorParallelCollectivesFollowEveryComputeOp) {
  const Scenario s = tiny_scenario(4, 2, 8);  // 2 layers, 4 heads
  ModelSplit split = pipeline_split(2, {{0, 1, 2, 3}}, {{0, 2}}, 2);
  const Plan plan = even_split_plan(s, split);
  const TrainingGraph g = build_training_graph(plan, s);
  expect_well_formed(g);
  expect_memory_balanced(g);
  // Per micro-batch: embedding forward 1 collective; each layer forward, recompute and backward
  // 1 (with 2 calls each); the head's forward and recompute 1 (3 calls), its backward 1.
  const int per_mb = 1 + 2 * 3 + 2 + 1;
  EXPECT_EQ(count(g, 0, OpKind::TpAllReduce), 2 * per_mb);
  for (const Op& o : g.program(0)) {
    if (o.kind != OpKind::TpAllReduce) continue;
    const Collective& c = g.collectives()[static_cast<std::size_t>(o.collective)];
    ASSERT_EQ(c.members_count, 2u);
    const int unit_kind = o.unit == 0 ? 0 : o.unit == 3 ? 2 : 1;
    if (unit_kind == 1) {
      EXPECT_EQ(c.calls, 2);
    }
    // The op right before it on the compute stream is its compute op, same unit and batch.
    const Op& before = g.op(o.id - 1);
    EXPECT_TRUE(is_compute(before.kind));
    EXPECT_EQ(before.unit, o.unit);
    EXPECT_EQ(before.micro_batch, o.micro_batch);
  }
  // Each rank holds its TP slice; the two TP ranks of a replica hold the same amount of a
  // layer, and together the whole layer plus one copy of what is replicated per rank.
  const ModelSpec& m = s.job.model;
  EXPECT_EQ(g.layout_of(0).numel(1), std::llround(costmodels::unit_parameters(m, 1, 2, 0)));
  EXPECT_EQ(g.layout_of(1).numel(1), g.layout_of(0).numel(1));
  EXPECT_LT(g.layout_of(0).numel(1), std::llround(costmodels::unit_parameters(m, 1)));
  // Ranks 0 and 2 (TP rank 0 of each replica) form domain 0 and shard it half each.
  EXPECT_EQ(g.layout_of(0).num_ranks(), 2);
  EXPECT_EQ(g.layout_ranks(0)[0], 0);
  EXPECT_EQ(g.layout_ranks(0)[1], 2);
  EXPECT_EQ(g.slice(1, 0).count + g.slice(1, 2).count, g.layout_of(0).numel(1));
}

TEST(SplitGraph, VocabularyRowsSplitTheEmbeddingAndHead) {
  const ModelSpec m = test_support::gpt_model("v", 2, 256, 4, 1024, 1001, 128);
  const double whole = costmodels::unit_parameters(m, 0);
  double sum = 0;
  for (int t = 0; t < 4; ++t) sum += costmodels::unit_parameters(m, 0, 4, t);
  // Each rank keeps the whole position embedding; the 1001 word rows are split 250/250/250/251.
  EXPECT_DOUBLE_EQ(sum, whole + 3.0 * 128 * 256);
  EXPECT_EQ(costmodels::vocab_rows(1001, 4, 3).size(), 251);
  EXPECT_EQ(costmodels::vocab_rows(1001, 4, 0).size(), 250);
}

TEST(SplitGraph, UnevenReplicasExchangeTheOverlapOfTheirSamples) {
  Scenario s = tiny_scenario(5, 4, 12);
  s.job.model.tied_embeddings = false;  // end stages of different sizes
  // Stage 0: replicas of 3 and 1 samples per micro-batch; stage 1: one replica of... three
  // ranks of 2, 1, 1 samples (assigned by hand below).
  ModelSplit split = pipeline_split(1, {{0, 1}, {2, 3, 4}}, {{0, 2}, {2, 4}}, 3);
  Plan plan = even_split_plan(s, split);
  plan.ranks[0].micro_batch = 3;
  plan.ranks[1].micro_batch = 1;
  plan.ranks[2].micro_batch = 2;
  plan.ranks[3].micro_batch = 1;
  plan.ranks[4].micro_batch = 1;
  for (auto& r : plan.ranks) r.batch = r.micro_batch * 3;
  const TrainingGraph g = build_training_graph(plan, s);
  expect_well_formed(g);
  expect_memory_balanced(g);
  // Micro-batch samples 0..3: rank 0 holds 0-2, rank 1 holds 3; rank 2 0-1, rank 3 2, rank 4 3.
  // Forward transfers per micro-batch: 0→2 (2 rows), 0→3 (1), 1→4 (1).
  std::map<std::pair<int, int>, double> bytes;
  for (const Collective& c : g.collectives()) {
    if (c.kind != OpKind::Send || c.pass != Pass::Forward) continue;
    const auto m = g.members(c);
    bytes[{m[0].rank, m[1].rank}] += c.total_bytes;
  }
  const double row = 128.0 * 256 * bytes_per_element(s.job.precision.compute);  // seq × hidden
  ASSERT_EQ(bytes.size(), 3u);
  EXPECT_DOUBLE_EQ((bytes[{0, 2}]), 3 * 2 * row);
  EXPECT_DOUBLE_EQ((bytes[{0, 3}]), 3 * 1 * row);
  EXPECT_DOUBLE_EQ((bytes[{1, 4}]), 3 * 1 * row);
}

TEST(SplitGraph, EveryShardingScheduleAndTiedHeadIsWellFormedAndReleasesItsMemory) {
  const Scenario s = tiny_scenario(4, 4, 8);  // a tied GPT
  using K = pipeline::PipelineSchedule::Kind;
  for (ShardingKind sharding :
       {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None})
    for (auto schedule :
         {pipeline::PipelineSchedule{K::GPipe, 1}, pipeline::PipelineSchedule{K::OneFOneB, 1},
          pipeline::PipelineSchedule{K::Interleaved, 2}})
      for (int tp : {1, 2}) {
        SCOPED_TRACE(to_string(sharding) + " " + pipeline::to_string(schedule) + " TP " +
                     std::to_string(tp));
        ModelSplit split =
            pipeline_split(tp, {{0, 1}, {2, 3}}, {{0, 2}, {2, 4}}, 4, schedule, sharding);
        if (schedule.kind == K::Interleaved) {
          split.stages[0].chunks = {{0, 1}, {2, 3}};
          split.stages[1].chunks = {{1, 2}, {3, 4}};
        }
        const Plan plan = even_split_plan(s, split);
        const TrainingGraph g = build_training_graph(plan, s);
        expect_well_formed(g);
        expect_memory_balanced(g);
        // The two copies of the tied word embedding meet once per iteration, rank by rank.
        EXPECT_EQ(count(g, 0, OpKind::TiedAllReduce), 1);
        EXPECT_EQ(count(g, 3, OpKind::TiedAllReduce), 1);
        EXPECT_EQ(count(g, 0, OpKind::OptimizerStep), 1);
      }
}

TEST(SplitGraph, ShardingDecidesTheDataParallelCollectives) {
  const Scenario s = tiny_scenario(4, 2, 8);
  auto dp = [&](ShardingKind sharding) {
    // TP 2: one stage of T = 1 and full sharding would be the default, the FSDP plan.
    const ModelSplit split = pipeline_split(2, {{0, 1, 2, 3}}, {{0, 2}}, 2, {}, sharding);
    const TrainingGraph g = build_training_graph(even_split_plan(s, split), s);
    std::map<OpKind, int> n;
    for (const Op& o : g.program(0))
      if (!is_compute(o.kind)) ++n[o.kind];
    return n;
  };
  const int units = 4;
  // Full: one gather per unit before its first forward and one reduce-scatter after its last
  // backward (parameters kept gathered through the iteration).
  auto full = dp(ShardingKind::Full);
  EXPECT_EQ(full[OpKind::AllGather] + full[OpKind::AllGatherV], units);
  EXPECT_EQ(full[OpKind::ReduceScatter] + full[OpKind::ReduceScatterV], units);
  // Optimizer (ZeRO-1): the reduce-scatter, then the updated parameters gathered after the step.
  auto opt = dp(ShardingKind::Optimizer);
  EXPECT_EQ(opt[OpKind::ReduceScatter] + opt[OpKind::ReduceScatterV], units);
  EXPECT_EQ(opt[OpKind::AllGather] + opt[OpKind::AllGatherV], units);
  // None (DDP): one all-reduce per unit.
  auto none = dp(ShardingKind::None);
  EXPECT_EQ(none[OpKind::AllReduce], units);
  EXPECT_EQ(none[OpKind::AllGather] + none[OpKind::ReduceScatter], 0);
}

// A split rank gathers each unit once, in the order of the units' first forwards, and issues
// each gather when the framework's prefetch rule says (schedule::gather_gates over those
// gathers, the rule an FSDP plan's phases follow): FSDP one unit ahead (none without
// prefetch), DeepSpeed ZeRO-3 as far as its prefetch bucket reaches (the whole tiny model).
TEST(SplitGraph, GathersFollowTheFrameworksPrefetchRule) {
  for (const Framework framework : {Framework::FSDP2, Framework::DeepSpeedZero3})
    for (const bool prefetch : {true, false}) {
      Scenario s = tiny_scenario(4, 4, 8);
      s.job.implementation.framework = framework;
      const ModelSplit split = pipeline_split(1, {{0, 1}, {2, 3}}, {{0, 2}, {2, 4}}, 4);
      Plan plan = even_split_plan(s, split);
      plan.prefetch = prefetch;
      const TrainingGraph g = build_training_graph(plan, s);
      expect_well_formed(g);
      for (int r : {0, 3}) {
        SCOPED_TRACE("rank " + std::to_string(r) + (prefetch ? " prefetch" : " no prefetch") +
                     (framework == Framework::FSDP2 ? " FSDP2" : " ZeRO-3"));
        std::vector<int> first_use;
        std::map<int, OpId> first_forward;
        std::vector<OpId> gathers;
        for (const Op& o : g.program(r)) {
          if (o.kind == OpKind::Forward && !first_forward.count(o.unit)) {
            first_forward[o.unit] = o.id;
            first_use.push_back(o.unit);
          }
          if (o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV) gathers.push_back(o.id);
        }
        ASSERT_EQ(gathers.size(), first_use.size());
        std::vector<schedule::GatherPhase> phases;
        for (int u : first_use)
          phases.push_back({static_cast<double>(g.layout_of(r).numel(u)), false});
        const std::vector<int> gates =
            schedule::gather_gates(schedule::gather_rules(framework, prefetch), phases);
        int issued_at_start = 0;
        for (std::size_t i = 0; i < gathers.size(); ++i) {
          EXPECT_EQ(g.op(gathers[i]).unit, first_use[i]);
          const auto waits = g.waits_on(gathers[i]);
          if (gates[i] < 0) {
            EXPECT_TRUE(waits.empty()) << "gather " << i;
            ++issued_at_start;
          } else {
            ASSERT_EQ(waits.size(), 1u) << "gather " << i;
            EXPECT_EQ(waits[0], first_forward[first_use[static_cast<std::size_t>(gates[i])]]);
          }
        }
        const int units = static_cast<int>(first_use.size());
        const int expected = framework == Framework::DeepSpeedZero3 && prefetch ? units
                             : prefetch                                         ? 2
                                                                                : 1;
        EXPECT_EQ(issued_at_start, expected);
      }
    }
}

// A split's data-parallel collectives come from one source in one id order, as an FSDP plan's
// do: domain by domain, phase by phase (forward u gathers, backward 2U − 1 − u reduces; per group
// the gather, then the reduce-scatter), each unit's cross-group reduction after the domain's
// last reducing phase; all before the tensor-parallel and pipeline ones, made as ranks emit.
TEST(SplitGraph, DataParallelCollectivesComeFirstInDomainAndPhaseOrder) {
  for (const ShardingKind sharding :
       {ShardingKind::Full, ShardingKind::Optimizer, ShardingKind::None}) {
    const Scenario s = tiny_scenario(8, 4, 8);
    const ModelSplit split =
        pipeline_split(2, {{0, 1, 2, 3}, {4, 5, 6, 7}}, {{0, 2}, {2, 4}}, 2, {}, sharding);
    const TrainingGraph g = build_training_graph(even_split_plan(s, split), s);
    expect_well_formed(g);
    const auto& cs = g.collectives();
    std::size_t first_other = cs.size();
    for (std::size_t i = 0; i < cs.size(); ++i)
      if (!is_data_parallel(cs[i].kind)) {
        first_other = i;
        break;
      }
    ASSERT_GT(first_other, 0u);
    ASSERT_LT(first_other, cs.size());
    // A domain is the ranks of one TP position of one stage (T = 2 on both): numbered
    // stage × 2 + TP rank, the order the builder makes them in.
    auto domain_of = [&](int rank) { return g.place(rank).stage * 2 + g.place(rank).tp_rank; };
    int domain = -1, phase = -1, collectives = 0;
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const Collective& c = cs[i];
      if (i >= first_other) {
        EXPECT_FALSE(is_data_parallel(c.kind)) << "collective " << i;
        continue;
      }
      ++collectives;
      const int d = domain_of(g.members(c)[0].rank);
      for (const CollectiveMember& m : g.members(c)) EXPECT_EQ(domain_of(m.rank), d);
      if (d != domain) {
        EXPECT_GT(d, domain) << "collective " << i;
        domain = d;
        phase = -1;
      }
      EXPECT_GE(c.phase, phase) << "collective " << i;
      phase = c.phase;
    }
    // Per domain and unit of its stage: full 1 gather + 1 reduce-scatter, optimizer the same (the
    // gather after the step), none 1 all-reduce; 4 domains (2 stages × T 2) of 3 units each.
    EXPECT_EQ(collectives, 4 * 3 * (sharding == ShardingKind::None ? 1 : 2));
  }
}

// A split graph of some ranks has only the collectives some built rank joins (sim/'s split
// classes price each by its members): a hybrid domain over two nodes, built for one rank, has
// no collective for the other node's group.
TEST(SplitGraph, AGraphOfSomeRanksHasNoCollectiveWithoutAMember) {
  Scenario s = tiny_scenario(2, 4, 8);
  Node second = s.cluster.nodes[0];
  second.name = "node1";
  s.cluster.nodes.push_back(second);
  const ModelSplit split =
      pipeline_split(1, {{0, 2}, {1, 3}}, {{0, 2}, {2, 4}}, 2, {}, ShardingKind::Hybrid);
  const Plan plan = even_split_plan(s, split);
  const int only[] = {0};
  const TrainingGraph some = build_training_graph_of_ranks(plan, s, only);
  const TrainingGraph all = build_training_graph(plan, s);
  int hybrid_gathers = 0;
  for (const Op& o : all.program(0))
    hybrid_gathers += o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV ? 1 : 0;
  EXPECT_EQ(hybrid_gathers, 3);  // the embedding and two layers, in rank 0's group
  for (const Collective& c : some.collectives()) EXPECT_FALSE(some.members(c).empty()) << c.id;
  // Rank 0's program is the whole graph's, op by op.
  ASSERT_EQ(some.program(0).size(), all.program(0).size());
  for (std::size_t i = 0; i < some.program(0).size(); ++i) {
    EXPECT_EQ(some.program(0)[i].kind, all.program(0)[i].kind);
    EXPECT_EQ(some.program(0)[i].shard_bytes, all.program(0)[i].shard_bytes);
  }
}

TEST(SplitGraph, OneFOneBHoldsFewerMicroBatchesThanGPipe) {
  const Scenario s = tiny_scenario(2, 4, 8);
  auto peak_boundaries = [&](pipeline::PipelineSchedule::Kind kind) {
    const ModelSplit split =
        pipeline_split(1, {{0}, {1}}, {{0, 2}, {2, 4}}, 8, {kind, 1}, ShardingKind::None);
    const TrainingGraph g = build_training_graph(even_split_plan(s, split), s);
    // Stage 0's dynamic memory over its program order up to its optimizer step (whose fp32
    // transient is the same under every schedule): the most it holds at once.
    double mem = 0, peak = 0;
    for (const Op& o : g.program(0)) {
      if (o.kind == OpKind::OptimizerStep) break;
      mem += o.mem_alloc;
      peak = std::max(peak, mem);
      mem -= o.mem_free;
    }
    return peak;
  };
  EXPECT_LT(peak_boundaries(pipeline::PipelineSchedule::Kind::OneFOneB),
            peak_boundaries(pipeline::PipelineSchedule::Kind::GPipe));
}

}  // namespace
}  // namespace cephalo::traces

namespace cephalo::traces {
namespace {

// The job's deferred output-layer weight gradient (pipeline::deferred_wgrad_micro_batches): on
// the last stage the head backward of the first n micro-batches runs without its weight-gradient
// GEMM (its FLOPs less output_weight_gradient_flops), one WeightGradient op per deferred
// micro-batch runs it after the rank's last backward, and the head's reductions wait for the
// last of them; no other stage and no job without the key changes.
TEST(SplitGraph, ADeferredOutputWeightGradientRunsInTheLastStagesFlush) {
  for (int limit : {0, 2})
    for (ShardingKind sharding : {ShardingKind::Optimizer, ShardingKind::Full})
      for (int tp : {1, 2}) {
        SCOPED_TRACE("limit " + std::to_string(limit) + " " + to_string(sharding) + " TP " +
                     std::to_string(tp));
        Scenario s = tiny_scenario(4, 4, 8);  // a tied GPT: the head's tied all-reduce moves too
        const ModelSplit split =
            pipeline_split(tp, {{0, 1}, {2, 3}}, {{0, 2}, {2, 4}}, 4,
                           {pipeline::PipelineSchedule::Kind::OneFOneB, 1}, sharding);
        const Plan plan = even_split_plan(s, split);
        const TrainingGraph plain = build_training_graph(plan, s);
        s.job.implementation.defer_embedding_wgrad_compute = true;
        s.job.implementation.wgrad_deferral_limit = limit;
        const TrainingGraph g = build_training_graph(plan, s);
        expect_well_formed(g);
        expect_memory_balanced(g);
        const int n = limit == 0 ? 4 : limit, head = g.summary().num_units - 1;
        for (int r = 0; r < 4; ++r) {
          const bool last = r >= 2;
          EXPECT_EQ(count(g, r, OpKind::WeightGradient), last ? n : 0) << "rank " << r;
          if (!last) {
            EXPECT_EQ(g.program(r).size(), plain.program(r).size()) << "rank " << r;
            continue;
          }
          // The flush after the last backward, in micro-batch order; the deferred head
          // backwards are the first n and lighter by what their flush ops compute.
          OpId last_backward = kNoOp, first_w = kNoOp, last_w = kNoOp;
          double head_flops = 0, inline_flops = 0, w_flops = 0;
          int w_seen = 0;
          for (const Op& o : g.program(r)) {
            if (o.kind == OpKind::Backward) last_backward = o.id;
            if (o.kind == OpKind::WeightGradient) {
              EXPECT_EQ(o.unit, head);
              EXPECT_EQ(o.micro_batch, w_seen++);
              if (first_w == kNoOp) first_w = o.id;
              last_w = o.id;
              w_flops = o.flops;
            }
            if (o.kind == OpKind::Backward && o.unit == head)
              (o.micro_batch < n ? head_flops : inline_flops) = o.flops;
          }
          EXPECT_LT(last_backward, first_w);
          EXPECT_GT(w_flops, 0);
          double plain_head = 0;
          for (const Op& o : plain.program(r))
            if (o.kind == OpKind::Backward && o.unit == head) plain_head = o.flops;
          EXPECT_NEAR(head_flops + w_flops, plain_head, 1e-9 * plain_head);
          if (n < 4) {
            EXPECT_DOUBLE_EQ(inline_flops, plain_head);
          }
          // The head's reductions (its tied all-reduce, its reduce-scatter) wait for the flush.
          for (const Op& o : g.program(r)) {
            const bool reduction = o.kind == OpKind::TiedAllReduce ||
                                   o.kind == OpKind::ReduceScatter ||
                                   o.kind == OpKind::ReduceScatterV;
            if (!reduction || o.unit != head) continue;
            const auto waits = g.waits_on(o.id);
            EXPECT_NE(std::find(waits.begin(), waits.end(), last_w), waits.end())
                << to_string(o.kind);
          }
        }
      }
}

}  // namespace
}  // namespace cephalo::traces

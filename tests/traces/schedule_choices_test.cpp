// The schedule choices (the plan keys of scenarios/README.md) in the TrainingGraph: activation
// checkpointing full / none / every k (which units get a Recompute op, how long a forward's working
// set lives) and the no_sync accumulation (one reduce-scatter per unit, in the last round, into a
// gradient buffer every round accumulates into). Each expectation is counted from the definitions
// in core/plan.hpp, not from the builder.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "../support/checkpointing.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "tiny_scenario.hpp"

using namespace cephalo;
using cephalo::test_support::every;
using cephalo::test_support::none;
using cephalo::test_support::selective;
using namespace cephalo::traces;
using cephalo::testing::tiny_plan;
using cephalo::testing::tiny_scenario;

namespace {

int count(const TrainingGraph& g, int rank, OpKind kind, int unit = -2) {
  int n = 0;
  for (const Op& o : g.program(rank))
    if (o.kind == kind && (unit == -2 || o.unit == unit)) ++n;
  return n;
}

// Peak of the device bytes over one rank's program in issue order (allocation at start, free
// at end, one op at a time): the schedule's own high-water mark without stream overlap.
double issue_order_peak(const TrainingGraph& g, int rank) {
  double now = 0, peak = 0;
  for (const Op& o : g.program(rank)) {
    now += o.mem_alloc;
    peak = std::max(peak, now);
    now -= o.mem_free;
  }
  return peak;
}

}  // namespace

TEST(ScheduleChoices, RecomputeOpsFollowTheCheckpointingSetting) {
  const int layers = 5, mbs = 3;
  const Scenario s = tiny_scenario(2, layers, 12);
  const int units = layers + 2;
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync}) {
    SCOPED_TRACE(to_string(acc));
    struct Case {
      ActivationCheckpointing c;
      int recomputed_units;  // counted from the definition: layers 1, 1+k, ... + embedding + head
    };
    const std::vector<Case> cases = {{ActivationCheckpointing{}, units},
                                     {none(), 1},
                                     {every(2), 3 + 2},
                                     {every(3), 2 + 2},
                                     {every(1), units},
                                     {every(9), 1 + 2}};
    for (const auto& c : cases) {
      SCOPED_TRACE(to_string(c.c));
      Plan p = tiny_plan(s, mbs, acc);
      p.activation_checkpointing = c.c;
      const TrainingGraph g = build_training_graph(p, s);
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(count(g, r, OpKind::Recompute), c.recomputed_units * mbs);
        EXPECT_EQ(count(g, r, OpKind::Backward), units * mbs);
        EXPECT_EQ(count(g, r, OpKind::Recompute, units - 1), mbs);  // the head, always
        for (int l = 1; l <= layers; ++l)
          EXPECT_EQ(count(g, r, OpKind::Recompute, l), c.c.checkpoints_layer(l) ? mbs : 0);
        EXPECT_EQ(g.recomputes(1), c.c.checkpoints_layer(1));
        // Every byte allocated is freed.
        double alloc = 0, freed = 0;
        for (const Op& o : g.program(r)) {
          alloc += o.mem_alloc;
          freed += o.mem_free;
        }
        EXPECT_NEAR(alloc, freed, 1e-6 * alloc);
      }
      g.topological_order();  // acyclic
    }
  }
}

// Selective recompute (Korthikanti et al.): every layer keeps its forward's saved activations
// but the attention core's, and reruns only that core before its backward: a Recompute op per
// layer and micro-batch with the core's forward FLOPs, allocating the core's saved state again.
TEST(ScheduleChoices, SelectiveRecomputesOnlyTheAttentionCore) {
  const int layers = 4, mbs = 2;
  const Scenario s = tiny_scenario(2, layers, 8);
  const Job& job = s.job;
  const int units = layers + 2;
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync}) {
    SCOPED_TRACE(to_string(acc));
    Plan p = tiny_plan(s, mbs, acc);
    p.activation_checkpointing = selective();
    const TrainingGraph g = build_training_graph(p, s);
    EXPECT_FALSE(g.recomputes(1));
    EXPECT_TRUE(g.recomputes_attention_core(1));
    EXPECT_FALSE(g.recomputes_attention_core(0));
    EXPECT_FALSE(g.recomputes_attention_core(units - 1));
    for (int r = 0; r < 2; ++r) {
      // Every layer and the head (always); not the embedding (it keeps nothing).
      EXPECT_EQ(count(g, r, OpKind::Recompute), (layers + 1) * mbs);
      EXPECT_EQ(count(g, r, OpKind::Recompute, 0), 0);
      double alloc = 0, freed = 0;
      for (const Op& o : g.program(r)) {
        alloc += o.mem_alloc;
        freed += o.mem_free;
        if (o.kind != OpKind::Recompute || o.unit < 1 || o.unit > layers) continue;
        const double core = costmodels::attention_core_forward_flops(job, o.micro_batch_size);
        EXPECT_EQ(o.flops, core);
        EXPECT_GT(core, 0.0);
        EXPECT_LT(core,
                  costmodels::unit_flops(job.model, o.unit, job.sequence_length, o.micro_batch_size)
                      .forward);
        EXPECT_EQ(o.mem_alloc, costmodels::attention_core_kept_bytes(job.model, job.sequence_length,
                                                                     o.micro_batch_size));
      }
      EXPECT_NEAR(alloc, freed, 1e-6 * alloc);
    }
    g.topological_order();
    // It holds more than full checkpointing and less than none.
    Plan full = p, kept = p;
    full.activation_checkpointing = ActivationCheckpointing{};
    kept.activation_checkpointing = none();
    const double sel = issue_order_peak(g, 0);
    EXPECT_LT(issue_order_peak(build_training_graph(full, s), 0), sel);
    EXPECT_LT(sel, issue_order_peak(build_training_graph(kept, s), 0));
  }
}

TEST(ScheduleChoices, EveryOneIsTheFullGraph) {
  const Scenario s = tiny_scenario(2, 4, 8);
  Plan full = tiny_plan(s, 2);
  Plan one = full;
  one.activation_checkpointing = every(1);
  const TrainingGraph a = build_training_graph(full, s), b = build_training_graph(one, s);
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (std::size_t i = 0; i < a.num_ops(); ++i) {
    EXPECT_EQ(a.ops()[i].kind, b.ops()[i].kind);
    EXPECT_EQ(a.ops()[i].mem_alloc, b.ops()[i].mem_alloc);
    EXPECT_EQ(a.ops()[i].mem_free, b.ops()[i].mem_free);
  }
}

TEST(ScheduleChoices, LayersWithoutCheckpointingHoldTheirActivationsLonger) {
  const Scenario s = tiny_scenario(2, 4, 8);
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard}) {
    SCOPED_TRACE(to_string(acc));
    Plan p = tiny_plan(s, 2, acc);
    const double full = issue_order_peak(build_training_graph(p, s), 0);
    p.activation_checkpointing = every(2);
    const double half = issue_order_peak(build_training_graph(p, s), 0);
    p.activation_checkpointing = none();
    const double kept = issue_order_peak(build_training_graph(p, s), 0);
    EXPECT_LT(full, half);
    EXPECT_LT(half, kept);
    // A kept layer's forward frees nothing of its working set; its backward frees it.
    const TrainingGraph g = build_training_graph(p, s);
    const double w = costmodels::unit_working_bytes(s.job.model, 2, s.job.sequence_length, 2,
                                                    s.job.precision.compute);
    for (const Op& o : g.program(0))
      if (o.kind == OpKind::Forward && o.unit == 2) {
        EXPECT_LT(o.mem_free, w);
      }
  }
}

TEST(ScheduleChoices, NoSyncReduceScattersEveryUnitOnceInTheLastRound) {
  const int layers = 3, mbs = 3;
  const Scenario s = tiny_scenario(2, layers, 12);
  const int units = layers + 2;
  Plan p = tiny_plan(s, mbs, Accumulation::NoSync);
  p.ranks[1].micro_batches = 2;  // fewer rounds on rank 1: it joins the last reduce-scatter
  p.ranks[1].micro_batch = 3;
  const TrainingGraph g = build_training_graph(p, s);
  Plan std_plan = p;
  std_plan.accumulation = Accumulation::Standard;
  const TrainingGraph st = build_training_graph(std_plan, s);
  for (int r = 0; r < 2; ++r) {
    const int rs = count(g, r, OpKind::ReduceScatter) + count(g, r, OpKind::ReduceScatterV);
    const int ag = count(g, r, OpKind::AllGather) + count(g, r, OpKind::AllGatherV);
    EXPECT_EQ(rs, units);
    EXPECT_EQ(ag, 2 * units * mbs);  // parameters re-gathered every micro-batch
    EXPECT_EQ(count(st, r, OpKind::ReduceScatter) + count(st, r, OpKind::ReduceScatterV),
              units * mbs);
    // Every backward accumulates into the last round's phase of its unit, which reduces it.
    std::map<int, int> reduced;  // gradient phase -> unit
    for (const Op& o : g.program(r))
      if (o.kind == OpKind::ReduceScatter || o.kind == OpKind::ReduceScatterV) {
        EXPECT_EQ(g.gradient_phase(o.phase), o.phase);
        reduced[o.phase] = o.unit;
        EXPECT_GE(o.phase, (mbs - 1) * 2 * units);  // in the last round
      }
    for (const Op& o : g.program(r))
      if (o.kind == OpKind::Backward) {
        ASSERT_TRUE(reduced.count(g.gradient_phase(o.phase)));
        EXPECT_EQ(reduced[g.gradient_phase(o.phase)], o.unit);
      }
    // The whole model's gradient is held across rounds: more memory than standard.
    EXPECT_GT(issue_order_peak(g, r), issue_order_peak(st, r));
    double alloc = 0, freed = 0;
    for (const Op& o : g.program(r)) {
      alloc += o.mem_alloc;
      freed += o.mem_free;
    }
    EXPECT_NEAR(alloc, freed, 1e-6 * alloc);
  }
  g.topological_order();
}

TEST(ScheduleChoices, MemoryModelCountsKeptActivationsAndNoSyncGradients) {
  const Scenario s = tiny_scenario(1, 4, 6);
  const Job& job = s.job;
  costmodels::RankMemoryInputs in;
  in.micro_batch_sizes = {2, 2, 2};
  in.gpu_runtime = false;
  auto total = [&](const costmodels::RankMemoryInputs& x, const char* term) {
    for (const auto& t : costmodels::memory_terms(job, x))
      if (t.name == term) return t.bytes;
    return 0.0;
  };
  const double w1 =
      costmodels::unit_working_bytes(job.model, 1, job.sequence_length, 1, job.precision.compute);
  EXPECT_EQ(total(in, "kept_activations"), 0.0);
  in.activation_checkpointing = none();
  EXPECT_NEAR(total(in, "kept_activations"), 4 * 6 * w1, 1e-6 * w1);  // 4 layers, 6 samples
  // Selective: every layer keeps all but its attention core's saved state.
  in.activation_checkpointing = selective();
  const double core1 = costmodels::attention_core_kept_bytes(job.model, job.sequence_length, 1);
  EXPECT_GT(core1, 0.0);
  EXPECT_NEAR(total(in, "kept_activations"), 4 * 6 * (w1 - core1), 1e-6 * w1);
  in.activation_checkpointing = every(2);
  EXPECT_NEAR(total(in, "kept_activations"), 2 * 6 * w1, 1e-6 * w1);  // layers 2 and 4
  in.accumulation = Accumulation::Standard;
  EXPECT_NEAR(total(in, "kept_activations"), 2 * 2 * w1, 1e-6 * w1);  // one micro-batch
  const double standard_grad = total(in, "unit_gradient");
  in.accumulation = Accumulation::NoSync;
  double all = 0;
  for (int u = 0; u < costmodels::num_units(job.model); ++u)
    all += costmodels::phase_parameters(job.model, u);
  EXPECT_NEAR(total(in, "unit_gradient"), all * bytes_per_element(job.precision.reduce),
              1e-6 * standard_grad);
  EXPECT_GT(total(in, "unit_gradient"), standard_grad);
}

// The graph runs what the schedule module says each accumulation mode gathers and reduces per
// unit (schedule::unit_collectives), and recomputes what schedule::recomputes says: the graph
// builder reads those rules, the planner and the memory model read the same functions.
TEST(ScheduleChoices, TheGraphRunsTheScheduleModulesCollectivesAndRecomputes) {
  const int layers = 3, units = layers + 2;
  const Scenario s = tiny_scenario(2, layers, 12);
  for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync})
    for (int mbs : {1, 3})
      for (const ActivationCheckpointing& ck :
           {ActivationCheckpointing{}, none(), every(2), selective()}) {
        Plan p = tiny_plan(s, mbs, acc);
        p.activation_checkpointing = ck;
        const TrainingGraph g = build_training_graph(p, s);
        const auto want = schedule::unit_collectives(acc, schedule::rounds(acc, mbs));
        for (int u = 0; u < units; ++u) {
          int fwd = 0, bwd = 0, rs = 0;
          for (const Op& o : g.program(0)) {
            if (o.unit != u) continue;
            const bool gather = o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV;
            fwd += gather && o.pass == Pass::Forward ? 1 : 0;
            bwd += gather && o.pass == Pass::Backward ? 1 : 0;
            rs += o.kind == OpKind::ReduceScatter || o.kind == OpKind::ReduceScatterV ? 1 : 0;
          }
          const std::string what = to_string(acc) + " m=" + std::to_string(mbs) + " " +
                                   to_string(ck) + " unit " + std::to_string(u);
          EXPECT_EQ(fwd, want.forward_gathers) << what;
          EXPECT_EQ(bwd, want.backward_gathers) << what;
          EXPECT_EQ(rs, want.reduce_scatters) << what;
          EXPECT_EQ(g.recomputes(u), schedule::recomputes(ck, u, units)) << what;
          EXPECT_EQ(g.recomputes_attention_core(u),
                    schedule::recomputes_attention_core(ck, u, units))
              << what;
          int rc = 0;
          for (const Op& o : g.program(0)) rc += o.unit == u && o.kind == OpKind::Recompute;
          EXPECT_EQ(rc, schedule::has_recompute_op(ck, u, units) ? mbs : 0) << what;
        }
      }
}

// Each gather waits on the last compute op of the phase schedule::gather_gates names for the
// job's framework (nothing before gate -1): DeepSpeed ZeRO-3's bucket holds the whole tiny
// model, so all its gathers are issued at the start, where FSDP2 issues two; the
// schedule's own high-water mark grows with the gathers held ahead, by at least one layer's.
TEST(ScheduleChoices, GathersWaitOnTheirFrameworksGatePhase) {
  Scenario s = tiny_scenario(2, 6, 8);
  std::map<Framework, double> peak;
  for (Framework f : {Framework::FSDP2, Framework::DeepSpeedZero3}) {
    SCOPED_TRACE(to_string(f));
    s.job.implementation.framework = f;
    const Plan p = tiny_plan(s, 2);
    const TrainingGraph g = build_training_graph(p, s);
    std::vector<schedule::GatherPhase> phases;
    std::map<int, OpId> last_compute;  // per phase
    std::vector<OpId> gathers;
    for (const Op& o : g.program(0)) {
      const bool gather = o.kind == OpKind::AllGather || o.kind == OpKind::AllGatherV;
      if (gather) {
        gathers.push_back(o.id);
        phases.push_back(
            {costmodels::phase_parameters(s.job.model, o.unit), o.pass == Pass::Backward});
      }
      if (o.kind == OpKind::Forward || o.kind == OpKind::Backward || o.kind == OpKind::Recompute)
        last_compute[o.phase] = o.id;
    }
    const auto gates = schedule::gather_gates(schedule::gather_rules(f, p.prefetch), phases);
    int at_start = 0;
    for (std::size_t q = 0; q < gathers.size(); ++q) {
      const auto waits = g.waits_on(gathers[q]);
      if (gates[q] < 0) {
        EXPECT_TRUE(waits.empty()) << "gather " << q;
        ++at_start;
      } else {
        ASSERT_EQ(waits.size(), 1u) << "gather " << q;
        EXPECT_EQ(waits[0], last_compute.at(gates[q])) << "gather " << q;
      }
    }
    // ZeRO-3: the forward and backward phases of all 8 units hold fewer elements than the bucket.
    EXPECT_EQ(at_start, f == Framework::FSDP2 ? 2 : 16);
    peak[f] = issue_order_peak(g, 0);
  }
  const double layer =
      costmodels::phase_parameters(s.job.model, 1) * bytes_per_element(s.job.precision.compute);
  EXPECT_GE(peak[Framework::DeepSpeedZero3] - peak[Framework::FSDP2], 0.999 * layer);
}

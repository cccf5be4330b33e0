// The first 3D-plan estimate (planner/split_estimate.hpp): it reduces to the plain sum of layer
// times without a split, follows pipeline_makespan's closed form for equal stages, issues the
// tensor-parallel collectives Megatron does, and refuses a stage that does not fit with its
// numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../support/fixed_models.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "split_fixture.hpp"

namespace cephalo {
namespace {

using costmodels::CollectiveKind;
using costmodels::ComputePhase;
using planner::estimate_split;
using planner::SplitOptions;

// One node of `gpus` GPUs of `gpu` on NVLink, running a small GPT (fp16 compute).
Scenario scenario(int gpus, int layers, int global_batch, const std::string& gpu = "A100-80GB",
                  int hidden = 1024, int heads = 16) {
  return test_support::split_scenario({{gpu, gpus, 8}}, layers, global_batch, hidden, heads);
}

PipelineStage stage(int begin, int end, std::vector<int> ranks) {
  PipelineStage s;
  s.chunks = {LayerRange{begin, end}};
  s.ranks = std::move(ranks);
  return s;
}

// Prices every collective and transfer at zero and records what was asked.
class RecordingComm final : public costmodels::CommModel {
 public:
  mutable std::vector<costmodels::CollectiveRequest> requests;
  double seconds = 0;
  costmodels::CollectiveEstimate collective(
      const Cluster&, const costmodels::CollectiveRequest& request) const override {
    requests.push_back(request);
    costmodels::CollectiveEstimate e;
    for (double b : request.shard_bytes) e.total_bytes += b;
    e.seconds = seconds;
    return e;
  }
  double copy_time(const Cluster&, int, double) const override { return 0; }
};

// A unit's backward as the estimate prices it from a calibrated compute model: its forward
// times the op list's backward / forward work at the roofline's default efficiencies.
double backward_from_forward(const costmodels::CostModels& models, const DeviceSpec& spec,
                             const Job& job, int unit, int micro_batch) {
  const auto ops = costmodels::unit_ops(job.model, unit, job.sequence_length, micro_batch,
                                        job.precision.compute, job.implementation);
  const auto x = costmodels::ops_features(spec, ops, job.precision.compute);
  const auto theta = costmodels::Efficiency{}.coefficients();
  double f = 0, b = 0;
  for (std::size_t i = 0; i < theta.size(); ++i) {
    f += x.forward[i] * theta[i];
    b += x.backward[i] * theta[i];
  }
  return models.compute->unit_time(spec, job, unit, ComputePhase::Forward, micro_batch).seconds *
         b / f;
}

TEST(SplitEstimate, WithoutASplitIsTheSumOfUnitTimesPlusTheOptimizerStep) {
  const Scenario s = scenario(1, 6, 8);
  ModelSplit split;
  split.micro_batches = 4;  // 2 samples each
  split.sharding = ShardingKind::None;
  split.stages = {stage(0, 6, {0})};
  const auto models = costmodels::make_cost_models(s);
  for (bool recompute : {false, true}) {
    SplitOptions options;
    options.activation_checkpointing.kind =
        recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
    const auto e = estimate_split(s, split, options, models);
    double per_micro = 0;
    const DeviceSpec& spec = s.cluster.ranks()[0].slot->spec;
    for (int u = 0; u < costmodels::num_units(s.job.model); ++u) {
      per_micro += models.compute->unit_time(spec, s.job, u, ComputePhase::Forward, 2).seconds +
                   models.compute->unit_time(spec, s.job, u, ComputePhase::Backward, 2).seconds;
      // The graph's recomputes: a checkpointed layer and the embedding under recompute, the
      // head's logits always (its fused kernel keeps none).
      const bool head = u == costmodels::num_units(s.job.model) - 1;
      if (recompute || head)
        per_micro += models.compute->unit_time(spec, s.job, u, ComputePhase::Recompute, 2).seconds;
    }
    const double opt =
        models.compute->optimizer_time(spec, s.job, costmodels::total_parameters(s.job.model))
            .seconds;
    EXPECT_NEAR(e.iteration_s, 4 * per_micro + opt, 1e-12 * e.iteration_s) << recompute;
    EXPECT_DOUBLE_EQ(e.stages[0].dp_comm, 0);
    EXPECT_EQ(e.stages[0].tp_collectives_forward, 0);
    EXPECT_NEAR(e.stages[0].parameters_per_rank, costmodels::total_parameters(s.job.model),
                1e-6 * e.stages[0].parameters_per_rank);
    EXPECT_TRUE(e.fits) << e.refusal;
  }
}

TEST(SplitEstimate, EqualStagesFollowTheOneFOneBClosedForm) {
  // Every unit takes 1 ms forward and 2 ms backward; with the embedding on stage 0 and the head
  // on the last stage, these layer ranges give every stage 3 units.
  auto compute = std::make_shared<sim::FixedComputeModel>();
  compute->recompute_s = 0;  // the head's recompute of its logits (always) adds nothing here
  auto comm = std::make_shared<RecordingComm>();
  const costmodels::CostModels models{compute, comm};
  const int m = 8;
  struct Case {
    int p;
    std::vector<PipelineStage> stages;
  };
  const std::vector<Case> cases = {
      {2, {stage(0, 2, {0}), stage(2, 4, {1})}},
      {4, {stage(0, 2, {0}), stage(2, 5, {1}), stage(5, 8, {2}), stage(8, 10, {3})}}};
  for (const auto& c : cases) {
    const int layers = c.p == 2 ? 4 : 10;
    const Scenario s = scenario(c.p, layers, m);
    ModelSplit split;
    split.micro_batches = m;
    split.sharding = ShardingKind::None;
    split.stages = c.stages;
    const auto e = estimate_split(s, split, {}, models);
    const double f = 3 * compute->forward_s, b = 3 * compute->backward_s;
    EXPECT_NEAR(e.makespan_s, (m + c.p - 1) * (f + b), 1e-12) << c.p;
    EXPECT_NEAR(e.iteration_s, e.makespan_s + compute->optimizer_s, 1e-12) << c.p;
    EXPECT_NEAR(e.bubble_fraction, (c.p - 1.0) / (m + c.p - 1.0), 1e-12) << c.p;
    EXPECT_EQ(e.stages[0].peak_in_flight, c.p);
    EXPECT_EQ(e.stages.back().peak_in_flight, 1);
  }
}

TEST(SplitEstimate, InterleavedChunksPutTheEmbeddingFirstAndTheHeadOnTheLastVirtualStage) {
  // p = 2, V = 2: virtual stages 0..3 are stage 0 chunk 0, stage 1 chunk 0, stage 0 chunk 1,
  // stage 1 chunk 1. With the embedding on virtual stage 0 and the head on virtual stage 3,
  // these ranges give every virtual stage 2 units, so each stage takes 4 units per micro-batch.
  auto compute = std::make_shared<sim::FixedComputeModel>();
  compute->recompute_s = 0;  // the head's recompute of its logits (always) adds nothing here
  auto comm = std::make_shared<RecordingComm>();
  const costmodels::CostModels models{compute, comm};
  const int m = 4;
  const Scenario s = scenario(2, 6, m);
  ModelSplit split;
  split.micro_batches = m;
  split.schedule = {pipeline::PipelineSchedule::Kind::Interleaved, 2};
  split.sharding = ShardingKind::None;
  PipelineStage first, second;
  first.chunks = {{0, 1}, {3, 5}};
  first.ranks = {0};
  second.chunks = {{1, 3}, {5, 6}};
  second.ranks = {1};
  split.stages = {first, second};
  const auto e = estimate_split(s, split, {}, models);
  const std::vector<pipeline::StageTimes> per_stage(
      2, {4 * compute->forward_s, 4 * compute->backward_s});
  EXPECT_NEAR(e.makespan_s, pipeline::pipeline_makespan(2, m, split.schedule, per_stage).makespan,
              1e-12);
  EXPECT_NEAR(e.stages[0].forward_compute, 4 * compute->forward_s, 1e-12);
  EXPECT_NEAR(e.stages[1].forward_compute, 4 * compute->forward_s, 1e-12);
  EXPECT_EQ(e.stages[0].peak_in_flight, pipeline::peak_in_flight(0, 2, m, split.schedule));
}

TEST(SplitEstimate, TensorParallelismIssuesTwoReductionsPerLayerEachWay) {
  const int L = 4, T = 2, b = 2;
  const Scenario s = scenario(T, L, b);
  auto comm = std::make_shared<RecordingComm>();
  const auto real = costmodels::make_cost_models(s);
  const costmodels::CostModels models{real.compute, comm};
  const double act_bytes = 1.0 * b * 1024 * 1024 * 2;  // b·s·h in fp16
  for (bool sp : {false, true})
    for (bool recompute : {false, true}) {
      ModelSplit split;
      split.tensor_parallel = T;
      split.sequence_parallel = sp;
      split.micro_batches = 1;
      split.stages = {stage(0, L, {0, 1})};
      SplitOptions options;
      options.activation_checkpointing.kind =
          recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
      comm->requests.clear();
      const auto e = estimate_split(s, split, options, models);
      const auto& st = e.stages[0];
      const int calls = sp ? 2 : 1;  // reduce-scatter + all-gather, or one all-reduce
      // As the graph issues them: 2 per layer forward, 2 per layer backward, 2 more when the
      // recompute reruns the forward (each a reduce-scatter + all-gather pair under SP); the
      // embedding's output and the head's input gradient one all-reduce each (never split
      // along the sequence); the vocabulary-parallel loss's 3 small all-reduces in the head's
      // forward and again in its recompute, which runs always.
      EXPECT_EQ(st.tp_collectives_forward, 2 * L * calls + 1 + 3) << sp << recompute;
      EXPECT_EQ(st.tp_collectives_backward, (recompute ? 4 : 2) * L * calls + 1 + 3)
          << sp << recompute;
      EXPECT_DOUBLE_EQ(st.tp_bytes_per_collective, act_bytes);
      // The layer's reductions are priced once per kind over the TP group with b·s·h bytes.
      const auto layer_kind = sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
      const auto first =
          std::find_if(comm->requests.begin(), comm->requests.end(), [&](const auto& r) {
            return r.kind == layer_kind && r.shard_bytes[0] + r.shard_bytes[1] == act_bytes;
          });
      ASSERT_NE(first, comm->requests.end()) << sp << recompute;
      EXPECT_EQ(first->ranks, (std::vector<int>{0, 1}));
      // The loss's all-reduces carry one fp32 per token.
      EXPECT_TRUE(std::any_of(comm->requests.begin(), comm->requests.end(), [&](const auto& r) {
        return r.kind == CollectiveKind::AllReduce &&
               r.shard_bytes[0] + r.shard_bytes[1] == 1.0 * b * 1024 * 4;
      }));
      // Compute: the replicated share r is strictly between 0 and 1 without SP, 0 with it.
      if (sp) {
        EXPECT_DOUBLE_EQ(st.replicated_forward, 0);
      } else {
        EXPECT_GT(st.replicated_forward, 0);
        EXPECT_LT(st.replicated_forward, 0.5);
      }
      const DeviceSpec& spec = s.cluster.ranks()[0].slot->spec;
      double expected = 0;
      for (int u = 1; u <= L; ++u)
        expected += real.compute->unit_time(spec, s.job, u, ComputePhase::Forward, b).seconds *
                    (st.replicated_forward + (1 - st.replicated_forward) / T);
      expected += real.compute->unit_time(spec, s.job, 0, ComputePhase::Forward, b).seconds;
      expected += real.compute->unit_time(spec, s.job, L + 1, ComputePhase::Forward, b).seconds / T;
      EXPECT_NEAR(st.forward_compute, expected, 1e-12);
    }
}

// The job's TP communication overlap (Transformer Engine's userbuffers): a sequence-parallel
// layer's pairs cost what costmodels::tp_overlap_exposed_seconds leaves of them under the
// layer's GEMMs, the embedding's and the loss's all-reduces stay exposed, and a split without
// sequence parallelism is priced as without the overlap (NeMo turns it off there).
TEST(SplitEstimate, TheTpOverlapLeavesALayersPairsWhatItsGemmsDoNotHide) {
  const int L = 4, T = 2, b = 2;
  Scenario s = scenario(T, L, b);
  auto comm = std::make_shared<RecordingComm>();
  comm->seconds = 2e-4;  // every collective, so that exposed and hidden differ visibly
  const auto real = costmodels::make_cost_models(s);
  const costmodels::CostModels models{real.compute, comm};
  for (bool sp : {false, true}) {
    ModelSplit split;
    split.tensor_parallel = T;
    split.sequence_parallel = sp;
    split.micro_batches = 1;
    split.stages = {stage(0, L, {0, 1})};
    s.job.implementation.tp_comm_overlap = false;
    const auto exposed = estimate_split(s, split, {}, models).stages[0];
    s.job.implementation.tp_comm_overlap = true;
    const auto overlapped = estimate_split(s, split, {}, models).stages[0];
    if (!sp) {
      EXPECT_DOUBLE_EQ(overlapped.tp_comm_forward, exposed.tp_comm_forward);
      EXPECT_DOUBLE_EQ(overlapped.tp_comm_backward, exposed.tp_comm_backward);
      continue;
    }
    const double c = comm->seconds;
    // Exposed: per layer 2 pairs each way, the embedding's all-reduce and the loss's 3 forward,
    // the head's input gradient and the loss's 3 again (its recompute) backward.
    EXPECT_NEAR(exposed.tp_comm_forward, L * 2 * 2 * c + 1 * c + 3 * c, 1e-15);
    EXPECT_NEAR(exposed.tp_comm_backward, L * 2 * 2 * c + 1 * c + 3 * c, 1e-15);
    const DeviceSpec& spec = s.cluster.ranks()[0].slot->spec;
    const auto shares = costmodels::layer_linear_shares(spec, s.job, b);
    const auto layer = [&](ComputePhase phase) {
      return real.compute->unit_time(spec, s.job, 1, phase, b).seconds;
    };
    const double fwd = costmodels::tp_overlap_exposed_seconds(
        shares, ComputePhase::Forward, layer(ComputePhase::Forward), T, c, c);
    const double bwd = costmodels::tp_overlap_exposed_seconds(
        shares, ComputePhase::Backward, layer(ComputePhase::Backward), T, c, c);
    EXPECT_NEAR(overlapped.tp_comm_forward, L * fwd + 4 * c, 1e-15);
    EXPECT_NEAR(overlapped.tp_comm_backward, L * bwd + 4 * c, 1e-15);
    EXPECT_LT(fwd, 4 * c);  // something is hidden
    EXPECT_LE(bwd, 4 * c);
  }
}

TEST(SplitEstimate, DataParallelReductionFollowsTheSharding) {
  // 4 ranks, T = 2: two replicas; DDP all-reduces the stage's gradients, the distributed
  // optimizer reduce-scatters them and all-gathers the parameters.
  const Scenario s = scenario(4, 4, 4);
  auto comm = std::make_shared<RecordingComm>();
  const costmodels::CostModels models{costmodels::make_cost_models(s).compute, comm};
  for (ShardingKind sharding : {ShardingKind::None, ShardingKind::Optimizer}) {
    ModelSplit split;
    split.tensor_parallel = 2;
    split.micro_batches = 2;
    split.sharding = sharding;
    split.stages = {stage(0, 4, {0, 1, 2, 3})};
    comm->requests.clear();
    const auto e = estimate_split(s, split, {}, models);
    // Each unit's gradient reduced after its last backward (the graph's order), so every
    // reduction carries at most the stage's parameters; the distributed optimizer then
    // all-gathers the whole updated stage once.
    std::vector<CollectiveKind> dp;
    for (const auto& r : comm->requests)
      if (r.ranks == std::vector<int>{0, 2}) {
        dp.push_back(r.kind);
        const double whole = e.stages[0].parameters_per_rank * 2;  // fp16
        if (r.kind == CollectiveKind::AllGather)
          EXPECT_NEAR(r.shard_bytes[0] * 2, whole, 1e-6 * whole);
        else
          EXPECT_LT(r.shard_bytes[0] * 2, whole);
      }
    ASSERT_GE(dp.size(), 2u);  // the embedding's, a layer's and the head's reductions
    const CollectiveKind reduce =
        sharding == ShardingKind::None ? CollectiveKind::AllReduce : CollectiveKind::ReduceScatter;
    const std::size_t reductions = sharding == ShardingKind::None ? dp.size() : dp.size() - 1;
    for (std::size_t i = 0; i < reductions; ++i) EXPECT_EQ(dp[i], reduce);
    if (sharding == ShardingKind::Optimizer) {
      EXPECT_EQ(dp.back(), CollectiveKind::AllGather);
    }
    // 1/T of every layer's weights on each rank.
    EXPECT_NEAR(e.stages[0].parameters_per_rank, costmodels::total_parameters(s.job.model) / 2,
                1e-6 * e.stages[0].parameters_per_rank);
  }
}

TEST(SplitEstimate, AStageThatDoesNotFitIsRefusedWithItsNumbers) {
  // A 40-layer 5120-wide model on two 24 GB GPUs, 39 layers on the second stage, unsharded:
  // its ~0.3 B parameters per layer x 39 at 16 B each cannot fit; the first stage's one can.
  const Scenario s = scenario(2, 40, 2, "L4", 5120, 40);
  ModelSplit split;
  split.micro_batches = 2;
  split.sharding = ShardingKind::None;
  split.stages = {stage(0, 1, {0}), stage(1, 40, {1})};
  const auto e = estimate_split(s, split, {});
  EXPECT_FALSE(e.fits);
  const auto& mem = e.stages[1].memory;
  EXPECT_GT(mem.total, mem.capacity);
  EXPECT_EQ(mem.rank, 1);
  EXPECT_LE(e.stages[0].memory.total, e.stages[0].memory.capacity);
  EXPECT_NE(e.refusal.find("stage 1"), std::string::npos) << e.refusal;
  EXPECT_NE(e.refusal.find("rank 1"), std::string::npos) << e.refusal;
  EXPECT_NE(e.refusal.find("needs"), std::string::npos) << e.refusal;
  EXPECT_THROW(planner::require_fit(e), InfeasibleError);

  // 16 B per parameter of the stage, unsharded.
  const double P = e.stages[1].parameters_per_rank;
  double state = 0;
  for (const auto& t : mem.terms)
    if (t.name == "training_state") state = t.bytes;
  EXPECT_NEAR(state, 16 * P, 1e-6 * P);
  EXPECT_NE(e.refusal.find("training_state"), std::string::npos) << e.refusal;
}

TEST(SplitEstimate, RefusesABatchTheMicroBatchesAndReplicasDoNotDivide) {
  const Scenario s = scenario(2, 4, 6);
  ModelSplit split;
  split.micro_batches = 4;  // 6 samples over 4 micro-batches x 2 replicas
  split.stages = {stage(0, 4, {0, 1})};
  try {
    estimate_split(s, split, {});
    ADD_FAILURE() << "accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.json_path(), "model_split.stages[0]");
    EXPECT_NE(std::string(e.what()).find("global batch 6"), std::string::npos) << e.what();
  }
}

TEST(SplitEstimate, ACalibratedBackwardRunsAtItsForwardsRate) {
  // One stage of one GPU: every unit's forward and backward, nothing divided by T.
  const Scenario s = scenario(1, 4, 4);
  ModelSplit split;
  split.micro_batches = 2;
  split.sharding = ShardingKind::None;
  split.stages = {stage(0, 4, {0})};
  const auto models = costmodels::make_cost_models(s);
  const DeviceSpec& spec = s.cluster.ranks()[0].slot->spec;
  ASSERT_EQ(models.compute->unit_time(spec, s.job, 1, ComputePhase::Forward, 2)
                .source.rfind("calibrated", 0),
            0u);
  double from_forward = 0, calibrated = 0;
  for (int u = 0; u < costmodels::num_units(s.job.model); ++u) {
    from_forward += backward_from_forward(models, spec, s.job, u, 2);
    calibrated += models.compute->unit_time(spec, s.job, u, ComputePhase::Backward, 2).seconds;
  }
  // The head's recompute of its logits (always) is part of the backward pass too.
  const int head = costmodels::num_units(s.job.model) - 1;
  const double head_recompute =
      models.compute->unit_time(spec, s.job, head, ComputePhase::Recompute, 2).seconds;
  from_forward += head_recompute;
  calibrated += head_recompute;
  SplitOptions at_forward_rate;
  at_forward_rate.backward_at_forward_rate = true;
  const auto e = estimate_split(s, split, at_forward_rate, models);
  EXPECT_NEAR(e.stages[0].backward_compute, from_forward, 1e-12 * from_forward);
  // A layer's backward does the forward's GEMMs twice (dgrad and wgrad): about twice its forward.
  const double ratio = planner::backward_work_ratio(spec, s.job, 1, 2);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.1);
  // The calibrated model's own backward by default: what the simulator prices too.
  EXPECT_NEAR(estimate_split(s, split, {}, models).stages[0].backward_compute, calibrated,
              1e-12 * calibrated);
  EXPECT_GT(calibrated, from_forward);
  // A compute model that is not the calibrated one (a profile, or here fixed times) keeps its
  // own backward.
  auto fixed = std::make_shared<sim::FixedComputeModel>();
  const costmodels::CostModels fixed_models{fixed, models.comm};
  const auto f = estimate_split(s, split, at_forward_rate, fixed_models);
  EXPECT_NEAR(f.stages[0].backward_compute,
              costmodels::num_units(s.job.model) * fixed->backward_s + fixed->forward_s, 1e-15);
}

TEST(SplitEstimate, SelectiveRecomputeRerunsOnlyTheAttentionCore) {
  // One stage of T = 2 (the fixture's 1024-token sequence): the attention core is a visible share.
  const int L = 4, T = 2, b = 2;
  const Scenario s = scenario(T, L, b);
  const auto models = costmodels::make_cost_models(s);
  ModelSplit split;
  split.tensor_parallel = T;
  split.micro_batches = 1;
  split.stages = {stage(0, L, {0, 1})};
  SplitOptions none, selective, full;
  selective.activation_checkpointing.kind = ActivationCheckpointing::Kind::Selective;
  full.activation_checkpointing.kind = ActivationCheckpointing::Kind::Full;
  const auto n = estimate_split(s, split, none, models).stages[0];
  const auto sel = estimate_split(s, split, selective, models).stages[0];
  const auto f = estimate_split(s, split, full, models).stages[0];
  // The core's forward work share (scores, softmax, context) of every layer, over the T ranks.
  const DeviceSpec& spec = s.cluster.ranks()[0].slot->spec;
  const auto ops = costmodels::unit_ops(s.job.model, 1, s.job.sequence_length, b,
                                        s.job.precision.compute, s.job.implementation);
  std::vector<costmodels::OpCost> core;
  for (const auto& op : ops)
    if (std::string(op.name) == "scores" || std::string(op.name) == "softmax" ||
        std::string(op.name) == "context" || std::string(op.name) == "flash_attention")
      core.push_back(op);
  ASSERT_FALSE(core.empty());
  const auto theta = costmodels::Efficiency{}.coefficients();
  auto work = [&](const std::vector<costmodels::OpCost>& list) {
    const auto x = costmodels::ops_features(spec, list, s.job.precision.compute);
    double t = 0;
    for (std::size_t i = 0; i < theta.size(); ++i) t += x.forward[i] * theta[i];
    return t;
  };
  const double share = work(core) / work(ops);
  EXPECT_GT(share, 0.05);
  EXPECT_LT(share, 0.6);
  double rerun = 0;
  for (int u = 1; u <= L; ++u)
    rerun +=
        models.compute->unit_time(spec, s.job, u, ComputePhase::Recompute, b).seconds * share / T;
  EXPECT_NEAR(sel.backward_compute - n.backward_compute, rerun, 1e-9 * rerun);
  EXPECT_LT(sel.backward_compute, f.backward_compute);
  // The core sits between the column- and row-parallel linears: no collective is added.
  EXPECT_EQ(sel.tp_collectives_backward, n.tp_collectives_backward);
  EXPECT_LT(n.tp_collectives_backward, f.tp_collectives_backward);
  // It keeps less than no recompute and more than full recompute.
  EXPECT_LT(sel.memory.activations, n.memory.activations);
  EXPECT_GT(sel.memory.activations, f.memory.activations);
}

TEST(SplitEstimate, TheEstimatorRemembersWithoutChangingAnAnswer) {
  // Two nodes of 4 A100 and 4 V100: every split below priced by one estimator, in turn (so
  // each finds the others' remembered times), equals a fresh estimate_split, to the last bit.
  const Scenario s =
      test_support::split_scenario({{"A100-80GB", 4}, {"V100-SXM2-32GB", 4}}, 8, 16, 1024, 16);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  std::vector<std::pair<ModelSplit, SplitOptions>> cases;
  for (int t : {1, 2})
    for (ShardingKind sharding : {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::None})
      for (bool recompute : {false, true}) {
        ModelSplit one;  // the A100 stage, then the V100 stage, 1F1B
        one.tensor_parallel = t;
        one.micro_batches = 2;
        one.sharding = sharding;
        one.sequence_parallel = t > 1;
        one.stages = {stage(0, 5, {0, 1, 2, 3}), stage(5, 8, {4, 5, 6, 7})};
        SplitOptions o;
        o.activation_checkpointing.kind =
            recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
        cases.push_back({one, o});
        ModelSplit inter = one;  // interleaved, the V100 stage first
        inter.schedule = {pipeline::PipelineSchedule::Kind::Interleaved, 2};
        inter.micro_batches = 4;
        inter.stages[0].ranks = {4, 5, 6, 7};
        inter.stages[1].ranks = {0, 1, 2, 3};
        inter.stages[0].chunks = {{0, 1}, {4, 6}};
        inter.stages[1].chunks = {{1, 4}, {6, 8}};
        cases.push_back({inter, o});
      }
  for (const auto& [split, options] : cases) {
    const auto fresh = estimate_split(s, split, options, models);
    const auto remembered = estimator.estimate(split, options);
    EXPECT_EQ(to_json(remembered).dump(), to_json(fresh).dump()) << fresh.split;
    EXPECT_TRUE(remembered.complete);
    EXPECT_LE(remembered.lower_bound_s, remembered.iteration_s);
    // Without texts, and stopped below the bound: the same numbers up to the schedule.
    planner::EstimateLimits quiet;
    quiet.describe = false;
    quiet.stop_above = fresh.iteration_s;  // the schedule's own answer: never stopped
    const auto q = estimator.estimate(split, options, quiet);
    EXPECT_TRUE(q.complete);
    EXPECT_TRUE(q.split.empty() && q.schedule.empty());
    EXPECT_EQ(q.iteration_s, fresh.iteration_s);
    quiet.stop_above = fresh.lower_bound_s * 0.99;
    const auto stopped = estimator.estimate(split, options, quiet);
    EXPECT_FALSE(stopped.complete);
    EXPECT_EQ(stopped.iteration_s, 0);
    EXPECT_EQ(stopped.lower_bound_s, fresh.lower_bound_s);
    EXPECT_EQ(stopped.fits, fresh.fits);
    EXPECT_EQ(stopped.stages[0].memory.total, fresh.stages[0].memory.total);
  }
}

TEST(SplitEstimate, RememberedDpPricesFollowTheStateShares) {
  // Two nodes of two A100 and one V100: by speed, the samples and the state shares (by free
  // memory) change with the micro-batch count, so one stage's DP collectives are asked under
  // more share vectors than the estimator keeps per stage. Priced in turn, twice over (the
  // second round finds some remembered and some dropped), every answer equals a fresh
  // estimate_split to the last bit.
  const Scenario s = test_support::split_scenario({{"A100-80GB", 2}, {"A100-80GB", 2}}, 4, 48, 1024,
                                                  16, 1024, "V100-SXM2-32GB", 1);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  std::vector<int> all(static_cast<std::size_t>(s.cluster.num_ranks()));
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
  SplitOptions by_speed;
  by_speed.replica_batches = planner::ReplicaBatches::BySpeed;
  std::vector<ModelSplit> cases;
  for (ShardingKind sharding : {ShardingKind::Full, ShardingKind::Hybrid})
    for (int m : {1, 2, 3, 4, 6, 8}) {
      ModelSplit one;
      one.micro_batches = m;
      one.sharding = sharding;
      one.stages = {stage(0, 4, all)};
      cases.push_back(one);
    }
  std::map<ShardingKind, std::set<std::vector<double>>> shares;
  for (int round = 0; round < 2; ++round)
    for (const ModelSplit& split : cases) {
      const auto fresh = estimate_split(s, split, by_speed, models);
      EXPECT_EQ(to_json(estimator.estimate(split, by_speed)).dump(), to_json(fresh).dump())
          << fresh.split << " round " << round;
      shares[split.sharding].insert(fresh.allocation.state_share);
    }
  // More share vectors than the estimator keeps for the stage (4): some were dropped.
  EXPECT_GT(shares[ShardingKind::Full].size(), 4U);
  EXPECT_GT(shares[ShardingKind::Hybrid].size(), 4U);
}

// Prices with `inner` and records what was asked.
class Recorded final : public costmodels::CommModel {
 public:
  explicit Recorded(std::shared_ptr<const costmodels::CommModel> inner)
      : inner_(std::move(inner)) {}
  mutable std::vector<costmodels::CollectiveRequest> requests;
  costmodels::CollectiveEstimate collective(
      const Cluster& cluster, const costmodels::CollectiveRequest& request) const override {
    requests.push_back(request);
    return inner_->collective(cluster, request);
  }
  double copy_time(const Cluster& cluster, int rank, double bytes) const override {
    return inner_->copy_time(cluster, rank, bytes);
  }

 private:
  std::shared_ptr<const costmodels::CommModel> inner_;
};

TEST(SplitEstimate, HybridGroupsArePricedOncePerKindAndAlikeGroupsPriceAlike) {
  // Six nodes of two A100 or two V100 and one more V100 each (uneven state shares within a
  // node group): nodes 0, 2, 4 alike, 1 and 3 alike, 5 an A100 node with a slower NIC. Under
  // hybrid sharding the DP collectives go per node group; the estimate prices one group per
  // kind (three), and the real comm model prices every other group of a kind as that one,
  // which is what lets the slowest kind stand for the slowest group.
  const Scenario s = test_support::split_scenario({{"A100-80GB", 2, 4},
                                                   {"V100-SXM2-32GB", 2, 2},
                                                   {"A100-80GB", 2, 4},
                                                   {"V100-SXM2-32GB", 2, 2},
                                                   {"A100-80GB", 2, 4},
                                                   {"A100-80GB", 2, 1, "100Gbit/s"}},
                                                  4, 36, 1024, 16, 1024, "V100-SXM2-32GB", 1);
  const auto real = costmodels::make_cost_models(s);
  auto comm = std::make_shared<Recorded>(real.comm);
  const costmodels::CostModels models{real.compute, comm};
  const auto& ranks = s.cluster.ranks();
  ModelSplit split;
  split.micro_batches = 1;
  split.sharding = ShardingKind::Hybrid;
  std::vector<int> all(ranks.size());
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
  split.stages = {stage(0, 4, all)};
  SplitOptions by_speed;  // samples and state shares by each replica's speed and free memory
  by_speed.replica_batches = planner::ReplicaBatches::BySpeed;
  const auto e = estimate_split(s, split, by_speed, models);
  ASSERT_TRUE(e.fits) << e.refusal;
  EXPECT_GT(e.stages[0].dp_comm, 0);
  std::vector<int> first_rank(s.cluster.nodes.size(), -1);
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (first_rank[static_cast<std::size_t>(ranks[r].node)] < 0)
      first_rank[static_cast<std::size_t>(ranks[r].node)] = static_cast<int>(r);
  const std::vector<std::vector<int>> kinds = {{0, 2, 4}, {1, 3}, {5}};
  std::set<int> priced;  // nodes whose group's collectives were priced
  int checked = 0;
  for (const auto& r : comm->requests) {
    if (r.ranks.size() != 3 || !r.pieces.empty()) continue;
    const int node = ranks[static_cast<std::size_t>(r.ranks.front())].node;
    if (!std::all_of(r.ranks.begin(), r.ranks.end(),
                     [&](int x) { return ranks[static_cast<std::size_t>(x)].node == node; }))
      continue;
    priced.insert(node);
    bool uneven = false;
    for (double b : r.shard_bytes) uneven |= b != r.shard_bytes.front();
    EXPECT_TRUE(uneven);  // the V100's share is not the A100s'
    // The same request on every node of the kind, member for member: the same price.
    for (const auto& kind : kinds) {
      if (std::find(kind.begin(), kind.end(), node) == kind.end()) continue;
      for (int other : kind) {
        costmodels::CollectiveRequest moved = r;
        for (int& x : moved.ranks)
          x += first_rank[static_cast<std::size_t>(other)] -
               first_rank[static_cast<std::size_t>(node)];
        EXPECT_EQ(real.comm->collective(s.cluster, moved).seconds,
                  real.comm->collective(s.cluster, r).seconds)
            << "node " << node << " as node " << other;
        ++checked;
      }
    }
  }
  // One group priced per kind of node and state shares (by speed, alike nodes may still get
  // different samples and so different shares): the first node of each.
  std::set<int> expected;
  std::set<std::pair<std::size_t, std::vector<double>>> seen;
  for (int n = 0; n < 6; ++n) {
    std::size_t kind = 0;
    while (std::find(kinds[kind].begin(), kinds[kind].end(), n) == kinds[kind].end()) ++kind;
    std::vector<double> shares;
    for (std::size_t r = 0; r < ranks.size(); ++r)
      if (ranks[r].node == n) shares.push_back(e.allocation.state_share[r]);
    if (seen.emplace(kind, shares).second) expected.insert(n);
  }
  EXPECT_EQ(priced, expected);
  EXPECT_LT(priced.size(), 6u);
  // One estimator across splits that keep the stage (its cross-group reduction remembered):
  // each answer a fresh estimate's, to the last bit.
  planner::SplitEstimator estimator(s, real);
  for (int m : {1, 2, 1, 3}) {
    ModelSplit again = split;
    again.micro_batches = m;
    const auto fresh = estimate_split(s, again, by_speed, real);
    EXPECT_EQ(to_json(estimator.estimate(again, by_speed)).dump(), to_json(fresh).dump()) << m;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace cephalo

// make_cost_models and the memory breakdown on the shipped scenarios (the comm calibration:
// comm_calibration_test.cpp).
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "profile_compute.hpp"
#include "published_throughput.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
const std::filesystem::path kScenarios = std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios";
}

TEST(CostModels, AutoUsesProfilesWhereTheyExistAndCalibratedElsewhere) {
  Scenario s = load_scenario(kScenarios / "default.json");  // GPT-2.7B fp16 on L4, A6000, P40
  auto models = make_cost_models(s);
  const DeviceSpec& l4 = s.cluster.ranks()[0].slot->spec;
  auto layer = models.compute->unit_time(l4, s.job, 1, ComputePhase::Forward, 4);
  EXPECT_EQ(layer.source, "profile");
  // deepspeedgpt_2.7b / l4 / 512 / float16 forward fit: 7.415036·4 + 1.181504 ms.
  EXPECT_NEAR(layer.seconds * 1e3, 7.415035999999968 * 4 + 1.1815040000000743, 1e-9);
  auto head =
      models.compute->unit_time(l4, s.job, s.job.model.num_layers + 1, ComputePhase::Forward, 4);
  EXPECT_NE(head.source.find("head not profiled"), std::string::npos);
  EXPECT_GT(head.seconds, 0);
  auto recompute = models.compute->unit_time(l4, s.job, 1, ComputePhase::Recompute, 4);
  EXPECT_DOUBLE_EQ(recompute.seconds, layer.seconds);
  EXPECT_GT(models.compute->optimizer_time(l4, s.job, 1e9).seconds, 0);

  Scenario modern = load_scenario(kScenarios / "modern-mix-gpt2.7b.json");
  auto auto_models = make_cost_models(modern);
  for (const auto& r : modern.cluster.ranks()) {
    auto e = auto_models.compute->unit_time(r.slot->spec, modern.job, 1, ComputePhase::Backward, 2);
    EXPECT_GT(e.seconds, 0) << r.slot->spec.name;
    EXPECT_FALSE(e.source.empty());
  }
  EXPECT_THROW(make_cost_models(modern, "profile"), InfeasibleError);
  EXPECT_THROW(make_cost_models(modern, "measured"), NotFoundError);
  auto roof = make_cost_models(modern, "roofline");
  EXPECT_EQ(roof.compute->name(), "roofline");
}

TEST(CostModels, AProfiledHeadsRecomputeIsInsideItsFusedBackward) {
  // `cephalo profile` times the head's backward as the fused forward + loss + backward the
  // executor runs as the head's backward op (the logits are never kept), so the head's
  // Recompute op costs nothing more; a profiled layer's recompute is its own measurement.
  Scenario s = load_scenario(kScenarios / "default.json");
  const DeviceSpec& l4 = s.cluster.ranks()[0].slot->spec;
  auto dir = std::filesystem::temp_directory_path() /
             (std::to_string(::getpid()) + "_cephalo_head_profile_test");
  std::filesystem::create_directories(dir);
  const auto file = dir / "p.json";
  std::ofstream(file) << R"({"format": "cephalo-profile", "version": 1,
    "rows": [{"model": ")"
                      << s.job.model.name << R"(", "gpu": "L4", "seq": )" << s.job.sequence_length
                      << R"(, "dtype": "fp16",
              "layer": [{"micro_batch": 4, "forward_ms": 10, "backward_ms": 20, "recompute_ms": 11}],
              "embedding": [{"micro_batch": 4, "forward_ms": 1, "backward_ms": 2}],
              "head": [{"micro_batch": 4, "forward_ms": 3, "backward_ms": 9}]}]})";
  ProfileComputeModel model(std::make_shared<ProfileTables>(ProfileTables::load(file)),
                            std::make_shared<RooflineComputeModel>(), true);
  const int head = s.job.model.num_layers + 1;
  EXPECT_NEAR(model.unit_time(l4, s.job, head, ComputePhase::Forward, 4).seconds, 3e-3, 1e-12);
  EXPECT_NEAR(model.unit_time(l4, s.job, head, ComputePhase::Backward, 4).seconds, 9e-3, 1e-12);
  const auto rc = model.unit_time(l4, s.job, head, ComputePhase::Recompute, 4);
  EXPECT_EQ(rc.seconds, 0.0);
  EXPECT_NE(rc.source.find("fused backward"), std::string::npos) << rc.source;
  EXPECT_NEAR(model.unit_time(l4, s.job, 1, ComputePhase::Recompute, 4).seconds, 11e-3, 1e-12);
  EXPECT_NEAR(model.unit_time(l4, s.job, 0, ComputePhase::Recompute, 4).seconds, 1e-3, 1e-12);
  std::filesystem::remove_all(dir);
}

TEST(MemoryModel, TermsAddUpAndTheStateIsSixteenBytesPerParameterShare) {
  Scenario s = load_scenario(kScenarios / "default.json");
  Plan plan = load_plan(kScenarios / "plans" / "default-even.json");
  for (const auto& r : plan.ranks) {
    MemoryBreakdown b = predict_memory(s, plan, r.rank);
    double sum = 0;
    for (const auto& t : b.terms) sum += t.bytes;
    EXPECT_DOUBLE_EQ(b.total, sum);
    EXPECT_DOUBLE_EQ(b.term("training_state"), r.state_share * total_parameters(s.job.model) * 16);
    // Layered accumulation keeps L+2 boundaries for every sample of the rank's batch.
    double boundary = 512.0 * s.job.model.hidden * 2;  // fp16
    EXPECT_DOUBLE_EQ(b.term("activations"), (s.job.model.num_layers + 2) * r.batch * boundary);
    EXPECT_GT(b.capacity, 0);
  }
  // Host offload keeps far fewer activations on the device.
  Plan offload = plan;
  offload.offload = Offload::Host;
  EXPECT_LT(predict_memory(s, offload, 0).term("activations"),
            predict_memory(s, plan, 0).term("activations") / 5);
  EXPECT_THROW(predict_memory(s, plan, 17), ValidationError);
}

TEST(CalibratedModel, Int32SharedLanesFollowTheArchitecture) {
  const auto& cat = GpuCatalog::builtin();
  // Pascal: integer ops on the CUDA cores; GA10x / AD10x: half the FP32 lanes shared; GA100,
  // Volta, Turing, Hopper: dedicated INT32 units.
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("P100")), 1.0);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("P40")), 1.0);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("RTX-A6000")), 0.5);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("L4")), 0.5);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("A10G")), 0.5);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("A100-40GB")), 0.0);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("V100-SXM2-16GB")), 0.0);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("T4")), 0.0);
  EXPECT_EQ(int32_shared_lane_fraction(cat.get("H100-SXM")), 0.0);
  // An Ampere spec without SM count or clock cannot be classified: treated as dedicated.
  DeviceSpec bare = cat.get("RTX-A6000");
  bare.sm_count = 0;
  EXPECT_EQ(int32_shared_lane_fraction(bare), 0.0);
  // Chosen on the training GPUs among 0 … 1; with it off the fraction is the power law alone.
  auto m = CalibratedComputeModel::builtin();
  EXPECT_GE(m->int32_share(), 0.0);
  EXPECT_LE(m->int32_share(), 1.0);
  CalibrationOptions off;
  off.int32_shared_lanes = false;
  EXPECT_EQ(CalibratedComputeModel::fit(ProfileTables::builtin(), off)->int32_share(), 0.0);
}

TEST(CalibratedModel, PowerLimitedPartsSustainLessOfTheirPeak) {
  auto m = CalibratedComputeModel::builtin();
  ASSERT_GT(m->watts_per_flops(0), 0);  // the fp32 (CUDA-core) power constant is fitted
  const auto& cat = GpuCatalog::builtin();
  auto q = [&](const char* gpu, Dtype d) { return m->sustained_fraction(cat.get(gpu), d); };
  // fp32 board power per datasheet TFLOP/s: L4 2.4 W, L40S 3.8 W, A6000 7.8 W, V100 19 W.
  EXPECT_LT(q("L4", Dtype::FP32), q("L40S", Dtype::FP32));
  EXPECT_LE(q("L40S", Dtype::FP32), q("RTX-A6000", Dtype::FP32));
  EXPECT_LE(q("RTX-A6000", Dtype::FP32), q("V100-SXM2-16GB", Dtype::FP32));
  EXPECT_LE(q("V100-SXM2-16GB", Dtype::FP32), 1.0);
  // Below the cap the sustained clock goes as the cube root of the power budget (P ∝ f³).
  const DeviceSpec& l4 = cat.get("L4");
  const DeviceSpec& l40s = cat.get("L40S");
  if (q("L40S", Dtype::FP32) < 1) {
    EXPECT_NEAR(q("L4", Dtype::FP32) / q("L40S", Dtype::FP32),
                std::cbrt((l4.tdp_watts / l4.peak_fp32) / (l40s.tdp_watts / l40s.peak_fp32)),
                1e-12);
  }
  // Without a board power in the spec nothing is capped: what remains is the integer work on
  // the FP32 lanes the L4 (AD104) shares with INT32.
  DeviceSpec unknown = l4;
  unknown.tdp_watts = 0;
  EXPECT_DOUBLE_EQ(m->sustained_fraction(unknown, Dtype::FP32),
                   1 / (1 + m->int32_share() * int32_shared_lane_fraction(l4)));
  EXPECT_EQ(m->sustained_fraction(unknown, Dtype::FP16), 1.0);  // tensor pipeline: no such term
  // Pascal runs fp16 on its fp32 pipeline, so it shares fp32's θ and power constant.
  EXPECT_EQ(pipeline_class(cat.get("P100"), Dtype::FP16), 0);
  EXPECT_EQ(pipeline_class(cat.get("T4"), Dtype::FP16), 1);
  EXPECT_EQ(pipeline_class(cat.get("T4"), Dtype::FP32), 0);
  // Every catalog GPU gets a finite, positive layer time (profiled or not).
  Job job;
  job.model = ModelCatalog::builtin().get("llama-7b");
  job.sequence_length = 2048;
  for (Dtype d : {Dtype::FP32, Dtype::BF16, Dtype::FP16})
    for (const auto& g : cat.all()) {
      if (g.kind != "gpu") continue;
      job.precision.compute = d;
      double s = m->unit_time(g, job, 1, ComputePhase::Backward, 4).seconds;
      EXPECT_TRUE(std::isfinite(s) && s > 0) << g.name << " " << to_string(d);
    }
}

TEST(CalibratedModel, TestGptRowsCoverTheWholeStackAndModelFactorsFallBackToTheFamily) {
  const auto& t = ProfileTables::builtin();
  int test_rows = 0;
  for (const auto& r : t.rows()) {
    if (r.file_model == "deepspeedgpt_test") {
      ++test_rows;
      EXPECT_EQ(profiled_layers(r), 12);
      EXPECT_EQ(profiled_layers(r, false), 1);
      EXPECT_NEAR(row_points(r).front().forward_ms * 12, raw_points(r).front().forward_ms, 1e-9);
    } else {
      EXPECT_EQ(profiled_layers(r), 1) << r.file_model;
    }
  }
  EXPECT_EQ(test_rows, 3);
  // A model never profiled gets its family's factor; a profiled one its own on top.
  auto m = CalibratedComputeModel::builtin();
  const DeviceSpec& h100 = GpuCatalog::builtin().get("H100-SXM");
  auto family = m->factor(h100, Dtype::BF16, "llama", "no-such-model");
  auto f16 = m->family_factor("llama", Dtype::BF16);
  EXPECT_DOUBLE_EQ(family[0], f16[0]);
  EXPECT_DOUBLE_EQ(family[1], f16[1]);
  auto own = m->factor(h100, Dtype::BF16, "llama", "llama-7b");
  EXPECT_GT(own[0], 0);
  EXPECT_NE(own[0], family[0]);
}

TEST(CalibratedModel, TheImplementationNotTheFamilyDecidesTheSoftwareFactor) {
  auto m = CalibratedComputeModel::builtin();
  const DeviceSpec& a100 = GpuCatalog::builtin().get("A100-80GB");
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-2.7b");
  job.model.name = "gpt-shaped";
  job.sequence_length = 2048;
  job.precision.compute = Dtype::BF16;
  Job relabelled = job;
  relabelled.model.family = "llama";
  // Flash, fused (the default): a GPT-shaped layer costs what the same shape labelled LLaMA
  // costs; the DeepSpeed GPT layers' factor is not inherited.
  auto layer = [&](const Job& j, ComputePhase p) { return m->unit_time(a100, j, 1, p, 4).seconds; };
  EXPECT_DOUBLE_EQ(layer(job, ComputePhase::Forward), layer(relabelled, ComputePhase::Forward));
  EXPECT_DOUBLE_EQ(layer(job, ComputePhase::Backward), layer(relabelled, ComputePhase::Backward));
  EXPECT_EQ(CalibratedComputeModel::job_stack(job).first, CalibratedComputeModel::kReferenceStack);
  // Eager and unfused is what the Cephalo source ran for GPT: its factor applies, and the
  // layer is slower (materialised scores, slower stack).
  Job eager = job;
  eager.implementation = {AttentionKernel::Eager, false};
  EXPECT_EQ(CalibratedComputeModel::job_stack(eager).first, "gpt");
  EXPECT_GT(layer(eager, ComputePhase::Forward), 1.2 * layer(job, ComputePhase::Forward));
  // Flash attention is cheaper than eager at long sequences even with the same factors.
  Job eager_llama = relabelled;
  eager_llama.implementation = {AttentionKernel::Eager, true};
  EXPECT_GT(layer(eager_llama, ComputePhase::Forward), layer(relabelled, ComputePhase::Forward));
}

TEST(CalibratedModel, CalibrationRowsCarryTheImplementationTheyWereMeasuredWith) {
  int flash = 0, eager = 0;
  for (const auto& r : ProfileTables::builtin().rows()) {
    const auto& gpu = GpuCatalog::builtin().get(r.gpu);
    const auto& family = ModelCatalog::builtin().get(r.model).family;
    const bool half = r.dtype == Dtype::FP16 || r.dtype == Dtype::BF16;
    const bool ampere_plus =
        gpu.architecture == "ampere" || gpu.architecture == "ada" || gpu.architecture == "hopper";
    const bool expect_flash = family == "llama" && half && ampere_plus;
    EXPECT_EQ(r.implementation.attention == AttentionKernel::Flash, expect_flash)
        << r.model << " on " << r.gpu << " " << to_string(r.dtype);
    EXPECT_FALSE(r.implementation.fused_elementwise);
    (expect_flash ? flash : eager)++;
  }
  EXPECT_GT(flash, 20);
  EXPECT_GT(eager, 100);
}

TEST(Scenario, ImplementationKeyIsValidatedNamingFilePathValueAndAllowed) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-impl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& impl) {
    auto f = dir / "s.json";
    std::ofstream(f) << R"({"cluster": {"nodes": [{"gpus": ["A100-80GB"]}]},
      "job": {"model": "gpt-2.7b", "sequence_length": 512, "global_batch": 4,
              "implementation": )"
                     << impl << "}}";
    return f;
  };
  auto ok =
      costmodels::load_scenario(write(R"({"attention": "eager", "fused_elementwise": false})"));
  EXPECT_EQ(ok.job.implementation.attention, AttentionKernel::Eager);
  EXPECT_FALSE(ok.job.implementation.fused_elementwise);
  EXPECT_EQ(costmodels::load_scenario(write("{}")).job.implementation, Implementation{});
  for (const char* bad : {R"({"attention": "paged"})", R"({"fused_elementwise": "yes"})",
                          R"({"attention": "flash", "kernels": 3})", R"("flash")"}) {
    try {
      costmodels::load_scenario(write(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValidationError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("s.json"), std::string::npos) << what;
      EXPECT_NE(what.find("implementation"), std::string::npos) << what;
    }
  }
  try {
    costmodels::load_scenario(write(R"({"attention": "paged"})"));
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("paged"), std::string::npos) << what;
    EXPECT_NE(what.find("flash"), std::string::npos) << what;
    EXPECT_NE(what.find("eager"), std::string::npos) << what;
  }
  // The stack's compile flag and framework: read, labelled, and refused with the allowed list.
  auto compiled = costmodels::load_scenario(
      write(R"({"attention": "eager", "compiled": true, "framework": "deepspeed_zero3"})"));
  EXPECT_TRUE(compiled.job.implementation.compiled);
  EXPECT_TRUE(compiled.job.implementation.fused());
  EXPECT_EQ(compiled.job.implementation.framework, Framework::DeepSpeedZero3);
  EXPECT_EQ(to_string(compiled.job.implementation), "eager, fused, compiled, deepspeed_zero3");
  // Transformer Engine's TP communication overlap: read, labelled, written only when on.
  auto overlap = costmodels::load_scenario(write(R"({"tp_comm_overlap": true})"));
  EXPECT_TRUE(overlap.job.implementation.tp_comm_overlap);
  EXPECT_FALSE(overlap.job.implementation == Implementation{});
  EXPECT_EQ(to_string(overlap.job.implementation), "flash, fused, TP comm overlap");
  EXPECT_EQ(to_json(overlap.job.implementation).value("tp_comm_overlap", false), true);
  EXPECT_FALSE(to_json(Implementation{}).contains("tp_comm_overlap"));
  // Megatron-Core's deferred output-layer weight gradient: read, labelled, written only when on.
  auto defer = costmodels::load_scenario(
      write(R"({"defer_embedding_wgrad_compute": true, "wgrad_deferral_limit": 22})"));
  EXPECT_TRUE(defer.job.implementation.defer_embedding_wgrad_compute);
  EXPECT_EQ(defer.job.implementation.wgrad_deferral_limit, 22);
  EXPECT_FALSE(defer.job.implementation == Implementation{});
  EXPECT_EQ(to_string(defer.job.implementation), "flash, fused, deferred output wgrad (limit 22)");
  EXPECT_EQ(to_json(defer.job.implementation).value("wgrad_deferral_limit", -1), 22);
  EXPECT_FALSE(to_json(Implementation{}).contains("defer_embedding_wgrad_compute"));
  EXPECT_EQ(costmodels::load_scenario(write(R"({"defer_embedding_wgrad_compute": true})"))
                .job.implementation.wgrad_deferral_limit,
            0);  // Megatron-Core's default: every micro-batch
  // The loss kernel: read, labelled, written only when fused.
  auto fused_loss = costmodels::load_scenario(write(R"({"cross_entropy": "fused"})"));
  EXPECT_EQ(fused_loss.job.implementation.cross_entropy, LossKernel::Fused);
  EXPECT_FALSE(fused_loss.job.implementation == Implementation{});
  EXPECT_EQ(to_string(fused_loss.job.implementation), "flash, fused, fused cross-entropy");
  EXPECT_EQ(to_json(fused_loss.job.implementation).value("cross_entropy", ""), "fused");
  EXPECT_FALSE(to_json(Implementation{}).contains("cross_entropy"));
  EXPECT_EQ(costmodels::load_scenario(write(R"({"cross_entropy": "eager"})")).job.implementation,
            Implementation{});
  // The flash-attention kernel: read, labelled, written only when not FlashAttention-2's.
  auto cudnn = costmodels::load_scenario(write(R"({"flash_kernel": "cudnn"})"));
  EXPECT_EQ(cudnn.job.implementation.flash_kernel, FlashKernel::Cudnn);
  EXPECT_FALSE(cudnn.job.implementation == Implementation{});
  EXPECT_EQ(to_string(cudnn.job.implementation), "flash, fused, cudnn");
  EXPECT_EQ(to_json(cudnn.job.implementation).value("flash_kernel", ""), "cudnn");
  EXPECT_FALSE(to_json(Implementation{}).contains("flash_kernel"));
  EXPECT_EQ(
      costmodels::load_scenario(write(R"({"flash_kernel": "flash-attn"})")).job.implementation,
      Implementation{});
  // Defaults keep the label recorded before the keys existed.
  EXPECT_EQ(to_string(Implementation{}), "flash, fused");
  EXPECT_EQ(to_string(Implementation{AttentionKernel::Eager, false}), "eager, unfused");
  const std::vector<std::pair<const char*, std::vector<std::string>>> refused = {
      {R"({"framework": "megatron"})",
       {"megatron", "fsdp2", "fsdp1", "deepspeed_zero3", "ddp", "implementation.framework"}},
      {R"({"compiled": true, "fused_elementwise": false})",
       {"implementation.fused_elementwise", "compiled"}},
      {R"({"compiled": "yes"})", {"implementation.compiled"}},
      {R"({"tp_comm_overlap": "on"})", {"implementation.tp_comm_overlap", "on"}},
      {R"({"flash_kernel": "fa3"})", {"implementation.flash_kernel", "fa3", "flash-attn", "cudnn"}},
      {R"({"attention": "eager", "flash_kernel": "cudnn"})",
       {"implementation.flash_kernel", "attention"}},
      {R"({"defer_embedding_wgrad_compute": 1})",
       {"implementation.defer_embedding_wgrad_compute", "1"}},
      {R"({"defer_embedding_wgrad_compute": true, "wgrad_deferral_limit": -3})",
       {"implementation.wgrad_deferral_limit", "-3"}},
      {R"({"defer_embedding_wgrad_compute": true, "wgrad_deferral_limit": 2.5})",
       {"implementation.wgrad_deferral_limit", "2.5"}},
      {R"({"wgrad_deferral_limit": 4})",
       {"implementation.wgrad_deferral_limit", "4", "defer_embedding_wgrad_compute"}},
      {R"({"weight_gradients": "fp32_master"})",
       {"s.json", "implementation.weight_gradients", "fp32_master", "autocast", "main_grad",
        "main_grad_compute_dtype", "fused_main_grad"}},
      {R"({"weight_gradients": true})", {"implementation.weight_gradients", "true"}},
      {R"({"cross_entropy": "chunked"})",
       {"implementation.cross_entropy", "chunked", "eager", "fused"}}};
  for (const auto& [bad, wanted] : refused) {
    try {
      costmodels::load_scenario(write(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValidationError& e) {
      const std::string what = e.what();
      for (const auto& w : wanted) EXPECT_NE(what.find(w), std::string::npos) << w << ": " << what;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(CalibratedModel, ACompiledStackIsPricedWithTheFusedOpList) {
  // torch.compile fuses the pointwise chains: a compiled eager stack prices the fused op list
  // (and the reference stack's factors), not the unfused Cephalo source's; its generated
  // kernels' bytes at the roofline's memory-bound efficiency instead of θ's coefficient.
  auto m = CalibratedComputeModel::builtin();
  const DeviceSpec& a100 = GpuCatalog::builtin().get("A100-80GB");
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-2.7b");
  job.sequence_length = 1024;
  job.precision.compute = Dtype::BF16;
  job.implementation = {AttentionKernel::Eager, false};
  Job compiled = job;
  compiled.implementation.compiled = true;
  Job fused = job;
  fused.implementation.fused_elementwise = true;
  auto layer = [&](const Job& j) {
    return m->unit_time(a100, j, 1, ComputePhase::Forward, 4).seconds;
  };
  const auto x = unit_features(a100, job.model, 1, 1024, 4, Dtype::BF16, fused.implementation);
  const double theta_memory = m->theta(a100, Dtype::BF16).forward[kMemoryBoundFeature];
  ASSERT_GT(theta_memory, 1 / Efficiency{}.memory);  // fitted on eager chains: above the roofline
  const double f = m->factor(a100, Dtype::BF16, CalibratedComputeModel::kReferenceStack, "")[0];
  EXPECT_NEAR(layer(fused) - layer(compiled),
              f * (theta_memory - 1 / Efficiency{}.memory) * x.forward[kMemoryBoundFeature], 1e-12);
  EXPECT_LT(layer(compiled), layer(job));
  // The embedding and the head are not the compiled layers: priced as the fused stack's.
  for (int unit : {0, num_units(job.model) - 1}) {
    EXPECT_DOUBLE_EQ(m->unit_time(a100, compiled, unit, ComputePhase::Forward, 4).seconds,
                     m->unit_time(a100, fused, unit, ComputePhase::Forward, 4).seconds);
  }
  EXPECT_EQ(CalibratedComputeModel::job_stack(compiled).first,
            CalibratedComputeModel::kReferenceStack);
  // The framework does not change a layer's kernels.
  Job zero3 = fused;
  zero3.implementation.framework = Framework::DeepSpeedZero3;
  EXPECT_DOUBLE_EQ(layer(zero3), layer(fused));
}

TEST(CalibratedModel, ACompiledFlashStackIsNotThePublishedSourcesStack) {
  // The published stack (Composer, flash attention as its own Triton kernel, fused) has a
  // fitted factor and attention weight; torch.compile keeps the eager stack's SDPA and GEMM
  // calls, so a compiled flash job gets neither, and its rotary positions are one generated
  // kernel over q and k.
  auto m = CalibratedComputeModel::builtin();
  Implementation fused{AttentionKernel::Flash, true};
  Implementation compiled = fused;
  compiled.compiled = true;
  ASSERT_GT(m->stack_points(fused), 0);
  EXPECT_NE(m->stack_factor(fused, 1), 1.0);
  EXPECT_EQ(m->stack_factor(compiled, 1), 1.0);
  EXPECT_EQ(m->stack_attention_weight(compiled, 1), 1.0);
  EXPECT_EQ(m->stack_points(compiled), 0);
  const ModelSpec llama = ModelCatalog::builtin().get("llama3-8b");
  auto names = [&](const Implementation& impl) {
    std::vector<std::string> v;
    for (const auto& op : unit_ops(llama, 1, 2048, 1, Dtype::BF16, impl)) v.push_back(op.name);
    return v;
  };
  auto with_rope = names(fused);
  with_rope.insert(std::find(with_rope.begin(), with_rope.end(), "qkv") + 1, "rope");
  EXPECT_EQ(names(compiled), with_rope);
  // A GPT-shaped model has learned positions: no rotary kernel.
  const ModelSpec gpt = ModelCatalog::builtin().get("gpt-2.7b");
  EXPECT_EQ(unit_ops(gpt, 1, 2048, 1, Dtype::BF16, compiled).size(),
            unit_ops(gpt, 1, 2048, 1, Dtype::BF16, fused).size());
}

TEST(GpuCatalog, AGpuWithoutAFieldTheComputeModelNeedsIsRefused) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-cat-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto f = dir / "gpus.json";
  std::ofstream(f) << R"({"devices": [{"name": "X1", "memory": "16GB",
    "memory_bandwidth": "900GB/s", "peak_fp32": "15TFLOPS", "tdp_watts": 300,
    "architecture": "volta", "boost_clock_mhz": 1500, "l2_cache": "6MiB"}]})";
  try {
    GpuCatalog::load(f);
    ADD_FAILURE() << "accepted a GPU without sm_count";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gpus.json"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_count"), std::string::npos) << what;
    EXPECT_NE(what.find("X1"), std::string::npos) << what;
  }
  for (const auto& d : GpuCatalog::builtin().all())
    if (d.kind == "gpu") {
      EXPECT_GT(d.sm_count, 0) << d.name;
      EXPECT_FALSE(d.architecture.empty()) << d.name;
      EXPECT_NE(d.source.find("sm_count"), std::string::npos) << d.name;
    }
  std::filesystem::remove_all(dir);
}

// A catalog read lazily converts an entry when it is asked for: a scenario's start converts
// the few it names. The answers are load()'s, and a bad entry is refused, with its path, when
// it is used (load() refuses the file at once).
TEST(GpuCatalog, ReadLazilyConvertsEntriesOnFirstUseWithLoadsAnswers) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-lazy-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto f = dir / "gpus.json";
  std::ofstream(f) << R"({"devices": [
    {"name": "Good", "aliases": ["g1"], "memory": "16GB", "memory_bandwidth": "900GB/s",
     "peak_fp32": "15TFLOPS", "tdp_watts": 300, "architecture": "volta",
     "boost_clock_mhz": 1500, "l2_cache": "6MiB", "sm_count": 80},
    {"name": "Bad", "memory": "lots"}]})";
  const GpuCatalog lazy = GpuCatalog::read_lazily(f);
  EXPECT_EQ(lazy.size(), 2u);
  ASSERT_TRUE(lazy.find("G1").has_value());
  EXPECT_EQ(lazy.get("good").sm_count, 80);
  EXPECT_EQ(&lazy.get("good"), &lazy.get("g1"));  // converted once
  EXPECT_FALSE(lazy.find("other").has_value());
  const auto names = lazy.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "Bad"), names.end());
  try {
    (void)lazy.get("bad");
    ADD_FAILURE() << "converted a GPU with memory \"lots\"";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gpus.json"), std::string::npos) << what;
    EXPECT_NE(what.find("devices[1]"), std::string::npos) << what;
  }
  EXPECT_THROW(GpuCatalog::load(f), ValidationError);
  for (const auto& d : GpuCatalog::builtin().all()) {
    const GpuCatalog& builtin = GpuCatalog::builtin();
    EXPECT_EQ(to_json(builtin.get(d.name)), to_json(d)) << d.name;
  }
  EXPECT_EQ(GpuCatalog::builtin().all().size(), GpuCatalog::builtin().size());
  std::filesystem::remove_all(dir);
}

// Every calibration source says which stack it measured: a published point without a label (on
// the point or the file) and a profile row with an unknown label are refused naming the file,
// the JSON path, the value and what is allowed.
TEST(CalibrationSources, ARowWithoutOrWithABadImplementationLabelIsRefused) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-label-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto pub = dir / "points.json";
  std::ofstream(pub) << R"({"format": "published-throughput", "version": 1, "points": [
    {"id": "p0", "model": {"arch": {"name": "m", "family": "gpt", "layers": 2, "hidden": 256,
       "heads": 4, "vocab_size": 1000, "max_positions": 512}},
     "config": {"seq_len": 512, "gpus": 8, "gpu_published": "h100_80gb", "global_batch": 16,
       "micro_batch": 2, "grad_accum": 1, "fsdp_mixed_precision": "DEFAULT",
       "activation_checkpointing": "full"},
     "measured": {"tokens_per_s_per_gpu": 1000}}]})";
  try {
    load_published_throughput(pub);
    ADD_FAILURE() << "accepted a published point without an implementation label";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("points.json"), std::string::npos) << what;
    EXPECT_NE(what.find("points[0].implementation"), std::string::npos) << what;
    EXPECT_NE(what.find("missing"), std::string::npos) << what;
    EXPECT_NE(what.find("\"flash\" | \"eager\""), std::string::npos) << what;
  }
  const auto prof = dir / "profile.json";
  std::ofstream(prof) << R"({"format": "cephalo-profile", "version": 1, "rows": [
    {"model": "gpt-tiny", "gpu": "cpu", "seq": 16, "dtype": "fp32",
     "implementation": {"attention": "paged", "fused_elementwise": false},
     "layer": [{"micro_batch": 1, "forward_ms": 1, "backward_ms": 2}]}]})";
  try {
    ProfileTables::load(prof);
    ADD_FAILURE() << "accepted an unknown implementation";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("profile.json"), std::string::npos) << what;
    EXPECT_NE(what.find("rows[0].implementation.attention"), std::string::npos) << what;
    EXPECT_NE(what.find("paged"), std::string::npos) << what;
    EXPECT_NE(what.find("eager"), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

// The never-fitted check set (scenarios/validation/published-throughput) reads with the same
// loader as the fitted one and is not among the points the calibration fits on.
TEST(CalibrationSources, TheHopperCheckSetIsReadableAndNeverFitted) {
  const auto points =
      load_published_throughput(kScenarios / "validation/published-throughput/mosaicml-h100.json");
  ASSERT_EQ(points.size(), 52u);
  for (const auto& p : points) {
    EXPECT_EQ(p.gpu, "H100-SXM") << p.id;
    EXPECT_EQ(p.job.implementation.attention, AttentionKernel::Flash) << p.id;
  }
  for (const auto& fitted : builtin_published_throughput())
    EXPECT_NE(fitted.gpu, "H100-SXM") << fitted.id << ": a Hopper point among the fitted ones";
}

TEST(Scenario, AConfigsTorchDtypeAndSlidingWindowArePriced) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-hfjob-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = (kScenarios / "models/mistral-7b-v0.1.json").string();
  auto write = [&](int seq, const std::string& precision) {
    auto f = dir / "s.json";
    std::ofstream(f) << R"({"cluster": {"nodes": [{"gpus": ["H100-SXM"]}]},
      "job": {"model": {"hf_config": ")"
                     << config << R"("}, "sequence_length": )" << seq << R"(, "global_batch": 8)"
                     << precision << "}}";
    return f;
  };
  auto s = costmodels::load_scenario(write(8192, ""));
  EXPECT_EQ(s.job.precision.compute, Dtype::BF16);  // torch_dtype: bfloat16
  EXPECT_EQ(s.job.model.attention_window, 4096);
  auto fp16 = costmodels::load_scenario(write(8192, R"(, "precision": {"compute": "fp16"})"));
  EXPECT_EQ(fp16.job.precision.compute, Dtype::FP16);
  // A catalog name describes an architecture only: the default compute dtype stays.
  EXPECT_EQ(ModelCatalog::builtin().get("mistral-7b").checkpoint_dtype, Dtype::BF16);
  // Flash FLOPs: at 8192 each query sees 4096 keys, (8192·4096 − 4096²/2) / 8192² = 3/8 of
  // the scores, against 1/2 for the same shape without a window.
  ModelSpec full = s.job.model;
  full.attention_window = 0;
  auto flash_flops = [&](const ModelSpec& m) {
    for (const auto& op : unit_ops(m, 1, 8192, 1, Dtype::BF16, {}))
      if (std::string(op.name) == "flash_attention") return op.forward_flops;
    return 0.0;
  };
  EXPECT_NEAR(flash_flops(s.job.model) / flash_flops(full), 0.75, 1e-12);
  EXPECT_DOUBLE_EQ(attended_fraction(s.job.model, 4096), 0.5);  // within the window: causal
  // Eager attention still materialises the whole s×s (HF's eager path masks, not skips).
  Implementation eager{AttentionKernel::Eager, true};
  EXPECT_EQ(eager_attention_bytes(s.job.model, 1, 8192, 1, eager),
            eager_attention_bytes(full, 1, 8192, 1, eager));
  std::filesystem::remove_all(dir);
}

// A GPU asked for a dtype it has no tensor-core rate for is priced at its fp32 rate, and says so.
TEST(CostModels, PrecisionWarningsNameTheGpuTheDtypeAndTheFasterOne) {
  Cluster c;
  Node n;
  for (const char* g : {"V100-SXM2-16GB", "V100-SXM2-16GB", "A100-80GB", "P100"}) {
    DeviceSlot slot;
    slot.type = g;
    slot.spec = GpuCatalog::builtin().get(g);
    n.devices.push_back(slot);
  }
  c.nodes.push_back(n);
  Job job;
  job.precision.compute = Dtype::BF16;
  auto w = precision_warnings(c, job);
  ASSERT_EQ(w.size(), 2u);  // V100 once, P100; the A100 has bf16 tensor cores
  EXPECT_NE(w[0].find("V100-SXM2-16GB has no bf16"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("fp16 would run on its tensor cores"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("P100"), std::string::npos) << w[1];
  EXPECT_EQ(w[1].find("would run"), std::string::npos) << w[1];  // Pascal: no faster dtype
  job.precision.compute = Dtype::FP16;
  w = precision_warnings(c, job);
  ASSERT_EQ(w.size(), 1u);  // only Pascal's fp16 runs on the fp32 pipeline
  EXPECT_NE(w[0].find("P100 has no fp16"), std::string::npos) << w[0];
  job.precision.compute = Dtype::FP32;
  EXPECT_TRUE(precision_warnings(c, job).empty());
}

// A NIC is described per NIC with its count; the old form (no count) is the node's total and
// is noted; a bad count is refused naming its path.
TEST(Scenario, NicsAreDescribedPerNicWithACount) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-nic-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& nic) {
    auto f = dir / "s.json";
    std::ofstream(f)
        << R"({"cluster": {"nodes": [{"gpus": [{"type": "H100-SXM", "count": 8}], "nic": )" << nic
        << R"(}, {"gpus": [{"type": "H100-SXM", "count": 8}], "nic": )" << nic
        << R"(}]}, "job": {"model": "gpt-2.7b", "sequence_length": 512, "global_batch": 16}})";
    return f;
  };
  auto per_gpu = costmodels::load_scenario(
      write(R"({"kind": "infiniband", "count": 8, "bandwidth": "400Gbit/s"})"));
  EXPECT_EQ(per_gpu.cluster.nodes[0].nic_count, 8);
  EXPECT_DOUBLE_EQ(per_gpu.cluster.nodes[0].nic.bandwidth, 8 * 400e9 / 8);
  EXPECT_TRUE(cluster_notes(per_gpu.cluster).empty());
  const Json j = to_json(per_gpu.cluster);
  EXPECT_EQ(j["nodes"][0]["nic"]["count"], 8);
  EXPECT_DOUBLE_EQ(j["nodes"][0]["nic"]["bandwidth"].get<double>(), 400e9 / 8);
  auto old =
      costmodels::load_scenario(write(R"({"kind": "infiniband", "bandwidth": "400Gbit/s"})"));
  EXPECT_EQ(old.cluster.nodes[0].nic_count, 0);
  EXPECT_DOUBLE_EQ(old.cluster.nodes[0].nic.bandwidth, 400e9 / 8);
  const auto notes = cluster_notes(old.cluster);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("node's total"), std::string::npos) << notes[0];
  // The per-GPU description carries 8x the bandwidth of the same number read per node, and the
  // comm model prices it: an all-gather across both nodes is faster (by how much is the comm
  // model's choice of ring or hierarchy, not asserted here).
  auto models_new = make_cost_models(per_gpu, "roofline");
  auto models_old = make_cost_models(old, "roofline");
  CollectiveRequest req;
  req.kind = CollectiveKind::AllGather;
  for (int r = 0; r < 16; ++r) req.ranks.push_back(r);
  req.shard_bytes.assign(16, 64e6);
  EXPECT_LT(models_new.comm->collective(per_gpu.cluster, req).seconds,
            models_old.comm->collective(old.cluster, req).seconds);
  for (const char* bad : {R"({"kind": "infiniband", "count": 0, "bandwidth": "400Gbit/s"})",
                          R"({"kind": "infiniband", "count": "8", "bandwidth": "400Gbit/s"})"}) {
    try {
      costmodels::load_scenario(write(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("nic.count"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

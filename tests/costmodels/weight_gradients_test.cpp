// A stack's weight-gradient path (Implementation::weight_gradients): each path's documented
// traffic per weight, priced at a fixed rate outside the fitted model, and the job's backward as
// the profiles' time minus their autocast path plus the job's own, never below the roofline.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/weight_gradients.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
Job job_with(const char* model, Dtype dtype, WeightGradients path) {
  Job job;
  job.model = ModelCatalog::builtin().get(model);
  job.sequence_length = 2048;
  job.global_batch = 8;
  job.precision.compute = dtype;
  job.implementation.weight_gradients = path;
  return job;
}

// Weights of a GPT layer's four GEMMs: qkv 3h², projection h², MLP 4h² + 4h².
double gpt_layer_gemm_weights(const ModelSpec& m) { return 12.0 * m.hidden * m.hidden; }
}  // namespace

TEST(WeightGradients, EachPathMovesItsDocumentedBytesPerWeight) {
  // autocast: cast to fp32 (e read, 4 written) + AccumulateGrad (8 read, 4 written), 2 kernels;
  // fp32 compute has no cast.
  EXPECT_DOUBLE_EQ(weight_gradient_traffic(WeightGradients::Autocast, Dtype::FP16).bytes, 18);
  EXPECT_EQ(weight_gradient_traffic(WeightGradients::Autocast, Dtype::BF16).kernels, 2);
  EXPECT_DOUBLE_EQ(weight_gradient_traffic(WeightGradients::Autocast, Dtype::FP32).bytes, 12);
  EXPECT_EQ(weight_gradient_traffic(WeightGradients::Autocast, Dtype::FP32).kernels, 1);
  // main_grad.add_(grad) into fp32: e + 4 read, 4 written; into the compute dtype: 3e.
  EXPECT_DOUBLE_EQ(weight_gradient_traffic(WeightGradients::MainGrad, Dtype::BF16).bytes, 10);
  EXPECT_EQ(weight_gradient_traffic(WeightGradients::MainGrad, Dtype::BF16).kernels, 1);
  EXPECT_DOUBLE_EQ(
      weight_gradient_traffic(WeightGradients::MainGradComputeDtype, Dtype::FP16).bytes, 6);
  EXPECT_EQ(weight_gradient_traffic(WeightGradients::MainGradComputeDtype, Dtype::FP16).kernels, 1);
  // Fused into the GEMM: its 4-byte output read and written instead of an e-byte one written.
  EXPECT_DOUBLE_EQ(weight_gradient_traffic(WeightGradients::FusedMainGrad, Dtype::BF16).bytes, 6);
  EXPECT_EQ(weight_gradient_traffic(WeightGradients::FusedMainGrad, Dtype::BF16).kernels, 0);
}

TEST(WeightGradients, ThePathIsPricedOverTheUnitsGemmWeightsAtTheFixedRate) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-1.3b");
  const DeviceSpec& a100 = GpuCatalog::builtin().get("A100-80GB");
  const Efficiency roofline;
  const double w = gpt_layer_gemm_weights(gpt);
  for (int b : {1, 4}) {  // per backward call, whatever its micro-batch
    const auto ops = unit_ops(gpt, 1, 2048, b, Dtype::FP16);
    EXPECT_NEAR(weight_gradient_seconds(a100, ops, WeightGradients::Autocast, Dtype::FP16),
                18 * w / (roofline.memory * a100.memory_bandwidth) +
                    2 * 4 * roofline.kernel_overhead_us * 1e-6,
                1e-12);
    EXPECT_NEAR(
        weight_gradient_seconds(a100, ops, WeightGradients::MainGrad, Dtype::FP16),
        10 * w / (roofline.memory * a100.memory_bandwidth) + 4 * roofline.kernel_overhead_us * 1e-6,
        1e-12);
  }
  // The embedding's lookup has no weight GEMM.
  EXPECT_EQ(weight_gradient_seconds(a100, unit_ops(gpt, 0, 2048, 1, Dtype::FP16),
                                    WeightGradients::Autocast, Dtype::FP16),
            0);
}

TEST(WeightGradients, TheJobsBackwardSwapsTheProfilesPathForItsOwnAboveTheRoofline) {
  const DeviceSpec& h100 = GpuCatalog::builtin().get("H100-SXM");
  const Job autocast = job_with("gpt-1.3b", Dtype::BF16, WeightGradients::Autocast);
  const Job fused = job_with("gpt-1.3b", Dtype::BF16, WeightGradients::FusedMainGrad);
  const Job hook = job_with("gpt-1.3b", Dtype::BF16, WeightGradients::MainGrad);
  const auto ops = unit_ops(fused.model, 1, 2048, 2, Dtype::BF16);
  const double a = weight_gradient_seconds(h100, ops, WeightGradients::Autocast, Dtype::BF16);
  const double floor = backward_roofline_floor_s(h100, ops, Dtype::BF16);
  ASSERT_GT(a, 0);
  ASSERT_GT(floor, 0);
  // The profiles' own path changes nothing, bit for bit.
  EXPECT_EQ(job_backward_seconds(h100, autocast, 1, 2, 0.0123), 0.0123);
  // Well above the floor: minus the autocast path, plus the job's.
  const double profiled = 3 * floor + a;
  EXPECT_NEAR(
      job_backward_seconds(h100, fused, 1, 2, profiled),
      3 * floor + weight_gradient_seconds(h100, ops, WeightGradients::FusedMainGrad, Dtype::BF16),
      1e-12);
  EXPECT_LT(job_backward_seconds(h100, fused, 1, 2, profiled),
            job_backward_seconds(h100, hook, 1, 2, profiled));
  EXPECT_LT(job_backward_seconds(h100, hook, 1, 2, profiled), profiled);
  // A profiled time that leaves less than the roofline once the path is out: the rest is held
  // at the roofline floor (no op faster than its roofline), then the job's path added.
  for (double p : {a, a + 0.5 * floor, 0.0})
    EXPECT_NEAR(job_backward_seconds(h100, hook, 1, 2, p),
                floor + weight_gradient_seconds(h100, ops, WeightGradients::MainGrad, Dtype::BF16),
                1e-12)
        << p;
  // The floor is each op at its roofline: never above what the roofline model prices.
  Job roofline_job = autocast;
  roofline_job.global_batch = 2;
  EXPECT_LT(
      floor,
      RooflineComputeModel{}.unit_time(h100, roofline_job, 1, ComputePhase::Backward, 2).seconds);
  // A unit without weight GEMMs keeps its time.
  EXPECT_EQ(job_backward_seconds(h100, hook, 0, 2, 1e-4), 1e-4);
}

TEST(WeightGradients, TheCostModelsPriceTheJobsPathInTheBackwardOnly) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-wgrad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto load = [&](const std::string& path) {
    auto f = dir / (path + ".json");
    std::ofstream(f) << R"({"cluster": {"nodes": [{"gpus": ["A100-80GB"]}]},
      "job": {"model": "gpt-2.7b", "sequence_length": 2048, "global_batch": 4,
              "precision": {"params": "fp32", "compute": "fp16", "reduce": "fp32"},
              "implementation": {"weight_gradients": ")"
                     << path << R"("}}})";
    return load_scenario(f);
  };
  const Scenario base = load("autocast");
  const Scenario own = load("main_grad_compute_dtype");
  const DeviceSpec& gpu = base.cluster.ranks().front().slot->spec;
  for (const char* source : {"calibrated", "auto", "roofline"}) {
    const auto b = make_cost_models(base, source);
    const auto o = make_cost_models(own, source);
    for (int unit : {1, base.job.model.num_layers + 1}) {  // a layer and the head
      auto t = [&](const CostModels& m, const Scenario& s, ComputePhase p) {
        return m.compute->unit_time(gpu, s.job, unit, p, 2).seconds;
      };
      EXPECT_EQ(t(o, own, ComputePhase::Forward), t(b, base, ComputePhase::Forward));
      EXPECT_EQ(t(o, own, ComputePhase::Recompute), t(b, base, ComputePhase::Recompute));
      const double backward = t(b, base, ComputePhase::Backward);
      // The roofline prices no path; the models built from the profiles swap theirs.
      const double expected = std::string(source) == "roofline"
                                  ? backward
                                  : job_backward_seconds(gpu, own.job, unit, 2, backward);
      EXPECT_DOUBLE_EQ(t(o, own, ComputePhase::Backward), expected) << source << " " << unit;
      if (std::string(source) != "roofline") {
        EXPECT_LT(expected, backward) << source;
      }
    }
  }
  std::filesystem::remove_all(dir);
}

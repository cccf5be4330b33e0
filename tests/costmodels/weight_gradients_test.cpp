// The weight-gradient path of a stack (Implementation::weight_gradients): the per-weight kernels
// autocast and Megatron's main_grad launch outside the GEMMs in each backward call, priced from
// their documented traffic at a fixed rate, never fitted.
#include <gtest/gtest.h>

#include <cstring>

#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
Implementation with(WeightGradients path) {
  Implementation impl;
  impl.weight_gradients = path;
  return impl;
}

const OpCost* find(const std::vector<OpCost>& ops, const char* name) {
  for (const auto& op : ops)
    if (std::strcmp(op.name, name) == 0) return &op;
  return nullptr;
}

// Weights of a GPT layer's four GEMMs: qkv 3h², projection h², MLP 4h² + 4h².
double gpt_layer_gemm_weights(const ModelSpec& m) { return 12.0 * m.hidden * m.hidden; }
}  // namespace

TEST(WeightGradients, AutocastCastsEachWeightAndAccumulatesItsGradientInFp32) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-1.3b");
  const double w = gpt_layer_gemm_weights(gpt);
  const auto ops = unit_ops(gpt, 1, 2048, 2, Dtype::FP16, with(WeightGradients::Autocast));
  const OpCost* op = find(ops, "weight_grads");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->op_class, OpClass::Memory);
  EXPECT_TRUE(op->fixed_rate);
  // Backward: the fp16 gradient read and written as fp32, then .grad += it (two fp32 reads,
  // one write); the forward's cast is cached per autocast region, not paid per call.
  EXPECT_DOUBLE_EQ(op->forward_bytes, 0);
  EXPECT_EQ(op->forward_kernels, 0);
  EXPECT_DOUBLE_EQ(op->backward_bytes, (2 + 4 + 12) * w);
  EXPECT_EQ(op->backward_kernels, 8);  // a cast and an add per weight GEMM
  EXPECT_EQ(op->forward_flops, 0);
  // fp32 compute: nothing to cast, only the accumulation.
  const auto fp32 = unit_ops(gpt, 1, 2048, 2, Dtype::FP32, with(WeightGradients::Autocast));
  ASSERT_NE(find(fp32, "weight_grads"), nullptr);
  EXPECT_DOUBLE_EQ(find(fp32, "weight_grads")->forward_bytes, 0);
  EXPECT_EQ(find(fp32, "weight_grads")->forward_kernels, 0);
  EXPECT_DOUBLE_EQ(find(fp32, "weight_grads")->backward_bytes, 12 * w);
  // A unit without weight GEMMs (the embedding's gather) has none.
  EXPECT_EQ(find(unit_ops(gpt, 0, 2048, 2, Dtype::FP16), "weight_grads"), nullptr);
}

TEST(WeightGradients, MegatronAddsIntoMainGradOrInsideTheGemm) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-1.3b");
  const double w = gpt_layer_gemm_weights(gpt);
  const auto hook = unit_ops(gpt, 1, 2048, 2, Dtype::BF16, with(WeightGradients::MainGrad));
  const OpCost* op = find(hook, "weight_grads");
  ASSERT_NE(op, nullptr);
  EXPECT_DOUBLE_EQ(op->forward_bytes, 0);
  EXPECT_DOUBLE_EQ(op->backward_bytes, (2 + 4 + 4) * w);  // main_grad.add_(grad)
  EXPECT_EQ(op->backward_kernels, 4);
  // Fused: no kernel of its own; each weight-gradient GEMM reads and writes its fp32 output
  // instead of writing a bf16 one.
  const auto fused = unit_ops(gpt, 1, 2048, 2, Dtype::BF16, with(WeightGradients::FusedMainGrad));
  EXPECT_EQ(find(fused, "weight_grads"), nullptr);
  double extra = 0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    if (fused[i].op_class != OpClass::Gemm) continue;
    EXPECT_STREQ(fused[i].name, hook[i].name);
    EXPECT_DOUBLE_EQ(fused[i].forward_bytes, hook[i].forward_bytes);
    extra += fused[i].backward_bytes - hook[i].backward_bytes;
  }
  EXPECT_NEAR(extra, (8 - 2) * w, 1e-6 * w);
}

TEST(WeightGradients, ThePathIsAFixedRateTermThatDoesNotGrowWithTheSamples) {
  // Priced at the roofline's memory efficiency and kernel overhead outside the fitted columns,
  // the same at every micro-batch: what a profile's straight line over its micro-batches sees
  // as the backward's intercept.
  const ModelSpec& llama = ModelCatalog::builtin().get("llama-7b");
  const DeviceSpec& a100 = GpuCatalog::builtin().get("A100-40GB");
  const double w = 4.0 * llama.hidden * llama.hidden + 3.0 * llama.hidden * llama.ffn_hidden;
  const Efficiency roofline;
  for (int b : {1, 4, 16}) {
    const auto autocast =
        unit_features(a100, llama, 1, 2048, b, Dtype::FP16, with(WeightGradients::Autocast));
    const auto hook =
        unit_features(a100, llama, 1, 2048, b, Dtype::FP16, with(WeightGradients::MainGrad));
    EXPECT_NEAR(autocast.backward_fixed_s,
                18.0 * w / (roofline.memory * a100.memory_bandwidth) +
                    8 * roofline.kernel_overhead_us * 1e-6,
                1e-12)
        << "micro-batch " << b;
    EXPECT_NEAR(hook.backward_fixed_s,
                10.0 * w / (roofline.memory * a100.memory_bandwidth) +
                    4 * roofline.kernel_overhead_us * 1e-6,
                1e-12);
    EXPECT_EQ(autocast.forward_fixed_s, 0);
    // Nothing of it in the fitted columns: they are the same for both stacks.
    for (std::size_t k = 0; k < kNumFeatures; ++k) {
      EXPECT_DOUBLE_EQ(autocast.backward[k], hook.backward[k]) << k;
      EXPECT_DOUBLE_EQ(autocast.forward[k], hook.forward[k]) << k;
    }
  }
}

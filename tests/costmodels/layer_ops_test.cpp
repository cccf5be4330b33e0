// predict layer --ops in process: the op classes add up to the layer's priced time, and each op
// is priced by the calibrated model's own unit_time arithmetic.
#include <gtest/gtest.h>

#include <numeric>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/layer_ops.hpp"

namespace cephalo::costmodels {
namespace {

LayerQuery query(const std::string& gpu, const std::string& model, int seq, int micro_batch) {
  LayerQuery q;
  q.gpu = gpu;
  q.model = model;
  q.seq = seq;
  q.micro_batch = micro_batch;
  q.dtype = "bf16";
  q.source = "calibrated";
  return q;
}

void expect_classes_add_up(const LayerOpsPrediction& p) {
  double f = 0, b = 0;
  for (const auto& c : p.classes) {
    f += c.forward_s;
    b += c.backward_s;
    EXPECT_GT(c.roofline_forward_s, 0) << c.name;
    EXPECT_GT(c.roofline_backward_s, 0) << c.name;
  }
  EXPECT_GT(p.layer.forward_s, 0);
  EXPECT_NEAR(f, p.layer.forward_s, 1e-9);  // to the ns
  EXPECT_NEAR(b, p.layer.backward_s, 1e-9);
}

TEST(LayerOps, ClassesAddUpToTheLayerForEveryStack) {
  for (const char* attention : {"flash", "eager"})
    for (bool fused : {true, false}) {
      LayerQuery q = query("h100", "llama-7b", 4096, 2);
      q.attention = attention;
      q.fused_elementwise = fused;
      SCOPED_TRACE(std::string(attention) + (fused ? " fused" : " unfused"));
      expect_classes_add_up(predict_layer_ops(q));
    }
  LayerQuery compiled = query("a100", "llama-7b", 2048, 1);
  compiled.compiled = true;  // generated kernels: the memory column at the roofline's rate
  expect_classes_add_up(predict_layer_ops(compiled));
  LayerQuery cudnn = query("h100", "gpt-2.7b", 2048, 4);
  cudnn.flash_kernel = "cudnn";
  expect_classes_add_up(predict_layer_ops(cudnn));
}

TEST(LayerOps, EachOpIsPricedAsTheUnitIs) {
  const LayerQuery q = query("h100", "llama-7b", 4096, 2);
  const LayerJob lj = layer_job(q);
  const auto& m = *CalibratedComputeModel::builtin();
  for (auto phase : {ComputePhase::Forward, ComputePhase::Backward}) {
    const auto ops = m.unit_op_seconds(*lj.gpu, lj.job, 1, phase, 2);
    const double unit = m.unit_time(*lj.gpu, lj.job, 1, phase, 2).seconds;
    EXPECT_NEAR(std::accumulate(ops.begin(), ops.end(), 0.0), unit, 1e-12 * unit + 1e-15);
  }
}

TEST(LayerOps, CudnnMovesOnlyTheAttentionCoreOnHopper) {
  LayerQuery q = query("h100", "gpt-2.7b", 2048, 2);
  const auto fa = predict_layer_ops(q);
  q.flash_kernel = "cudnn";
  const auto cu = predict_layer_ops(q);
  ASSERT_EQ(fa.classes.size(), cu.classes.size());
  for (std::size_t i = 0; i < fa.classes.size(); ++i) {
    if (fa.classes[i].name == "attention core") {
      EXPECT_LT(cu.classes[i].forward_s, fa.classes[i].forward_s);
      // The datasheet roofline is the same work at the same peak: only the price moves.
      EXPECT_EQ(cu.classes[i].roofline_forward_s, fa.classes[i].roofline_forward_s);
    } else {
      EXPECT_EQ(cu.classes[i].forward_s, fa.classes[i].forward_s) << fa.classes[i].name;
    }
  }
}

TEST(LayerOps, RefusesALayerTheCalibratedModelDoesNotPrice) {
  LayerQuery q = query("l4", "deepspeedgpt_2.7b", 512, 4);
  q.dtype = "fp16";
  q.source = "profile";
  try {
    predict_layer_ops(q, {"command line", true});
    FAIL() << "a profile row has no per-op prices";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("--compute-model"), std::string::npos) << e.what();
  }
}

TEST(LayerOps, FlashKernelOnlyWithFlashAttention) {
  LayerQuery q = query("h100", "gpt-2.7b", 2048, 1);
  q.attention = "eager";
  q.flash_kernel = "cudnn";
  EXPECT_THROW(predict_layer(q), ValidationError);
  q.attention = "flash";
  q.flash_kernel = "triton";
  EXPECT_THROW(predict_layer(q), ValidationError);
}

}  // namespace
}  // namespace cephalo::costmodels

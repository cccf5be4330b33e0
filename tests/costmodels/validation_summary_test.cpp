// The per-layer report's summaries by dtype class (by_dtype_class): what the targets are stated
// over ("fp32" and "fp16/bf16" leave-one-GPU-out), and the signed errors that say per GPU which
// way its held-out rows are off.
#include <gtest/gtest.h>

#include "cephalo/costmodels/calibrated.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
RowError row(const std::string& model, const std::string& gpu, int seq, Dtype dtype, double fwd,
             double bwd, double ape) {
  RowError r;
  r.model = model;
  r.gpu = gpu;
  r.seq = seq;
  r.dtype = dtype;
  r.forward_error = fwd;
  r.backward_error = bwd;
  r.ape = ape;
  return r;
}
}  // namespace

TEST(ValidationSummary, ByDtypeClassKeepsTheClassAndSaysWhichWayEachGpuIsOff) {
  const std::vector<RowError> rows = {
      row("llama-7b", "T4", 512, Dtype::FP16, -20, -30, 25),
      row("llama-13b", "T4", 2048, Dtype::FP16, -10, -12, 11),
      row("gpt-2.7b", "T4", 512, Dtype::BF16, -40, -40, 40),  // bf16 is the same class
      row("llama-7b", "P100", 512, Dtype::FP16, +30, +20, 25),
      row("llama-7b", "P100", 512, Dtype::FP32, -90, -90, 90),  // another class: left out
  };
  const DtypeClassError half = by_dtype_class(rows, false);
  ASSERT_EQ(half.per_gpu.size(), 2u);
  EXPECT_EQ(half.rows, 4);
  const auto& p100 = half.per_gpu[0];  // by name
  const auto& t4 = half.per_gpu[1];
  EXPECT_EQ(p100.gpu, "P100");
  EXPECT_EQ(t4.gpu, "T4");
  EXPECT_EQ(t4.rows, 3);
  EXPECT_DOUBLE_EQ(t4.mape, (25 + 11 + 40) / 3.0);
  EXPECT_DOUBLE_EQ(t4.forward_bias, -20);  // median of −20, −10, −40
  EXPECT_DOUBLE_EQ(t4.backward_bias, -30);
  EXPECT_EQ(t4.worst, "gpt-2.7b s512");
  EXPECT_DOUBLE_EQ(t4.worst_ape, 40);
  EXPECT_DOUBLE_EQ(p100.forward_bias, 30);
  EXPECT_DOUBLE_EQ(p100.backward_bias, 20);
  EXPECT_DOUBLE_EQ(half.median_over_gpus, (25 + (25 + 11 + 40) / 3.0) / 2);
  EXPECT_DOUBLE_EQ(half.overall, (25 + 11 + 40 + 25) / 4.0);

  const DtypeClassError full = by_dtype_class(rows, true);
  ASSERT_EQ(full.per_gpu.size(), 1u);
  EXPECT_EQ(full.per_gpu[0].gpu, "P100");
  EXPECT_DOUBLE_EQ(full.median_over_gpus, 90);
  EXPECT_DOUBLE_EQ(full.per_gpu[0].forward_bias, -90);

  const DtypeClassError none = by_dtype_class({}, false);
  EXPECT_TRUE(none.per_gpu.empty());
  EXPECT_EQ(none.rows, 0);
  EXPECT_DOUBLE_EQ(none.median_over_gpus, 0);
}

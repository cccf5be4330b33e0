// The published profile tables and memory curves as the planner and simulator see them.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/profile.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

TEST(ProfileTables, EveryShapeOfThePublishedFileLoads) {
  const auto& t = ProfileTables::builtin();
  int measured = 0, fit = 0, combined = 0;
  for (const auto& r : t.rows()) {
    measured += r.shape == ProfileShape::Measured;
    fit += r.shape == ProfileShape::Fit;
    combined += r.shape == ProfileShape::Combined || r.shape == ProfileShape::CombinedSlope;
    EXPECT_GT(r.forward.slope_ms, 0) << r.model << " " << r.gpu;
    EXPECT_GT(r.backward.slope_ms, 0) << r.model << " " << r.gpu;
  }
  EXPECT_GT(measured, 100);
  EXPECT_GT(fit, 30);
  EXPECT_GT(combined, 10);
}

TEST(ProfileTables, MeasuredPointsAreReturnedExactlyAndExtrapolationIsFlagged) {
  const auto& t = ProfileTables::builtin();
  // deepspeedgpt_2.7b on p100, fp32: 12 measured points, first forward 15.91256 ms.
  LayerTime one = t.layer_time("deepspeedgpt_2.7b", "p100", 512, Dtype::FP32, 1);
  EXPECT_TRUE(one.measured);
  EXPECT_FALSE(one.extrapolated);
  EXPECT_NEAR(one.forward_ms, 15.91256, 1e-6);
  EXPECT_NEAR(one.backward_ms, 35.17632, 1e-6);
  LayerTime far = t.layer_time("gpt-2.7b", "P100", 512, Dtype::FP32, 20);
  EXPECT_TRUE(far.extrapolated);
  LayerTime last = t.layer_time("gpt-2.7b", "P100", 512, Dtype::FP32, 12);
  EXPECT_NEAR(far.forward_ms, last.forward_ms + 8 * 17.264846643356623, 1e-6);
}

TEST(ProfileTables, AliasesAndBf16FallBack) {
  const auto& t = ProfileTables::builtin();
  EXPECT_NE(t.find("llama-7b", "A100-40GB", 2048, Dtype::FP16), nullptr);
  std::string note;
  EXPECT_NE(t.find_for("llama-7b", "a100x40", 2048, Dtype::BF16, &note), nullptr);
  EXPECT_NE(note.find("fp16"), std::string::npos);
  EXPECT_THROW(t.layer_time("llama-7b", "H100-SXM", 2048, Dtype::FP16, 1), InfeasibleError);
  try {
    t.layer_time("llama-7b", "H100-SXM", 2048, Dtype::FP16, 1);
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("calibrated"), std::string::npos);
  }
}

TEST(ProfileTables, CombinedRowsAreSplitAndSumToTheirTotal) {
  const auto& t = ProfileTables::builtin();
  // gpt_6.7b on rtx3090 is only [9.739, 4.264] for forward+backward.
  const LayerProfile* r = t.find("gpt-6.7b", "rtx3090", 512, Dtype::FP16);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->shape, ProfileShape::Combined);
  EXPECT_NEAR(r->forward.slope_ms + r->backward.slope_ms, 9.739129999999921, 1e-9);
  EXPECT_NEAR(r->forward.intercept_ms + r->backward.intercept_ms, 4.264321999999954, 1e-9);
  // The richer deepspeedgpt_2.7b row wins over the gpt_2.7b duplicate on the P40.
  const LayerProfile* p40 = t.find("gpt-2.7b", "p40", 512, Dtype::FP16);
  ASSERT_NE(p40, nullptr);
  EXPECT_EQ(p40->shape, ProfileShape::Fit);
}

TEST(MemoryProfiles, PaperClusterCurvesAreGiBPerMicroBatch) {
  const auto& m = MemoryProfiles::builtin();
  const MemoryCurve* c = m.find("paper", "deepspeedgpt_2.7b", Dtype::FP16);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->model, "gpt-2.7b");
  ASSERT_EQ(c->compute_gib.size(), 4u);
  bool ext = false;
  EXPECT_DOUBLE_EQ(c->compute_gib_at(2, &ext), c->compute_gib[1]);
  EXPECT_FALSE(ext);
  double six = c->compute_gib_at(6, &ext);
  EXPECT_TRUE(ext);
  EXPECT_NEAR(six, c->compute_gib[3] + 2 * (c->compute_gib[3] - c->compute_gib[2]), 1e-12);
  // gpt_2.7b (the other profiling run) keeps its own curve.
  const MemoryCurve* g = m.find("paper", "gpt_2.7b", Dtype::FP16);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->compute_gib.size(), 20u);
}

TEST(ProfileTables, OwnFormatRoundTrip) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::to_string(::getpid()) + "_cephalo_profile_test");
  std::filesystem::create_directories(dir);
  auto file = dir / "p.json";
  std::ofstream(file) << R"({"format": "cephalo-profile", "version": 1,
    "rows": [{"model": "gpt-2.7b", "gpu": "l4", "seq": 1024, "dtype": "bf16",
              "layer": [{"micro_batch": 1, "forward_ms": 10, "backward_ms": 20},
                        {"micro_batch": 4, "forward_ms": 40, "backward_ms": 80, "recompute_ms": 41}]}],
    "optimizer": [{"gpu": "L4", "parameters": 1e8, "ms": 12.5}]})";
  ProfileTables t = ProfileTables::load(file);
  LayerTime mid = t.layer_time("gpt-2.7b", "L4", 1024, Dtype::BF16, 2);
  EXPECT_NEAR(mid.forward_ms, 20, 1e-9);
  EXPECT_EQ(mid.detail, "interpolated");
  EXPECT_NE(t.find_optimizer("l4"), nullptr);
  std::ofstream(file) << R"({"format": "cephalo-profile", "version": 1,
    "rows": [{"model": "gpt-2.7b", "gpu": "l4", "seq": 1024, "dtype": "bf16",
              "layer": [{"micro_batch": 2, "forward_ms": -1, "backward_ms": 20}]}]})";
  EXPECT_THROW(ProfileTables::load(file), ValidationError);
  std::ofstream(file) << R"({"format": "cephalo-profile", "version": 1,
    "rows": [{"model": "gpt-2.7b", "gpu": "l44", "seq": 1024, "dtype": "bf16",
              "layer": [{"micro_batch": 2, "forward_ms": 1, "backward_ms": 20}]}]})";
  EXPECT_THROW(ProfileTables::load(file), NotFoundError);
  std::filesystem::remove_all(dir);
}

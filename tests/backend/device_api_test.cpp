// The device API's front functions (backend/src/device.cpp) check the element-type contract and
// the sizes once, for every device: a device that accepts everything (below) still never sees a
// call that breaks them, and sees every call that keeps them.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cephalo/backend/device.hpp"
#include "cephalo/core/error.hpp"

namespace cb = cephalo::backend;
using cb::ElemType;
using cb::TensorRef;

namespace {

// Counts the implementations reached; runs nothing.
class CountingDevice final : public cb::Device {
 public:
  int reached = 0;
  std::string kind() const override { return "counting"; }
  std::string name() const override { return "counting:0"; }
  bool supports(ElemType) const override { return true; }
  cb::Stream& stream(cb::StreamKind) override { throw cephalo::RuntimeFailure("no streams"); }
  std::unique_ptr<cb::Event> create_event() override { return nullptr; }
  void synchronize() override {}
  cb::MemoryStats memory_stats(cb::MemorySpace) const override { return {}; }
  void reset_peak() override {}

 protected:
  void do_copy(cb::Stream&, TensorRef, TensorRef) override { ++reached; }
  void do_upload(TensorRef, const void*, std::size_t) override { ++reached; }
  void do_download(void*, TensorRef, std::size_t) override { ++reached; }
  void* raw_allocate(std::size_t, cb::MemorySpace) override { return nullptr; }
  void raw_free(void*, std::size_t, cb::MemorySpace) noexcept override {}
  void do_fill(cb::Stream&, TensorRef, float) override { ++reached; }
  void do_scale(cb::Stream&, TensorRef, float) override { ++reached; }
  void do_axpy(cb::Stream&, float, TensorRef, TensorRef) override { ++reached; }
  void do_cast(cb::Stream&, TensorRef, TensorRef) override { ++reached; }
  void do_sum(cb::Stream&, TensorRef, TensorRef) override { ++reached; }
  void do_gemm(cb::Stream&, cb::Transpose, cb::Transpose, std::int64_t, std::int64_t, std::int64_t,
               float, TensorRef, TensorRef, float, TensorRef) override {
    ++reached;
  }
  void do_add_bias(cb::Stream&, TensorRef, TensorRef, std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_bias_backward(cb::Stream&, TensorRef, TensorRef, std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_layer_norm_forward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, TensorRef,
                             TensorRef, std::int64_t, std::int64_t, float) override {
    ++reached;
  }
  void do_layer_norm_backward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, TensorRef,
                              TensorRef, TensorRef, TensorRef, std::int64_t,
                              std::int64_t) override {
    ++reached;
  }
  void do_gelu_forward(cb::Stream&, TensorRef, TensorRef) override { ++reached; }
  void do_gelu_backward(cb::Stream&, TensorRef, TensorRef, TensorRef) override { ++reached; }
  void do_attention_forward(cb::Stream&, const cb::AttentionShape&, TensorRef, TensorRef,
                            TensorRef) override {
    ++reached;
  }
  void do_attention_backward(cb::Stream&, const cb::AttentionShape&, TensorRef, TensorRef,
                             TensorRef, TensorRef, TensorRef) override {
    ++reached;
  }
  void do_embedding_forward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, std::int64_t,
                            std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_embedding_backward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, std::int64_t,
                             std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_forward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                                std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_backward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                                 std::int64_t, std::int64_t, float) override {
    ++reached;
  }
  void do_adamw_step(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                     const cb::AdamWParams&) override {
    ++reached;
  }
};

// A stream that is never used (the counting device runs nothing).
class NullStream final : public cb::Stream {
 public:
  cb::StreamKind kind() const override { return cb::StreamKind::Compute; }
  void synchronize() override {}
  void enqueue_host(std::function<void()>) override {}
  void wait(cb::Event&) override {}
};

TensorRef t(std::int64_t n, ElemType type = ElemType::F32) { return {nullptr, n, type}; }

// `bad` must be refused naming the device kind and `words`, before the implementation;
// `good` must reach it exactly once.
void expect_checked(CountingDevice& dev, const std::function<void()>& bad,
                    const std::function<void()>& good, const std::string& words) {
  dev.reached = 0;
  try {
    bad();
    ADD_FAILURE() << words << ": accepted";
  } catch (const cephalo::RuntimeFailure& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("counting device: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  }
  EXPECT_EQ(dev.reached, 0) << words;
  good();
  EXPECT_EQ(dev.reached, 1) << words;
}

}  // namespace

TEST(DeviceApi, FrontFunctionsRefuseBrokenPreconditionsBeforeAnyImplementation) {
  CountingDevice dev;
  NullStream s;
  const auto F32 = ElemType::F32, BF = ElemType::BF16, I32 = ElemType::I32;
  const auto No = cb::Transpose::No;
  char host[64] = {};
  expect_checked(
      dev, [&] { dev.copy(s, t(3), t(4)); }, [&] { dev.copy(s, t(4), t(4)); }, "copy of 16 bytes");
  expect_checked(
      dev, [&] { dev.upload(t(3), host, 16); }, [&] { dev.upload(t(4), host, 16); }, "upload");
  expect_checked(
      dev, [&] { dev.download(host, t(3), 16); }, [&] { dev.download(host, t(4), 16); },
      "download");
  expect_checked(
      dev, [&] { dev.fill(s, t(4, I32), 0.0f); }, [&] { dev.fill(s, t(4, BF), 0.0f); }, "x=i32");
  expect_checked(
      dev, [&] { dev.axpy(s, 1.0f, t(4), t(3)); }, [&] { dev.axpy(s, 1.0f, t(4), t(5, BF)); },
      "axpy y tensor has 3 elements, needs 4");
  expect_checked(
      dev, [&] { dev.gemm(s, No, No, 2, 3, 4, 1.0f, t(8), t(12), 0.0f, t(5)); },
      [&] { dev.gemm(s, No, No, 2, 3, 4, 1.0f, t(8, BF), t(12, BF), 0.0f, t(6, F32)); },
      "gemm C tensor has 5 elements, needs 6");
  expect_checked(
      dev, [&] { dev.gemm(s, No, No, 2, 3, 4, 1.0f, t(8, BF), t(12), 0.0f, t(6)); },
      [&] { dev.gemm(s, No, No, 2, 3, 4, 1.0f, t(8), t(12), 0.0f, t(6)); }, "A=bf16, B=f32");
  const cb::AttentionShape sh{2, 3, 4, 5};  // C = 20, rows = 6
  expect_checked(
      dev, [&] { dev.attention_forward(s, sh, t(6 * 60), t(6 * 20), t(2 * 4 * 3 - 1)); },
      [&] { dev.attention_forward(s, sh, t(6 * 60), t(6 * 20), t(2 * 4 * 3)); },
      "attention lse tensor has 23 elements, needs 24");
  expect_checked(
      dev, [&] { dev.embedding_forward(s, t(6, F32), t(40), t(12), t(24), 6, 3, 4); },
      [&] { dev.embedding_forward(s, t(6, I32), t(40), t(12), t(24), 6, 3, 4); }, "tokens=f32");
  expect_checked(
      dev, [&] { dev.adamw_step(s, t(8), t(8), t(7), t(8), {}); },
      [&] { dev.adamw_step(s, t(8), t(8), t(8), t(8), {}); },
      "adamw m tensor has 7 elements, needs 8");
}

// The device API's front functions (backend/src/device.cpp) check the element-type contract and
// the sizes once, for every device: a device that accepts everything (below) still never sees a
// call that breaks them, and sees every call that keeps them; on the CPU device every
// combination the contract refuses is refused naming the kernel and the types.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
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
  cb::VocabSlice last_vocab{-1, -1};  // what the embedding kernels were handed, resolved
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
                            std::int64_t, std::int64_t, cb::VocabSlice vocab) override {
    ++reached;
    last_vocab = vocab;
  }
  void do_embedding_backward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, std::int64_t,
                             std::int64_t, std::int64_t, cb::VocabSlice vocab) override {
    ++reached;
    last_vocab = vocab;
  }
  void do_cross_entropy_forward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                                std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_backward(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                                 std::int64_t, std::int64_t, float, std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_row_max(cb::Stream&, TensorRef, TensorRef, std::int64_t,
                                std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_partial_sums(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef,
                                     TensorRef, std::int64_t, std::int64_t, std::int64_t) override {
    ++reached;
  }
  void do_cross_entropy_combine(cb::Stream&, TensorRef, TensorRef, TensorRef, TensorRef, TensorRef,
                                std::int64_t) override {
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
  // Vocabulary-parallel lookups: the local rows (40 / 4 = 10) must lie inside the vocabulary,
  // wte must be whole rows, and an empty wpe (no position term) is allowed.
  expect_checked(
      dev,
      [&] {
        dev.embedding_forward(s, t(6, I32), t(40), t(12), t(24), 6, 3, 4, {5, 12});
      },
      [&] {
        dev.embedding_forward(s, t(6, I32), t(40), {}, t(24), 6, 3, 4, {2, 12});
      },
      "vocabulary slice [5, 15) is not inside a vocabulary of 12 ids");
  EXPECT_EQ(dev.last_vocab.begin, 2);
  EXPECT_EQ(dev.last_vocab.size, 12);
  expect_checked(
      dev, [&] { dev.embedding_backward(s, t(6, I32), t(24), t(42), {}, 6, 3, 4); },
      [&] { dev.embedding_backward(s, t(6, I32), t(24), t(40), {}, 6, 3, 4); },
      "embedding_backward dwte tensor has 42 elements, not rows of 4");
  EXPECT_EQ(dev.last_vocab.begin, 0);  // the default slice resolves to the local rows
  EXPECT_EQ(dev.last_vocab.size, 10);
  expect_checked(
      dev,
      [&] {
        dev.embedding_forward(s, t(6, I32), t(40), t(12), t(24), 6, 3, 4, {-1, 12});
      },
      [&] {
        dev.embedding_forward(s, t(6, I32), t(40), t(12), t(24), 6, 3, 4, {0, 10});
      },
      "vocabulary slice [-1, 9)");
  expect_checked(
      dev, [&] { dev.cross_entropy_row_max(s, t(6), t(3), 3, 0); },
      [&] { dev.cross_entropy_row_max(s, t(6), t(3), 3, 2); }, "row_max over 0 columns");
  expect_checked(
      dev,
      [&] { dev.cross_entropy_partial_sums(s, t(6), t(3, I32), t(3), t(3, BF), t(3), 3, 2, 4); },
      [&] { dev.cross_entropy_partial_sums(s, t(6), t(3, I32), t(3), t(3), t(3), 3, 2, 4); },
      "sum_exp=bf16");
  expect_checked(
      dev, [&] { dev.cross_entropy_partial_sums(s, t(6), t(3, I32), t(3), t(3), t(3), 3, 2, -1); },
      [&] { dev.cross_entropy_partial_sums(s, t(6, BF), t(3, I32), t(3), t(3), t(3), 3, 2, 0); },
      "vocab_begin -1 is negative");
  expect_checked(
      dev, [&] { dev.cross_entropy_combine(s, t(3), t(3), t(2), t(3), t(3), 3); },
      [&] { dev.cross_entropy_combine(s, t(3), t(3), t(3), t(3), t(3), 3); },
      "cross_entropy_combine target_logit tensor has 2 elements, needs 3");
  expect_checked(
      dev, [&] { dev.cross_entropy_backward(s, t(6), t(3, I32), t(3), t(6), 3, 2, 1.0f, -2); },
      [&] { dev.cross_entropy_backward(s, t(6), t(3, I32), t(3), t(6), 3, 2, 1.0f, 2); },
      "cross_entropy_backward vocab_begin -2 is negative");
  expect_checked(
      dev, [&] { dev.adamw_step(s, t(8), t(8), t(7), t(8), {}); },
      [&] { dev.adamw_step(s, t(8), t(8), t(8), t(8), {}); },
      "adamw m tensor has 7 elements, needs 8");
}

namespace {

using namespace cephalo::backend;
using cephalo::RuntimeFailure;

constexpr ElemType kF32 = ElemType::F32, kBF16 = ElemType::BF16, kF16 = ElemType::F16,
                   kI32 = ElemType::I32;

// ---------------------------------------------------------------------------------------------
// Refused combinations

// Expects `fn` to throw RuntimeFailure whose message names the kernel and each of `words`.
void expect_refused(const std::function<void()>& fn, const std::string& kernel,
                    const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << kernel << ": accepted a combination the contract refuses";
  } catch (const RuntimeFailure& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(kernel), std::string::npos) << msg;
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << w << " in " << msg;
  }
}

TEST(DeviceApi, CpuDeviceRefusesCombinationsOutsideTheContract) {
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Compute);
  auto buf = [&](ElemType t, std::int64_t n = 64) { return dev->allocate(n, t); };
  auto f32 = buf(kF32), f32b = buf(kF32), f32c = buf(kF32), f32d = buf(kF32);
  auto bf = buf(kBF16), bf2 = buf(kBF16), bf3 = buf(kBF16), bf4 = buf(kBF16);
  auto hf = buf(kF16), hf2 = buf(kF16), i32 = buf(kI32);

  expect_refused(
      [&] {
        dev->gemm(s, Transpose::No, Transpose::No, 2, 2, 2, 1.0f, bf.ref(), hf.ref(), 0.0f,
                  f32.ref());
      },
      "gemm", {"A=bf16", "B=f16", "C=f32"});
  expect_refused(
      [&] {
        dev->gemm(s, Transpose::No, Transpose::No, 2, 2, 2, 1.0f, bf.ref(), bf2.ref(), 0.0f,
                  hf.ref());
      },
      "gemm", {"C=f16"});
  expect_refused(
      [&] {
        dev->gemm(s, Transpose::No, Transpose::No, 2, 2, 2, 1.0f, f32.ref(), f32b.ref(), 0.0f,
                  bf.ref());
      },
      "gemm", {"A=f32", "C=bf16"});
  expect_refused(
      [&] {
        dev->gemm(s, Transpose::No, Transpose::No, 2, 2, 2, 1.0f, i32.ref(), i32.ref(), 0.0f,
                  f32.ref());
      },
      "gemm", {"A=i32"});
  expect_refused([&] { dev->add_bias(s, bf.ref(), f32.ref(), 2, 2); }, "add_bias", {"bias=f32"});
  expect_refused([&] { dev->bias_backward(s, bf.ref(), hf.ref(), 2, 2); }, "bias_backward",
                 {"dbias=f16"});
  expect_refused(
      [&] {
        dev->layer_norm_forward(s, bf.ref(), bf2.ref(), bf3.ref(), bf4.ref(), bf.ref(), f32.ref(),
                                2, 2, 1e-5f);
      },
      "layer_norm_forward", {"mean=bf16"});
  expect_refused(
      [&] {
        dev->layer_norm_forward(s, bf.ref(), f32.ref(), bf3.ref(), bf4.ref(), f32b.ref(),
                                f32c.ref(), 2, 2, 1e-5f);
      },
      "layer_norm_forward", {"gamma=f32"});
  expect_refused(
      [&] {
        dev->layer_norm_backward(s, bf.ref(), bf2.ref(), f32.ref(), f32b.ref(), bf3.ref(),
                                 bf4.ref(), hf.ref(), f32c.ref(), 2, 2);
      },
      "layer_norm_backward", {"dgamma=f16"});
  expect_refused(
      [&] {
        dev->layer_norm_backward(s, bf.ref(), bf2.ref(), f32.ref(), f32b.ref(), bf3.ref(),
                                 f32d.ref(), f32c.ref(), f32c.ref(), 2, 2);
      },
      "layer_norm_backward", {"dx=f32"});
  expect_refused([&] { dev->gelu_forward(s, bf.ref(), hf.ref()); }, "gelu_forward", {"y=f16"});
  expect_refused([&] { dev->gelu_backward(s, bf.ref(), f32.ref(), bf2.ref()); }, "gelu_backward",
                 {"dy=f32"});
  const AttentionShape sh{1, 2, 1, 2};
  expect_refused([&] { dev->attention_forward(s, sh, bf.ref(), bf2.ref(), bf3.ref()); },
                 "attention_forward", {"lse=bf16"});
  expect_refused(
      [&] { dev->attention_backward(s, sh, bf.ref(), bf2.ref(), f32.ref(), hf.ref(), bf3.ref()); },
      "attention_backward", {"dout=f16"});
  expect_refused(
      [&] { dev->embedding_forward(s, f32.ref(), bf.ref(), bf2.ref(), bf3.ref(), 2, 2, 2); },
      "embedding_forward", {"tokens=f32"});
  expect_refused(
      [&] { dev->embedding_backward(s, i32.ref(), bf.ref(), hf.ref(), f32.ref(), 2, 2, 2); },
      "embedding_backward", {"dwte=f16"});
  expect_refused(
      [&] { dev->cross_entropy_forward(s, bf.ref(), i32.ref(), bf2.ref(), f32.ref(), 2, 2); },
      "cross_entropy_forward", {"losses=bf16"});
  expect_refused(
      [&] {
        dev->cross_entropy_backward(s, bf.ref(), i32.ref(), f32.ref(), f32b.ref(), 2, 2, 1.0f);
      },
      "cross_entropy_backward", {"logits=bf16", "dlogits=f32"});
  expect_refused([&] { dev->adamw_step(s, f32.ref(), bf.ref(), f32b.ref(), f32c.ref(), {}); },
                 "adamw_step", {"grad=bf16"});
  expect_refused([&] { dev->adamw_step(s, bf.ref(), f32.ref(), f32b.ref(), f32c.ref(), {}); },
                 "adamw_step", {"param=bf16"});
  expect_refused([&] { dev->cast(s, bf.ref(), i32.ref()); }, "cast", {"dst=i32"});
  expect_refused([&] { dev->sum(s, bf.ref(), bf2.ref()); }, "sum", {"out=bf16"});
  expect_refused([&] { dev->fill(s, i32.ref(), 0.0f); }, "fill", {"x=i32"});
  expect_refused([&] { dev->axpy(s, 1.0f, i32.ref(), f32.ref()); }, "axpy", {"x=i32"});

  EXPECT_TRUE(dev->supports(kF32));
  EXPECT_TRUE(dev->supports(kBF16));
  EXPECT_TRUE(dev->supports(kF16));
  EXPECT_FALSE(dev->supports(kI32));
}

}  // namespace

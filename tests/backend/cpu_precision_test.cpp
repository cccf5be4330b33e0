// Low precision on the CPU device (device.hpp's element-type contract): every kernel in bf16 and
// fp16 (and with f32 gradient outputs) against the same kernel run in f32 on the rounded
// inputs, and the all-f32 path bit for bit against direct fp32 computations. (half.hpp's
// conversions: half_conversion_test.cpp; the combinations the contract refuses:
// device_api_test.cpp.) Somewhat over 500 lines: every kernel's case shares one harness
// (rounded inputs, the f32 rerun, tolerances), which a split would have to expose in a header.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/random_data.hpp"
#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/core/error.hpp"
#include "half.hpp"

using namespace cephalo::backend;
using cephalo::RuntimeFailure;

namespace {

constexpr ElemType kF32 = ElemType::F32, kBF16 = ElemType::BF16, kF16 = ElemType::F16,
                   kI32 = ElemType::I32;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Kernels in bf16 / fp16 against f32 on rounded inputs

using cephalo::test_support::randn;

// The values a tensor of `type` holds after storing `v` (each rounded once).
std::vector<float> rounded(const std::vector<float>& v, ElemType type) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = round_to(v[i], type);
  return out;
}

Buffer make(Device& d, const std::vector<float>& v, ElemType type) {
  Buffer b = d.allocate(v.size(), type);
  std::vector<std::uint8_t> bytes(v.size() * element_size(type));
  store_f32(v.data(), bytes.data(), type, v.size());
  d.upload(b.ref(), bytes.data(), bytes.size());
  return b;
}
Buffer make_i32(Device& d, const std::vector<std::int32_t>& v) {
  Buffer b = d.allocate(v.size(), kI32);
  d.upload(b.ref(), v.data(), v.size() * 4);
  return b;
}
std::vector<float> read(Device& d, const Buffer& b) {
  std::vector<std::uint8_t> bytes(b.bytes());
  d.download(bytes.data(), b.ref(), bytes.size());
  std::vector<float> v(static_cast<std::size_t>(b.numel()));
  load_f32(bytes.data(), b.type(), v.data(), v.size());
  return v;
}

// ||got - want|| / ||want||; infinite when either holds a NaN (or an inf), so NaN never passes.
double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double d = 0, r = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i]))
      return std::numeric_limits<double>::infinity();
    d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    r += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(d) / std::max(std::sqrt(r), 1e-30);
}

// One tensor argument of a kernel call. `type` is its type in the low-precision run; the f32
// reference run uses F32 for every floating tensor (I32 stays I32).
enum class Role {
  In,    // random input, rounded to `type`
  Out,   // overwritten output: poisoned with NaN before the run
  Acc,   // accumulated / updated output: starts from random values rounded to `type`
  Ints,  // I32 contents given by `ints`
};
struct Arg {
  std::int64_t n;
  ElemType type;
  Role role;
  float scale = 1.0f;
  std::vector<std::int32_t> ints = {};
};
using Call = std::function<void(Device&, Stream&, const std::vector<TensorRef>&)>;

// How closely the low-precision run must match the rounded f32 run. Kernels that are plain
// loops do the very same fp32 operations in both runs, so every element must be the f32
// result rounded once, to nearest even (this is what catches truncation or double rounding).
// Eigen kernels are held to the relative error only.
enum class Match { RelL2, Bitwise };

// Runs `call` once with the low-precision tensors and once in f32 on the same (rounded)
// values; every Out/Acc tensor must match the f32 result rounded to its storage type within
// 1e-2 relative L2 (and contain no NaN), and bit for bit with Match::Bitwise.
void expect_matches_f32(const std::string& what, const std::vector<Arg>& args, const Call& call,
                        std::uint32_t seed, Match match = Match::Bitwise) {
  auto dev = make_cpu_device({});
  std::vector<Buffer> low, ref;
  std::vector<TensorRef> low_refs, ref_refs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    const auto n = static_cast<std::size_t>(a.n);
    if (a.role == Role::Ints) {
      low.push_back(make_i32(*dev, a.ints));
      ref.push_back(make_i32(*dev, a.ints));
    } else {
      std::vector<float> v = a.role == Role::Out
                                 ? std::vector<float>(n, kNaN)
                                 : rounded(randn(n, a.scale, seed + 7919u * (i + 1)), a.type);
      low.push_back(make(*dev, v, a.type));
      ref.push_back(make(*dev, v, kF32));
    }
    low_refs.push_back(low.back().ref());
    ref_refs.push_back(ref.back().ref());
  }
  auto& s = dev->stream(StreamKind::Compute);
  call(*dev, s, low_refs);
  call(*dev, s, ref_refs);
  dev->synchronize();
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].role != Role::Out && args[i].role != Role::Acc) continue;
    const auto want = rounded(read(*dev, ref[i]), args[i].type);
    const auto got = read(*dev, low[i]);
    EXPECT_LE(rel_l2(got, want), 1e-2)
        << what << ": output argument " << i << " (" << to_string(args[i].type) << ")";
    double norm = 0;
    for (float x : want) norm += std::fabs(x);
    EXPECT_GT(norm, 0.0) << what << ": the f32 reference of argument " << i << " is all zero";
    if (match == Match::Bitwise) {
      std::size_t differ = 0;
      for (std::size_t j = 0; j < got.size(); ++j)
        differ += std::bit_cast<std::uint32_t>(got[j]) != std::bit_cast<std::uint32_t>(want[j]);
      EXPECT_EQ(differ, 0u) << what << ": output argument " << i << " (" << to_string(args[i].type)
                            << ") elements not the rounded f32 result";
    }
  }
}

struct Types {
  ElemType t;  // compute type
  ElemType g;  // parameter-gradient type (t or F32)
};
std::string label(const Types& ty) {
  return std::string("T=") + to_string(ty.t) + " grad=" + to_string(ty.g);
}
// bf16 and fp16, each with T and with f32 gradient outputs.
const std::vector<Types> kLowTypes = {{kBF16, kBF16}, {kBF16, kF32}, {kF16, kF16}, {kF16, kF32}};

TEST(CpuPrecision, FillScaleAxpyCastSum) {
  const std::int64_t n = 1000;
  for (ElemType t : {kBF16, kF16}) {
    const std::string tn = to_string(t);
    expect_matches_f32(
        "fill " + tn, {{n, t, Role::Out}},
        [](Device& d, Stream& s, const auto& x) { d.fill(s, x[0], 0.3f); }, 1);
    expect_matches_f32(
        "scale " + tn, {{n, t, Role::Acc}},
        [](Device& d, Stream& s, const auto& x) { d.scale(s, x[0], -0.7f); }, 2);
    expect_matches_f32(
        "sum " + tn, {{n, t, Role::In}, {1, kF32, Role::Out}},
        [](Device& d, Stream& s, const auto& x) { d.sum(s, x[0], x[1]); }, 3);
  }
  // axpy and cast take any pair of floating types.
  for (ElemType x : {kF32, kBF16, kF16})
    for (ElemType y : {kF32, kBF16, kF16}) {
      const std::string pair = std::string(to_string(x)) + " -> " + to_string(y);
      expect_matches_f32(
          "axpy " + pair, {{n, x, Role::In}, {n, y, Role::Acc}},
          [](Device& d, Stream& s, const auto& a) { d.axpy(s, 0.37f, a[0], a[1]); }, 4);
      expect_matches_f32(
          "cast " + pair, {{n, x, Role::In, 100.0f}, {n, y, Role::Out}},
          [](Device& d, Stream& s, const auto& a) { d.cast(s, a[0], a[1]); }, 5);
    }
}

TEST(CpuPrecision, GemmAllTransposesAndBetas) {
  const std::int64_t m = 13, n = 17, k = 29;
  for (const Types& ty : kLowTypes)
    for (Transpose ta : {Transpose::No, Transpose::Yes})
      for (Transpose tb : {Transpose::No, Transpose::Yes})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          const std::string what =
              "gemm " + label(ty) + " ta=" + std::to_string(ta == Transpose::Yes) +
              " tb=" + std::to_string(tb == Transpose::Yes) + " beta=" + std::to_string(beta);
          expect_matches_f32(
              what,
              {{m * k, ty.t, Role::In},
               {k * n, ty.t, Role::In},
               {m * n, ty.g, beta == 0.0f ? Role::Out : Role::Acc}},
              [=](Device& d, Stream& s, const auto& x) {
                d.gemm(s, ta, tb, m, n, k, 0.8f, x[0], x[1], beta, x[2]);
              },
              10, Match::RelL2);
        }
}

TEST(CpuPrecision, BiasForwardAndBackward) {
  const std::int64_t rows = 24, cols = 40;
  for (const Types& ty : kLowTypes) {
    expect_matches_f32(
        "add_bias " + label(ty), {{rows * cols, ty.t, Role::Acc}, {cols, ty.t, Role::In}},
        [=](Device& d, Stream& s, const auto& x) { d.add_bias(s, x[0], x[1], rows, cols); }, 20);
    expect_matches_f32(
        "bias_backward " + label(ty), {{rows * cols, ty.t, Role::In}, {cols, ty.g, Role::Acc}},
        [=](Device& d, Stream& s, const auto& x) { d.bias_backward(s, x[0], x[1], rows, cols); },
        21);
  }
}

TEST(CpuPrecision, LayerNormForwardAndBackward) {
  const std::int64_t rows = 12, cols = 48;
  for (const Types& ty : kLowTypes) {
    expect_matches_f32(
        "layer_norm_forward " + label(ty),
        {{rows * cols, ty.t, Role::In, 2.0f},
         {cols, ty.t, Role::In},
         {cols, ty.t, Role::In},
         {rows * cols, ty.t, Role::Out},
         {rows, kF32, Role::Out},
         {rows, kF32, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) {
          d.layer_norm_forward(s, x[0], x[1], x[2], x[3], x[4], x[5], rows, cols, 1e-5f);
        },
        30);
    // mean/rstd are inputs here; any values define the same function in both runs.
    expect_matches_f32(
        "layer_norm_backward " + label(ty),
        {{rows * cols, ty.t, Role::In, 2.0f},
         {cols, ty.t, Role::In},
         {rows, kF32, Role::In, 0.1f},
         {rows, kF32, Role::In, 1.0f},
         {rows * cols, ty.t, Role::In},
         {rows * cols, ty.t, Role::Out},
         {cols, ty.g, Role::Acc},
         {cols, ty.g, Role::Acc}},
        [=](Device& d, Stream& s, const auto& x) {
          d.layer_norm_backward(s, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], rows, cols);
        },
        31);
  }
}

TEST(CpuPrecision, GeluForwardAndBackward) {
  const std::int64_t n = 777;
  for (ElemType t : {kBF16, kF16}) {
    expect_matches_f32(
        std::string("gelu_forward ") + to_string(t), {{n, t, Role::In, 2.0f}, {n, t, Role::Out}},
        [](Device& d, Stream& s, const auto& x) { d.gelu_forward(s, x[0], x[1]); }, 40);
    expect_matches_f32(
        std::string("gelu_backward ") + to_string(t),
        {{n, t, Role::In, 2.0f}, {n, t, Role::In}, {n, t, Role::Out}},
        [](Device& d, Stream& s, const auto& x) { d.gelu_backward(s, x[0], x[1], x[2]); }, 41);
  }
}

TEST(CpuPrecision, AttentionForwardAndBackward) {
  const AttentionShape sh{2, 7, 3, 8};
  const std::int64_t C = sh.heads * sh.head_dim, rows = sh.batch * sh.seq;
  const std::int64_t stats = sh.batch * sh.heads * sh.seq;
  for (ElemType t : {kBF16, kF16}) {
    expect_matches_f32(
        std::string("attention_forward ") + to_string(t),
        {{rows * 3 * C, t, Role::In}, {rows * C, t, Role::Out}, {stats, kF32, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) { d.attention_forward(s, sh, x[0], x[1], x[2]); },
        50, Match::RelL2);
    expect_matches_f32(
        std::string("attention_backward ") + to_string(t),
        {{rows * 3 * C, t, Role::In},
         {rows * C, t, Role::In},
         {stats, kF32, Role::In},
         {rows * C, t, Role::In},
         {rows * 3 * C, t, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) {
          d.attention_backward(s, sh, x[0], x[1], x[2], x[3], x[4]);
        },
        51, Match::RelL2);
  }
}

TEST(CpuPrecision, EmbeddingForwardAndBackward) {
  const std::int64_t vocab = 11, seq = 5, rows = 15, hidden = 24;
  std::vector<std::int32_t> tokens(rows);
  for (std::int64_t i = 0; i < rows; ++i) tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 9);
  tokens[4] = tokens[9];  // one token repeated, so dwte sums two rows
  for (const Types& ty : kLowTypes) {
    expect_matches_f32(
        "embedding_forward " + label(ty),
        {{rows, kI32, Role::Ints, 1.0f, tokens},
         {vocab * hidden, ty.t, Role::In},
         {seq * hidden, ty.t, Role::In},
         {rows * hidden, ty.t, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) {
          d.embedding_forward(s, x[0], x[1], x[2], x[3], rows, seq, hidden);
        },
        60);
    expect_matches_f32(
        "embedding_backward " + label(ty),
        {{rows, kI32, Role::Ints, 1.0f, tokens},
         {rows * hidden, ty.t, Role::In},
         {vocab * hidden, ty.g, Role::Acc},
         {seq * hidden, ty.g, Role::Acc}},
        [=](Device& d, Stream& s, const auto& x) {
          d.embedding_backward(s, x[0], x[1], x[2], x[3], rows, seq, hidden);
        },
        61);
  }
}

TEST(CpuPrecision, CrossEntropyForwardAndBackward) {
  const std::int64_t rows = 9, vocab = 31;
  std::vector<std::int32_t> targets(rows);
  for (std::int64_t i = 0; i < rows; ++i) targets[i] = static_cast<std::int32_t>((i * 13) % vocab);
  for (ElemType t : {kBF16, kF16}) {
    expect_matches_f32(
        std::string("cross_entropy_forward ") + to_string(t),
        {{rows * vocab, t, Role::In, 3.0f},
         {rows, kI32, Role::Ints, 1.0f, targets},
         {rows, kF32, Role::Out},
         {rows, kF32, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) {
          d.cross_entropy_forward(s, x[0], x[1], x[2], x[3], rows, vocab);
        },
        70);
    expect_matches_f32(
        std::string("cross_entropy_backward ") + to_string(t),
        {{rows * vocab, t, Role::In, 3.0f},
         {rows, kI32, Role::Ints, 1.0f, targets},
         {rows, kF32, Role::In},
         {rows * vocab, t, Role::Out}},
        [=](Device& d, Stream& s, const auto& x) {
          d.cross_entropy_backward(s, x[0], x[1], x[2], x[3], rows, vocab, 0.25f);
        },
        71);
  }
}

// dlogits may alias logits (the head does this to save a logits-sized buffer).
TEST(CpuPrecision, CrossEntropyBackwardInPlaceEqualsOutOfPlace) {
  const std::int64_t rows = 6, vocab = 29;
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Compute);
  const auto targets = make_i32(*dev, {0, 5, 28, 3, 3, 17});
  for (ElemType t : {kF32, kBF16, kF16}) {
    const auto logits = randn(static_cast<std::size_t>(rows * vocab), 3.0f, 80);
    auto in_place = make(*dev, logits, t), source = make(*dev, logits, t);
    auto out = make(*dev, std::vector<float>(static_cast<std::size_t>(rows * vocab), kNaN), t);
    auto lse = make(*dev, std::vector<float>(static_cast<std::size_t>(rows)), kF32);
    auto losses = make(*dev, std::vector<float>(static_cast<std::size_t>(rows)), kF32);
    dev->cross_entropy_forward(s, source.ref(), targets.ref(), losses.ref(), lse.ref(), rows,
                               vocab);
    dev->cross_entropy_backward(s, source.ref(), targets.ref(), lse.ref(), out.ref(), rows, vocab,
                                0.5f);
    dev->cross_entropy_backward(s, in_place.ref(), targets.ref(), lse.ref(), in_place.ref(), rows,
                                vocab, 0.5f);
    const auto a = read(*dev, in_place), b = read(*dev, out);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_FALSE(std::isnan(b[i])) << to_string(t) << " element " << i;
      ASSERT_EQ(a[i], b[i]) << to_string(t) << " element " << i;
    }
  }
}

// Outputs are rounded once from the fp32 result, not through intermediate low-precision values:
// a bf16 gemm whose exact result is representable gives it exactly even though the f32
// accumulator passes through values bf16 cannot hold.
TEST(CpuPrecision, OutputsAreRoundedOnce) {
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Compute);
  // 1 * 256 + 1 * 1 + 1 * -256: the partial sum 257 is not a bf16 value (8 significant bits),
  // the final 1 is. A per-step rounding would lose the 1 (257 -> 256, then 0).
  auto a = make(*dev, {1.0f, 1.0f, 1.0f}, kBF16);
  auto b = make(*dev, {256.0f, 1.0f, -256.0f}, kBF16);
  auto c = make(*dev, {kNaN}, kBF16);
  dev->gemm(s, Transpose::No, Transpose::No, 1, 1, 3, 1.0f, a.ref(), b.ref(), 0.0f, c.ref());
  EXPECT_EQ(read(*dev, c)[0], 1.0f);
  // An F32 gradient accumulates without bf16 rounding: 256 + 1 stays 257.
  auto dy = make(*dev, {1.0f}, kBF16);
  auto dbias_f32 = make(*dev, {256.0f}, kF32), dbias_bf16 = make(*dev, {256.0f}, kBF16);
  dev->bias_backward(s, dy.ref(), dbias_f32.ref(), 1, 1);
  dev->bias_backward(s, dy.ref(), dbias_bf16.ref(), 1, 1);
  EXPECT_EQ(read(*dev, dbias_f32)[0], 257.0f);
  EXPECT_EQ(read(*dev, dbias_bf16)[0], 256.0f);  // 257 is a tie: even mantissa, 256
}

// The comm and copy streams are worker threads: a kernel enqueued there converts its bf16 input
// when it runs, after earlier work on that stream wrote it, not when it is submitted.
TEST(CpuPrecision, ConversionsHappenInStreamOrder) {
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Comm);
  auto x = make(*dev, {0.0f, 0.0f}, kBF16);
  auto y = make(*dev, {kNaN, kNaN}, kF32);
  auto acc = make(*dev, {1.0f, 1.0f}, kBF16);
  const TensorRef xr = x.ref();
  s.enqueue_host([xr] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto* h = static_cast<std::uint16_t*>(xr.data);
    h[0] = float_to_bf16(3.0f);
    h[1] = float_to_bf16(-0.5f);
  });
  dev->cast(s, x.ref(), y.ref());
  dev->axpy(s, 2.0f, x.ref(), acc.ref());
  s.synchronize();
  EXPECT_EQ(read(*dev, y), (std::vector<float>{3.0f, -0.5f}));
  EXPECT_EQ(read(*dev, acc), (std::vector<float>{7.0f, 0.0f}));
}

// ---------------------------------------------------------------------------------------------
// The all-f32 path is the reference computation, bit for bit

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST(CpuPrecision, F32GemmIsBitwiseTheEigenProduct) {
  const std::int64_t m = 33, n = 21, k = 45;
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Compute);
  const auto a = randn(static_cast<std::size_t>(m * k), 1.0f, 90);
  const auto b = randn(static_cast<std::size_t>(k * n), 1.0f, 91);
  const auto c0 = randn(static_cast<std::size_t>(m * n), 1.0f, 92);
  for (float beta : {0.0f, 1.0f, 0.5f}) {
    auto ab = make(*dev, a, kF32), bb = make(*dev, b, kF32), cb = make(*dev, c0, kF32);
    dev->gemm(s, Transpose::Yes, Transpose::No, m, n, k, 0.8f, ab.ref(), bb.ref(), beta, cb.ref());
    // The same product computed directly: A stored k x m (transposed), B k x n.
    Eigen::Map<const RowMat> A(a.data(), k, m), B(b.data(), k, n);
    RowMat C = Eigen::Map<const RowMat>(c0.data(), m, n);
    if (beta == 0.0f)
      C.setZero();
    else if (beta != 1.0f)
      C *= beta;
    C.noalias() += 0.8f * A.transpose() * B;
    const auto got = read(*dev, cb);
    for (std::int64_t i = 0; i < m * n; ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[static_cast<std::size_t>(i)]),
                std::bit_cast<std::uint32_t>(C.data()[i]))
          << "beta " << beta << " element " << i;
  }
}

TEST(CpuPrecision, F32LayerNormAndGeluAreBitwiseTheDirectLoops) {
  const std::int64_t rows = 7, cols = 37;
  const float eps = 1e-5f;
  auto dev = make_cpu_device({});
  auto& s = dev->stream(StreamKind::Compute);
  const auto x = randn(static_cast<std::size_t>(rows * cols), 2.0f, 100);
  const auto gamma = randn(static_cast<std::size_t>(cols), 1.0f, 101);
  const auto beta = randn(static_cast<std::size_t>(cols), 1.0f, 102);
  const auto dy = randn(static_cast<std::size_t>(rows * cols), 1.0f, 103);
  const auto dg0 = randn(static_cast<std::size_t>(cols), 1.0f, 104);
  const auto db0 = randn(static_cast<std::size_t>(cols), 1.0f, 105);
  auto xb = make(*dev, x, kF32), gb = make(*dev, gamma, kF32), bb = make(*dev, beta, kF32);
  auto yb = make(*dev, std::vector<float>(x.size(), kNaN), kF32);
  auto mb = make(*dev, std::vector<float>(rows, kNaN), kF32);
  auto rb = make(*dev, std::vector<float>(rows, kNaN), kF32);
  auto dyb = make(*dev, dy, kF32), dxb = make(*dev, std::vector<float>(x.size(), kNaN), kF32);
  auto dgb = make(*dev, dg0, kF32), dbb = make(*dev, db0, kF32);
  auto gy = make(*dev, std::vector<float>(x.size(), kNaN), kF32);
  dev->layer_norm_forward(s, xb.ref(), gb.ref(), bb.ref(), yb.ref(), mb.ref(), rb.ref(), rows, cols,
                          eps);
  dev->layer_norm_backward(s, xb.ref(), gb.ref(), mb.ref(), rb.ref(), dyb.ref(), dxb.ref(),
                           dgb.ref(), dbb.ref(), rows, cols);
  dev->gelu_forward(s, xb.ref(), gy.ref());

  // The fp32 reference loops (the device's documented arithmetic: double statistics, fp32
  // elementwise).
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg = dg0, db = db0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double mu = 0;
    for (std::int64_t j = 0; j < cols; ++j) mu += xr[j];
    mu /= static_cast<double>(cols);
    double var = 0;
    for (std::int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= static_cast<double>(cols);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(var + eps));
    mean[r] = static_cast<float>(mu);
    for (std::int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = (xr[j] - mean[r]) * rstd[r] * gamma[j] + beta[j];
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const float* dyr = dy.data() + r * cols;
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      float xhat = (xr[j] - mean[r]) * rstd[r];
      float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
      dg[j] += dyr[j] * xhat;
      db[j] += dyr[j];
    }
    float mg = static_cast<float>(sum_g / static_cast<double>(cols));
    float mgx = static_cast<float>(sum_gx / static_cast<double>(cols));
    for (std::int64_t j = 0; j < cols; ++j) {
      float xhat = (xr[j] - mean[r]) * rstd[r];
      float g = dyr[j] * gamma[j];
      dx[r * cols + j] = rstd[r] * (g - mg - xhat * mgx);
    }
  }
  std::vector<float> gelu(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float k = 0.7978845608028654f;
    gelu[i] = 0.5f * x[i] * (1.0f + std::tanh(k * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
  }
  auto bitwise = [](const std::vector<float>& got, const std::vector<float>& want,
                    const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
          << what << " element " << i << ": " << got[i] << " vs " << want[i];
  };
  bitwise(read(*dev, yb), y, "y");
  bitwise(read(*dev, mb), mean, "mean");
  bitwise(read(*dev, rb), rstd, "rstd");
  bitwise(read(*dev, dxb), dx, "dx");
  bitwise(read(*dev, dgb), dg, "dgamma");
  bitwise(read(*dev, dbb), db, "dbeta");
  bitwise(read(*dev, gy), gelu, "gelu");
}

}  // namespace

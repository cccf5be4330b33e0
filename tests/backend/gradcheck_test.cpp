// In-process checks of the CPU device and the GPT model: every unit's backward against central
// finite differences, shard slicing, and the device's stream/event/memory semantics.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "../support/random_data.hpp"
#include "../support/scenario_builders.hpp"
#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/gpt.hpp"

using namespace cephalo::backend;

namespace {

// 1 layer, hidden 16, 2 heads, ffn 32, vocab 20, sequence 8; 12 positions: rows 8..11 of wpe
// exist but are not used, so their gradient must stay 0.
GptConfig small_config() {
  return GptConfig::from_spec(cephalo::test_support::gpt_model("small", 1, 16, 2, 32, 20, 12), 8);
}

using cephalo::test_support::randn;

Buffer upload(Device& d, const std::vector<float>& host) {
  Buffer b = d.allocate(host.size(), ElemType::F32);
  d.upload(b.ref(), host.data(), host.size() * 4);
  return b;
}
std::vector<float> download(Device& d, const Buffer& b) {
  std::vector<float> v(static_cast<std::size_t>(b.numel()));
  d.download(v.data(), b.ref(), v.size() * 4);
  return v;
}

// Central differences of `loss` around `values[i]` for a spread of indices; compares with the
// analytic gradient. fp32 forward passes, so h is large-ish and the tolerance relative.
void expect_matches_fd(const char* what, std::vector<float>& values, const std::vector<float>& grad,
                       const std::function<double()>& loss, int samples = 48) {
  ASSERT_EQ(values.size(), grad.size());
  double gmax = 0;
  for (float g : grad) gmax = std::max(gmax, static_cast<double>(std::fabs(g)));
  ASSERT_GT(gmax, 0.0) << what << ": all-zero analytic gradient";
  const std::size_t n = values.size();
  const std::size_t stride = std::max<std::size_t>(1, n / static_cast<std::size_t>(samples));
  int checked = 0;
  for (std::size_t i = stride / 2; i < n; i += stride) {
    const float h = 1e-2f * std::max(1.0f, std::fabs(values[i]));
    const float keep = values[i];
    values[i] = keep + h;
    const double up = loss();
    values[i] = keep - h;
    const double down = loss();
    values[i] = keep;
    const double fd = (up - down) / (2.0 * h);
    EXPECT_NEAR(fd, grad[i], 2e-2 * std::max(std::fabs(fd), 0.05 * gmax))
        << what << " element " << i;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

}  // namespace

TEST(GradCheck, LayerBackwardMatchesFiniteDifferences) {
  auto dev = make_cpu_device({});
  GptModel model(small_config());
  const auto& c = model.config();
  const std::int64_t rows = 2 * c.seq, C = c.hidden;
  // Perturb the initial parameters so norms, biases and projections are all non-trivial.
  auto params = model.initial_unit(1);
  auto noise = randn(params.size(), 0.1f, 1);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  auto x = randn(static_cast<std::size_t>(rows * C), 1.0f, 2);
  auto r = randn(static_cast<std::size_t>(rows * C), 1.0f, 3);

  auto forward_loss = [&]() {
    Buffer p = upload(*dev, params), xb = upload(*dev, x),
           y = dev->allocate(rows * C, ElemType::F32);
    LayerActivations acts;
    model.layer_forward(*dev, p.ref(), xb.ref(), y.ref(), acts, rows);
    auto yh = download(*dev, y);
    double l = 0;
    for (std::size_t i = 0; i < yh.size(); ++i) l += static_cast<double>(yh[i]) * r[i];
    return l;
  };
  Buffer p = upload(*dev, params), xb = upload(*dev, x), y = dev->allocate(rows * C, ElemType::F32);
  Buffer g = dev->allocate(params.size(), ElemType::F32),
         dx = dev->allocate(rows * C, ElemType::F32);
  Buffer dy = upload(*dev, r);
  dev->fill(dev->stream(StreamKind::Compute), g.ref(), 0.0f);
  LayerActivations acts;
  model.layer_forward(*dev, p.ref(), xb.ref(), y.ref(), acts, rows);
  model.layer_backward(*dev, p.ref(), g.ref(), xb.ref(), acts, dy.ref(), dx.ref(), rows);
  auto grads = download(*dev, g), dxs = download(*dev, dx);
  // Every named tensor of the layer separately, so a wrong slot cannot hide behind others.
  for (const auto& slot : model.unit_slots(1)) {
    std::vector<float> sub(params.begin() + slot.offset, params.begin() + slot.offset + slot.numel);
    std::vector<float> gsub(grads.begin() + slot.offset, grads.begin() + slot.offset + slot.numel);
    expect_matches_fd(
        slot.name.c_str(), sub, gsub,
        [&] {
          std::copy(sub.begin(), sub.end(), params.begin() + slot.offset);
          double l = forward_loss();
          return l;
        },
        12);
    std::copy(sub.begin(), sub.end(), params.begin() + slot.offset);
  }
  expect_matches_fd("layer input", x, dxs, forward_loss);
}

TEST(GradCheck, HeadBackwardMatchesFiniteDifferences) {
  auto dev = make_cpu_device({});
  GptModel model(small_config());
  const auto& c = model.config();
  const std::int64_t rows = 2 * c.seq, C = c.hidden;
  auto head = model.initial_unit(model.head_unit());
  auto hn = randn(head.size(), 0.2f, 4);
  for (std::size_t i = 0; i < head.size(); ++i) head[i] += hn[i];
  auto emb = model.initial_unit(0);
  auto en = randn(emb.size(), 0.3f, 5);
  for (std::size_t i = 0; i < emb.size(); ++i) emb[i] += en[i];
  auto x = randn(static_cast<std::size_t>(rows * C), 1.0f, 6);
  std::vector<std::int32_t> tgt(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < tgt.size(); ++i) tgt[i] = static_cast<std::int32_t>((i * 7 + 3) % 20);
  Buffer t = dev->allocate(tgt.size(), ElemType::I32);
  dev->upload(t.ref(), tgt.data(), tgt.size() * 4);
  auto loss = [&]() {
    Buffer hp = upload(*dev, head), ep = upload(*dev, emb), xb = upload(*dev, x);
    return model.head_forward_backward(*dev, hp.ref(), ep.ref(), xb.ref(), t.ref(), rows, 0.0f, {},
                                       {}, {});
  };
  Buffer hp = upload(*dev, head), ep = upload(*dev, emb), xb = upload(*dev, x);
  Buffer hg = dev->allocate(head.size(), ElemType::F32),
         eg = dev->allocate(emb.size(), ElemType::F32);
  Buffer dx = dev->allocate(rows * C, ElemType::F32);
  auto& s = dev->stream(StreamKind::Compute);
  dev->fill(s, hg.ref(), 0.0f);
  dev->fill(s, eg.ref(), 0.0f);
  model.head_forward_backward(*dev, hp.ref(), ep.ref(), xb.ref(), t.ref(), rows, 1.0f, dx.ref(),
                              hg.ref(), eg.ref());
  auto hgrad = download(*dev, hg), egrad = download(*dev, eg), dxs = download(*dev, dx);
  expect_matches_fd("final norm", head, hgrad, loss);
  // Only wte is used by the head (tied); wpe's gradient from the head must be exactly zero.
  const auto& wte = model.unit_slots(0)[0];
  std::vector<float> w(emb.begin(), emb.begin() + wte.numel),
      gw(egrad.begin(), egrad.begin() + wte.numel);
  expect_matches_fd("tied wte", w, gw, [&] {
    std::copy(w.begin(), w.end(), emb.begin());
    return loss();
  });
  std::copy(w.begin(), w.end(), emb.begin());
  for (std::size_t i = static_cast<std::size_t>(wte.numel); i < egrad.size(); ++i)
    ASSERT_EQ(egrad[i], 0.0f) << "wpe gradient from the head at " << i;
  expect_matches_fd("head input", x, dxs, loss);
}

TEST(GradCheck, UntiedHeadBackwardMatchesFiniteDifferences) {
  auto dev = make_cpu_device({});
  GptConfig cfg = small_config();
  cfg.tied_head = false;
  GptModel model(cfg);
  const auto& c = model.config();
  const std::int64_t rows = 2 * c.seq, C = c.hidden;
  // The head unit holds the final norm and its own [vocab x hidden] weight.
  ASSERT_EQ(model.unit_numel(model.head_unit()), 2 * C + std::int64_t{c.vocab} * C);
  auto head = model.initial_unit(model.head_unit());
  auto hn = randn(head.size(), 0.2f, 7);
  for (std::size_t i = 0; i < head.size(); ++i) head[i] += hn[i];
  auto x = randn(static_cast<std::size_t>(rows * C), 1.0f, 8);
  std::vector<std::int32_t> tgt(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < tgt.size(); ++i) tgt[i] = static_cast<std::int32_t>((i * 5 + 2) % 20);
  Buffer t = dev->allocate(tgt.size(), ElemType::I32);
  dev->upload(t.ref(), tgt.data(), tgt.size() * 4);
  // No embedding parameters are passed: an untied head must not read them.
  auto loss = [&]() {
    Buffer hp = upload(*dev, head), xb = upload(*dev, x);
    return model.head_forward_backward(*dev, hp.ref(), {}, xb.ref(), t.ref(), rows, 0.0f, {}, {},
                                       {});
  };
  Buffer hp = upload(*dev, head), xb = upload(*dev, x);
  Buffer hg = dev->allocate(head.size(), ElemType::F32);
  Buffer dx = dev->allocate(rows * C, ElemType::F32);
  dev->fill(dev->stream(StreamKind::Compute), hg.ref(), 0.0f);
  model.head_forward_backward(*dev, hp.ref(), {}, xb.ref(), t.ref(), rows, 1.0f, dx.ref(), hg.ref(),
                              {});
  expect_matches_fd("untied head (final norm, w_head)", head, download(*dev, hg), loss);
  expect_matches_fd("head input", x, download(*dev, dx), loss);
}

TEST(GradCheck, EmbeddingBackwardMatchesFiniteDifferences) {
  auto dev = make_cpu_device({});
  GptModel model(small_config());
  const auto& c = model.config();
  const std::int64_t rows = 2 * c.seq, C = c.hidden;
  auto emb = model.initial_unit(0);
  std::vector<std::int32_t> tok(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<std::int32_t>((i * 5 + 1) % 20);
  Buffer t = dev->allocate(tok.size(), ElemType::I32);
  dev->upload(t.ref(), tok.data(), tok.size() * 4);
  auto r = randn(static_cast<std::size_t>(rows * C), 1.0f, 7);
  auto loss = [&]() {
    Buffer p = upload(*dev, emb), y = dev->allocate(rows * C, ElemType::F32);
    model.embedding_forward(*dev, p.ref(), t.ref(), y.ref(), rows);
    auto yh = download(*dev, y);
    double l = 0;
    for (std::size_t i = 0; i < yh.size(); ++i) l += static_cast<double>(yh[i]) * r[i];
    return l;
  };
  Buffer g = dev->allocate(emb.size(), ElemType::F32), dy = upload(*dev, r);
  dev->fill(dev->stream(StreamKind::Compute), g.ref(), 0.0f);
  model.embedding_backward(*dev, g.ref(), t.ref(), dy.ref(), rows);
  auto grads = download(*dev, g);
  expect_matches_fd("embedding", emb, grads, loss, 200);
  // wpe has the model's 12 position rows; this sequence uses the first 8.
  ASSERT_EQ(model.unit_numel(0), std::int64_t{c.vocab} * C + 12 * C);
  for (std::int64_t i = std::int64_t{c.vocab} * C + c.seq * C; i < model.unit_numel(0); ++i)
    ASSERT_EQ(grads[static_cast<std::size_t>(i)], 0.0f) << "unused position row element " << i;
}

TEST(Sharding, OffsetsCoverTheUnitContiguously) {
  auto o = shard_offsets(1000, {0.5, 0.2, 0.3});
  ASSERT_EQ(o.size(), 4u);
  EXPECT_EQ(o[0], 0);
  EXPECT_EQ(o[1], 500);
  EXPECT_EQ(o[2], 700);
  EXPECT_EQ(o[3], 1000);
  auto z = shard_offsets(7, {0.0, 1.0, 0.0});
  EXPECT_EQ(z, (std::vector<std::int64_t>{0, 0, 7, 7}));
  auto tiny = shard_offsets(3, {0.25, 0.25, 0.25, 0.25});
  for (std::size_t i = 1; i < tiny.size(); ++i) EXPECT_LE(tiny[i - 1], tiny[i]);
  EXPECT_EQ(tiny.back(), 3);
}

TEST(CpuDevice, AccountsMemoryAndPeak) {
  auto dev = make_cpu_device({});
  auto before = dev->memory_stats().current;
  {
    Buffer a = dev->allocate(1000, ElemType::F32);
    Buffer b = dev->allocate(500, ElemType::F32, MemorySpace::PinnedHost);
    EXPECT_EQ(dev->memory_stats().current, before + 4000);
    EXPECT_EQ(dev->memory_stats(MemorySpace::PinnedHost).current, 2000u);
  }
  EXPECT_EQ(dev->memory_stats().current, before);
  EXPECT_GE(dev->memory_stats().peak, before + 4000);
  dev->reset_peak();
  EXPECT_EQ(dev->memory_stats().peak, before);
}

TEST(CpuDevice, FreedBlocksAreReusedWithoutChangingTheAccounting) {
  auto dev = make_cpu_device({});
  void* first = nullptr;
  {
    Buffer a = dev->allocate(300000, ElemType::F32);  // 1.2 MB: a fresh mmap'd block in glibc
    first = a.data();
  }
  EXPECT_EQ(dev->memory_stats().current, 0u);  // cached, not allocated
  Buffer b = dev->allocate(300000, ElemType::F32);
  EXPECT_EQ(b.data(), first) << "a freed block of the same size is reused (pages already touched)";
  Buffer c = dev->allocate(300000, ElemType::F32);
  EXPECT_NE(c.data(), b.data());
  EXPECT_EQ(dev->memory_stats().current, 2400000u);
  EXPECT_EQ(dev->memory_stats().peak, 2400000u);
  // Another size class does not take the cached block; the spaces have their own caches.
  c.reset();
  Buffer d = dev->allocate(200000, ElemType::F32);
  EXPECT_NE(d.data(), first);
  Buffer h = dev->allocate(300000, ElemType::F32, MemorySpace::PinnedHost);
  EXPECT_EQ(dev->memory_stats(MemorySpace::PinnedHost).current, 1200000u);
  // With the cache off every block goes back to the heap (nothing to assert on addresses).
  auto uncached = make_cpu_device({0, 1, 0, 0});
  { Buffer e = uncached->allocate(1000, ElemType::F32); }
  EXPECT_EQ(uncached->memory_stats().current, 0u);
}

TEST(CpuDevice, CommStreamRunsInOrderAndEventsTime) {
  auto dev = make_cpu_device({});
  auto& comm = dev->stream(StreamKind::Comm);
  std::vector<int> order;
  auto start = dev->create_event(), end = dev->create_event();
  start->record(comm);
  for (int i = 0; i < 5; ++i)
    comm.enqueue_host([&order, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      order.push_back(i);
    });
  end->record(comm);
  // The compute stream waiting on `end` blocks until the comm work is done.
  dev->stream(StreamKind::Compute).wait(*end);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_GE(end->seconds_since(*start), 0.009);
}

TEST(CpuDevice, QueuedFailureSurfacesAtSynchronize) {
  auto dev = make_cpu_device({});
  auto& comm = dev->stream(StreamKind::Comm);
  comm.enqueue_host([] { throw cephalo::RuntimeFailure("boom on the comm thread"); });
  bool ran_after = false;
  comm.enqueue_host([&] { ran_after = true; });
  EXPECT_THROW(comm.synchronize(), cephalo::RuntimeFailure);
  EXPECT_FALSE(ran_after) << "work after a failure must be skipped, not run on bad data";
}

TEST(CpuDevice, GemmTransposesMatchNaive) {
  auto dev = make_cpu_device({});
  const int m = 5, n = 4, k = 3;
  auto a = randn(m * k, 1, 11), b = randn(k * n, 1, 12), c0 = randn(m * n, 1, 13);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Buffer A = upload(*dev, a), B = upload(*dev, b), C = upload(*dev, c0);
      dev->gemm(dev->stream(StreamKind::Compute), ta ? Transpose::Yes : Transpose::No,
                tb ? Transpose::Yes : Transpose::No, m, n, k, 2.0f, A.ref(), B.ref(), 0.5f,
                C.ref());
      auto got = download(*dev, C);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double want = 0.5 * c0[i * n + j];
          for (int p = 0; p < k; ++p)
            want += 2.0 * (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
          EXPECT_NEAR(got[i * n + j], want, 1e-5) << ta << tb << " " << i << "," << j;
        }
    }
}

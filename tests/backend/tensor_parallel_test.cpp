// Tensor parallelism in one process (the multi-rank math is mpi_split_check's): the slice
// layout of every unit against its closed form (DESIGN §4: linear weights and column-parallel
// biases 1/T, norms and row-parallel biases replicated, vocabulary rows ⌊V·t/T⌋..⌊V·(t+1)/T⌋),
// which elements each rank holds, the refusals, and the vocabulary-parallel kernels on the CPU
// device against their unsplit forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/core/error.hpp"

namespace cb = cephalo::backend;
using cb::ElemType;
using cb::GptConfig;
using cb::GptModel;
using cb::TensorParallel;

namespace {

GptConfig config(int vocab, bool tied) {
  GptConfig c = GptConfig::tiny();  // hidden 64, 4 heads, ffn 256
  c.vocab = vocab;
  c.tied_head = tied;
  return c;
}

std::vector<float> iota_unit(const GptModel& m, int u) {
  std::vector<float> v(static_cast<std::size_t>(m.full_unit_numel(u)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

template <class Fn>
void expect_refused(Fn fn, const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "accepted";
  } catch (const cephalo::InfeasibleError& e) {
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TensorParallel, SliceSizesFollowTheClosedForm) {
  for (bool tied : {true, false})
    for (int T : {1, 2, 4}) {
      const GptConfig c = config(251, tied);
      const std::int64_t C = c.hidden, F = c.ffn, V = c.vocab, P = c.position_rows();
      std::int64_t vocab_rows = 0;
      for (int t = 0; t < T; ++t) {
        const GptModel m(c, TensorParallel{T, t, nullptr});
        const std::int64_t rows = V * (t + 1) / T - V * t / T;
        vocab_rows += rows;
        EXPECT_EQ(m.vocab_slice().begin, V * t / T);
        EXPECT_EQ(m.vocab_slice().size, V);
        // Weights 4C² + 2CF and column-parallel biases 3C + F split; 2 norms (4C) and the two
        // row-parallel biases (2C) replicated.
        EXPECT_EQ(m.unit_numel(1), (4 * C * C + 2 * C * F + 3 * C + F) / T + 6 * C) << T;
        EXPECT_EQ(m.unit_numel(0), rows * C + P * C);
        EXPECT_EQ(m.unit_numel(m.head_unit()), 2 * C + (tied ? 0 : rows * C));
        EXPECT_EQ(m.full_unit_numel(1), 4 * C * C + 2 * C * F + 3 * C + F + 6 * C);
        // The whole model's count, whatever the slice.
        EXPECT_EQ(m.total_parameters(), GptModel(c).total_parameters());
      }
      EXPECT_EQ(vocab_rows, V);
    }
}

TEST(TensorParallel, RanksHoldEverySplitElementOnceAndReplicatedOnesEach) {
  for (bool tied : {true, false})
    for (int T : {2, 4}) {
      const GptConfig c = config(251, tied);
      const GptModel full(c);
      for (int u = 0; u < full.num_units(); ++u) {
        std::vector<int> held(static_cast<std::size_t>(full.full_unit_numel(u)), 0),
            marked(held.size(), 0);
        const auto values = iota_unit(full, u);
        for (int t = 0; t < T; ++t) {
          const GptModel m(c, TensorParallel{T, t, nullptr});
          const auto local = m.slice_of(u, values);
          std::int64_t covered = 0, previous_end = 0;
          for (const auto& r : m.slice_runs(u)) {
            EXPECT_EQ(r.local, previous_end) << "runs tile the slice in order";
            previous_end = r.local + r.count;
            covered += r.count;
            for (std::int64_t i = 0; i < r.count; ++i) {
              ++held[static_cast<std::size_t>(r.full + i)];
              marked[static_cast<std::size_t>(r.full + i)] += r.replicated ? 1 : 0;
            }
          }
          EXPECT_EQ(covered, m.unit_numel(u));
          // place_in puts every value back where it came from.
          std::vector<float> back(values.size(), -1.0f);
          m.place_in(u, local.data(), back.data());
          for (const auto& r : m.slice_runs(u))
            for (std::int64_t i = 0; i < r.count; ++i)
              ASSERT_EQ(back[static_cast<std::size_t>(r.full + i)],
                        values[static_cast<std::size_t>(r.full + i)]);
        }
        const std::set<std::string> replicated = {"ln1_g", "ln1_b", "b_proj", "ln2_g", "ln2_b",
                                                  "b_out", "wpe",   "lnf_g",  "lnf_b"};
        for (const auto& slot : full.unit_slots(u))
          for (std::int64_t i = 0; i < slot.numel; ++i) {
            ASSERT_EQ(held[static_cast<std::size_t>(slot.offset + i)],
                      replicated.count(slot.name) ? T : 1)
                << "unit " << u << " " << slot.name << "[" << i << "] T=" << T;
            // The runs say which elements every rank holds (a whole-model view takes them once).
            ASSERT_EQ(marked[static_cast<std::size_t>(slot.offset + i)],
                      replicated.count(slot.name) ? T : 0)
                << "unit " << u << " " << slot.name;
          }
      }
    }
}

TEST(TensorParallel, QkvColumnsAreTheRanksHeadsOfEachBlock) {
  // Rank 1 of 2 holds heads 2 and 3: in row 0 of w_qkv [C x 3C] the columns 32..63 of the q
  // block, 96..127 (k) and 160..191 (v).
  const GptConfig c = config(256, true);
  const GptModel full(c), m(c, TensorParallel{2, 1, nullptr});
  const auto local = m.slice_of(1, iota_unit(full, 1));
  const auto& w = m.unit_slots(1)[2];
  const auto& wf = full.unit_slots(1)[2];
  ASSERT_EQ(w.name, "w_qkv");
  EXPECT_EQ(w.numel, 64 * 96);
  for (int block = 0; block < 3; ++block)
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(local[static_cast<std::size_t>(w.offset + block * 32 + j)],
                static_cast<float>(wf.offset + block * 64 + 32 + j));
  // Row 1 starts after the 96 local columns of row 0.
  EXPECT_EQ(local[static_cast<std::size_t>(w.offset + 96)],
            static_cast<float>(wf.offset + 192 + 32));
}

TEST(TensorParallel, DegreesTheModelCannotSplitAreRefusedNamingTheNumbers) {
  expect_refused(
      [] {
        GptModel(config(256, true), TensorParallel{3, 0, nullptr});
      },
      {"tensor-parallel degree 3", "attention heads (4)", "MLP width (256)"});
  GptConfig odd_ffn = config(256, true);
  odd_ffn.ffn = 254;
  expect_refused(
      [&] {
        GptModel(odd_ffn, TensorParallel{4, 0, nullptr});
      },
      {"tensor-parallel degree 4", "MLP width (254)"});
  expect_refused(
      [] {
        GptModel(config(3, true), TensorParallel{4, 1, nullptr});
      },
      {"tensor-parallel degree 4 exceeds the vocabulary of 3 ids"});
  expect_refused(
      [] {
        GptModel(config(256, true), TensorParallel{2, 2, nullptr});
      },
      {"tensor-parallel rank 2 of degree 2"});
  expect_refused([] { GptModel(config(256, true), TensorParallel{0, 0, nullptr}); }, {"degree 0"});
}

TEST(TensorParallel, ComputingWithoutTheGroupsCommunicatorIsRefused) {
  auto dev = cb::make_cpu_device({});
  const GptConfig c = config(256, true);
  const GptModel m(c, TensorParallel{2, 0, nullptr});
  const std::int64_t rows = c.seq, C = c.hidden;
  auto params = m.initial_unit(1);
  cb::Buffer p = dev->allocate(params.size(), ElemType::F32),
             x = dev->allocate(rows * C, ElemType::F32), y = dev->allocate(rows * C, ElemType::F32);
  dev->upload(p.ref(), params.data(), params.size() * 4);
  dev->fill(dev->stream(cb::StreamKind::Compute), x.ref(), 0.5f);
  cb::LayerActivations acts;
  try {
    m.layer_forward(*dev, p.ref(), x.ref(), y.ref(), acts, rows);
    ADD_FAILURE() << "a TP layer ran without its group";
  } catch (const cephalo::RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel rank 0 of degree 2 computes without its "
                                         "group's communicator"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)m.slice_of(1, std::vector<float>(3)), cephalo::Error);
}

namespace {

std::vector<float> pseudo(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v(n);
  std::uint64_t z = seed;
  for (auto& x : v) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) - 0.5f);
  }
  return v;
}

struct CpuFixture {
  std::unique_ptr<cb::Device> dev = cb::make_cpu_device({});
  cb::Stream& s = dev->stream(cb::StreamKind::Compute);
  cb::Buffer f32(const std::vector<float>& v) {
    cb::Buffer b = dev->allocate(std::max<std::size_t>(v.size(), 1), ElemType::F32);
    if (!v.empty()) dev->upload(b.ref(), v.data(), v.size() * 4);
    return b;
  }
  cb::Buffer i32(const std::vector<std::int32_t>& v) {
    cb::Buffer b = dev->allocate(v.size(), ElemType::I32);
    dev->upload(b.ref(), v.data(), v.size() * 4);
    return b;
  }
  std::vector<float> get(const cb::Buffer& b, std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    dev->download(v.data(), b.ref(), v.size() * 4);
    return v;
  }
};

}  // namespace

TEST(TensorParallel, VocabularyParallelCrossEntropyEqualsTheUnsplitOne) {
  CpuFixture f;
  const std::int64_t rows = 6, V = 11, split = 5;  // columns [0, 5) and [5, 11)
  const auto logits = pseudo(static_cast<std::size_t>(rows * V), 7, 8.0f);
  const std::vector<std::int32_t> targets = {0, 4, 5, 10, 7, 2};
  cb::Buffer lg = f.f32(logits), tg = f.i32(targets);
  cb::Buffer losses = f.f32(std::vector<float>(rows)), lse = f.f32(std::vector<float>(rows));
  f.dev->cross_entropy_forward(f.s, lg.ref(), tg.ref(), losses.ref(), lse.ref(), rows, V);
  const auto want_loss = f.get(losses, rows), want_lse = f.get(lse, rows);
  // The two halves' statistics, combined as the all-reduces would (max, then sums).
  std::vector<float> halves[2];
  for (int h = 0; h < 2; ++h) {
    const std::int64_t begin = h ? split : 0, cols = h ? V - split : split;
    std::vector<float> part(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j)
        part[static_cast<std::size_t>(r * cols + j)] =
            logits[static_cast<std::size_t>(r * V + begin + j)];
    halves[h] = part;
  }
  std::vector<float> row_max(rows, -INFINITY);
  for (int h = 0; h < 2; ++h) {
    const std::int64_t cols = h ? V - split : split;
    cb::Buffer p = f.f32(halves[h]), m = f.f32(std::vector<float>(rows));
    f.dev->cross_entropy_row_max(f.s, p.ref(), m.ref(), rows, cols);
    const auto got = f.get(m, rows);
    for (std::int64_t r = 0; r < rows; ++r) row_max[r] = std::max(row_max[r], got[r]);
  }
  std::vector<float> sum_exp(rows, 0.0f), target_logit(rows, 0.0f);
  for (int h = 0; h < 2; ++h) {
    const std::int64_t begin = h ? split : 0, cols = h ? V - split : split;
    cb::Buffer p = f.f32(halves[h]), m = f.f32(row_max), se = f.f32(std::vector<float>(rows)),
               tl = f.f32(std::vector<float>(rows));
    f.dev->cross_entropy_partial_sums(f.s, p.ref(), tg.ref(), m.ref(), se.ref(), tl.ref(), rows,
                                      cols, begin);
    const auto a = f.get(se, rows), b = f.get(tl, rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      sum_exp[r] += a[r];
      target_logit[r] += b[r];
    }
  }
  cb::Buffer m = f.f32(row_max), se = f.f32(sum_exp), tl = f.f32(target_logit),
             l2 = f.f32(std::vector<float>(rows)), lse2 = f.f32(std::vector<float>(rows));
  f.dev->cross_entropy_combine(f.s, m.ref(), se.ref(), tl.ref(), l2.ref(), lse2.ref(), rows);
  const auto got_loss = f.get(l2, rows), got_lse = f.get(lse2, rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(got_loss[r], want_loss[r], 1e-5f * std::fabs(want_loss[r]) + 1e-6f) << r;
    EXPECT_NEAR(got_lse[r], want_lse[r], 1e-5f * std::fabs(want_lse[r]) + 1e-6f) << r;
  }
  // The backward of each half (vocab_begin) is the unsplit gradient's columns.
  cb::Buffer dfull = f.f32(std::vector<float>(rows * V));
  f.dev->cross_entropy_backward(f.s, lg.ref(), tg.ref(), lse.ref(), dfull.ref(), rows, V, 0.5f);
  const auto want = f.get(dfull, rows * V);
  for (int h = 0; h < 2; ++h) {
    const std::int64_t begin = h ? split : 0, cols = h ? V - split : split;
    cb::Buffer p = f.f32(halves[h]), d = f.f32(std::vector<float>(rows * cols));
    f.dev->cross_entropy_backward(f.s, p.ref(), tg.ref(), lse.ref(), d.ref(), rows, cols, 0.5f,
                                  begin);
    const auto got = f.get(d, rows * cols);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j)
        EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(r * cols + j)],
                        want[static_cast<std::size_t>(r * V + begin + j)])
            << r << "," << begin + j;
  }
}

TEST(TensorParallel, VocabularyParallelLookupsSumToTheUnsplitOneBitForBit) {
  CpuFixture f;
  const std::int64_t V = 9, C = 3, seq = 4, rows = 8, split = 4;
  const auto wte = pseudo(static_cast<std::size_t>(V * C), 3, 1.0f);
  const auto wpe = pseudo(static_cast<std::size_t>(seq * C), 4, 1.0f);
  const std::vector<std::int32_t> tokens = {0, 3, 4, 8, 8, 1, 5, 2};
  cb::Buffer tk = f.i32(tokens), we = f.f32(wte), wp = f.f32(wpe),
             out = f.f32(std::vector<float>(rows * C));
  f.dev->embedding_forward(f.s, tk.ref(), we.ref(), wp.ref(), out.ref(), rows, seq, C);
  const auto want = f.get(out, rows * C);
  std::vector<float> sum(static_cast<std::size_t>(rows * C), 0.0f);
  for (int h = 0; h < 2; ++h) {
    const std::int64_t begin = h ? split : 0, n = h ? V - split : split;
    cb::Buffer part =
        f.f32(std::vector<float>(wte.begin() + begin * C, wte.begin() + (begin + n) * C));
    cb::Buffer o = f.f32(std::vector<float>(rows * C));
    // Positions from the first part only, as TP rank 0 adds them.
    f.dev->embedding_forward(f.s, tk.ref(), part.ref(), h ? cb::TensorRef{} : wp.ref(), o.ref(),
                             rows, seq, C, {begin, V});
    const auto got = f.get(o, rows * C);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
  }
  for (std::size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i], want[i]) << i;
  // A token outside the vocabulary is still refused by a slice.
  cb::Buffer bad = f.i32({0, 9, 1, 2, 0, 0, 0, 0});
  cb::Buffer part = f.f32(std::vector<float>(wte.begin(), wte.begin() + split * C));
  EXPECT_THROW(
      f.dev->embedding_forward(f.s, bad.ref(), part.ref(), {}, out.ref(), rows, seq, C, {0, V}),
      cephalo::RuntimeFailure);
}

TEST(TensorParallel, AHeadHoldingItsOwnWordEmbeddingCopyComputesAsTheTiedHead) {
  // The tied head of a last pipeline stage: its unit is the final norm plus a copy of its TP
  // rank's wte rows, outside the single-rank unit, starting equal to wte.
  CpuFixture f;
  const GptConfig c = config(251, true);
  for (int T : {1, 2}) {
    const GptModel plain(c, TensorParallel{T, T - 1, nullptr}),
        copy(c, TensorParallel{T, T - 1, nullptr, true});
    const int hu = copy.head_unit();
    const std::int64_t rows = 251 * T / T - 251 * (T - 1) / T;
    EXPECT_EQ(copy.unit_numel(hu), 2 * c.hidden + rows * c.hidden);
    EXPECT_EQ(copy.full_unit_numel(hu), 2 * c.hidden);
    EXPECT_EQ(copy.word_embedding_copy().begin, 2 * c.hidden);
    EXPECT_EQ(copy.word_embedding_copy().count, rows * c.hidden);
    EXPECT_EQ(plain.word_embedding_copy().count, 0);
    std::int64_t covered = 0;
    for (const auto& r : copy.slice_runs(hu)) covered += r.count;
    EXPECT_EQ(covered, 2 * c.hidden);
    const auto head = copy.initial_unit(hu), wte = copy.initial_unit(0);
    for (std::int64_t i = 0; i < rows * c.hidden; ++i)
      ASSERT_EQ(head[static_cast<std::size_t>(2 * c.hidden + i)], wte[static_cast<std::size_t>(i)]);
  }
  // On one rank the copy's logits, loss and gradients are the tied head's.
  const GptModel tied(c), copy(c, TensorParallel{1, 0, nullptr, true});
  const std::int64_t rows = c.seq, C = c.hidden;
  const auto x = pseudo(static_cast<std::size_t>(rows * C), 9, 2.0f);
  std::vector<std::int32_t> tg(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < tg.size(); ++i) tg[i] = static_cast<std::int32_t>((i * 31) % 251);
  cb::Buffer xb = f.f32(x), tb = f.i32(tg), emb = f.f32(tied.initial_unit(0));
  cb::Buffer th = f.f32(tied.initial_unit(tied.head_unit())),
             ch = f.f32(copy.initial_unit(copy.head_unit()));
  cb::Buffer dx1 = f.f32(std::vector<float>(rows * C)), dx2 = f.f32(std::vector<float>(rows * C));
  cb::Buffer g1 = f.f32(std::vector<float>(2 * C)),
             e1 = f.f32(std::vector<float>(tied.unit_numel(0)));
  cb::Buffer g2 = f.f32(std::vector<float>(copy.unit_numel(copy.head_unit())));
  const double l1 = tied.head_forward_backward(*f.dev, th.ref(), emb.ref(), xb.ref(), tb.ref(),
                                               rows, 0.25f, dx1.ref(), g1.ref(), e1.ref());
  const double l2 = copy.head_forward_backward(*f.dev, ch.ref(), {}, xb.ref(), tb.ref(), rows,
                                               0.25f, dx2.ref(), g2.ref(), {});
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(f.get(dx1, rows * C), f.get(dx2, rows * C));
  const auto g2h = f.get(g2, copy.unit_numel(copy.head_unit()));
  EXPECT_EQ(f.get(g1, 2 * C), std::vector<float>(g2h.begin(), g2h.begin() + 2 * C));
  const auto wte_grad = f.get(e1, tied.unit_slots(0)[0].numel);
  EXPECT_EQ(wte_grad, std::vector<float>(g2h.begin() + 2 * C, g2h.end()));
  // An untied head has its own weight already.
  expect_refused(
      [&] {
        GptModel(config(251, false), TensorParallel{1, 0, nullptr, true});
      },
      {"untied head"});
}

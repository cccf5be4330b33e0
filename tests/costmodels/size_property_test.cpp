// Property: whatever integers a model config holds, no negative, zero or wrapped size reaches a
// cost model. Random Hugging Face configs (every supported model_type) and inline specs are
// drawn with widths from 1 to 2^31 - 1 (products of them wrap a 32-bit int); each is either
// refused with a cephalo::ValidationError naming the file, or every size the cost models derive
// from it (parameters, FLOPs, activation bytes, the ViT sequence) is finite and positive.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "cephalo/core/checked.hpp"
#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/specs.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace {

using cephalo::Json;
using cephalo::ModelSpec;
namespace cm = cephalo::costmodels;

// Mostly plausible widths (so that many configs are accepted and their sizes checked), some
// huge ones (so that products wrap), a few zero or negative.
std::int64_t draw(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 10);
  if (kind < 6) return std::int64_t{1} << (rng() % 13);                    // 1 .. 4096
  if (kind < 9) return static_cast<std::int64_t>(rng() % 2147483647) + 1;  // up to 2^31 - 1
  return -static_cast<std::int64_t>(rng() % 3);                            // 0, -1, -2
}

Json random_hf_config(const std::string& type, std::mt19937_64& rng) {
  const std::int64_t hidden = draw(rng);
  // Heads often divide the width, so the draws get past the divisibility checks.
  const std::int64_t heads = rng() % 2 ? std::max<std::int64_t>(1, hidden / 64) : draw(rng);
  Json j = {{"model_type", type}};
  if (type == "gpt2") {
    j.update({{"n_embd", hidden},
              {"n_head", heads},
              {"n_layer", 2},
              {"n_positions", draw(rng)},
              {"vocab_size", draw(rng)}});
    if (rng() % 2) j["n_inner"] = draw(rng);
  } else if (type == "mpt") {
    j.update({{"d_model", hidden},
              {"n_heads", heads},
              {"n_layers", 2},
              {"max_seq_len", draw(rng)},
              {"vocab_size", draw(rng)},
              {"expansion_ratio", rng() % 2 ? draw(rng) : 4}});
  } else if (type == "vit") {
    const std::int64_t image = draw(rng);
    j.update({{"hidden_size", hidden},
              {"num_attention_heads", heads},
              {"num_hidden_layers", 2},
              {"intermediate_size", draw(rng)},
              {"image_size", image},
              {"patch_size", rng() % 2 ? 1 : std::max<std::int64_t>(1, image / 16)},
              {"num_labels", draw(rng)}});
  } else {  // llama, mistral, qwen2, gpt_neox, opt, bert share these key names
    j.update({{"hidden_size", hidden},
              {"num_attention_heads", heads},
              {"num_hidden_layers", 2},
              {"intermediate_size", draw(rng)},
              {"vocab_size", draw(rng)},
              {"max_position_embeddings", draw(rng)}});
    if (type == "opt") j["ffn_dim"] = draw(rng);
  }
  return j;
}

// Every size the cost models take from `m` at sequence `seq` and micro-batch 1..big.
void expect_sizes_sane(const ModelSpec& m, const std::string& what) {
  SCOPED_TRACE(what);
  for (int v : {m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.num_layers}) {
    EXPECT_GT(v, 0);
    EXPECT_LE(v, cephalo::kMaxModelWidth);
  }
  const int seq = cm::effective_sequence(m, 128);
  EXPECT_GT(seq, 0);
  EXPECT_LE(seq, cephalo::kMaxSequenceLength);
  const double params = cm::total_parameters(m);
  EXPECT_TRUE(std::isfinite(params) && params > 0) << params;
  for (int u = 0; u < cm::num_units(m); ++u) {
    for (int mb : {1, 64}) {
      const auto f = cm::unit_flops(m, u, 128, mb);
      EXPECT_TRUE(std::isfinite(f.forward) && f.forward >= 0) << "unit " << u << ": " << f.forward;
      EXPECT_TRUE(std::isfinite(f.backward) && f.backward >= 0) << f.backward;
    }
    EXPECT_GT(cm::unit_parameters(m, u), 0) << "unit " << u;
  }
  const double act = cm::boundary_activation_bytes(m, 128, 64, cephalo::Dtype::FP16);
  EXPECT_TRUE(std::isfinite(act) && act > 0) << act;
}

}  // namespace

TEST(SizeProperty, RandomHuggingFaceConfigsAreRefusedOrGiveSaneSizes) {
  std::mt19937_64 rng(20261202);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto& types = cephalo::supported_hf_model_types();
    const std::string type = types[rng() % types.size()];
    const Json config = random_hf_config(type, rng);
    try {
      const auto hf = cephalo::parse_hf_config(config, "random.json", "random");
      expect_sizes_sane(hf.spec, config.dump());
      ++accepted;
    } catch (const cephalo::ValidationError& e) {
      EXPECT_EQ(e.file(), "random.json") << e.what();
      ++refused;
    }
    if (::testing::Test::HasFailure()) break;
  }
  // Both outcomes occur, or the property was not exercised.
  EXPECT_GT(accepted, 200);
  EXPECT_GT(refused, 200);
}

TEST(SizeProperty, RandomInlineSpecsAreRefusedOrGiveSaneSizes) {
  std::mt19937_64 rng(7);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const bool vit = rng() % 2;
    const std::int64_t hidden = draw(rng);
    Json j = {{"name", "random"},
              {"family", vit ? "vit" : "gpt"},
              {"layers", 2},
              {"hidden", hidden},
              {"heads", rng() % 2 ? std::max<std::int64_t>(1, hidden / 64) : draw(rng)}};
    if (rng() % 2) j["ffn_hidden"] = draw(rng);
    if (vit) {
      const std::int64_t image = draw(rng);
      j.update({{"image_size", image},
                {"patch_size", rng() % 2 ? 1 : std::max<std::int64_t>(1, image / 16)}});
    } else {
      j["vocab_size"] = draw(rng);
    }
    try {
      cephalo::JsonReader r(j, "inline.json", "model");
      const ModelSpec m = cephalo::parse_model_spec(r);
      expect_sizes_sane(m, j.dump());
      ++accepted;
    } catch (const cephalo::ValidationError& e) {
      EXPECT_EQ(e.file(), "inline.json") << e.what();
      ++refused;
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(accepted, 200);
  EXPECT_GT(refused, 200);
}

TEST(CheckedArithmetic, ProductsAndSumsRefuseOverflowNamingFilePathAndOperands) {
  EXPECT_EQ(cephalo::checked_product("f.json", "a", "x", {{"a", 3}, {"b", 5}}, 100), 15);
  EXPECT_EQ(cephalo::checked_sum("f.json", "a", "x", {{"a", 3}, {"b", 5}}, 100), 8);
  try {
    cephalo::checked_product("f.json", "d_model", "the MLP width",
                             {{"d_model", 4194304}, {"expansion_ratio", 512}}, 1 << 24);
    FAIL() << "no refusal";
  } catch (const cephalo::ValidationError& e) {
    EXPECT_EQ(e.file(), "f.json");
    EXPECT_EQ(e.json_path(), "d_model");
    EXPECT_NE(e.value().find("d_model 4194304 × expansion_ratio 512 = 2147483648"),
              std::string::npos)
        << e.what();
  }
  // Past 2^63: refused as such, not wrapped into range.
  EXPECT_THROW(cephalo::checked_product(
                   "f.json", "a", "x", {{"a", std::int64_t{1} << 40}, {"b", std::int64_t{1} << 40}},
                   INT64_MAX),
               cephalo::ValidationError);
  EXPECT_THROW(cephalo::checked_sum("f.json", "a", "x", {{"a", INT64_MAX}, {"b", 1}}, INT64_MAX),
               cephalo::ValidationError);
  EXPECT_THROW(cephalo::checked_product("f.json", "a", "x", {{"a", -1}, {"b", 2}}, 100),
               cephalo::ValidationError);
}

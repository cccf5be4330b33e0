// GptConfig::from_spec takes only the architectures the backend's decoder is: a spec it would
// train as another model (no biases, a LayerNorm without shift, rotary or ALiBi positions) is
// refused, and the sequence is limited to what the model can run (OPT: its 2 offset rows are
// stored, not usable).
#include <gtest/gtest.h>

#include <filesystem>

#include "cephalo/backend/gpt.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/hf_config.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

using namespace cephalo;
using backend::GptConfig;
using backend::GptModel;

namespace {
const std::filesystem::path kModels =
    std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios/models";

std::string refusal(const ModelSpec& spec, int seq) {
  try {
    GptConfig::from_spec(spec, seq);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  ADD_FAILURE() << spec.name << " accepted";
  return "";
}
}  // namespace

TEST(GptConfigFromSpec, RefusesSpecsWithoutTheBiasesShiftsAndPositionsTheBackendHas) {
  ModelSpec base = costmodels::ModelCatalog::builtin().get("gpt-tiny");
  EXPECT_NO_THROW(GptConfig::from_spec(base, 32));
  for (bool ModelSpec::*part : {&ModelSpec::qkv_bias, &ModelSpec::out_bias, &ModelSpec::mlp_bias}) {
    ModelSpec m = base;
    m.*part = false;
    EXPECT_NE(refusal(m, 32).find("without biases"), std::string::npos);
  }
  ModelSpec no_shift = base;
  no_shift.norm_bias = false;
  EXPECT_NE(refusal(no_shift, 32).find("without shift"), std::string::npos);
  ModelSpec rotary = base;
  rotary.max_positions = 0;
  EXPECT_NE(refusal(rotary, 32).find("no learned positions"), std::string::npos);
  // Hugging Face configs the cost models price but the backend does not implement.
  EXPECT_NE(refusal(load_hf_config(kModels / "mpt-7b.json").spec, 512).find("without biases"),
            std::string::npos);
  EXPECT_NE(
      refusal(load_hf_config(kModels / "pythia-160m.json").spec, 512).find("no learned positions"),
      std::string::npos);
  // GPT-2 is the backend's decoder: same parameter count on both sides.
  const ModelSpec gpt2 = load_hf_config(kModels / "gpt2.json").spec;
  EXPECT_EQ(GptModel(GptConfig::from_spec(gpt2, 1024)).total_parameters(),
            static_cast<std::int64_t>(costmodels::total_parameters(gpt2)));
}

TEST(GptConfigFromSpec, OptRunsAtMostMaxPositionEmbeddingsTokens) {
  // OPT's MLP is ReLU, which the backend does not train: refused as such.
  const ModelSpec relu = load_hf_config(kModels / "opt-1.3b.json").spec;
  EXPECT_NE(refusal(relu, 2048).find("activation \"relu\""), std::string::npos);
  // Its position rule, with the activation the backend has.
  ModelSpec opt = relu;
  opt.activation = "gelu";
  EXPECT_EQ(max_sequence(opt), 2048);
  EXPECT_NO_THROW(GptConfig::from_spec(opt, 2048));
  EXPECT_NE(refusal(opt, 2049).find("2048 positions"), std::string::npos);
  EXPECT_NE(refusal(opt, 2050).find("2048 positions"), std::string::npos);
}

TEST(GptConfigFromSpec, TensorParallelSlicesHoldWhatTheCostModelsCharge) {
  // The graph, the memory model and the simulator size a TP rank's units with
  // costmodels::unit_parameters(model, u, T, t, copy); the backend's slices must be exactly that
  // (tied and untied heads, the last stage's word-embedding copy, an uneven vocabulary split).
  for (const char* name : {"gpt-tiny", "gpt-1.3b"}) {
    ModelSpec spec = costmodels::ModelCatalog::builtin().get(name);
    for (int vocab : {spec.vocab_size, 251}) {
      spec.vocab_size = vocab;
      const GptConfig c = GptConfig::from_spec(spec, 16);
      for (int T : {1, 2, 4})
        for (int t = 0; t < T; ++t)
          for (bool copy : {false, true}) {
            if (copy && !spec.tied_embeddings) continue;
            const GptModel m(c, backend::TensorParallel{T, t, nullptr, copy});
            for (int u = 0; u < m.num_units(); ++u)
              EXPECT_EQ(m.unit_numel(u), static_cast<std::int64_t>(costmodels::unit_parameters(
                                             spec, u, T, t, copy && u == m.head_unit())))
                  << name << " vocab " << vocab << " T " << T << " t " << t << " unit " << u;
          }
    }
  }
}

// Hugging Face config.json models (core/hf_config.hpp): the shipped configs under
// scenarios/models/ (written from the public model cards) give the published parameter counts
// exactly, cost-neutral settings are noted, cost-changing ones refused with file, path, value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cephalo/core/hf_config.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

using namespace cephalo;

namespace {
const std::filesystem::path kModels =
    std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios/models";

HfModel load(const std::string& name) { return load_hf_config(kModels / (name + ".json")); }

ValidationError refusal(const Json& config) {
  try {
    parse_hf_config(config, "config.json", "m");
  } catch (const ValidationError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << config.dump();
  return ValidationError("", "", "", "");
}

Json llama_like() {
  return Json::parse(R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
      "vocab_size": 1000})");
}
}  // namespace

// Published totals (the model cards / the papers' tables, as transformers counts them:
// tied weights once).
TEST(HfConfig, ShippedConfigsGiveThePublishedParameterCounts) {
  struct Case {
    const char* file;
    double published;
  };
  const Case cases[] = {
      {"meta-llama-3-8b", 8'030'261'248},    // Llama 3 model card
      {"meta-llama-3-70b", 70'553'706'496},  // Llama 3 model card
      {"mistral-7b-v0.1", 7'241'732'096},    // Mistral 7B model card
      {"gpt2", 124'439'808},                 // GPT-2 small, tied head
      {"opt-1.3b", 1'315'758'080},           // OPTForCausalLM, facebook/opt-1.3b
      // BertForMaskedLM of bert-large-uncased: BertModel's published 335,141,888 less the
      // pooler (1024·1024 + 1024) plus the masked-LM head's transform, LayerNorm and
      // decoder bias (1024·1024 + 1024 + 2·1024 + 30522).
      {"bert-large-uncased", 335'174'458},
      {"qwen2-0.5b", 494'032'768},           // Qwen2-0.5B, tied, q/k/v biases only
      {"pythia-160m", 162'322'944},          // Pythia suite table (GPT-NeoX, untied)
      {"vit-base-patch16-224", 86'567'656},  // ViTForImageClassification, 1000 classes
      {"mpt-7b", 6'649'286'656},             // MPT-7B: ALiBi, no biases, LayerNorm no shift
  };
  for (const auto& c : cases) {
    HfModel m = load(c.file);
    EXPECT_EQ(costmodels::total_parameters(m.spec), c.published) << c.file;
    EXPECT_EQ(m.spec.name, c.file);
  }
}

// Each catalog model that names a published model matches its shipped config: exactly where
// the entry is that model, layer by layer where the entry keeps Cephalo's vocabulary and head.
TEST(HfConfig, CatalogModelsMatchTheirShippedConfigs) {
  const auto& catalog = costmodels::ModelCatalog::builtin();
  struct Pair {
    const char* catalog;
    const char* config;
    bool exact;  // false: Cephalo's vocabulary / head (catalog models.json _comment)
  };
  const Pair pairs[] = {{"mistral-7b", "mistral-7b-v0.1", true},
                        {"llama3-8b", "meta-llama-3-8b", true},
                        {"llama3-70b", "meta-llama-3-70b", true},
                        {"bert-large", "bert-large-uncased", false},
                        {"vit-base", "vit-base-patch16-224", false}};
  for (const auto& p : pairs) {
    const ModelSpec& c = catalog.get(p.catalog);
    const ModelSpec h = load(p.config).spec;
    EXPECT_EQ(c.num_layers, h.num_layers) << p.catalog;
    EXPECT_EQ(c.hidden, h.hidden) << p.catalog;
    EXPECT_EQ(c.heads, h.heads) << p.catalog;
    EXPECT_EQ(c.kv_heads, h.kv_heads) << p.catalog;
    EXPECT_EQ(c.ffn_hidden, h.ffn_hidden) << p.catalog;
    EXPECT_EQ(costmodels::layer_parameters(c), costmodels::layer_parameters(h)) << p.catalog;
    if (!p.exact) continue;
    EXPECT_EQ(c.vocab_size, h.vocab_size) << p.catalog;
    EXPECT_EQ(c.attention_window, h.attention_window) << p.catalog;
    EXPECT_EQ(costmodels::total_parameters(c), costmodels::total_parameters(h)) << p.catalog;
  }
  // The Mistral 7B model card's count, 32,000 tokens (not 49,152: 7.38 B).
  EXPECT_EQ(costmodels::total_parameters(catalog.get("mistral-7b")), 7'241'732'096);
  EXPECT_EQ(catalog.get("mistral-7b").attention_window, 4096);
  // The Cephalo profiles' names still find it.
  EXPECT_EQ(catalog.get("deepspeedmistral_7b").name, "mistral-7b");
}

TEST(HfConfig, TorchDtypeIsTheComputeDtypeOfAJobNamingTheConfig) {
  EXPECT_EQ(load("mistral-7b-v0.1").spec.checkpoint_dtype, Dtype::BF16);
  EXPECT_EQ(load("opt-1.3b").spec.checkpoint_dtype, Dtype::FP16);
  EXPECT_FALSE(load("gpt2").spec.checkpoint_dtype.has_value());  // no torch_dtype key
}

TEST(HfConfig, StructureIsReadAsTheModelTypeDefinesIt) {
  HfModel qwen = load("qwen2-0.5b");
  EXPECT_EQ(qwen.spec.family, "llama");
  EXPECT_EQ(qwen.spec.kv_heads, 2);
  EXPECT_TRUE(qwen.spec.qkv_bias);
  EXPECT_FALSE(qwen.spec.out_bias);
  EXPECT_FALSE(qwen.spec.mlp_bias);
  EXPECT_TRUE(qwen.spec.tied_embeddings);
  EXPECT_EQ(qwen.spec.attention_window, 0);  // use_sliding_window: false
  HfModel mpt = load("mpt-7b");
  EXPECT_FALSE(mpt.spec.norm_bias);
  EXPECT_EQ(mpt.spec.max_positions, 0);  // ALiBi
  HfModel opt = load("opt-1.3b");
  EXPECT_EQ(opt.spec.max_positions, 2050);  // stored rows (the parameter count)
  EXPECT_EQ(opt.spec.position_offset, 2);
  EXPECT_EQ(opt.spec.activation, "relu");   // recorded as what it is: the backend trains GELU
  EXPECT_EQ(max_sequence(opt.spec), 2048);  // what it runs
  HfModel mistral = load("mistral-7b-v0.1");
  EXPECT_EQ(mistral.spec.attention_window, 4096);
  EXPECT_FALSE(mistral.notes.empty());
}

// The catalog's entries for shipped configs are those configs ("hf_config" in
// scenarios/catalog/models.json), so catalog and configs cannot drift; the architecture is the
// model card's (closed_forms_test checks llama3-8b's count independently).
TEST(HfConfig, CatalogEntriesOfShippedConfigsAreThoseConfigs) {
  const std::pair<const char*, const char*> entries[] = {{"llama3-8b", "meta-llama-3-8b"},
                                                         {"llama3-70b", "meta-llama-3-70b"}};
  for (const auto& [name, file] : entries) {
    ModelSpec config = load(file).spec;
    const ModelSpec& catalog = costmodels::ModelCatalog::builtin().get(name);
    EXPECT_EQ(catalog.name, name);
    config.name = catalog.name;
    config.source = catalog.source;
    config.aliases = catalog.aliases;
    EXPECT_EQ(to_json(config), to_json(catalog)) << name;
  }
  EXPECT_EQ(costmodels::ModelCatalog::builtin().get("llama3-8b").kv_heads, 8);
}

// A catalog entry that names a config: a missing config file and a key beside "hf_config"
// that the config would silently override are refused, naming the catalog and the entry.
TEST(HfConfig, CatalogEntryWithABadConfigIsRefusedWithItsPath) {
  const auto dir = std::filesystem::temp_directory_path() / "cephalo_hf_catalog_test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kModels / "meta-llama-3-8b.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto refused = [&](const std::string& entry) -> std::string {
    const auto file = dir / "models.json";
    std::ofstream(file) << R"({"models": [)" << entry << "]}";
    try {
      costmodels::ModelCatalog::load(file);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted " << entry;
    return "";
  };
  const std::string missing = refused(R"({"name": "m", "hf_config": "missing.json"})");
  EXPECT_NE(missing.find("missing.json"), std::string::npos) << missing;
  EXPECT_NE(missing.find("models.json"), std::string::npos) << missing;
  EXPECT_NE(missing.find("models[0].hf_config"), std::string::npos) << missing;
  const std::string extra = refused(R"({"name": "m", "hf_config": "config.json", "layers": 3})");
  EXPECT_NE(extra.find("models.json"), std::string::npos) << extra;
  EXPECT_NE(extra.find("layers"), std::string::npos) << extra;
  std::filesystem::remove_all(dir);
}

TEST(HfConfig, ChangingOneCostRelevantKeyChangesTheCount) {
  Json base = llama_like();
  const double p0 = costmodels::total_parameters(parse_hf_config(base, "c", "m").spec);
  Json tied = base;
  tied["tie_word_embeddings"] = true;
  EXPECT_EQ(p0 - costmodels::total_parameters(parse_hf_config(tied, "c", "m").spec), 1000 * 256);
  Json biased = base;
  biased["attention_bias"] = true;  // q, k, v and o: 256 + 2·64 + 256 per layer
  EXPECT_EQ(costmodels::total_parameters(parse_hf_config(biased, "c", "m").spec) - p0,
            2 * (256 + 2 * 64 + 256));
  Json labels = Json::parse(R"({"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 128, "image_size": 32, "patch_size": 16,
      "id2label": {"0": "a", "1": "b", "2": "c"}})");
  EXPECT_EQ(parse_hf_config(labels, "c", "m").spec.num_classes, 3);
}

TEST(HfConfig, CostChangingSettingsAreRefusedNamingFilePathValueAndWhy) {
  ValidationError moe = [] {
    try {
      load("mixtral-8x7b-v0.1");
    } catch (const ValidationError& e) {
      return e;
    }
    ADD_FAILURE() << "mixtral accepted";
    return ValidationError("", "", "", "");
  }();
  EXPECT_NE(moe.file().find("mixtral-8x7b-v0.1.json"), std::string::npos);
  EXPECT_EQ(moe.json_path(), "model_type");
  EXPECT_EQ(moe.value(), "\"mixtral\"");
  EXPECT_NE(moe.expected().find("mixture of experts"), std::string::npos);

  Json unknown = llama_like();
  unknown["model_type"] = "falcon";
  auto e = refusal(unknown);
  EXPECT_EQ(e.json_path(), "model_type");
  EXPECT_NE(e.expected().find("llama, mistral, qwen2, gpt2, gpt_neox, opt, bert, vit, mpt"),
            std::string::npos);

  Json experts = llama_like();
  experts["num_local_experts"] = 8;
  EXPECT_EQ(refusal(experts).json_path(), "num_local_experts");
  Json head_dim = llama_like();
  head_dim["head_dim"] = 64;  // 256 / 8 = 32
  EXPECT_EQ(refusal(head_dim).json_path(), "head_dim");
  Json gelu = llama_like();
  gelu["hidden_act"] = "gelu";
  EXPECT_EQ(refusal(gelu).json_path(), "hidden_act");
  Json kv = llama_like();
  kv["num_key_value_heads"] = 3;
  EXPECT_EQ(refusal(kv).json_path(), "num_key_value_heads");
  Json missing = llama_like();
  missing.erase("vocab_size");
  EXPECT_EQ(refusal(missing).json_path(), "vocab_size");
  Json opt = Json::parse(R"({"model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 2,
      "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 100,
      "max_position_embeddings": 2048, "word_embed_proj_dim": 512})");
  EXPECT_EQ(refusal(opt).json_path(), "word_embed_proj_dim");
  Json mpt = Json::parse(R"({"model_type": "mpt", "d_model": 64, "n_layers": 1, "n_heads": 4,
      "vocab_size": 100, "max_seq_len": 64, "attn_config": {"qk_ln": true}})");
  EXPECT_EQ(refusal(mpt).json_path(), "attn_config.qk_ln");
}

TEST(HfConfig, CostNeutralSettingsAreAcceptedAndNoted) {
  Json c = llama_like();
  c["rope_scaling"] = Json::parse(R"({"type": "linear", "factor": 2.0})");
  HfModel m = parse_hf_config(c, "c", "m");
  bool noted = false;
  for (const auto& n : m.notes) noted = noted || n.find("rope_scaling") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(costmodels::total_parameters(m.spec),
            costmodels::total_parameters(parse_hf_config(llama_like(), "c", "m").spec));
}

namespace {
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("cephalo-hf-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

Job job_with(const TempDir& dir, const std::string& model, int sequence) {
  auto file = dir.write("job.json", R"({"model": )" + model + R"(, "sequence_length": )" +
                                        std::to_string(sequence) + R"(, "global_batch": 8})");
  return load_job(file, costmodels::CatalogLookup::builtin());
}

ValidationError refused_job(const TempDir& dir, const std::string& model, int sequence) {
  try {
    job_with(dir, model, sequence);
  } catch (const ValidationError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << model << " at sequence " << sequence;
  return ValidationError("", "", "", "");
}
}  // namespace

TEST(HfConfig, AJobsModelMayBeAConfigRelativeToTheJobFile) {
  TempDir dir;
  std::filesystem::copy_file(kModels / "mistral-7b-v0.1.json", dir.path / "config.json");
  Job job = job_with(dir, R"({"hf_config": "config.json"})", 2048);
  EXPECT_EQ(costmodels::total_parameters(job.model), 7'241'732'096);
  EXPECT_EQ(job.model_name, job.model.name);
  // Longer than the sliding window: accepted (the window is priced), in the config's bf16.
  Job windowed = job_with(dir, R"({"hf_config": "config.json"})", 8192);
  EXPECT_EQ(windowed.sequence_length, 8192);
  EXPECT_EQ(windowed.model.attention_window, 4096);
  EXPECT_EQ(windowed.precision.compute, Dtype::BF16);
  // OPT runs max_position_embeddings tokens: its two offset rows are stored, never reached.
  std::filesystem::copy_file(kModels / "opt-1.3b.json", dir.path / "opt.json");
  EXPECT_EQ(job_with(dir, R"({"hf_config": "opt.json"})", 2048).sequence_length, 2048);
  for (int too_long : {2049, 2050}) {
    ValidationError opt = refused_job(dir, R"({"hf_config": "opt.json"})", too_long);
    EXPECT_EQ(opt.json_path(), "sequence_length");
    EXPECT_NE(opt.expected().find("2048 tokens"), std::string::npos) << opt.expected();
  }
  ValidationError missing = refused_job(dir, R"({"hf_config": "missing.json"})", 128);
  EXPECT_EQ(missing.json_path(), "model.hf_config");
  EXPECT_NE(missing.value().find("missing.json"), std::string::npos);
  ValidationError unknown = refused_job(dir, R"({"hf_config": "config.json", "layers": 3})", 128);
  EXPECT_NE(unknown.json_path().find("layers"), std::string::npos);
}

#include "cephalo/core/hf_config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "cephalo/core/checked.hpp"

namespace cephalo {
namespace {

constexpr std::int64_t kBig = kMaxModelWidth;  // the bounds of parse_model_spec

// Mixture-of-experts types: each token runs a few of many MLPs and a router; the catalog's
// dense layer would price every expert (or one), neither is the model.
const std::vector<std::string> kMoeTypes = {
    "mixtral", "qwen2_moe", "qwen3_moe", "dbrx",       "deepseek_v2",         "deepseek_v3",
    "jamba",   "olmoe",     "phimoe",    "granitemoe", "switch_transformers", "nllb_moe"};

// Keys Hugging Face uses for expert counts across model types.
const std::vector<std::string> kExpertKeys = {"num_local_experts", "num_experts",
                                              "n_routed_experts", "moe_num_experts"};

// Read access to one config object. Hugging Face configs carry many keys that do not affect
// the architecture (token ids, dtype, versions), so unknown keys are ignored, not refused;
// a key set to null means "the default", as in transformers.
class Config {
 public:
  Config(JsonReader reader, std::vector<std::string>& notes)
      : r_(std::move(reader)), notes_(notes) {}

  bool given(const std::string& key) const { return r_.has(key) && !r_.value()[key].is_null(); }
  int integer(const std::string& key, std::int64_t lo = 1, std::int64_t hi = kBig) {
    return static_cast<int>(r_.integer(key, lo, hi));
  }
  int integer_or(const std::string& key, int fallback, std::int64_t lo = 1,
                 std::int64_t hi = kBig) {
    return given(key) ? integer(key, lo, hi) : fallback;
  }
  bool boolean_or(const std::string& key, bool fallback) {
    return given(key) ? r_.child(key).as_bool() : fallback;
  }
  std::string string_or(const std::string& key, const std::string& fallback) {
    return given(key) ? r_.child(key).as_string() : fallback;
  }
  std::optional<Config> object(const std::string& key) {
    if (!given(key)) return std::nullopt;
    auto c = r_.child(key);
    if (!c.is_object()) c.fail("an object");
    return Config(c, notes_);
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) {
    r_.child(key).fail(why);
  }
  void note(const std::string& text) { notes_.push_back(text); }
  // Accepted and noted when set: `why` says why it changes nothing that is priced.
  void neutral(const std::string& key, const std::string& why) {
    if (given(key)) note(key + " = " + brief(r_.value()[key]) + ": " + why);
  }
  const JsonReader& reader() const { return r_; }
  JsonReader child(const std::string& key) { return r_.child(key); }

 private:
  JsonReader r_;
  std::vector<std::string>& notes_;
};

// PyTorch dtypes a checkpoint may be stored in that no job trains in here (double precision,
// fp8, integers of quantised checkpoints): real spellings, so noted and not used, where any
// other text is a typo refused with the accepted list.
constexpr std::array<std::string_view, 13> kStorageOnlyDtypes{
    "float64",       "double",      "torch.float64",       "torch.double",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",     "float8_e5m2fnuz",
    "int8",          "uint8",       "torch.float8_e4m3fn", "torch.float8_e5m2",
    "torch.int8"};

// The checkpoint's dtype: a job naming this config computes in it unless its "precision" says
// otherwise. transformers writes it as "torch_dtype", and since 4.56 as "dtype"; both are read
// (the newer name first), and a file giving both must agree.
void read_checkpoint_dtype(Config& c, ModelSpec& m) {
  const bool has_new = c.given("dtype");
  if (!has_new && !c.given("torch_dtype")) return;
  const std::string key = has_new ? "dtype" : "torch_dtype";
  auto value = c.child(key);
  if (!value.value().is_string())
    value.fail("a dtype name: one of " + dtype_spellings(true) + ", or \"auto\"");
  const std::string dt = value.as_string();
  if (has_new && c.given("torch_dtype")) {
    auto old = c.child("torch_dtype");
    if (!old.value().is_string() || old.value().get<std::string>() != dt)
      old.fail_value(brief(old.value()), "the same dtype as \"dtype\" (\"" + dt +
                                             "\"): the file names the checkpoint's dtype twice");
  }
  const auto d = parse_dtype(dt);
  if (d && *d != Dtype::TF32) {
    m.checkpoint_dtype = *d;
    c.note(key + " " + dt + ": a job naming this config computes in " + to_string(*d) +
           " unless its \"precision\" says otherwise");
    return;
  }
  const bool storage_only =
      dt == "auto" || std::find(kStorageOnlyDtypes.begin(), kStorageOnlyDtypes.end(), dt) !=
                          kStorageOnlyDtypes.end();
  if (!storage_only)
    value.fail("a dtype name: one of " + dtype_spellings(true) +
               ", or a storage dtype no job computes in (auto, "
               "float64, float8_e4m3fn, int8, ...)");
  c.note(key + " \"" + dt + "\" is no compute dtype (" + dtype_spellings(true) +
         "): not used; the job's \"precision\", else fp16");
}

void check_heads(Config& c, const std::string& key, const ModelSpec& m) {
  if (m.hidden % m.heads != 0)
    c.refuse(key, "a divisor of the hidden size (" + std::to_string(m.hidden) + ")");
}

void check_kv_heads(Config& c, const std::string& key, const ModelSpec& m) {
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
    c.refuse(key, "a divisor of the attention heads (" + std::to_string(m.heads) + ")");
}

// The MLP's activation as the spec records it: `gated` types must use SiLU ("swiglu"); the
// others GELU (any of transformers' variants, the same elementwise kernel) or ReLU ("relu",
// so the backend, which trains GELU, refuses it instead of training a different model).
std::string read_activation(Config& c, const std::string& key, bool gated,
                            const std::string& fallback) {
  const std::string act = c.string_or(key, fallback);
  if (gated) {
    if (act != "silu" && act != "swish")
      c.refuse(key, "\"silu\" (a gated SwiGLU MLP is what this model_type is priced as)");
    return "swiglu";
  }
  if (act.rfind("gelu", 0) == 0) return "gelu";
  if (act == "relu") return "relu";
  c.refuse(key, "a GELU variant or \"relu\" (the MLP activations that are modelled)");
}

void refuse_experts(Config& c) {
  for (const auto& key : kExpertKeys)
    if (c.given(key) && c.integer(key, 0, kBig) > 1)
      c.refuse(key,
               "no mixture of experts (1 or absent): routed expert MLPs are not modelled; "
               "a dense layer would misprice parameters, FLOPs and memory");
}

void refuse_head_dim(Config& c, const std::string& key, const ModelSpec& m) {
  if (c.given(key) && c.integer(key) * m.heads != m.hidden)
    c.refuse(key, "hidden / heads (" + std::to_string(m.hidden / m.heads) +
                      "): attention with another head size is not modelled");
}

// ---- what each model_type adds to the shared structure (the `extras` of its table row) ----

// llama, mistral, qwen2: grouped-query attention, no biases unless the config says so (Qwen2:
// q/k/v only), an optional sliding window.
void llama_extras(Config& c, const std::string& type, ModelSpec& m) {
  refuse_head_dim(c, "head_dim", m);
  if (type == "qwen2") {
    // Qwen2 has biases on the q, k and v projections only (modeling_qwen2.py).
    m.qkv_bias = true;
    m.out_bias = false;
    m.mlp_bias = false;
    if (c.boolean_or("use_sliding_window", false)) m.attention_window = c.integer("sliding_window");
  } else {
    const bool attention_bias = c.boolean_or("attention_bias", false);
    m.qkv_bias = m.out_bias = attention_bias;
    m.mlp_bias = c.boolean_or("mlp_bias", false);
    if (c.given("sliding_window")) m.attention_window = c.integer("sliding_window");
  }
  if (m.attention_window > 0)
    c.note("sliding window " + std::to_string(m.attention_window) +
           " tokens: flash attention is priced over the window; eager attention still "
           "materialises the masked scores of the whole sequence");
  c.neutral("rope_scaling", "changes the rotary angles, not the work");
  c.neutral("rope_theta", "changes the rotary angles, not the work");
  c.neutral("pretraining_tp", "a numerics detail of how the projections were sliced");
  c.neutral("max_position_embeddings",
            "rotary positions store nothing; the sequence is limited by the job only");
}

void gpt2_extras(Config& c, const std::string&, ModelSpec&) {
  if (c.boolean_or("add_cross_attention", false))
    c.refuse("add_cross_attention", "false (encoder-decoder cross-attention is not modelled)");
  c.neutral("scale_attn_by_inverse_layer_idx", "a scale factor, not work");
  c.neutral("reorder_and_upcast_attn", "numerics only");
}

void gpt_neox_extras(Config& c, const std::string&, ModelSpec& m) {
  m.qkv_bias = m.out_bias = c.boolean_or("attention_bias", true);
  c.neutral("rotary_pct", "rotary positions on part of each head: angles, not work");
  if (c.boolean_or("use_parallel_residual", true))
    c.note(
        "use_parallel_residual: attention and MLP read the same input; the same kernels "
        "run, one after the other, as priced");
  c.neutral("max_position_embeddings",
            "rotary positions store nothing; the sequence is limited by the job only");
}

void opt_extras(Config& c, const std::string&, ModelSpec& m) {
  c.note(
      "max_position_embeddings + 2 learned position rows (OPT's offset), as stored; the "
      "sequence may be at most max_position_embeddings");
  const bool bias = c.boolean_or("enable_bias", true);
  m.qkv_bias = m.out_bias = m.mlp_bias = bias;
  if (c.given("word_embed_proj_dim") && c.integer("word_embed_proj_dim") != m.hidden)
    c.refuse("word_embed_proj_dim", "the hidden size (" + std::to_string(m.hidden) +
                                        "): projecting the embedding in and out is not modelled");
  if (!c.boolean_or("do_layer_norm_before", true))
    c.refuse("do_layer_norm_before",
             "true (post-LayerNorm OPT drops the final norm; that variant is not modelled)");
  if (!c.boolean_or("layer_norm_elementwise_affine", true))
    c.refuse("layer_norm_elementwise_affine", "true (LayerNorm without weights is not modelled)");
}

void bert_extras(Config& c, const std::string&, ModelSpec&) {
  if (c.integer_or("type_vocab_size", 2) != 2)
    c.refuse("type_vocab_size", "2 (the token-type table modelled)");
  if (c.string_or("position_embedding_type", "absolute") != "absolute")
    c.refuse("position_embedding_type", "\"absolute\" (relative position terms are not modelled)");
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (c.boolean_or(key, false))
      c.refuse(key, "false (a BERT decoder with cross-attention is not modelled)");
  c.note("priced as BertForMaskedLM: the masked-LM head, no pooler");
}

void vit_extras(Config& c, const std::string&, ModelSpec& m) {
  m.image_size = c.integer("image_size", 1, 1 << 16);
  m.patch_size = c.integer("patch_size", 1, m.image_size);
  m.channels = c.integer_or("num_channels", 3, 1, 64);
  m.tied_embeddings = false;  // no vocabulary: nothing to tie
  m.qkv_bias = c.boolean_or("qkv_bias", true);
  // transformers stores the label count as id2label (num_labels is a constructor argument
  // that some configs also keep); its default is 2.
  if (c.given("num_labels")) {
    m.num_classes = c.integer("num_labels");
  } else if (c.given("id2label")) {
    auto labels = c.object("id2label");
    m.num_classes = static_cast<int>(labels->reader().value().size());
    if (m.num_classes < 1) c.refuse("id2label", "at least one label");
  } else {
    m.num_classes = 2;
    c.note("no num_labels or id2label: 2 classes (transformers' default)");
  }
  c.note("priced as ViTForImageClassification: a linear classifier on the class token, no pooler");
}

// MPT: an MLP of expansion_ratio × d_model, LayerNorm without shift with no_bias, attention
// variants in attn_config, ALiBi (no stored positions) or learned ones.
void mpt_extras(Config& c, const std::string&, ModelSpec& m) {
  const int ratio = c.integer_or("expansion_ratio", 4, 1, 1024);
  m.ffn_hidden = static_cast<int>(
      checked_product(c.given("expansion_ratio") ? c.child("expansion_ratio") : c.reader(),
                      "the MLP width d_model × expansion_ratio",
                      {{"d_model", m.hidden}, {"expansion_ratio", ratio}}, kBig));
  const bool no_bias = c.boolean_or("no_bias", false);
  m.qkv_bias = m.out_bias = m.mlp_bias = m.norm_bias = !no_bias;
  const std::string norm = c.string_or("norm_type", "low_precision_layernorm");
  if (norm != "low_precision_layernorm" && norm != "layernorm")
    c.refuse("norm_type", "\"low_precision_layernorm\" or \"layernorm\" (the norms modelled)");
  bool alibi = false;
  if (auto attn = c.object("attn_config")) {
    alibi = attn->boolean_or("alibi", false);
    const std::string type = attn->string_or("attn_type", "multihead_attention");
    if (type == "grouped_query_attention") {
      m.kv_heads = attn->integer("kv_n_heads");
      check_kv_heads(*attn, "kv_n_heads", m);
    } else if (type == "multiquery_attention") {
      m.kv_heads = 1;
    } else if (type != "multihead_attention") {
      attn->refuse("attn_type",
                   "multihead_attention, grouped_query_attention or multiquery_attention");
    }
    if (attn->boolean_or("qk_ln", false))
      attn->refuse("qk_ln", "false (LayerNorms on queries and keys are not modelled)");
    attn->neutral("clip_qkv", "clamps values, no work");
    if (alibi) c.note("ALiBi: a bias on the attention scores, no stored positions");
  }
  if (auto ffn = c.object("ffn_config")) {
    const std::string type = ffn->string_or("ffn_type", "mptmlp");
    if (type != "mptmlp") ffn->refuse("ffn_type", "\"mptmlp\" (the GELU MLP modelled)");
  }
  const bool learned = c.boolean_or("learned_pos_emb", true) && !alibi;
  m.max_positions = learned ? c.integer("max_seq_len") : 0;
}

// One row per supported model_type: the keys its config names the shared structure by, the
// defaults transformers gives them, and what else the type reads (`extras`). A null key is a
// part the type does not have (or sets in its extras). Adding a dense type is adding a row.
struct ModelType {
  const char* type;
  const char* family;
  const char* hidden;
  const char* layers;
  const char* heads;
  const char* kv_heads;  // null: every head has its own keys and values
  const char* ffn;       // null: set by extras
  bool ffn_defaults_to_4x;
  const char* vocab;       // null: no vocabulary (ViT)
  const char* positions;   // null: no stored positions (rotary, or set by extras)
  int position_offset;     // rows stored beyond `positions` (OPT's 2)
  const char* activation;  // null: fixed GELU
  const char* activation_default;
  bool gated;    // SwiGLU MLP (else GELU)
  bool rmsnorm;  // RMSNorm (else LayerNorm with shift)
  bool tied_default;
  void (*extras)(Config&, const std::string& type, ModelSpec&);
};

// clang-format off
const ModelType kModelTypes[] = {
  // type        family  hidden         layers               heads                  kv_heads               ffn                  4x     vocab         positions                 off act                    default     gated  rms    tied   extras
  {"llama",      "llama", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", false, "vocab_size", nullptr,                   0, "hidden_act",          "silu",     true,  true,  false, llama_extras},
  {"mistral",    "llama", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", false, "vocab_size", nullptr,                   0, "hidden_act",          "silu",     true,  true,  false, llama_extras},
  {"qwen2",      "llama", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", false, "vocab_size", nullptr,                   0, "hidden_act",          "silu",     true,  true,  false, llama_extras},
  {"gpt2",       "gpt",   "n_embd",      "n_layer",           "n_head",              nullptr,               "n_inner",           true,  "vocab_size", "n_positions",             0, "activation_function", "gelu_new", false, false, true,  gpt2_extras},
  {"gpt_neox",   "gpt",   "hidden_size", "num_hidden_layers", "num_attention_heads", nullptr,               "intermediate_size", false, "vocab_size", nullptr,                   0, "hidden_act",          "gelu",     false, false, false, gpt_neox_extras},
  {"opt",        "gpt",   "hidden_size", "num_hidden_layers", "num_attention_heads", nullptr,               "ffn_dim",           false, "vocab_size", "max_position_embeddings", 2, "activation_function", "relu",     false, false, true,  opt_extras},
  {"bert",       "bert",  "hidden_size", "num_hidden_layers", "num_attention_heads", nullptr,               "intermediate_size", false, "vocab_size", "max_position_embeddings", 0, "hidden_act",          "gelu",     false, false, true,  bert_extras},
  {"vit",        "vit",   "hidden_size", "num_hidden_layers", "num_attention_heads", nullptr,               "intermediate_size", false, nullptr,      nullptr,                   0, "hidden_act",          "gelu",     false, false, false, vit_extras},
  {"mpt",        "gpt",   "d_model",     "n_layers",          "n_heads",             nullptr,               nullptr,             false, "vocab_size", nullptr,                   0, nullptr,               nullptr,    false, false, true,  mpt_extras},
};
// clang-format on

// The structure every type shares, read by the row's keys; then the row's extras.
void read_model(Config& c, const ModelType& row, ModelSpec& m) {
  m.family = row.family;
  m.hidden = c.integer(row.hidden);
  m.num_layers = c.integer(row.layers, 1, kMaxModelLayers);
  m.heads = c.integer(row.heads);
  check_heads(c, row.heads, m);
  m.kv_heads = m.heads;
  if (row.kv_heads) {
    m.kv_heads = c.integer_or(row.kv_heads, m.heads);
    check_kv_heads(c, row.kv_heads, m);
  }
  if (row.ffn) {
    // The default (GPT-2's n_inner = 4 × n_embd) obeys the same bound as a width written out.
    m.ffn_hidden =
        row.ffn_defaults_to_4x && !c.given(row.ffn)
            ? static_cast<int>(checked_product(
                  c.child(row.hidden),
                  std::string("the default MLP width (") + row.ffn + " = 4 × " + row.hidden + ")",
                  {{"", 4}, {row.hidden, m.hidden}}, kBig))
            : c.integer(row.ffn);
  }
  m.vocab_size = row.vocab ? c.integer(row.vocab) : 0;
  m.max_positions = row.positions ? c.integer(row.positions) + row.position_offset : 0;
  m.position_offset = row.position_offset;
  m.activation = row.gated ? "swiglu" : "gelu";
  if (row.activation)
    m.activation = read_activation(c, row.activation, row.gated, row.activation_default);
  m.norm = row.rmsnorm ? "rmsnorm" : "layernorm";
  m.norm_bias = !row.rmsnorm;
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", row.tied_default);
  row.extras(c, row.type, m);
}

}  // namespace

const std::vector<std::string>& supported_hf_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const auto& row : kModelTypes) out.push_back(row.type);
    return out;
  }();
  return types;
}

HfModel parse_hf_config(const Json& config, const std::string& file, const std::string& name) {
  HfModel out;
  JsonReader root(config, file);
  if (!root.is_object()) root.fail("a Hugging Face config.json object");
  Config c(root, out.notes);
  JsonReader type_reader = root;
  out.model_type = type_reader.string("model_type");
  for (const auto& moe : kMoeTypes)
    if (out.model_type == moe)
      c.refuse("model_type", "a dense model_type: \"" + moe +
                                 "\" is a mixture of experts, whose routed expert MLPs are not "
                                 "modelled (a dense layer would misprice parameters, FLOPs "
                                 "and memory)");
  const ModelType* row = nullptr;
  for (const auto& r : kModelTypes)
    if (out.model_type == r.type) row = &r;
  if (!row) {
    std::string list;
    for (const auto& t : supported_hf_model_types()) list += (list.empty() ? "" : ", ") + t;
    c.refuse("model_type", "one of " + list +
                               " (other architectures are not modelled: their layers' "
                               "parameters, FLOPs and memory would be guesses)");
  }
  refuse_experts(c);
  ModelSpec& m = out.spec;
  m.name = name;
  read_model(c, *row, m);
  check_model_sizes(m, m.family == "vit" ? root.child("image_size") : root);
  read_checkpoint_dtype(c, m);
  m.source = "Hugging Face config.json (model_type " + out.model_type + "): " + file;
  return out;
}

HfModel load_hf_config(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  std::string name = file.stem().string();
  if (name == "config" && file.has_parent_path())
    name = std::filesystem::absolute(file).parent_path().filename().string();
  return parse_hf_config(j, file.string(), name);
}

ModelSpec load_hf_config_named_by(const JsonReader& path_value,
                                  const std::filesystem::path& base_dir,
                                  const std::string& relative_to) {
  const std::string named = path_value.as_string();
  std::filesystem::path p = named;
  if (p.is_relative()) p = base_dir / p;
  try {
    return load_hf_config(p).spec;
  } catch (const IoError& e) {
    path_value.fail_value("\"" + named + "\" (" + e.what() + ")",
                          "a readable Hugging Face config.json (relative to " + relative_to + ")");
  }
}

}  // namespace cephalo

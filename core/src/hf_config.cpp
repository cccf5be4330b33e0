#include "cephalo/core/hf_config.hpp"

#include <cstdint>

namespace cephalo {
namespace {

constexpr std::int64_t kBig = std::int64_t{1} << 24;  // the bounds of parse_model_spec

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

 private:
  JsonReader r_;
  std::vector<std::string>& notes_;
};

void check_heads(Config& c, const std::string& key, const ModelSpec& m) {
  if (m.hidden % m.heads != 0)
    c.refuse(key, "a divisor of the hidden size (" + std::to_string(m.hidden) + ")");
}

void check_kv_heads(Config& c, const std::string& key, const ModelSpec& m) {
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
    c.refuse(key, "a divisor of the attention heads (" + std::to_string(m.heads) + ")");
}

// The MLP's activation: `gated` types must use SiLU (SwiGLU); the others GELU (any of
// transformers' variants, the same elementwise cost) or ReLU (priced as GELU: one bandwidth-
// bound elementwise kernel either way).
void read_activation(Config& c, const std::string& key, bool gated, const std::string& fallback) {
  const std::string act = c.string_or(key, fallback);
  if (gated) {
    if (act != "silu" && act != "swish")
      c.refuse(key, "\"silu\" (a gated SwiGLU MLP is what this model_type is priced as)");
    return;
  }
  if (act.rfind("gelu", 0) == 0) return;
  if (act == "relu") {
    c.note(key + " = \"relu\": priced as GELU (one bandwidth-bound elementwise kernel either way)");
    return;
  }
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

// llama, mistral, qwen2: pre-RMSNorm decoders with grouped-query attention, rotary positions
// and a SwiGLU MLP.
void read_llama_like(Config& c, const std::string& type, ModelSpec& m) {
  m.family = "llama";
  m.hidden = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers", 1, 100000);
  m.heads = c.integer("num_attention_heads");
  check_heads(c, "num_attention_heads", m);
  m.kv_heads = c.integer_or("num_key_value_heads", m.heads);
  check_kv_heads(c, "num_key_value_heads", m);
  refuse_head_dim(c, "head_dim", m);
  m.ffn_hidden = c.integer("intermediate_size");
  m.vocab_size = c.integer("vocab_size");
  m.activation = "swiglu";
  read_activation(c, "hidden_act", true, "silu");
  m.norm = "rmsnorm";
  m.norm_bias = false;
  m.max_positions = 0;  // rotary: nothing stored
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", false);
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
           " tokens: a job's sequence may not exceed it, so full attention is priced exactly");
  c.neutral("rope_scaling", "changes the rotary angles, not the work");
  c.neutral("rope_theta", "changes the rotary angles, not the work");
  c.neutral("pretraining_tp", "a numerics detail of how the projections were sliced");
  c.neutral("max_position_embeddings",
            "rotary positions store nothing; the sequence is limited by the job only");
}

// GPT-2: learned positions, pre-LayerNorm, fused qkv with biases, GELU MLP, tied head.
void read_gpt2(Config& c, ModelSpec& m) {
  m.family = "gpt";
  m.hidden = c.integer("n_embd");
  m.num_layers = c.integer("n_layer", 1, 100000);
  m.heads = c.integer("n_head");
  check_heads(c, "n_head", m);
  m.kv_heads = m.heads;
  m.ffn_hidden = c.integer_or("n_inner", 4 * m.hidden);
  m.vocab_size = c.integer("vocab_size");
  m.max_positions = c.integer("n_positions");
  read_activation(c, "activation_function", false, "gelu_new");
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
  if (c.boolean_or("add_cross_attention", false))
    c.refuse("add_cross_attention", "false (encoder-decoder cross-attention is not modelled)");
  c.neutral("scale_attn_by_inverse_layer_idx", "a scale factor, not work");
  c.neutral("reorder_and_upcast_attn", "numerics only");
}

// GPT-NeoX (Pythia): rotary positions, LayerNorm, fused qkv with biases, untied head.
void read_gpt_neox(Config& c, ModelSpec& m) {
  m.family = "gpt";
  m.hidden = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers", 1, 100000);
  m.heads = c.integer("num_attention_heads");
  check_heads(c, "num_attention_heads", m);
  m.kv_heads = m.heads;
  m.ffn_hidden = c.integer("intermediate_size");
  m.vocab_size = c.integer("vocab_size");
  m.max_positions = 0;
  read_activation(c, "hidden_act", false, "gelu");
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", false);
  m.qkv_bias = m.out_bias = c.boolean_or("attention_bias", true);
  c.neutral("rotary_pct", "rotary positions on part of each head: angles, not work");
  if (c.boolean_or("use_parallel_residual", true))
    c.note(
        "use_parallel_residual: attention and MLP read the same input; the same kernels "
        "run, one after the other, as priced");
  c.neutral("max_position_embeddings",
            "rotary positions store nothing; the sequence is limited by the job only");
}

// OPT: learned positions (two extra rows: Hugging Face's offset), pre-LayerNorm, ReLU MLP,
// biases everywhere, tied head.
void read_opt(Config& c, ModelSpec& m) {
  m.family = "gpt";
  m.hidden = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers", 1, 100000);
  m.heads = c.integer("num_attention_heads");
  check_heads(c, "num_attention_heads", m);
  m.kv_heads = m.heads;
  m.ffn_hidden = c.integer("ffn_dim");
  m.vocab_size = c.integer("vocab_size");
  m.max_positions = c.integer("max_position_embeddings") + 2;
  c.note("max_position_embeddings + 2 learned position rows (OPT's offset), as stored");
  read_activation(c, "activation_function", false, "relu");
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
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

// BERT: learned positions and two token types, post-LayerNorm, GELU MLP, masked-LM head
// (dense + LayerNorm + decoder with a vocabulary bias), no pooler — as the catalog's BERT.
void read_bert(Config& c, ModelSpec& m) {
  m.family = "bert";
  m.hidden = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers", 1, 100000);
  m.heads = c.integer("num_attention_heads");
  check_heads(c, "num_attention_heads", m);
  m.kv_heads = m.heads;
  m.ffn_hidden = c.integer("intermediate_size");
  m.vocab_size = c.integer("vocab_size");
  m.max_positions = c.integer("max_position_embeddings");
  read_activation(c, "hidden_act", false, "gelu");
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
  if (c.integer_or("type_vocab_size", 2) != 2)
    c.refuse("type_vocab_size", "2 (the token-type table modelled)");
  if (c.string_or("position_embedding_type", "absolute") != "absolute")
    c.refuse("position_embedding_type", "\"absolute\" (relative position terms are not modelled)");
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (c.boolean_or(key, false))
      c.refuse(key, "false (a BERT decoder with cross-attention is not modelled)");
  c.note("priced as BertForMaskedLM: the masked-LM head, no pooler");
}

// ViT: patch embedding, class token, learned positions, pre-LayerNorm, GELU MLP, classifier.
void read_vit(Config& c, ModelSpec& m) {
  m.family = "vit";
  m.hidden = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers", 1, 100000);
  m.heads = c.integer("num_attention_heads");
  check_heads(c, "num_attention_heads", m);
  m.kv_heads = m.heads;
  m.ffn_hidden = c.integer("intermediate_size");
  m.image_size = c.integer("image_size", 1, 1 << 16);
  m.patch_size = c.integer("patch_size", 1, m.image_size);
  m.channels = c.integer_or("num_channels", 3, 1, 64);
  m.vocab_size = 0;
  m.max_positions = 0;
  m.tied_embeddings = false;
  read_activation(c, "hidden_act", false, "gelu");
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

// MPT: ALiBi (no stored positions) or learned positions, LayerNorm (no shift with no_bias),
// GELU MLP of expansion_ratio × d_model, tied head.
void read_mpt(Config& c, ModelSpec& m) {
  m.family = "gpt";
  m.hidden = c.integer("d_model");
  m.num_layers = c.integer("n_layers", 1, 100000);
  m.heads = c.integer("n_heads");
  check_heads(c, "n_heads", m);
  m.kv_heads = m.heads;
  m.vocab_size = c.integer("vocab_size");
  m.ffn_hidden = m.hidden * c.integer_or("expansion_ratio", 4, 1, 1024);
  const bool no_bias = c.boolean_or("no_bias", false);
  m.qkv_bias = m.out_bias = m.mlp_bias = m.norm_bias = !no_bias;
  m.tied_embeddings = c.boolean_or("tie_word_embeddings", true);
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

}  // namespace

const std::vector<std::string>& supported_hf_model_types() {
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2", "gpt2", "gpt_neox",
                                                 "opt",   "bert",    "vit",   "mpt"};
  return types;
}

HfModel parse_hf_config(const Json& config, const std::string& file, const std::string& name) {
  HfModel out;
  JsonReader root(config, file);
  if (!root.is_object()) root.fail("a Hugging Face config.json object");
  Config c(root, out.notes);
  JsonReader type_reader = root;
  out.model_type = type_reader.string("model_type");
  const auto& supported = supported_hf_model_types();
  for (const auto& moe : kMoeTypes)
    if (out.model_type == moe)
      c.refuse("model_type", "a dense model_type: \"" + moe +
                                 "\" is a mixture of experts, whose routed expert MLPs are not "
                                 "modelled (a dense layer would misprice parameters, FLOPs "
                                 "and memory)");
  bool known = false;
  for (const auto& t : supported) known = known || t == out.model_type;
  if (!known) {
    std::string list;
    for (const auto& t : supported) list += (list.empty() ? "" : ", ") + t;
    c.refuse("model_type", "one of " + list +
                               " (other architectures are not modelled: their layers' "
                               "parameters, FLOPs and memory would be guesses)");
  }
  refuse_experts(c);
  ModelSpec& m = out.spec;
  m.name = name;
  const std::string& t = out.model_type;
  if (t == "llama" || t == "mistral" || t == "qwen2")
    read_llama_like(c, t, m);
  else if (t == "gpt2")
    read_gpt2(c, m);
  else if (t == "gpt_neox")
    read_gpt_neox(c, m);
  else if (t == "opt")
    read_opt(c, m);
  else if (t == "bert")
    read_bert(c, m);
  else if (t == "vit")
    read_vit(c, m);
  else
    read_mpt(c, m);
  m.source = "Hugging Face config.json (model_type " + t + "): " + file;
  return out;
}

HfModel load_hf_config(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  std::string name = file.stem().string();
  if (name == "config" && file.has_parent_path())
    name = std::filesystem::absolute(file).parent_path().filename().string();
  return parse_hf_config(j, file.string(), name);
}

}  // namespace cephalo

#include "cephalo/backend/gpt.hpp"

#include <cmath>
#include <numbers>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {
namespace {

// SplitMix64: tiny, portable, good enough for initial weights and synthetic tokens (and,
// unlike std::normal_distribution, bit-identical across standard libraries).
std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double uniform01(std::uint64_t& state) {
  return (static_cast<double>(splitmix(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
double normal(std::uint64_t& state) {
  double u1 = uniform01(state), u2 = uniform01(state);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

GptConfig GptConfig::tiny() { return GptConfig{}; }

GptConfig GptConfig::from_spec(const ModelSpec& spec, int sequence_length) {
  auto refuse = [&](const std::string& why) {
    throw InfeasibleError("model \"" + spec.name + "\": " + why +
                          "; the backend implements GPT decoders (learned positions, "
                          "LayerNorm with shift, biased linears, GELU, tied or untied head)");
  };
  if (spec.family != "gpt") refuse("family \"" + spec.family + "\" is not \"gpt\"");
  if (spec.activation != "gelu") refuse("activation \"" + spec.activation + "\"");
  if (spec.norm != "layernorm") refuse("norm \"" + spec.norm + "\"");
  if (spec.kv_heads != spec.heads) refuse("grouped-query attention");
  if (spec.heads <= 0 || spec.hidden % spec.heads != 0)
    refuse("hidden " + std::to_string(spec.hidden) + " not divisible by heads " +
           std::to_string(spec.heads));
  if (spec.vocab_size <= 0) refuse("no vocabulary");
  // Every linear and LayerNorm of this decoder has a bias / shift, and positions are a learned
  // table: a spec without them (MPT's no_bias, Qwen2's q/k/v-only biases, rotary or ALiBi
  // positions) would train another model than the one the cost models priced.
  if (!spec.qkv_bias || !spec.out_bias || !spec.mlp_bias)
    refuse("linear layers without biases (qkv_bias " + std::string(spec.qkv_bias ? "yes" : "no") +
           ", out_bias " + (spec.out_bias ? "yes" : "no") + ", mlp_bias " +
           (spec.mlp_bias ? "yes" : "no") + ")");
  if (!spec.norm_bias) refuse("LayerNorm without shift (norm_bias false)");
  if (spec.max_positions == 0) refuse("no learned positions (rotary or ALiBi)");
  if (sequence_length <= 0 || sequence_length > max_sequence(spec))
    throw InfeasibleError("sequence length " + std::to_string(sequence_length) +
                          " exceeds the model's " + std::to_string(max_sequence(spec)) +
                          " positions");
  GptConfig c;
  c.layers = spec.num_layers;
  c.hidden = spec.hidden;
  c.heads = spec.heads;
  c.ffn = spec.ffn_hidden;
  c.vocab = spec.vocab_size;
  c.seq = sequence_length;
  c.positions = spec.max_positions;
  c.tied_head = spec.tied_embeddings;
  return c;
}

GptModel::GptModel(const GptConfig& c) : config_(c) {
  if (c.positions > 0 && c.positions < c.seq)
    throw InfeasibleError("sequence length " + std::to_string(c.seq) + " exceeds the model's " +
                          std::to_string(c.positions) + " positions");
  const std::int64_t C = c.hidden, F = c.ffn;
  auto build = [](std::initializer_list<std::pair<const char*, std::int64_t>> items) {
    std::vector<ParamSlot> out;
    std::int64_t off = 0;
    for (auto& [name, n] : items) {
      out.push_back({name, off, n});
      off += n;
    }
    return out;
  };
  // wpe has a row per position the model knows (its max_positions), not per token of this
  // job's sequence: the parameter count is the model's, and a checkpoint resumes at any length.
  slots_.push_back(
      build({{"wte", std::int64_t{c.vocab} * C}, {"wpe", std::int64_t{c.position_rows()} * C}}));
  for (int l = 0; l < c.layers; ++l)
    slots_.push_back(build({{"ln1_g", C},
                            {"ln1_b", C},
                            {"w_qkv", C * 3 * C},
                            {"b_qkv", 3 * C},
                            {"w_proj", C * C},
                            {"b_proj", C},
                            {"ln2_g", C},
                            {"ln2_b", C},
                            {"w_fc", C * F},
                            {"b_fc", F},
                            {"w_out", F * C},
                            {"b_out", C}}));
  if (c.tied_head)
    slots_.push_back(build({{"lnf_g", C}, {"lnf_b", C}}));
  else
    slots_.push_back(build({{"lnf_g", C}, {"lnf_b", C}, {"w_head", std::int64_t{c.vocab} * C}}));
}

std::int64_t GptModel::unit_numel(int unit) const {
  const auto& s = slots_.at(static_cast<std::size_t>(unit));
  return s.back().offset + s.back().numel;
}
const std::vector<ParamSlot>& GptModel::unit_slots(int unit) const {
  return slots_.at(static_cast<std::size_t>(unit));
}
std::string GptModel::unit_name(int unit) const {
  if (unit == 0) return "embedding";
  if (unit == head_unit()) return "head";
  return "layer " + std::to_string(unit);
}
std::int64_t GptModel::total_parameters() const {
  std::int64_t n = 0;
  for (int u = 0; u < num_units(); ++u) n += unit_numel(u);
  return n;
}
double GptModel::training_flops(double samples) const {
  // 6 FLOPs per parameter per token for the matmuls (2 forward + 4 backward) plus attention
  // scores and values: 12 * layers * seq * hidden per token (causal halving ignored, as in
  // the usual MFU convention). The position table is a lookup, not a matmul.
  // wte is a lookup too, but a tied head multiplies by it (an untied w_head is counted already).
  const double C = config_.hidden, T = config_.seq, VC = static_cast<double>(config_.vocab) * C;
  const double matmul_params = static_cast<double>(total_parameters()) -
                               config_.position_rows() * C - VC + (config_.tied_head ? VC : 0.0);
  const double per_token = 6.0 * matmul_params + 12.0 * config_.layers * T * C;
  return per_token * T * samples;
}

std::vector<float> GptModel::initial_unit(int unit) const {
  std::vector<float> v(static_cast<std::size_t>(unit_numel(unit)), 0.0f);
  std::uint64_t state = config_.init_seed * 1000003ull + static_cast<std::uint64_t>(unit);
  const double resid_scale = 0.02 / std::sqrt(2.0 * std::max(1, config_.layers));
  for (const auto& s : unit_slots(unit)) {
    float* p = v.data() + s.offset;
    double stddev = 0;
    if (s.name == "wte" || s.name == "wpe" || s.name == "w_qkv" || s.name == "w_fc" ||
        s.name == "w_head")
      stddev = 0.02;
    else if (s.name == "w_proj" || s.name == "w_out")
      stddev = resid_scale;
    if (s.name.ends_with("_g")) {
      for (std::int64_t i = 0; i < s.numel; ++i) p[i] = 1.0f;
    } else if (stddev > 0) {
      for (std::int64_t i = 0; i < s.numel; ++i) p[i] = static_cast<float>(stddev * normal(state));
    }
  }
  return v;
}

TensorRef GptModel::used_positions(TensorRef embedding) const {
  return slot(embedding, 0, 1).slice(0, std::int64_t{config_.seq} * config_.hidden);
}

TensorRef GptModel::slot(TensorRef unit, int unit_index, int slot_index) const {
  const auto& s = unit_slots(unit_index).at(static_cast<std::size_t>(slot_index));
  return unit.slice(s.offset, s.numel);
}

// Slot indices inside a layer unit (order of the constructor).
enum LayerSlot {
  LN1_G,
  LN1_B,
  W_QKV,
  B_QKV,
  W_PROJ,
  B_PROJ,
  LN2_G,
  LN2_B,
  W_FC,
  B_FC,
  W_OUT,
  B_OUT
};

void GptModel::embedding_forward(Device& d, TensorRef params, TensorRef tokens, TensorRef out,
                                 std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  d.embedding_forward(s, tokens, slot(params, 0, 0), used_positions(params), out, rows, config_.seq,
                      config_.hidden);
}

void GptModel::embedding_backward(Device& d, TensorRef grads, TensorRef tokens, TensorRef dout,
                                  std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  d.embedding_backward(s, tokens, dout, slot(grads, 0, 0), used_positions(grads), rows, config_.seq,
                       config_.hidden);
}

void GptModel::layer_forward(Device& d, TensorRef params, TensorRef x, TensorRef y,
                             LayerActivations& a, std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  const std::int64_t C = config_.hidden, F = config_.ffn, N = rows;
  const AttentionShape shape{rows / config_.seq, config_.seq, config_.heads,
                             config_.hidden / config_.heads};
  // Activations take the compute type of the input; statistics are always fp32 (device.hpp).
  const ElemType T = x.type;
  auto sized = [&](Buffer& b, std::int64_t n, ElemType type) {
    if (b.numel() != n || b.type() != type) b = d.allocate(static_cast<std::size_t>(n), type);
  };
  sized(a.ln1, N * C, T);
  sized(a.ln1_mean, N, ElemType::F32);
  sized(a.ln1_rstd, N, ElemType::F32);
  sized(a.qkv, N * 3 * C, T);
  sized(a.att, N * C, T);
  sized(a.att_lse, shape.batch * shape.heads * shape.seq, ElemType::F32);
  sized(a.mid, N * C, T);
  sized(a.ln2, N * C, T);
  sized(a.ln2_mean, N, ElemType::F32);
  sized(a.ln2_rstd, N, ElemType::F32);
  sized(a.fc, N * F, T);
  sized(a.act, N * F, T);
  const int u = 1;  // every layer has the same slot layout
  auto P = [&](int i) { return slot(params, u, i); };
  d.layer_norm_forward(s, x, P(LN1_G), P(LN1_B), a.ln1.ref(), a.ln1_mean.ref(), a.ln1_rstd.ref(), N,
                       C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::No, N, 3 * C, C, 1.0f, a.ln1.ref(), P(W_QKV), 0.0f,
         a.qkv.ref());
  d.add_bias(s, a.qkv.ref(), P(B_QKV), N, 3 * C);
  d.attention_forward(s, shape, a.qkv.ref(), a.att.ref(), a.att_lse.ref());
  d.copy(s, a.mid.ref(), x.slice(0, N * C));
  d.gemm(s, Transpose::No, Transpose::No, N, C, C, 1.0f, a.att.ref(), P(W_PROJ), 1.0f, a.mid.ref());
  d.add_bias(s, a.mid.ref(), P(B_PROJ), N, C);
  d.layer_norm_forward(s, a.mid.ref(), P(LN2_G), P(LN2_B), a.ln2.ref(), a.ln2_mean.ref(),
                       a.ln2_rstd.ref(), N, C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::No, N, F, C, 1.0f, a.ln2.ref(), P(W_FC), 0.0f, a.fc.ref());
  d.add_bias(s, a.fc.ref(), P(B_FC), N, F);
  d.gelu_forward(s, a.fc.ref(), a.act.ref());
  d.copy(s, y.slice(0, N * C), a.mid.ref());
  d.gemm(s, Transpose::No, Transpose::No, N, C, F, 1.0f, a.act.ref(), P(W_OUT), 1.0f, y);
  d.add_bias(s, y, P(B_OUT), N, C);
}

void GptModel::layer_backward(Device& d, TensorRef params, TensorRef grads, TensorRef x,
                              const LayerActivations& a, TensorRef dy, TensorRef dx,
                              std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  const std::int64_t C = config_.hidden, F = config_.ffn, N = rows;
  const AttentionShape shape{rows / config_.seq, config_.seq, config_.heads,
                             config_.hidden / config_.heads};
  auto P = [&](int i) { return slot(params, 1, i); };
  auto G = [&](int i) { return slot(grads, 1, i); };
  // Input gradients are in the compute type of the activations. Each temporary lives only
  // while a step needs it, so the backward holds at most max(C + 2F, 5C) x N elements beyond
  // the saved activations and dx (dmid + dact + dfc around the GELU; dmid + datt + dqkv, then
  // dmid + dqkv + dln, in attention): costmodels::unit_backward_transient_bytes charges that.
  // Releasing a buffer here is safe on every device: the CPU compute stream runs inline, and
  // the CUDA device defers a free until every stream has passed it.
  auto act = [&](std::int64_t n) { return d.allocate(static_cast<std::size_t>(n), x.type); };
  Buffer dmid = act(N * C);
  // MLP: y = mid + gelu(ln2(mid) W_fc + b_fc) W_out + b_out
  d.copy(s, dmid.ref(), dy.slice(0, N * C));
  Buffer dfc = act(N * F);
  {
    Buffer dact = act(N * F);
    d.gemm(s, Transpose::No, Transpose::Yes, N, F, C, 1.0f, dy, P(W_OUT), 0.0f, dact.ref());
    d.gemm(s, Transpose::Yes, Transpose::No, F, C, N, 1.0f, a.act.ref(), dy, 1.0f, G(W_OUT));
    d.bias_backward(s, dy, G(B_OUT), N, C);
    d.gelu_backward(s, a.fc.ref(), dact.ref(), dfc.ref());
  }
  Buffer dln = act(N * C);
  d.gemm(s, Transpose::No, Transpose::Yes, N, C, F, 1.0f, dfc.ref(), P(W_FC), 0.0f, dln.ref());
  d.gemm(s, Transpose::Yes, Transpose::No, C, F, N, 1.0f, a.ln2.ref(), dfc.ref(), 1.0f, G(W_FC));
  d.bias_backward(s, dfc.ref(), G(B_FC), N, F);
  dfc.reset();
  {
    Buffer tmp = act(N * C);
    d.layer_norm_backward(s, a.mid.ref(), P(LN2_G), a.ln2_mean.ref(), a.ln2_rstd.ref(), dln.ref(),
                          tmp.ref(), G(LN2_G), G(LN2_B), N, C);
    d.axpy(s, 1.0f, tmp.ref(), dmid.ref());
  }
  dln.reset();
  // Attention: mid = x + attn(ln1(x)) W_proj + b_proj
  Buffer dqkv = act(N * 3 * C);
  {
    Buffer datt = act(N * C);
    d.gemm(s, Transpose::No, Transpose::Yes, N, C, C, 1.0f, dmid.ref(), P(W_PROJ), 0.0f,
           datt.ref());
    d.gemm(s, Transpose::Yes, Transpose::No, C, C, N, 1.0f, a.att.ref(), dmid.ref(), 1.0f,
           G(W_PROJ));
    d.bias_backward(s, dmid.ref(), G(B_PROJ), N, C);
    d.attention_backward(s, shape, a.qkv.ref(), a.att.ref(), a.att_lse.ref(), datt.ref(),
                         dqkv.ref());
  }
  Buffer dln1 = act(N * C);
  d.gemm(s, Transpose::No, Transpose::Yes, N, C, 3 * C, 1.0f, dqkv.ref(), P(W_QKV), 0.0f,
         dln1.ref());
  d.gemm(s, Transpose::Yes, Transpose::No, C, 3 * C, N, 1.0f, a.ln1.ref(), dqkv.ref(), 1.0f,
         G(W_QKV));
  d.bias_backward(s, dqkv.ref(), G(B_QKV), N, 3 * C);
  dqkv.reset();
  d.layer_norm_backward(s, x, P(LN1_G), a.ln1_mean.ref(), a.ln1_rstd.ref(), dln1.ref(), dx,
                        G(LN1_G), G(LN1_B), N, C);
  d.axpy(s, 1.0f, dmid.ref(), dx);
  // Temporaries must outlive queued work on asynchronous devices.
  s.synchronize();
}

double GptModel::head_forward_backward(Device& d, TensorRef head_params, TensorRef embedding_params,
                                       TensorRef x, TensorRef targets, std::int64_t rows,
                                       float grad_scale, TensorRef dx, TensorRef head_grads,
                                       TensorRef embedding_grads) const {
  auto& s = d.stream(StreamKind::Compute);
  const std::int64_t C = config_.hidden, V = config_.vocab, N = rows;
  const int hu = head_unit();
  auto f32 = [&](std::int64_t n) { return d.allocate(static_cast<std::size_t>(n), ElemType::F32); };
  auto act = [&](std::int64_t n) { return d.allocate(static_cast<std::size_t>(n), x.type); };
  Buffer h = act(N * C), mean = f32(N), rstd = f32(N), logits = act(N * V), losses = f32(N),
         lse = f32(N), total = f32(1);
  // The logits' weight [vocab x hidden]: the embedding's wte (tied) or the head's own w_head.
  const TensorRef w = config_.tied_head ? slot(embedding_params, 0, 0) : slot(head_params, hu, 2);
  d.layer_norm_forward(s, x, slot(head_params, hu, 0), slot(head_params, hu, 1), h.ref(),
                       mean.ref(), rstd.ref(), N, C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::Yes, N, V, C, 1.0f, h.ref(), w, 0.0f, logits.ref());
  d.cross_entropy_forward(s, logits.ref(), targets, losses.ref(), lse.ref(), N, V);
  d.sum(s, losses.ref(), total.ref());
  if (!dx.empty()) {
    Buffer dh = act(N * C);
    d.cross_entropy_backward(s, logits.ref(), targets, lse.ref(), logits.ref(), N, V, grad_scale);
    d.gemm(s, Transpose::No, Transpose::No, N, C, V, 1.0f, logits.ref(), w, 0.0f, dh.ref());
    d.gemm(s, Transpose::Yes, Transpose::No, V, C, N, 1.0f, logits.ref(), h.ref(), 1.0f,
           config_.tied_head ? slot(embedding_grads, 0, 0) : slot(head_grads, hu, 2));
    d.layer_norm_backward(s, x, slot(head_params, hu, 0), mean.ref(), rstd.ref(), dh.ref(), dx,
                          slot(head_grads, hu, 0), slot(head_grads, hu, 1), N, C);
    s.synchronize();
  }
  float loss = 0;
  d.download(&loss, total.ref(), sizeof(float));
  return loss;
}

void synthetic_sample(const GptConfig& config, std::uint64_t seed, std::int64_t step,
                      std::int64_t index, std::int32_t* tokens, std::int32_t* targets) {
  std::uint64_t state = seed ^ (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull) ^
                        (static_cast<std::uint64_t>(index) * 0xD1B54A32D192ED03ull);
  splitmix(state);
  // Tokens from the first min(vocab, 64) ids; each next token follows a fixed permutation of
  // the previous one (x -> 37x + 11 mod V', a bijection because 37 is odd and V' a power of
  // two or coprime), with 10% uniform noise. A model learns first the unigram, then the
  // bigram table, so the loss falls visibly within tens of steps.
  std::int64_t V = std::min<std::int64_t>(config.vocab, 64);
  std::int64_t x = static_cast<std::int64_t>(splitmix(state) % static_cast<std::uint64_t>(V));
  for (int t = 0; t <= config.seq; ++t) {
    if (t < config.seq) tokens[t] = static_cast<std::int32_t>(x);
    if (t > 0) targets[t - 1] = static_cast<std::int32_t>(x);
    if (splitmix(state) % 10 == 0)
      x = static_cast<std::int64_t>(splitmix(state) % static_cast<std::uint64_t>(V));
    else
      x = (37 * x + 11) % V;
  }
}

}  // namespace cephalo::backend

#include "cephalo/backend/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

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

namespace {

using SlotList = std::vector<ParamSlot>;

SlotList build_slots(std::initializer_list<std::pair<const char*, std::int64_t>> items) {
  SlotList out;
  std::int64_t off = 0;
  for (auto& [name, n] : items) {
    out.push_back({name, off, n});
    off += n;
  }
  return out;
}

// The slot lists of every unit for hidden width C, MLP width F, query heads' width Q (C / T),
// vocabulary rows R: the single-rank layout with Q = C, F the model's, R = vocab.
std::vector<SlotList> unit_layouts(const GptConfig& c, std::int64_t Q, std::int64_t F,
                                   std::int64_t R, bool head_copy) {
  const std::int64_t C = c.hidden;
  std::vector<SlotList> units;
  // wpe has a row per position the model knows (its max_positions), not per token of this
  // job's sequence: the parameter count is the model's, and a checkpoint resumes at any length.
  units.push_back(build_slots({{"wte", R * C}, {"wpe", std::int64_t{c.position_rows()} * C}}));
  for (int l = 0; l < c.layers; ++l)
    units.push_back(build_slots({{"ln1_g", C},
                                 {"ln1_b", C},
                                 {"w_qkv", C * 3 * Q},
                                 {"b_qkv", 3 * Q},
                                 {"w_proj", Q * C},
                                 {"b_proj", C},
                                 {"ln2_g", C},
                                 {"ln2_b", C},
                                 {"w_fc", C * F},
                                 {"b_fc", F},
                                 {"w_out", F * C},
                                 {"b_out", C}}));
  if (c.tied_head && !head_copy)
    units.push_back(build_slots({{"lnf_g", C}, {"lnf_b", C}}));
  else
    units.push_back(build_slots({{"lnf_g", C}, {"lnf_b", C}, {"w_head", R * C}}));
  return units;
}

// Appends a run, merged into the previous one when both sides continue it.
void add_run(std::vector<SliceRun>& runs, std::int64_t full, std::int64_t local, std::int64_t count,
             bool replicated = false) {
  if (count == 0) return;
  if (!runs.empty()) {
    SliceRun& r = runs.back();
    if (r.full + r.count == full && r.local + r.count == local && r.replicated == replicated) {
      r.count += count;
      return;
    }
  }
  runs.push_back({full, local, count, replicated});
}

}  // namespace

GptModel::GptModel(const GptConfig& c, TensorParallel tp) : config_(c), tp_(tp) {
  if (c.positions > 0 && c.positions < c.seq)
    throw InfeasibleError("sequence length " + std::to_string(c.seq) + " exceeds the model's " +
                          std::to_string(c.positions) + " positions");
  const int T = tp.degree, t = tp.rank;
  if (T < 1 || t < 0 || t >= T)
    throw InfeasibleError("tensor-parallel rank " + std::to_string(t) + " of degree " +
                          std::to_string(T) + ": the rank must lie in 0.." + std::to_string(T - 1) +
                          " and the degree be at least 1");
  if (const std::string why = tensor_parallel_refusal(c, T); !why.empty())
    throw InfeasibleError(why);
  const std::int64_t V = c.vocab, C = c.hidden, F = c.ffn, Q = C / T, Fl = F / T;
  vocab_ = {V * t / T, V};
  const std::int64_t R = V * (t + 1) / T - vocab_.begin;
  if (tp.head_holds_word_embedding && !c.tied_head)
    throw InfeasibleError(
        "an untied head has its own weight: it holds no copy of the word "
        "embedding");
  full_slots_ = unit_layouts(c, C, F, V, false);
  slots_ = unit_layouts(c, Q, Fl, R, tp.head_holds_word_embedding);
  // The slice's runs, slot by slot (slots keep their order; DESIGN §4 names which are split).
  for (std::size_t u = 0; u < slots_.size(); ++u) {
    std::vector<SliceRun> runs;
    for (std::size_t k = 0; k < slots_[u].size(); ++k) {
      const ParamSlot& mine = slots_[u][k];
      const std::int64_t full = k < full_slots_[u].size() ? full_slots_[u][k].offset : 0,
                         local = mine.offset;
      const std::string& n = mine.name;
      if (n == "w_qkv") {  // [C x 3C]: per row, this rank's columns of the q, k and v blocks
        for (std::int64_t i = 0; i < C; ++i)
          for (std::int64_t b = 0; b < 3; ++b)
            add_run(runs, full + i * 3 * C + b * C + t * Q, local + i * 3 * Q + b * Q, Q);
      } else if (n == "b_qkv") {
        for (std::int64_t b = 0; b < 3; ++b) add_run(runs, full + b * C + t * Q, local + b * Q, Q);
      } else if (n == "w_proj") {  // [C x C]: this rank's heads' rows
        add_run(runs, full + t * Q * C, local, Q * C);
      } else if (n == "w_fc") {  // [C x F]: per row, this rank's columns
        for (std::int64_t i = 0; i < C; ++i)
          add_run(runs, full + i * F + t * Fl, local + i * Fl, Fl);
      } else if (n == "b_fc") {
        add_run(runs, full + t * Fl, local, Fl);
      } else if (n == "w_out") {  // [F x C]: this rank's rows
        add_run(runs, full + t * Fl * C, local, Fl * C);
      } else if (n == "w_head" && c.tied_head) {  // the word-embedding copy: not in the unit
        continue;
      } else if (n == "wte" || n == "w_head") {  // [V x C]: this rank's vocabulary rows
        add_run(runs, full + vocab_.begin * C, local, R * C);
      } else {  // replicated: norms, row-parallel biases, wpe (one rank holds all under T = 1)
        add_run(runs, full, local, mine.numel, T > 1);
      }
    }
    runs_.push_back(std::move(runs));
  }
}

std::string GptModel::tensor_parallel_refusal(const GptConfig& c, int T) {
  if (T >= 1 && (c.heads % T != 0 || c.ffn % T != 0))
    return "tensor-parallel degree " + std::to_string(T) + " must divide the attention heads (" +
           std::to_string(c.heads) + ") and the MLP width (" + std::to_string(c.ffn) + ")";
  if (T >= 1 && c.vocab < T)
    return "tensor-parallel degree " + std::to_string(T) + " exceeds the vocabulary of " +
           std::to_string(c.vocab) +
           " ids (every rank holds at least one row of the vocabulary-parallel embedding)";
  return "";
}

std::int64_t GptModel::unit_numel(int unit) const {
  const auto& s = unit_slots(unit);
  return s.back().offset + s.back().numel;
}
std::int64_t GptModel::full_unit_numel(int unit) const {
  const auto& s = full_slots_.at(static_cast<std::size_t>(unit));
  return s.back().offset + s.back().numel;
}
const std::vector<ParamSlot>& GptModel::unit_slots(int unit) const {
  return slots_.at(static_cast<std::size_t>(unit));
}
const std::vector<SliceRun>& GptModel::slice_runs(int unit) const {
  return runs_.at(static_cast<std::size_t>(unit));
}
std::string GptModel::unit_name(int unit) const {
  if (unit == 0) return "embedding";
  if (unit == head_unit()) return "head";
  return "layer " + std::to_string(unit);
}
std::int64_t GptModel::total_parameters() const {
  std::int64_t n = 0;
  for (int u = 0; u < num_units(); ++u) n += full_unit_numel(u);
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

GptModel::Copy GptModel::word_embedding_copy() const {
  if (!tp_.head_holds_word_embedding) return {};
  const ParamSlot& w = unit_slots(head_unit()).back();
  return {w.offset, w.numel};
}

std::vector<float> GptModel::slice_of(int unit, const std::vector<float>& full) const {
  if (static_cast<std::int64_t>(full.size()) != full_unit_numel(unit))
    throw Error("GptModel::slice_of: unit " + std::to_string(unit) + " has " +
                std::to_string(full_unit_numel(unit)) + " elements, given " +
                std::to_string(full.size()));
  std::vector<float> local(static_cast<std::size_t>(unit_numel(unit)));
  for (const SliceRun& r : slice_runs(unit))
    std::copy_n(full.data() + r.full, r.count, local.data() + r.local);
  return local;
}

void GptModel::place_in(int unit, const float* local, float* full) const {
  for (const SliceRun& r : slice_runs(unit)) std::copy_n(local + r.local, r.count, full + r.full);
}

std::vector<float> GptModel::initial_unit(int unit) const {
  if (tp_.degree == 1 && !tp_.head_holds_word_embedding) return full_initial_unit(unit);
  auto local = slice_of(unit, full_initial_unit(unit));
  if (const Copy copy = word_embedding_copy(); unit == head_unit() && copy.count > 0) {
    // The copy starts as the embedding's rows: the two stay equal through training (their
    // gradients are all-reduced, their optimizer states evolve alike).
    const auto wte = slice_of(0, full_initial_unit(0));
    std::copy_n(wte.begin() + unit_slots(0)[0].offset, copy.count, local.begin() + copy.begin);
  }
  return local;
}

std::vector<TpCall> GptModel::take_tp_calls() const { return std::exchange(tp_calls_, {}); }

void GptModel::tp_all_reduce(Device& d, TensorRef x, ReduceOp op) const {
  if (tp_.degree == 1) return;
  if (!tp_.comm || tp_.comm->size() != tp_.degree || tp_.comm->rank() != tp_.rank)
    throw RuntimeFailure("GptModel: tensor-parallel rank " + std::to_string(tp_.rank) +
                         " of degree " + std::to_string(tp_.degree) +
                         " computes without its group's communicator");
  auto& s = d.stream(StreamKind::Compute);
  TpCall call{d.create_event(), d.create_event()};
  call.start->record(s);
  tp_.comm->all_reduce(s, x, op);
  call.end->record(s);
  tp_calls_.push_back(std::move(call));
}

std::vector<float> GptModel::full_initial_unit(int unit) const {
  std::vector<float> v(static_cast<std::size_t>(full_unit_numel(unit)), 0.0f);
  std::uint64_t state = config_.init_seed * 1000003ull + static_cast<std::uint64_t>(unit);
  const double resid_scale = 0.02 / std::sqrt(2.0 * std::max(1, config_.layers));
  for (const auto& s : full_slots_.at(static_cast<std::size_t>(unit))) {
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
  if (tp_.degree == 1) {
    d.embedding_forward(s, tokens, slot(params, 0, 0), used_positions(params), out, rows,
                        config_.seq, config_.hidden);
    return;
  }
  // Each rank looks up the tokens of its vocabulary rows (zeros for the others); rank 0 also
  // adds the positions, so the all-reduced sum is wte[token] + wpe, each element one fp32
  // addition as on one rank.
  d.embedding_forward(s, tokens, slot(params, 0, 0),
                      tp_.rank == 0 ? used_positions(params) : TensorRef{}, out, rows, config_.seq,
                      config_.hidden, vocab_);
  tp_all_reduce(d, out.slice(0, rows * config_.hidden), ReduceOp::Sum);
}

void GptModel::embedding_backward(Device& d, TensorRef grads, TensorRef tokens, TensorRef dout,
                                  std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  // The output gradient is the same on every TP rank: each takes its vocabulary rows' part,
  // and the (replicated) position table the whole of it.
  d.embedding_backward(s, tokens, dout, slot(grads, 0, 0), used_positions(grads), rows, config_.seq,
                       config_.hidden, tp_.degree == 1 ? VocabSlice{} : vocab_);
}

void GptModel::layer_forward(Device& d, TensorRef params, TensorRef x, TensorRef y,
                             LayerActivations& a, std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  // Q: this rank's heads' width (all of C on one rank); Fl: its MLP columns.
  const std::int64_t C = config_.hidden, Q = C / tp_.degree, Fl = config_.ffn / tp_.degree,
                     N = rows;
  const bool split = tp_.degree > 1;
  const AttentionShape shape{rows / config_.seq, config_.seq, config_.heads / tp_.degree,
                             config_.hidden / config_.heads};
  // Activations take the compute type of the input; statistics are always fp32 (device.hpp).
  const ElemType T = x.type;
  auto sized = [&](Buffer& b, std::int64_t n, ElemType type) {
    if (b.numel() != n || b.type() != type) b = d.allocate(static_cast<std::size_t>(n), type);
  };
  sized(a.ln1, N * C, T);
  sized(a.ln1_mean, N, ElemType::F32);
  sized(a.ln1_rstd, N, ElemType::F32);
  sized(a.qkv, N * 3 * Q, T);
  sized(a.att, N * Q, T);
  sized(a.att_lse, shape.batch * shape.heads * shape.seq, ElemType::F32);
  sized(a.mid, N * C, T);
  sized(a.ln2, N * C, T);
  sized(a.ln2_mean, N, ElemType::F32);
  sized(a.ln2_rstd, N, ElemType::F32);
  sized(a.fc, N * Fl, T);
  sized(a.act, N * Fl, T);
  const int u = 1;  // every layer has the same slot layout
  auto P = [&](int i) { return slot(params, u, i); };
  d.layer_norm_forward(s, x, P(LN1_G), P(LN1_B), a.ln1.ref(), a.ln1_mean.ref(), a.ln1_rstd.ref(), N,
                       C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::No, N, 3 * Q, C, 1.0f, a.ln1.ref(), P(W_QKV), 0.0f,
         a.qkv.ref());
  d.add_bias(s, a.qkv.ref(), P(B_QKV), N, 3 * Q);
  d.attention_forward(s, shape, a.qkv.ref(), a.att.ref(), a.att_lse.ref());
  if (!split) {
    d.copy(s, a.mid.ref(), x.slice(0, N * C));
    d.gemm(s, Transpose::No, Transpose::No, N, C, C, 1.0f, a.att.ref(), P(W_PROJ), 1.0f,
           a.mid.ref());
  } else {
    // Row-parallel: each rank's heads contribute a partial product; their sum is the output.
    d.gemm(s, Transpose::No, Transpose::No, N, C, Q, 1.0f, a.att.ref(), P(W_PROJ), 0.0f,
           a.mid.ref());
    tp_all_reduce(d, a.mid.ref(), ReduceOp::Sum);
    d.axpy(s, 1.0f, x.slice(0, N * C), a.mid.ref());
  }
  d.add_bias(s, a.mid.ref(), P(B_PROJ), N, C);
  d.layer_norm_forward(s, a.mid.ref(), P(LN2_G), P(LN2_B), a.ln2.ref(), a.ln2_mean.ref(),
                       a.ln2_rstd.ref(), N, C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::No, N, Fl, C, 1.0f, a.ln2.ref(), P(W_FC), 0.0f, a.fc.ref());
  d.add_bias(s, a.fc.ref(), P(B_FC), N, Fl);
  d.gelu_forward(s, a.fc.ref(), a.act.ref());
  if (!split) {
    d.copy(s, y.slice(0, N * C), a.mid.ref());
    d.gemm(s, Transpose::No, Transpose::No, N, C, Fl, 1.0f, a.act.ref(), P(W_OUT), 1.0f, y);
  } else {
    d.gemm(s, Transpose::No, Transpose::No, N, C, Fl, 1.0f, a.act.ref(), P(W_OUT), 0.0f, y);
    tp_all_reduce(d, y.slice(0, N * C), ReduceOp::Sum);
    d.axpy(s, 1.0f, a.mid.ref(), y.slice(0, N * C));
  }
  d.add_bias(s, y, P(B_OUT), N, C);
}

void GptModel::drop_attention_core(LayerActivations& a) const { a.att_lse.reset(); }

void GptModel::recompute_attention_core(Device& d, LayerActivations& a, std::int64_t rows) const {
  const AttentionShape shape{rows / config_.seq, config_.seq, config_.heads / tp_.degree,
                             config_.hidden / config_.heads};
  a.att_lse =
      d.allocate(static_cast<std::size_t>(shape.batch * shape.heads * shape.seq), ElemType::F32);
  d.attention_forward(d.stream(StreamKind::Compute), shape, a.qkv.ref(), a.att.ref(),
                      a.att_lse.ref());
}

void GptModel::layer_backward(Device& d, TensorRef params, TensorRef grads, TensorRef x,
                              const LayerActivations& a, TensorRef dy, TensorRef dx,
                              std::int64_t rows) const {
  auto& s = d.stream(StreamKind::Compute);
  const std::int64_t C = config_.hidden, Q = C / tp_.degree, F = config_.ffn / tp_.degree, N = rows;
  const AttentionShape shape{rows / config_.seq, config_.seq, config_.heads / tp_.degree,
                             config_.hidden / config_.heads};
  auto P = [&](int i) { return slot(params, 1, i); };
  auto G = [&](int i) { return slot(grads, 1, i); };
  // Input gradients are in the compute type of the activations. Each temporary lives only
  // while a step needs it, so the backward holds at most max(C + 2F, 5C) x N elements beyond
  // the saved activations and dx (dmid + dact + dfc around the GELU; dmid + datt + dqkv, then
  // dmid + dqkv + dln, in attention): costmodels::unit_backward_transient_bytes charges that.
  // (Under tensor parallelism F and the attention's 3C are this rank's columns.)
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
  // Column-parallel input: the norm's gradient is the sum of every rank's columns' part.
  tp_all_reduce(d, dln.ref(), ReduceOp::Sum);
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
  Buffer dqkv = act(N * 3 * Q);
  {
    Buffer datt = act(N * Q);
    d.gemm(s, Transpose::No, Transpose::Yes, N, Q, C, 1.0f, dmid.ref(), P(W_PROJ), 0.0f,
           datt.ref());
    d.gemm(s, Transpose::Yes, Transpose::No, Q, C, N, 1.0f, a.att.ref(), dmid.ref(), 1.0f,
           G(W_PROJ));
    d.bias_backward(s, dmid.ref(), G(B_PROJ), N, C);
    d.attention_backward(s, shape, a.qkv.ref(), a.att.ref(), a.att_lse.ref(), datt.ref(),
                         dqkv.ref());
  }
  Buffer dln1 = act(N * C);
  d.gemm(s, Transpose::No, Transpose::Yes, N, C, 3 * Q, 1.0f, dqkv.ref(), P(W_QKV), 0.0f,
         dln1.ref());
  tp_all_reduce(d, dln1.ref(), ReduceOp::Sum);
  d.gemm(s, Transpose::Yes, Transpose::No, C, 3 * Q, N, 1.0f, a.ln1.ref(), dqkv.ref(), 1.0f,
         G(W_QKV));
  d.bias_backward(s, dqkv.ref(), G(B_QKV), N, 3 * Q);
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
  HeadActivations kept;
  const double loss = head_forward(d, head_params, embedding_params, x, targets, rows,
                                   dx.empty() ? nullptr : &kept);
  if (!dx.empty())
    head_backward(d, head_params, embedding_params, x, targets, rows, grad_scale, kept, dx,
                  head_grads, embedding_grads);
  return loss;
}

double GptModel::head_forward(Device& d, TensorRef head_params, TensorRef embedding_params,
                              TensorRef x, TensorRef targets, std::int64_t rows,
                              HeadActivations* keep) const {
  auto& s = d.stream(StreamKind::Compute);
  const bool split = tp_.degree > 1;
  // V: this rank's vocabulary columns (all of them on one rank).
  const std::int64_t C = config_.hidden, N = rows, V = unit_slots(0)[0].numel / C;
  const int hu = head_unit();
  auto f32 = [&](std::int64_t n) { return d.allocate(static_cast<std::size_t>(n), ElemType::F32); };
  auto act = [&](std::int64_t n) { return d.allocate(static_cast<std::size_t>(n), x.type); };
  HeadActivations local;
  HeadActivations& a = keep ? *keep : local;
  a.h = act(N * C);
  a.mean = f32(N);
  a.rstd = f32(N);
  a.logits = act(N * V);
  Buffer losses = f32(N);
  a.lse = f32(N);
  Buffer total = f32(1);
  // The logits' weight [vocab x hidden]: the embedding's wte (tied) or the head's own w_head
  // (untied, or a copy of the word embedding held by the head).
  const bool own_weight = !config_.tied_head || tp_.head_holds_word_embedding;
  const TensorRef w = own_weight ? slot(head_params, hu, 2) : slot(embedding_params, 0, 0);
  d.layer_norm_forward(s, x, slot(head_params, hu, 0), slot(head_params, hu, 1), a.h.ref(),
                       a.mean.ref(), a.rstd.ref(), N, C, config_.ln_eps);
  d.gemm(s, Transpose::No, Transpose::Yes, N, V, C, 1.0f, a.h.ref(), w, 0.0f, a.logits.ref());
  if (!split) {
    d.cross_entropy_forward(s, a.logits.ref(), targets, losses.ref(), a.lse.ref(), N, V);
  } else {
    // Vocabulary-parallel cross-entropy: the rows' maximum, sum of exponentials and target
    // logit over every rank's columns, then the loss from the three (the same on every rank).
    Buffer row_max = f32(N), sum_exp = f32(N), target_logit = f32(N);
    d.cross_entropy_row_max(s, a.logits.ref(), row_max.ref(), N, V);
    tp_all_reduce(d, row_max.ref(), ReduceOp::Max);
    d.cross_entropy_partial_sums(s, a.logits.ref(), targets, row_max.ref(), sum_exp.ref(),
                                 target_logit.ref(), N, V, vocab_.begin);
    tp_all_reduce(d, sum_exp.ref(), ReduceOp::Sum);
    tp_all_reduce(d, target_logit.ref(), ReduceOp::Sum);
    d.cross_entropy_combine(s, row_max.ref(), sum_exp.ref(), target_logit.ref(), losses.ref(),
                            a.lse.ref(), N);
  }
  d.sum(s, losses.ref(), total.ref());
  float loss = 0;
  d.download(&loss, total.ref(), sizeof(float));
  return loss;
}

void GptModel::head_backward(Device& d, TensorRef head_params, TensorRef embedding_params,
                             TensorRef x, TensorRef targets, std::int64_t rows, float grad_scale,
                             HeadActivations& a, TensorRef dx, TensorRef head_grads,
                             TensorRef embedding_grads) const {
  auto& s = d.stream(StreamKind::Compute);
  const bool split = tp_.degree > 1;
  const std::int64_t C = config_.hidden, N = rows, V = unit_slots(0)[0].numel / C;
  const int hu = head_unit();
  const bool own_weight = !config_.tied_head || tp_.head_holds_word_embedding;
  const TensorRef w = own_weight ? slot(head_params, hu, 2) : slot(embedding_params, 0, 0);
  Buffer dh = d.allocate(static_cast<std::size_t>(N * C), x.type);
  // The logits' gradient overwrites the logits (they are not needed after).
  d.cross_entropy_backward(s, a.logits.ref(), targets, a.lse.ref(), a.logits.ref(), N, V,
                           grad_scale, split ? vocab_.begin : 0);
  d.gemm(s, Transpose::No, Transpose::No, N, C, V, 1.0f, a.logits.ref(), w, 0.0f, dh.ref());
  // The normed input is replicated: its gradient is the sum of every rank's columns' part.
  tp_all_reduce(d, dh.ref(), ReduceOp::Sum);
  d.gemm(s, Transpose::Yes, Transpose::No, V, C, N, 1.0f, a.logits.ref(), a.h.ref(), 1.0f,
         own_weight ? slot(head_grads, hu, 2) : slot(embedding_grads, 0, 0));
  d.layer_norm_backward(s, x, slot(head_params, hu, 0), a.mean.ref(), a.rstd.ref(), dh.ref(), dx,
                        slot(head_grads, hu, 0), slot(head_grads, hu, 1), N, C);
  s.synchronize();
  a = HeadActivations{};
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

#include "cephalo/costmodels/model_math.hpp"

#include <algorithm>
#include <cmath>

#include "cephalo/core/error.hpp"

namespace cephalo::costmodels {
namespace {

double h(const ModelSpec& m) { return m.hidden; }
double kv_dim(const ModelSpec& m) { return static_cast<double>(m.hidden) / m.heads * m.kv_heads; }

// Weights of the matrices of one layer (the part that costs 2 FLOPs per token per weight).
double layer_matmul_weights(const ModelSpec& m) {
  double attention = h(m) * (h(m) + 2 * kv_dim(m)) + h(m) * h(m);
  double mlp = (m.activation == "swiglu" ? 3.0 : 2.0) * h(m) * m.ffn_hidden;
  return attention + mlp;
}

double norm_parameters(const ModelSpec& m) {
  return m.norm == "layernorm" && m.norm_bias ? 2 * h(m) : h(m);
}

int vit_patches(const ModelSpec& m) {
  int side = m.image_size / m.patch_size;
  return side * side;
}

}  // namespace

int num_units(const ModelSpec& model) { return model.num_layers + 2; }

UnitKind unit_kind(const ModelSpec& model, int unit) {
  if (unit < 0 || unit >= num_units(model))
    throw Error("unit " + std::to_string(unit) + " out of range for model " + model.name);
  if (unit == 0) return UnitKind::Embedding;
  if (unit == model.num_layers + 1) return UnitKind::Head;
  return UnitKind::Layer;
}

double layer_parameters(const ModelSpec& m) {
  double biases = 0;
  if (m.qkv_bias) biases += h(m) + 2 * kv_dim(m);
  if (m.out_bias) biases += h(m);
  if (m.mlp_bias) biases += (m.activation == "swiglu" ? 2.0 : 1.0) * m.ffn_hidden + h(m);
  return layer_matmul_weights(m) + biases + 2 * norm_parameters(m);
}

double embedding_parameters(const ModelSpec& m) {
  if (m.family == "vit") {
    double patch = static_cast<double>(m.channels) * m.patch_size * m.patch_size * h(m) + h(m);
    return patch + h(m) /*class token*/ + (vit_patches(m) + 1.0) * h(m);
  }
  double e = static_cast<double>(m.vocab_size) * h(m) + static_cast<double>(m.max_positions) * h(m);
  if (m.family == "bert") e += 2 * h(m) /*token types*/ + norm_parameters(m);
  return e;
}

double head_parameters(const ModelSpec& m) {
  double p = norm_parameters(m);
  if (m.family == "vit") return p + h(m) * m.num_classes + m.num_classes;
  // BERT is post-LN (no final norm); its masked-LM head is a dense h×h transform with bias,
  // a LayerNorm, and the decoder (its own weight when untied) with a vocabulary-sized bias.
  if (m.family == "bert") p = h(m) * h(m) + h(m) + norm_parameters(m) + m.vocab_size;
  if (!m.tied_embeddings) p += static_cast<double>(m.vocab_size) * h(m);
  return p;
}

double unit_parameters(const ModelSpec& m, int unit) {
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding:
      return embedding_parameters(m);
    case UnitKind::Layer:
      return layer_parameters(m);
    case UnitKind::Head:
      return head_parameters(m);
  }
  return 0;
}

double phase_parameters(const ModelSpec& m, int unit) {
  double p = unit_parameters(m, unit);
  // A tied head's logits use the embedding's weight: its phases gather (and reduce-scatter the
  // gradient of) the whole embedding unit together with the head's own parameters.
  if (unit_kind(m, unit) == UnitKind::Head && m.tied_embeddings && m.family != "vit")
    p += embedding_parameters(m);
  return p;
}

double total_parameters(const ModelSpec& m) {
  return embedding_parameters(m) + m.num_layers * layer_parameters(m) + head_parameters(m);
}

VocabRows vocab_rows(std::int64_t vocab, int tensor_parallel, int tp_rank) {
  if (tensor_parallel < 1 || tp_rank < 0 || tp_rank >= tensor_parallel)
    throw Error("vocab_rows: TP rank " + std::to_string(tp_rank) + " of " +
                std::to_string(tensor_parallel));
  return {vocab * tp_rank / tensor_parallel, vocab * (tp_rank + 1) / tensor_parallel};
}

double unit_parameters(const ModelSpec& m, int unit, int tensor_parallel, int tp_rank,
                       bool head_holds_word_embedding) {
  const double t = tensor_parallel;
  const double rows =
      static_cast<double>(vocab_rows(m.vocab_size, tensor_parallel, tp_rank).size());
  // ViT has no vocabulary: its patch embedding and classifier stay whole on every TP rank.
  const bool vocabulary = m.family != "vit";
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding:
      if (!vocabulary) return embedding_parameters(m);
      return embedding_parameters(m) - static_cast<double>(m.vocab_size) * h(m) + rows * h(m);
    case UnitKind::Layer: {
      // Column-parallel: q/k/v (and their biases), the MLP's first linear(s) and bias; row-
      // parallel: the attention output and the MLP's second linear, their biases whole.
      double column_biases = 0, whole_biases = 0;
      if (m.qkv_bias) column_biases += h(m) + 2 * kv_dim(m);
      if (m.out_bias) whole_biases += h(m);
      if (m.mlp_bias) {
        column_biases += (m.activation == "swiglu" ? 2.0 : 1.0) * m.ffn_hidden;
        whole_biases += h(m);
      }
      return (layer_matmul_weights(m) + column_biases) / t + whole_biases + 2 * norm_parameters(m);
    }
    case UnitKind::Head: {
      double p = head_parameters(m);
      if (vocabulary && !m.tied_embeddings) p += (rows - static_cast<double>(m.vocab_size)) * h(m);
      if (vocabulary && m.tied_embeddings && head_holds_word_embedding) p += rows * h(m);
      return p;
    }
  }
  return 0;
}

int effective_sequence(const ModelSpec& m, int seq) {
  return m.family == "vit" ? vit_patches(m) + 1 : seq;
}

UnitFlops unit_flops(const ModelSpec& m, int unit, int seq_in, int micro_batch) {
  const int seq = effective_sequence(m, seq_in);
  double tokens = static_cast<double>(seq) * micro_batch;
  UnitFlops f;
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding:
      f.forward = m.family == "vit"
                      ? 2 * (tokens - micro_batch) * m.channels * m.patch_size * m.patch_size * h(m)
                      : 0;
      break;
    case UnitKind::Layer:
      // GEMMs: 2 FLOPs per weight per token; attention scores and context: 2·2·b·s²·h.
      f.forward = 2 * tokens * layer_matmul_weights(m) +
                  4.0 * micro_batch * static_cast<double>(seq) * seq * h(m);
      break;
    case UnitKind::Head: {
      double out = m.family == "vit" ? m.num_classes : m.vocab_size;
      double rows = m.family == "vit" ? micro_batch : tokens;
      f.forward = 2 * rows * h(m) * out;
      if (m.family == "bert") f.forward += 2 * rows * h(m) * h(m);  // MLM transform
      break;
    }
  }
  // Backward computes gradients for inputs and weights: twice the forward GEMM work.
  f.backward = 2 * f.forward;
  return f;
}

LayerKeptBytes layer_kept_bytes_per_token(const ModelSpec& m, Dtype dtype) {
  // Activations saved inside one transformer layer for its backward, counted tensor by tensor
  // as GptModel::layer_forward keeps them (cf. Korthikanti et al., 2022, whose 34·s·b·h bytes
  // at 16 bits also hold the layer's input, here the checkpointed boundary that the
  // activations term already holds, and two dropout masks; no dropout here). Per token, in the
  // compute dtype: the first norm's output (h), q, k, v (h + 2·kv), the attention context (h),
  // the residual sum after attention (h), the second norm's output (h), and the MLP's
  // pre-activation and activation (2f; a gated MLP keeps gate, up and their product: 3f). In
  // fp32: each norm's statistics (mean and rstd for LayerNorm, rstd for RMSNorm) and one
  // softmax log-sum-exp per head. No s×s attention probabilities: memory-efficient attention
  // (PyTorch SDPA / flash, and the backend's) keeps none; eager attention's scores are
  // eager_attention_bytes. (Against the published Cephalo memory curves the s×s term raised
  // the median error from 20.9% to 23.3%.)
  // Megatron's column / row split leaves the norms' outputs and statistics and the residual
  // sum whole on every TP rank (the inputs of the column-parallel GEMMs and of the norms); q,
  // k, v, the context, the log-sum-exps (by head) and the MLP's inner activations are split.
  const double e = bytes_per_element(dtype);
  const double fp32_stats = 2.0 * (m.norm == "layernorm" ? 2 : 1);
  LayerKeptBytes k;
  k.replicated = 3 * h(m) * e + fp32_stats * 4.0;
  k.split = (2 * h(m) + 2 * kv_dim(m) + (m.activation == "swiglu" ? 3.0 : 2.0) * m.ffn_hidden) * e +
            m.heads * 4.0;
  return k;
}

double boundary_activation_bytes(const ModelSpec& m, int seq, int micro_batch, Dtype dtype) {
  return static_cast<double>(effective_sequence(m, seq)) * micro_batch * h(m) *
         bytes_per_element(dtype);
}

double unit_working_bytes(const ModelSpec& m, int unit, int seq_in, int micro_batch, Dtype dtype,
                          const Implementation& impl) {
  const int seq = effective_sequence(m, seq_in);
  double b = micro_batch, s = seq;
  switch (unit_kind(m, unit)) {
    case UnitKind::Layer: {
      const LayerKeptBytes k = layer_kept_bytes_per_token(m, dtype);
      return s * b * (k.replicated + k.split);
    }
    case UnitKind::Embedding:
      return boundary_activation_bytes(m, seq, micro_batch, dtype) * 2;
    case UnitKind::Head: {
      if (m.family == "vit") return b * (h(m) + m.num_classes) * 4.0;
      // Logits in the compute dtype plus, for the framework's cross-entropy, an fp32
      // log-softmax of their size that becomes their gradient; a fused cross-entropy keeps one
      // fp32 log-sum-exp per token and writes the gradient in the logits' dtype.
      if (impl.cross_entropy == LossKernel::Fused)
        return s * b * (2.0 * m.vocab_size * bytes_per_element(dtype) + 4.0);
      return s * b * m.vocab_size * (bytes_per_element(dtype) + 4.0);
    }
  }
  return 0;
}

double unit_backward_transient_bytes(const ModelSpec& m, int unit, int seq_in, int micro_batch,
                                     Dtype dtype) {
  if (unit_kind(m, unit) != UnitKind::Layer) return 0;
  const double tokens = static_cast<double>(effective_sequence(m, seq_in)) * micro_batch;
  // Per token, in elements of the compute dtype: the residual gradient (h) lives through the
  // whole backward; around the MLP activation it meets the gradients of the activation's
  // output and input (f each; a gated MLP also the up projection's: 3f), in attention the
  // context gradient (h) and the q, k, v gradients (h + 2·kv).
  const double mlp = h(m) + (m.activation == "swiglu" ? 3.0 : 2.0) * m.ffn_hidden;
  const double attention = 3 * h(m) + 2 * kv_dim(m);
  return tokens * std::max(mlp, attention) * bytes_per_element(dtype);
}

double output_tiles(double m, double n, double batch) {
  return batch * std::ceil(m / 128.0) * std::ceil(n / 128.0);
}

double wave_efficiency(double tiles, int sm_count) {
  if (!(tiles > 0) || sm_count <= 0) return 1;
  const double waves = std::ceil(tiles / sm_count);
  return tiles / (waves * sm_count);
}

bool causal_attention(const ModelSpec& m) { return m.family == "gpt" || m.family == "llama"; }

double attended_fraction(const ModelSpec& m, double s) {
  if (!causal_attention(m)) return 1;
  const double w = m.attention_window;
  // Query i sees min(i + 1, w) keys: s·w − w²/2 of the s² scores (continuous with the causal
  // half at w = s).
  if (w > 0 && w < s) return (s * w - 0.5 * w * w) / (s * s);
  return 0.5;
}

double eager_attention_bytes(const ModelSpec& m, int unit, int seq_in, int micro_batch,
                             const Implementation& impl) {
  if (impl.attention != AttentionKernel::Eager || unit_kind(m, unit) != UnitKind::Layer) return 0;
  const double s = effective_sequence(m, seq_in);
  return 2.0 * micro_batch * m.heads * s * s * 4.0;
}

std::string to_string(OpClass c) {
  switch (c) {
    case OpClass::Gemm:
      return "gemm";
    case OpClass::Attention:
      return "attention";
    case OpClass::FusedAttention:
      return "fused_attention";
    case OpClass::Memory:
      return "memory";
  }
  return "?";
}

double optimizer_bytes_per_parameter(Dtype params, Dtype reduce, Dtype compute) {
  // Read master, grad, m, v; write master, m, v and the low-precision copy.
  double p = bytes_per_element(params), g = bytes_per_element(reduce);
  return 2 * p + g + 2 * 4.0 * 2 + bytes_per_element(compute);
}

std::vector<OpCost> unit_ops(const ModelSpec& m, int unit, int seq_in, int micro_batch, Dtype dtype,
                             const Implementation& impl) {
  const bool fused = impl.fused();
  const double e = bytes_per_element(dtype);
  const double s = effective_sequence(m, seq_in), b = micro_batch, hd = h(m);
  const double tokens = s * b;
  std::vector<OpCost> ops;
  ops.reserve(16);
  // A GEMM [rows×k]·[k×n]: backward computes the input and the weight gradient (2× FLOPs,
  // reading the saved input, the weight and the output gradient).
  auto gemm = [&](const char* name, double rows, double k, double n) {
    OpCost op{name, OpClass::Gemm};
    op.forward_flops = 2 * rows * k * n;
    op.forward_bytes = e * (rows * k + k * n + rows * n);
    op.backward_flops = 2 * op.forward_flops;
    op.backward_bytes = 2 * op.forward_bytes;
    op.backward_kernels = 2;
    op.tiles = output_tiles(rows, n);
    op.weights = k * n;
    ops.push_back(op);
  };
  // A bandwidth-bound elementwise kernel over `elements` values: `passes` reads+writes.
  auto memory = [&](const char* name, double elements, double passes, double flops_per) {
    OpCost op{name, OpClass::Memory};
    op.forward_flops = flops_per * elements;
    op.forward_bytes = e * elements * passes;
    op.backward_flops = 2 * op.forward_flops;
    op.backward_bytes = 1.5 * op.forward_bytes;  // reads output grad + saved input, writes grad
    ops.push_back(op);
  };
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding:
      if (m.family == "vit") {
        gemm("patch_embed", tokens - b,
             static_cast<double>(m.channels) * m.patch_size * m.patch_size, hd);
        memory("position_add", tokens * hd, 3, 1);
      } else {
        memory("embedding_gather", tokens * hd, m.max_positions > 0 ? 4 : 2, 1);
      }
      break;
    case UnitKind::Layer: {
      const double kv = kv_dim(m), f = m.ffn_hidden, a = m.heads;
      // Fused: the previous layer's residual add is done by this norm (reads both, writes
      // the sum and the normalised output); the embedding's output needs no add.
      memory("norm1", tokens * hd, fused ? 4 : 2, 5);
      gemm("qkv", tokens, hd, hd + 2 * kv);
      // A compiled stack's rotary positions are one generated kernel over q and k (read,
      // write). The eager op list leaves them out: their kernels are part of what the
      // memory-bound coefficient fitted on eager layers holds, which a compiled stack's
      // generated kernels are not priced with (CalibratedComputeModel::unit_time).
      if (impl.compiled && m.family == "llama") memory("rope", tokens * (hd + kv), 2, 6);
      if (impl.attention == AttentionKernel::Flash) {
        OpCost fa{"flash_attention", OpClass::FusedAttention};
        fa.forward_flops = 4 * b * s * s * hd * attended_fraction(m, s);
        // q, k, v read, o written, one fp32 log-sum-exp per head and row.
        fa.forward_bytes = e * tokens * (2 * hd + 2 * kv) + 4 * b * a * s;
        fa.backward_flops = 2.5 * fa.forward_flops;
        // q, k, v, o, dO and the lse read; dq, dk, dv written (plus the dO·O row sums).
        fa.backward_bytes = e * tokens * (4 * hd + 4 * kv + hd) + 8 * b * a * s;
        fa.backward_kernels = 2;
        fa.forward_exps = b * a * s * s * attended_fraction(m, s);
        fa.backward_exps = fa.forward_exps;
        // One block per 128 query rows of each (sample, head).
        fa.tiles = output_tiles(s, 128, b * a);
        fa.legacy_mma = impl.flash_kernel == FlashKernel::FlashAttn;
        ops.push_back(fa);
      } else {
        OpCost scores{"scores", OpClass::Attention};
        scores.forward_flops = 2 * b * s * s * hd;
        scores.forward_bytes = e * (2 * tokens * hd + b * a * s * s);
        scores.backward_flops = 2 * scores.forward_flops;
        scores.backward_bytes = 2 * scores.forward_bytes;
        scores.backward_kernels = 2;
        ops.push_back(scores);
        memory("softmax", b * a * s * s, 2, 5);
        OpCost context = scores;
        context.name = "context";
        ops.push_back(context);
      }
      gemm("attn_proj", tokens, hd, hd);
      if (!fused) memory("residual1", tokens * hd, 3, 1);
      memory("norm2", tokens * hd, fused ? 4 : 2, 5);
      if (m.activation == "swiglu") {
        gemm("mlp_gate_up", tokens, hd, 2 * f);
        memory("swiglu", tokens * f, 3, 8);
      } else {
        gemm("mlp_up", tokens, hd, f);
        // ReLU and GELU are one bandwidth-bound elementwise kernel each; only the FLOPs differ.
        if (m.activation == "relu")
          memory("relu", tokens * f, 2, 1);
        else
          memory("gelu", tokens * f, 2, 8);
      }
      gemm("mlp_down", tokens, f, hd);
      if (!fused) memory("residual2", tokens * hd, 3, 1);
      break;
    }
    case UnitKind::Head:
      if (m.family == "vit") {
        memory("final_norm", tokens * hd, 2, 5);
        gemm("classifier", b, hd, m.num_classes);
      } else {
        if (m.family == "bert") {
          gemm("mlm_transform", tokens, hd, hd);
          memory("mlm_norm", tokens * hd, 2, 5);
        } else {
          memory("final_norm", tokens * hd, 2, 5);
        }
        gemm("lm_head", tokens, hd, m.vocab_size);
        // Cross-entropy reads the logits, writes fp32 softmax, backward writes logit grads; a
        // fused kernel reads the logits once forward (per-token log-sum-exps only), and
        // backward reads them again and writes their gradient in their dtype.
        const bool fused_loss = impl.cross_entropy == LossKernel::Fused;
        OpCost loss{"cross_entropy", OpClass::Memory};
        loss.forward_flops = 5 * tokens * m.vocab_size;
        loss.forward_bytes = tokens * m.vocab_size * (fused_loss ? e : e + 4);
        loss.backward_flops = 2 * tokens * m.vocab_size;
        loss.backward_bytes = tokens * m.vocab_size * (fused_loss ? 2 * e : 4 + e);
        ops.push_back(loss);
      }
      break;
  }
  return ops;
}

}  // namespace cephalo::costmodels

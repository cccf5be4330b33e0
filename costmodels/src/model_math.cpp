#include "cephalo/costmodels/model_math.hpp"

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

double norm_parameters(const ModelSpec& m) { return m.norm == "layernorm" ? 2 * h(m) : h(m); }

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
  if (m.bias) biases = (h(m) + 2 * kv_dim(m)) + h(m) + (m.activation == "swiglu" ? 2.0 : 1.0) * m.ffn_hidden + h(m);
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
  if (!m.tied_embeddings) p += static_cast<double>(m.vocab_size) * h(m);
  return p;
}

double unit_parameters(const ModelSpec& m, int unit) {
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding: return embedding_parameters(m);
    case UnitKind::Layer: return layer_parameters(m);
    case UnitKind::Head: return head_parameters(m);
  }
  return 0;
}

double total_parameters(const ModelSpec& m) {
  return embedding_parameters(m) + m.num_layers * layer_parameters(m) + head_parameters(m);
}

UnitFlops unit_flops(const ModelSpec& m, int unit, int seq, int micro_batch) {
  double tokens = static_cast<double>(seq) * micro_batch;
  UnitFlops f;
  switch (unit_kind(m, unit)) {
    case UnitKind::Embedding:
      f.forward = m.family == "vit" ? 2 * tokens * m.channels * m.patch_size * m.patch_size * h(m) : 0;
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
      break;
    }
  }
  // Backward computes gradients for inputs and weights: twice the forward GEMM work.
  f.backward = 2 * f.forward;
  return f;
}

double boundary_activation_bytes(const ModelSpec& m, int seq, int micro_batch, Dtype dtype) {
  return static_cast<double>(seq) * micro_batch * h(m) * bytes_per_element(dtype);
}

double unit_working_bytes(const ModelSpec& m, int unit, int seq, int micro_batch, Dtype dtype) {
  double b = micro_batch, s = seq, a = m.heads;
  double scale = bytes_per_element(dtype) / 2.0;  // the closed form is for 16-bit activations
  switch (unit_kind(m, unit)) {
    case UnitKind::Layer:
      // Activations saved inside one transformer layer (Korthikanti et al., 2022, no
      // recomputation): s·b·h·(34 + 5·a·s/h) bytes at 16 bits.
      return s * b * h(m) * (34.0 + 5.0 * a * s / h(m)) * scale;
    case UnitKind::Embedding: return boundary_activation_bytes(m, seq, micro_batch, dtype) * 2;
    case UnitKind::Head: {
      double out = m.family == "vit" ? m.num_classes : m.vocab_size;
      // Logits in the compute dtype plus fp32 softmax for the loss.
      return s * b * out * (bytes_per_element(dtype) + 4.0);
    }
  }
  return 0;
}

}  // namespace cephalo::costmodels

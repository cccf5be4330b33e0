#pragma once
// Closed forms for a transformer's parameters, FLOPs and activation sizes, per FSDP unit.
// Units: 0 = embedding (token + position, plus patch projection for ViT), 1..L = layers,
// L+1 = head (final norm + LM/classifier head, whose weight is the embedding when tied).
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

enum class UnitKind { Embedding, Layer, Head };

int num_units(const ModelSpec& model);  // layers + 2
UnitKind unit_kind(const ModelSpec& model, int unit);

double layer_parameters(const ModelSpec& model);
double embedding_parameters(const ModelSpec& model);
double head_parameters(const ModelSpec& model);  // excludes a tied weight
double unit_parameters(const ModelSpec& model, int unit);
// Parameters a phase of `unit` gathers and reduce-scatters: the unit's own, plus, for the head
// of a model with tied embeddings, the whole embedding unit (the backend's head phases gather
// unit 0 in front of the head, whose logits use wte, and reduce its wte gradient into unit 0).
double phase_parameters(const ModelSpec& model, int unit);
double total_parameters(const ModelSpec& model);

// Floating-point operations of one unit for `micro_batch` samples of `seq` tokens
// (multiply-add = 2 FLOPs). Backward is the gradient pass only (no recompute).
struct UnitFlops {
  double forward = 0;
  double backward = 0;
};
UnitFlops unit_flops(const ModelSpec& model, int unit, int seq, int micro_batch);

// Bytes of the activation at a unit's input boundary (what layered accumulation keeps per
// micro-batch), and a unit's working set: what its forward (and the recompute before its
// backward) keeps for the backward, on top of the boundaries.
double boundary_activation_bytes(const ModelSpec& model, int seq, int micro_batch, Dtype dtype);
double unit_working_bytes(const ModelSpec& model, int unit, int seq, int micro_batch, Dtype dtype);
// Peak bytes of the input-gradient temporaries a unit's backward holds on top of its working
// set (the saved activations) and of its output gradient (a boundary): for a transformer layer
// max(h + 2f, 3h + 2·kv) per token (h + 3f with a gated MLP) in the compute dtype, what
// GptModel::layer_backward allocates at its two high-water marks (GELU and attention backward).
// Zero for embedding and head: the head's fp32-softmax-sized buffer in unit_working_bytes
// covers its input-gradient temporaries.
double unit_backward_transient_bytes(const ModelSpec& model, int unit, int seq, int micro_batch,
                                     Dtype dtype);

// Tokens per sample the model actually processes: the job's sequence length for language
// models, patches + class token for ViT (whose input size is fixed by image and patch size).
int effective_sequence(const ModelSpec& model, int seq);

// The kernels of one unit, for the roofline and calibrated compute models. Op classes:
//   Gemm      dense matrix multiplies against weights (QKV, projection, MLP, head, patch embed)
//   Attention the batched s×s matmuls of attention (scores and context)
//   Memory    bandwidth-bound kernels (norms, softmax, activations, residual adds, embedding
//             gather, dropout-free loss), costed by the bytes they read and write
enum class OpClass { Gemm, Attention, Memory };
std::string to_string(OpClass op_class);

struct OpCost {
  const char* name = "";  // "qkv", "scores", "softmax", "mlp_up", ... (static strings)
  OpClass op_class = OpClass::Gemm;
  double forward_flops = 0;
  double forward_bytes = 0;   // bytes read + written by the forward kernel
  double backward_flops = 0;  // gradient pass (input and weight gradients)
  double backward_bytes = 0;
  int forward_kernels = 1;  // launches, for the per-kernel overhead term
  int backward_kernels = 1;
};

// Every op of one unit for `micro_batch` samples. Sums of forward_flops over the ops equal
// unit_flops(...).forward for the layer's GEMM and attention classes (the Memory class adds
// its own small FLOP counts, which unit_flops leaves out).
std::vector<OpCost> unit_ops(const ModelSpec& model, int unit, int seq, int micro_batch,
                             Dtype dtype);

// Bytes an AdamW step reads and writes per parameter: fp32 master, gradient (reduce dtype),
// m and v read and written, plus the compute-dtype copy of the parameter written back.
double optimizer_bytes_per_parameter(Dtype params, Dtype reduce, Dtype compute);

}  // namespace cephalo::costmodels

#pragma once
#include <cstdint>
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

// ---- tensor parallelism (DESIGN §4, "A split in the plan and the graph") ----
// The word-embedding rows TP rank t of T holds: [floor(V·t/T), floor(V·(t+1)/T)).
struct VocabRows {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};
VocabRows vocab_rows(std::int64_t vocab, int tensor_parallel, int tp_rank);
// Elements of TP rank t's flat buffer of `unit` under T-way tensor parallelism: a layer's
// column-parallel weights and biases and its row-parallel weights 1/T, its norms and
// row-parallel biases whole; the embedding's and an untied head's vocabulary rows (vocab_rows),
// the position embedding and final norm whole. `head_holds_word_embedding`: the head of a tied
// model on another pipeline stage than the embedding keeps its own copy of its rows. T = 1 and
// no copy: unit_parameters.
double unit_parameters(const ModelSpec& model, int unit, int tensor_parallel, int tp_rank,
                       bool head_holds_word_embedding = false);

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
// Per token, the bytes a layer's forward keeps for its backward (its unit_working_bytes over
// s·b), in the part tensor parallelism leaves whole on every rank (the norms' outputs and
// statistics, the residual sum) and the part it splits by T (q, k, v, context, log-sum-exps,
// the MLP's inner activations): the one rule of a layer's kept activations under a split.
struct LayerKeptBytes {
  double replicated = 0;
  double split = 0;
};
LayerKeptBytes layer_kept_bytes_per_token(const ModelSpec& model, Dtype dtype);
// A unit's working set under the job's stack (the head's loss buffer depends on its
// cross-entropy kernel); by default the default stack's (eager cross-entropy, what the backend
// runs).
double unit_working_bytes(const ModelSpec& model, int unit, int seq, int micro_batch, Dtype dtype,
                          const Implementation& impl = Implementation{});
// Peak bytes of the input-gradient temporaries a unit's backward holds on top of its working
// set (the saved activations) and of its output gradient (a boundary): for a transformer layer
// max(h + 2f, 3h + 2·kv) per token (h + 3f with a gated MLP) in the compute dtype, what
// GptModel::layer_backward allocates at its two high-water marks (GELU and attention backward).
// Zero for embedding and head: the head's loss buffer in unit_working_bytes (fp32-softmax-sized,
// or the fused kernel's gradient in the logits' dtype) covers its input-gradient temporaries.
double unit_backward_transient_bytes(const ModelSpec& model, int unit, int seq, int micro_batch,
                                     Dtype dtype);
// Extra bytes eager attention holds while a layer's attention runs on a GPU: the s×s scores of
// every head of the micro-batch in fp32 (softmax output overwrites them in place) and, in the
// backward, their gradient dP as well (2 × b·heads·s² × 4 B). What PyTorch eager attention and
// the CUDA backend's materialised-score attention allocate; 0 for flash attention, for units
// that are not layers, and on CPU devices (the CPU backend computes one head's s×s at a time,
// outside the device allocator).
double eager_attention_bytes(const ModelSpec& model, int unit, int seq, int micro_batch,
                             const Implementation& impl);

// Whether the model's self-attention is causal (decoders: GPT, LLaMA) or bidirectional (BERT,
// ViT): flash attention skips the masked half of the s×s products only when causal.
bool causal_attention(const ModelSpec& model);
// Fraction of the s×s scores flash attention computes: 1 bidirectional, ½ causal, and with a
// sliding window w < s (Mistral) (s·w − w²/2) / s², each query seeing at most w keys.
double attended_fraction(const ModelSpec& model, double seq);

// Tokens per sample the model actually processes: the job's sequence length for language
// models, patches + class token for ViT (whose input size is fixed by image and patch size).
int effective_sequence(const ModelSpec& model, int seq);

// The kernels of one unit, for the roofline and calibrated compute models. Op classes:
//   Gemm      dense matrix multiplies against weights (QKV, projection, MLP, head, patch embed)
//   Attention the batched s×s matmuls of eager attention (scores and context)
//   FusedAttention one FlashAttention kernel (forward) / two (backward): QKᵀ, softmax and PV in
//             on-chip memory, only q, k, v, o and the log-sum-exp in DRAM; causal masking
//             skips half the products; the backward recomputes the scores (5 matmuls of the
//             forward's 2, i.e. 2.5× its FLOPs)
//   Memory    bandwidth-bound kernels (norms, softmax, activations, residual adds, embedding
//             gather, dropout-free loss), costed by the bytes they read and write
enum class OpClass { Gemm, Attention, FusedAttention, Memory };
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
  // Output tiles of the kernel's grid (GEMMs and flash attention; 0 otherwise): 128×128 output
  // tiles, one thread block each, run in waves over the SMs (a 132-SM GPU runs 133 tiles in
  // two waves, the second nearly empty).
  double tiles = 0;
  // Exponentials evaluated on the special-function units (flash attention's softmax: one per
  // score element in the forward, one again in the backward, which recomputes the
  // probabilities); 0 for the other ops, whose exponentials hide under their memory traffic.
  double forward_exps = 0;
  double backward_exps = 0;
  // Elements of the weight a GEMM multiplies by (k·n; 0 for the other ops): what a stack's
  // weight-gradient path passes over once per backward call (weight_gradients.hpp).
  double weights = 0;
  // Flash attention run with Ampere's warp-level mma.sync (FlashAttention-2): its matmuls reach
  // legacy_mma_fraction of the peak. False for the other ops and for a kernel that issues each
  // architecture's own instructions (cuDNN's fused attention, Implementation::flash_kernel).
  bool legacy_mma = false;
};
// Output tiles of an [m×n] result in 128×128 blocks, times `batch` independent products.
double output_tiles(double m, double n, double batch = 1);
// Fraction of the SM-time a grid of `tiles` blocks keeps busy on `sm_count` SMs (1 when either
// is 0): tiles / (waves · SMs) with waves = ⌈tiles / SMs⌉.
double wave_efficiency(double tiles, int sm_count);

// Every op of one unit for `micro_batch` samples, as the implementation runs them. With eager
// attention, sums of forward_flops over the ops equal unit_flops(...).forward for the layer's
// GEMM and attention classes (the Memory class adds its own small FLOP counts, which
// unit_flops leaves out); flash attention executes fewer (causal halving). Unfused elementwise
// code runs each residual add as its own kernel; fused, the add is done by the following norm
// (one kernel reading both inputs, writing the sum and the normalised output).
std::vector<OpCost> unit_ops(const ModelSpec& model, int unit, int seq, int micro_batch,
                             Dtype dtype, const Implementation& impl = {});

// Bytes an AdamW step reads and writes per parameter: fp32 master, gradient (reduce dtype),
// m and v read and written, plus the compute-dtype copy of the parameter written back.
double optimizer_bytes_per_parameter(Dtype params, Dtype reduce, Dtype compute);

}  // namespace cephalo::costmodels

#pragma once
// The GPT decoder the backend trains (DESIGN §7): token + position embedding, pre-LN blocks
// (causal multi-head attention, GELU MLP, residuals), final layer norm, a head tied to the
// token embedding or with its own weight (the model's `tied_embeddings`), softmax
// cross-entropy. Parameters live in one flat buffer per FSDP unit:
//   unit 0      embedding: wte [vocab x hidden], wpe [positions x hidden] (the first seq rows
//                          are used)
//   unit 1..L   layer l:   ln1 g,b | w_qkv [h x 3h], b_qkv | w_proj [h x h], b_proj |
//                          ln2 g,b | w_fc [h x f], b_fc | w_out [f x h], b_out
//   unit L+1    head:      final norm g,b, then, untied, w_head [vocab x hidden]
//                          (tied: the logits use unit 0's wte)
// Weights are stored [in x out] so a linear layer is y = x W + b. Every compute function runs
// on a Device with views of the gathered unit parameters; gradients ACCUMULATE into the
// unit's gradient buffer (micro-batches sum), input gradients are overwritten.
// Precision: the element type of the input activations and gathered parameters (F32, BF16 or
// F16) is the compute type of every activation and input gradient the model allocates; the
// gradient buffers may be that type or F32 (device.hpp's mixed-precision contract).
//
// Tensor parallelism (DESIGN §4, "A split in the plan and the graph", Units; Megatron-LM's
// split): a model built for TP degree T and TP rank t holds, in every unit's flat buffer, its
// slice of the single-rank unit, in the same slot order with the split slots narrowed:
//   layer      w_qkv [h x 3h/T] (the q, k and v columns of heads [t·H/T, (t+1)·H/T), side by
//              side as q | k | v), b_qkv [3h/T], w_proj [h/T x h] (the rows of those heads),
//              w_fc [h x f/T] and b_fc [f/T] (columns [t·f/T, (t+1)·f/T)), w_out [f/T x h] (the
//              same rows); ln1, ln2, b_proj, b_out replicated;
//   embedding  wte rows [⌊V·t/T⌋, ⌊V·(t+1)/T⌋) (vocabulary-parallel), wpe replicated;
//   head       final norm replicated, w_head (untied) the same vocabulary rows.
// Its initial values are the single-rank unit's values at those places (`slice_runs`), so TP
// training starts from, and follows, single-rank training. The math issues its collectives on
// the TP group's communicator on the compute stream, where it needs them: a layer's forward
// (and recompute) all-reduces the two row-parallel outputs, its backward the two
// column-parallel input gradients; the embedding's forward all-reduces its partial lookups; the
// head's forward all-reduces the vocabulary-parallel cross-entropy's row maximum, sum of
// exponentials and target logit, its backward the input gradient. Replicated parameters get
// equal gradients on the T ranks (no reduction). Sequence parallelism is not implemented.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/core/specs.hpp"

namespace cephalo::backend {

struct GptConfig {
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int ffn = 256;
  int vocab = 256;
  int seq = 32;
  int positions = 0;  // rows of wpe: the model's max_positions (0 = seq)
  float ln_eps = 1e-5f;
  bool tied_head = true;  // logits use the embedding's wte; false: the head's own w_head
  std::uint64_t init_seed = 1234;

  // From a catalog/inline ModelSpec and the job's sequence length; InfeasibleError for
  // architectures this backend does not implement (non-GPT families, rotary, SwiGLU, ...).
  static GptConfig from_spec(const ModelSpec& spec, int sequence_length);
  static GptConfig tiny();  // the test preset: 2 layers, hidden 64, 4 heads, vocab 256, seq 32
  int position_rows() const { return positions > 0 ? positions : seq; }
};

// Offset and length of a named tensor inside its unit's flat buffer.
struct ParamSlot {
  std::string name;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
};

// A model's place in its tensor-parallel group (degree 1: the whole model, no collectives).
struct TensorParallel {
  int degree = 1;
  int rank = 0;
  // The group's communicator (`degree` ranks, numbered by TP rank): the compute functions need
  // it under degree > 1; layouts and initial values do not.
  Communicator* comm = nullptr;
  // A tied head on another pipeline stage than the embedding keeps its own copy of its word-
  // embedding rows (DESIGN §4), as a `w_head` slot after the final norm (the untied layout): its
  // logits use the copy, its gradient goes there, and its initial values are wte's. The copy is
  // not part of the single-rank unit (`slice_runs` leave it out: `word_embedding_copy`).
  bool head_holds_word_embedding = false;
};

// `count` consecutive elements of a tensor-parallel slice's flat buffer, from element `local`,
// are the single-rank unit's elements from `full`. `replicated`: every TP rank holds them (a
// norm, a row-parallel bias, wpe), so a whole-model view takes them from one rank only.
struct SliceRun {
  std::int64_t full = 0;
  std::int64_t local = 0;
  std::int64_t count = 0;
  bool replicated = false;
};

// One collective the math issued, bracketed by events on the compute stream (both complete
// once the stream has passed them): the executor reports their sum as the op's TP collective.
struct TpCall {
  std::unique_ptr<Event> start, end;
};

// Activations of one layer for `rows` = micro_batch * seq tokens (forward saves them, backward
// reads them; with recompute they exist for one layer at a time).
struct LayerActivations {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, att, att_lse, mid, ln2, ln2_mean, ln2_rstd, fc, act;
};

// What the head's forward keeps for its backward: the normed input, its statistics, the logits
// (this rank's vocabulary columns) and their rows' log-sum-exp over the whole vocabulary.
struct HeadActivations {
  Buffer h, mean, rstd, logits, lse;
};

class GptModel {
 public:
  // InfeasibleError when the tensor-parallel degree does not divide the heads or the MLP's
  // width, exceeds the vocabulary, or the rank is outside the group.
  explicit GptModel(const GptConfig& config, TensorParallel tp = {});
  // Why `config` cannot be split `degree` ways (the refusal the constructor throws), or "".
  static std::string tensor_parallel_refusal(const GptConfig& config, int degree);
  const GptConfig& config() const { return config_; }
  const TensorParallel& tensor_parallel() const { return tp_; }

  int num_units() const { return config_.layers + 2; }
  bool is_layer(int unit) const { return unit >= 1 && unit <= config_.layers; }
  int head_unit() const { return config_.layers + 1; }
  // This rank's slice (the whole unit under degree 1) and the single-rank unit.
  std::int64_t unit_numel(int unit) const;
  std::int64_t full_unit_numel(int unit) const;
  const std::vector<ParamSlot>& unit_slots(int unit) const;
  std::string unit_name(int unit) const;  // "embedding", "layer 3", "head"
  // The whole model's unique parameters (tied weight counted once), whatever the slice.
  std::int64_t total_parameters() const;
  // Training FLOPs of the whole model (forward + backward, no recompute) for `samples`.
  double training_flops(double samples) const;
  // The vocabulary ids of this rank's embedding and head rows.
  VocabSlice vocab_slice() const { return vocab_; }

  // Where the slice's elements sit in the single-rank unit: runs in ascending `local` order
  // covering the slice (one run under degree 1), except a head's word-embedding copy.
  const std::vector<SliceRun>& slice_runs(int unit) const;
  // The head's word-embedding copy: its elements [begin, begin + count) of the head's buffer
  // mirror unit 0's wte slice (count 0 when the head holds none).
  struct Copy {
    std::int64_t begin = 0;
    std::int64_t count = 0;
  };
  Copy word_embedding_copy() const;
  // The slice of a single-rank unit's values, and the slice's values put back in place.
  std::vector<float> slice_of(int unit, const std::vector<float>& full) const;
  void place_in(int unit, const float* local, float* full) const;

  // Deterministic initial values of this rank's slice of a unit: the single-rank unit's
  // (GPT-2 style: N(0, 0.02), projections into the residual scaled by 1/sqrt(2L), norms at
  // 1/0, biases 0) at the slice's places. Same on every rank of a slice.
  std::vector<float> initial_unit(int unit) const;

  // The tensor-parallel collectives issued since the last call (empty under degree 1).
  std::vector<TpCall> take_tp_calls() const;

  // ---- compute (rows = micro_batch * seq) ----
  void embedding_forward(Device& d, TensorRef params, TensorRef tokens, TensorRef out,
                         std::int64_t rows) const;
  void embedding_backward(Device& d, TensorRef grads, TensorRef tokens, TensorRef dout,
                          std::int64_t rows) const;
  // Allocates `acts` on first use for `rows` and fills them; writes the block output to `y`.
  void layer_forward(Device& d, TensorRef params, TensorRef x, TensorRef y, LayerActivations& acts,
                     std::int64_t rows) const;
  // Selective recompute (Korthikanti et al., 2022; the graph's attention-core Recompute op):
  // after a kept forward, drop the attention kernel's own saved state (its log-sum-exps; q, k,
  // v and the attention output stay, as the projections' inputs); before the backward,
  // recompute it from the kept q, k, v (the attention output is rewritten with the same values,
  // no allocation beyond the log-sum-exps). No collective: each TP rank runs its own heads.
  void drop_attention_core(LayerActivations& acts) const;
  void recompute_attention_core(Device& d, LayerActivations& acts, std::int64_t rows) const;
  // Needs `acts` from layer_forward on the same x. dx overwritten, grads accumulated.
  void layer_backward(Device& d, TensorRef params, TensorRef grads, TensorRef x,
                      const LayerActivations& acts, TensorRef dy, TensorRef dx,
                      std::int64_t rows) const;
  // Final norm + head + cross-entropy. Returns the sum of token losses of the micro-batch.
  // When `dx` is non-empty also runs backward: token-loss gradients scaled by `grad_scale`,
  // dx overwritten, head grads (final norm, w_head) accumulated, and with a tied head the wte
  // gradient into embedding_grads. Untied, embedding_params / embedding_grads are not used.
  double head_forward_backward(Device& d, TensorRef head_params, TensorRef embedding_params,
                               TensorRef x, TensorRef targets, std::int64_t rows, float grad_scale,
                               TensorRef dx, TensorRef head_grads, TensorRef embedding_grads) const;
  // The same in two parts, for a graph whose head recomputes in an op of its own before the
  // backward (the split graph: the recompute issues the forward's 3 TP collectives, the
  // backward 1): the forward returns the loss sum and, with `keep`, keeps what the backward
  // reads; the backward then takes it.
  double head_forward(Device& d, TensorRef head_params, TensorRef embedding_params, TensorRef x,
                      TensorRef targets, std::int64_t rows, HeadActivations* keep) const;
  void head_backward(Device& d, TensorRef head_params, TensorRef embedding_params, TensorRef x,
                     TensorRef targets, std::int64_t rows, float grad_scale, HeadActivations& kept,
                     TensorRef dx, TensorRef head_grads, TensorRef embedding_grads) const;

 private:
  TensorRef slot(TensorRef unit, int unit_index, int slot_index) const;
  TensorRef used_positions(TensorRef embedding) const;  // wpe's first seq rows
  std::vector<float> full_initial_unit(int unit) const;
  // In place over the TP group on the compute stream (nothing under degree 1), timed.
  void tp_all_reduce(Device& d, TensorRef x, ReduceOp op) const;
  GptConfig config_;
  TensorParallel tp_;
  VocabSlice vocab_;
  std::vector<std::vector<ParamSlot>> slots_, full_slots_;
  std::vector<std::vector<SliceRun>> runs_;
  mutable std::vector<TpCall> tp_calls_;
};

// Deterministic synthetic token stream: sample `index` of step `step` is a sequence of
// seq + 1 tokens of a noisy fixed bigram chain over the first min(vocab, 64) ids (learnable,
// so the loss falls), seeded by (seed, step, index). tokens[i] = seq[i], targets[i] = seq[i+1].
void synthetic_sample(const GptConfig& config, std::uint64_t seed, std::int64_t step,
                      std::int64_t index, std::int32_t* tokens, std::int32_t* targets);

}  // namespace cephalo::backend

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
#include <cstdint>
#include <string>
#include <vector>

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

// Activations of one layer for `rows` = micro_batch * seq tokens (forward saves them, backward
// reads them; with recompute they exist for one layer at a time).
struct LayerActivations {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, att, att_lse, mid, ln2, ln2_mean, ln2_rstd, fc, act;
};

class GptModel {
 public:
  explicit GptModel(const GptConfig& config);
  const GptConfig& config() const { return config_; }

  int num_units() const { return config_.layers + 2; }
  bool is_layer(int unit) const { return unit >= 1 && unit <= config_.layers; }
  int head_unit() const { return config_.layers + 1; }
  std::int64_t unit_numel(int unit) const;
  const std::vector<ParamSlot>& unit_slots(int unit) const;
  std::string unit_name(int unit) const;  // "embedding", "layer 3", "head"
  std::int64_t total_parameters() const;  // unique parameters (tied weight counted once)
  // Training FLOPs (forward + backward, no recompute) for `tokens` tokens.
  double training_flops(double samples) const;

  // Deterministic initial values of a whole unit (GPT-2 style: N(0, 0.02), projections into
  // the residual scaled by 1/sqrt(2L), norms at 1/0, biases 0). Same on every rank.
  std::vector<float> initial_unit(int unit) const;

  // ---- compute (rows = micro_batch * seq) ----
  void embedding_forward(Device& d, TensorRef params, TensorRef tokens, TensorRef out,
                         std::int64_t rows) const;
  void embedding_backward(Device& d, TensorRef grads, TensorRef tokens, TensorRef dout,
                          std::int64_t rows) const;
  // Allocates `acts` on first use for `rows` and fills them; writes the block output to `y`.
  void layer_forward(Device& d, TensorRef params, TensorRef x, TensorRef y, LayerActivations& acts,
                     std::int64_t rows) const;
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

 private:
  TensorRef slot(TensorRef unit, int unit_index, int slot_index) const;
  TensorRef used_positions(TensorRef embedding) const;  // wpe's first seq rows
  GptConfig config_;
  std::vector<std::vector<ParamSlot>> slots_;
};

// Deterministic synthetic token stream: sample `index` of step `step` is a sequence of
// seq + 1 tokens of a noisy fixed bigram chain over the first min(vocab, 64) ids (learnable,
// so the loss falls), seeded by (seed, step, index). tokens[i] = seq[i], targets[i] = seq[i+1].
void synthetic_sample(const GptConfig& config, std::uint64_t seed, std::int64_t step,
                      std::int64_t index, std::int32_t* tokens, std::int32_t* targets);

}  // namespace cephalo::backend

#pragma once
// The kernel half of the device API (device.hpp): the transformer kernels on streams of the
// runtime half. Every public kernel is non-virtual: it checks the element-type contract and
// the tensor sizes below once, for every device (backend/src/device.cpp), then calls the
// device's protected do_* implementation, which may assume them. A device that cannot run a
// combination the contract allows throws from its do_* naming the kernel and types.
//
// Kernels: row-major, contiguous. All take a Stream (CPU ignores it for compute kernels, which
// run inline) and TensorRef views. Kernels named "..._backward" that produce parameter
// gradients ACCUMULATE into them (+=), because gradients of one layer are summed over
// micro-batches; input gradients are OVERWRITTEN.
//
// Element types (mixed precision, the same contract on every device). A call has one
// "compute type" T in {F32, BF16, F16}: activations, gathered parameters, input gradients and
// logits are T. Arithmetic is fp32 whatever T is; each output element is rounded to its storage
// type once per call. Exceptions to "everything is T":
//   * statistics are always F32: layer-norm mean/rstd, attention and cross-entropy lse, losses,
//     the output of sum(); token ids and targets are I32;
//   * parameter-gradient outputs (gemm C when it accumulates a weight gradient, dbias, dgamma,
//     dbeta, dwte, dwpe) are T or F32 — the += happens in fp32, so an F32 gradient buffer
//     sums micro-batches without bf16 rounding;
//   * gemm: A and B share T; C is T or F32;
//   * axpy: x and y may have different floating types; cast: any floating -> any floating;
//     fill/scale: any floating type;
//   * adamw_step: all F32 (master weights, gradient shard, moments).
// A device that cannot run a combination throws RuntimeFailure naming the kernel and types.
#include <cstdint>
#include <string>

#include "cephalo/backend/adamw_params.hpp"
#include "cephalo/backend/device_runtime.hpp"
#include "cephalo/backend/tensor.hpp"

namespace cephalo::backend {

enum class Transpose { No, Yes };

// Shapes of the fused attention kernels: input qkv is [batch*seq, 3*heads*head_dim] with the
// q, k, v blocks side by side (as produced by one QKV GEMM); output [batch*seq, heads*head_dim].
struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
};

// The vocabulary ids a tensor-parallel rank's embedding rows and logit columns stand for
// (DESIGN §4, vocabulary-parallel embedding and head): ids [begin, begin + local rows) of a
// vocabulary of `size` ids. The default {0, 0} means the tensor holds the whole vocabulary.
struct VocabSlice {
  std::int64_t begin = 0;
  std::int64_t size = 0;  // the full vocabulary; 0: the local rows are all of it (begin 0)
};

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;
  // The device's kind ("cpu", "cuda"), which starts every refusal's message.
  virtual std::string kind() const = 0;
  // Floating element types the kernels accept as compute type T (see the contract above).
  virtual bool supports(ElemType type) const = 0;

  // ---- elementwise and utility kernels ----
  void fill(Stream& s, TensorRef x, float value);
  void scale(Stream& s, TensorRef x, float alpha);              // x *= alpha
  void axpy(Stream& s, float alpha, TensorRef x, TensorRef y);  // y += alpha x
  void cast(Stream& s, TensorRef src, TensorRef dst);           // element types differ
  // out[0] = sum(x) in fp32 (out is a 1-element F32 tensor on the device).
  void sum(Stream& s, TensorRef x, TensorRef out);

  // ---- dense algebra ----
  // C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k (A stored k x m
  // when transposed), op(B) is k x n. A, B, C share an element type; fp32 accumulation.
  void gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
            float alpha, TensorRef a, TensorRef b, float beta, TensorRef c);
  // y[rows x cols] += bias[cols] broadcast over rows.
  void add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows, std::int64_t cols);
  // dbias[cols] += column sums of dy[rows x cols].
  void bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                     std::int64_t cols);

  // ---- transformer kernels ----
  // y = (x - mean) * rstd * gamma + beta per row; saves mean[rows], rstd[rows] (F32).
  void layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                          TensorRef mean, TensorRef rstd, std::int64_t rows, std::int64_t cols,
                          float eps);
  // dx = overwritten; dgamma, dbeta accumulated.
  void layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean, TensorRef rstd,
                           TensorRef dy, TensorRef dx, TensorRef dgamma, TensorRef dbeta,
                           std::int64_t rows, std::int64_t cols);
  // GELU, tanh approximation (as GPT-2). y and dx overwritten.
  void gelu_forward(Stream& s, TensorRef x, TensorRef y);
  void gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx);
  // Causal multi-head attention, softmax scale 1/sqrt(head_dim). Saves the per-row
  // log-sum-exp lse[batch*heads*seq] (F32) so backward recomputes probabilities.
  void attention_forward(Stream& s, const AttentionShape& shape, TensorRef qkv, TensorRef out,
                         TensorRef lse);
  // dqkv overwritten.
  void attention_backward(Stream& s, const AttentionShape& shape, TensorRef qkv, TensorRef out,
                          TensorRef lse, TensorRef dout, TensorRef dqkv);
  // out[n, :] = wte[tokens[n], :] + wpe[n % seq, :]; tokens I32[rows]. With a `vocab` slice,
  // wte holds the rows of ids [vocab.begin, vocab.begin + wte rows): token ids must still lie
  // in [0, vocab.size), and a token outside the local rows adds nothing (the partial lookup a
  // tensor-parallel group all-reduces). An empty wpe adds no position term.
  void embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe, TensorRef out,
                         std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                         VocabSlice vocab = {});
  // dwte[tokens[n] - vocab.begin] += dout[n] for the local rows; dwpe[n % seq] += dout[n]
  // (nothing when dwpe is empty).
  void embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                          TensorRef dwpe, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                          VocabSlice vocab = {});
  // Per-row softmax cross-entropy of logits[rows x vocab] against targets I32[rows]:
  // losses[rows] (F32) = lse - logit[target]; lse[rows] (F32) saved for backward.
  void cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets, TensorRef losses,
                             TensorRef lse, std::int64_t rows, std::int64_t vocab);
  // dlogits = (softmax(logits) - onehot(target)) * grad_scale, overwritten (may alias logits).
  // With a `vocab_begin`, logits are the columns [vocab_begin, vocab_begin + vocab) of the
  // full vocabulary, lse the full rows' (cross_entropy_combine), and a target outside the
  // local columns subtracts nothing.
  void cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets, TensorRef lse,
                              TensorRef dlogits, std::int64_t rows, std::int64_t vocab,
                              float grad_scale, std::int64_t vocab_begin = 0);
  // Vocabulary-parallel cross-entropy (Megatron-LM's), in three kernels around the
  // tensor-parallel group's all-reduces: logits[rows x vocab] are the columns [vocab_begin,
  // vocab_begin + vocab) of the full vocabulary, targets I32[rows] full-vocabulary ids, every
  // other tensor F32[rows].
  //   cross_entropy_row_max: row_max = the largest local logit of each row (all-reduce Max);
  //   cross_entropy_partial_sums: given the global row_max, sum_exp = Σ exp(logit − row_max)
  //     over the local columns, target_logit = the target's logit when it is a local column,
  //     else 0 (all-reduce Sum of each);
  //   cross_entropy_combine: lse = row_max + log(sum_exp), losses = lse − target_logit.
  // On one rank (vocab_begin 0, every column local) they compute cross_entropy_forward.
  void cross_entropy_row_max(Stream& s, TensorRef logits, TensorRef row_max, std::int64_t rows,
                             std::int64_t vocab);
  void cross_entropy_partial_sums(Stream& s, TensorRef logits, TensorRef targets, TensorRef row_max,
                                  TensorRef sum_exp, TensorRef target_logit, std::int64_t rows,
                                  std::int64_t vocab, std::int64_t vocab_begin);
  void cross_entropy_combine(Stream& s, TensorRef row_max, TensorRef sum_exp,
                             TensorRef target_logit, TensorRef losses, TensorRef lse,
                             std::int64_t rows);

  // ---- optimizer ----
  // Decoupled-weight-decay Adam on fp32 param/grad/m/v of equal length.
  void adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                  const AdamWParams& p);

 protected:
  virtual void do_fill(Stream& s, TensorRef x, float value) = 0;
  virtual void do_scale(Stream& s, TensorRef x, float alpha) = 0;
  virtual void do_axpy(Stream& s, float alpha, TensorRef x, TensorRef y) = 0;
  virtual void do_cast(Stream& s, TensorRef src, TensorRef dst) = 0;
  virtual void do_sum(Stream& s, TensorRef x, TensorRef out) = 0;
  virtual void do_gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
                       std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
                       TensorRef c) = 0;
  virtual void do_add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                           std::int64_t cols) = 0;
  virtual void do_bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                                std::int64_t cols) = 0;
  virtual void do_layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta,
                                     TensorRef y, TensorRef mean, TensorRef rstd, std::int64_t rows,
                                     std::int64_t cols, float eps) = 0;
  virtual void do_layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                                      TensorRef rstd, TensorRef dy, TensorRef dx, TensorRef dgamma,
                                      TensorRef dbeta, std::int64_t rows, std::int64_t cols) = 0;
  virtual void do_gelu_forward(Stream& s, TensorRef x, TensorRef y) = 0;
  virtual void do_gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) = 0;
  virtual void do_attention_forward(Stream& s, const AttentionShape& shape, TensorRef qkv,
                                    TensorRef out, TensorRef lse) = 0;
  virtual void do_attention_backward(Stream& s, const AttentionShape& shape, TensorRef qkv,
                                     TensorRef out, TensorRef lse, TensorRef dout,
                                     TensorRef dqkv) = 0;
  // `vocab` arrives resolved: size is the full vocabulary (the local rows when not sliced).
  virtual void do_embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                                    TensorRef out, std::int64_t rows, std::int64_t seq,
                                    std::int64_t hidden, VocabSlice vocab) = 0;
  virtual void do_embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                                     TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                                     std::int64_t hidden, VocabSlice vocab) = 0;
  virtual void do_cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets,
                                        TensorRef losses, TensorRef lse, std::int64_t rows,
                                        std::int64_t vocab) = 0;
  virtual void do_cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets,
                                         TensorRef lse, TensorRef dlogits, std::int64_t rows,
                                         std::int64_t vocab, float grad_scale,
                                         std::int64_t vocab_begin) = 0;
  virtual void do_cross_entropy_row_max(Stream& s, TensorRef logits, TensorRef row_max,
                                        std::int64_t rows, std::int64_t vocab) = 0;
  virtual void do_cross_entropy_partial_sums(Stream& s, TensorRef logits, TensorRef targets,
                                             TensorRef row_max, TensorRef sum_exp,
                                             TensorRef target_logit, std::int64_t rows,
                                             std::int64_t vocab, std::int64_t vocab_begin) = 0;
  virtual void do_cross_entropy_combine(Stream& s, TensorRef row_max, TensorRef sum_exp,
                                        TensorRef target_logit, TensorRef losses, TensorRef lse,
                                        std::int64_t rows) = 0;
  virtual void do_adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                             const AdamWParams& p) = 0;
};

}  // namespace cephalo::backend

#pragma once
// Transformer kernels behind plain host functions. Every function enqueues work on `stream`
// and returns without synchronising; launch errors are checked (RuntimeFailure).
//
// Conventions (shared with the tests' CPU references):
//  * matrices are row-major; activations are [rows = tokens, cols = features];
//  * a buffer's element type is the storage type of activations and gathered parameters (F32,
//    BF16 or F16; TF32 is stored as F32); arithmetic is always fp32;
//  * per-row statistics (layer-norm mean / rstd, cross-entropy log-sum-exp) are fp32;
//  * parameter gradients are fp32 and ACCUMULATED into (+=), so micro-batches of one layer
//    add into one buffer (layered gradient accumulation) without extra passes;
//  * backward kernels may run in place (dx == dy) where noted.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cephalo/backend/adamw_params.hpp"
#include "cephalo/backend/tensor.hpp"
#include "cephalo/core/dtype.hpp"

namespace cephalo::cuda {

// Buffers of activations and parameters are backend::TensorRef (pointer, element count,
// element type): a buffer's storage dtype travels with its pointer, and every launcher checks
// once, at its entry, that each buffer holds at least the elements its shape needs (as the
// backend's front functions do; Error naming the kernel, the buffer and both counts).
// Elementwise kernels run over their first buffer's elements. fp32 statistics and gradients
// stay `float*`.
using backend::TensorRef;

// ---- dtype casts and elementwise ----------------------------------------------------------
// dst[i] = src[i] converted (round to nearest even), for src's elements. Any pair of
// FP32/BF16/FP16.
void cast(TensorRef src, TensorRef dst, cudaStream_t stream);
// dst[i] += alpha * src[i] (fp32 arithmetic), any pair of FP32/BF16/FP16: gradient
// accumulators, master shards.
void axpy(float alpha, TensorRef src, TensorRef dst, cudaStream_t stream);
// y[i] = a[i] + b[i] (residual connections); one type; y may alias a or b.
void add(TensorRef a, TensorRef b, TensorRef y, cudaStream_t stream);
// x[i] *= scale (in place).
void scale(TensorRef x, float factor, cudaStream_t stream);
// y[r, c] += bias[c]  (bias of y's type; y rows x cols, bias cols).
void add_bias(TensorRef y, TensorRef bias, int rows, int cols, cudaStream_t stream);
// dbias[c] += sum_r dy[r, c].
void bias_backward(TensorRef dy, float* dbias, int rows, int cols, cudaStream_t stream);

// ---- GELU (tanh approximation, as GPT-2) --------------------------------------------------
void gelu_forward(TensorRef x, TensorRef y, cudaStream_t stream);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(TensorRef x, TensorRef dy, TensorRef dx, cudaStream_t stream);

// ---- layer norm over the last dimension ---------------------------------------------------
// y = (x - mean) * rstd * gamma + beta; writes mean[rows], rstd[rows] for the backward.
void layernorm_forward(TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y, float* mean,
                       float* rstd, int rows, int cols, float eps, cudaStream_t stream);
// dx = (overwritten) input gradient; dgamma, dbeta accumulated (fp32). dx may alias dy.
void layernorm_backward(TensorRef dy, TensorRef x, TensorRef gamma, const float* mean,
                        const float* rstd, TensorRef dx, float* dgamma, float* dbeta, int rows,
                        int cols, cudaStream_t stream);

// ---- causal softmax over attention scores [batch, T, T] -----------------------------------
// Scores (and their gradient dprobs) are fp32 or of the probabilities' type; attention keeps
// them fp32 (accuracy, see kernels.cu). In-place calls need equal types.
// probs[b, i, j] = softmax_j(scale * scores[b, i, j]) for j <= i, 0 for j > i.
// When `lse` is not null, lse[b * T + i] = log sum_j exp(scale * scores[b, i, j]) (fp32).
void causal_softmax_forward(TensorRef scores, TensorRef probs, float* lse, int batch, int T,
                            float scale, cudaStream_t stream);
// Recomputes probs from scores and the saved lse (one pass, no reductions).
void causal_softmax_recompute(TensorRef scores, const float* lse, TensorRef probs, int batch, int T,
                              float scale, cudaStream_t stream);
// dscores (probs' type) = scale * p * (dp - sum_j p * dp), 0 above the diagonal.
void causal_softmax_backward(TensorRef probs, TensorRef dprobs, TensorRef dscores, int batch, int T,
                             float scale, cudaStream_t stream);

// ---- head permutations for attention -------------------------------------------------------
// qkv [B, T, 3, H, D] -> q, k, v each [B, H, T, D].
void split_qkv_heads(TensorRef qkv, TensorRef q, TensorRef k, TensorRef v, int B, int T, int H,
                     int D, cudaStream_t stream);
// Inverse: dq, dk, dv [B, H, T, D] -> dqkv [B, T, 3, H, D].
void merge_qkv_heads(TensorRef dq, TensorRef dk, TensorRef dv, TensorRef dqkv, int B, int T, int H,
                     int D, cudaStream_t stream);
// y [B, H, T, D] -> out [B, T, H, D]  (forward: heads back into features).
void merge_heads(TensorRef y, TensorRef out, int B, int T, int H, int D, cudaStream_t stream);
// dout [B, T, H, D] -> dy [B, H, T, D]  (backward of merge_heads).
void split_heads(TensorRef dout, TensorRef dy, int B, int T, int H, int D, cudaStream_t stream);

// ---- softmax cross-entropy over logits [rows, vocab] ---------------------------------------
// losses[r] = scale * (logsumexp(logits[r]) - logits[r, targets[r]]); lse[r] saved.
// Rows whose target is negative are ignored (loss 0, gradient 0).
void cross_entropy_forward(TensorRef logits, const std::int32_t* targets, float* losses, float* lse,
                           int rows, int vocab, float scale, cudaStream_t stream);
// dlogits = scale * (softmax(logits) - onehot(target)); dlogits may alias logits. With
// vocab_begin > 0 the logits are the columns [vocab_begin, vocab_begin + vocab) of the full
// vocabulary (a tensor-parallel rank's) and lse the full rows': a target in other columns
// subtracts nothing.
void cross_entropy_backward(TensorRef logits, const std::int32_t* targets, const float* lse,
                            TensorRef dlogits, int rows, int vocab, float scale,
                            cudaStream_t stream, int vocab_begin = 0);
// The vocabulary-parallel cross-entropy's three row kernels (backend/device_kernels.hpp):
// row_max over the local columns; given the global row_max, sum_exp over the local columns and
// the target's logit when local (else 0); then lse = row_max + log(sum_exp), losses = lse −
// target_logit.
void cross_entropy_row_max(TensorRef logits, float* row_max, int rows, int vocab,
                           cudaStream_t stream);
void cross_entropy_partial_sums(TensorRef logits, const std::int32_t* targets, const float* row_max,
                                float* sum_exp, float* target_logit, int rows, int vocab,
                                int vocab_begin, cudaStream_t stream);
void cross_entropy_combine(const float* row_max, const float* sum_exp, const float* target_logit,
                           float* losses, float* lse, int rows, cudaStream_t stream);

// ---- token + position embedding ------------------------------------------------------------
// y[b*T + t] = wte[tokens[b*T + t]] + wpe[t]; tokens out of [0, vocab) are reported through
// `bad_token_flag` (device int, set to 1) and give a zero row instead of reading out of bounds.
// wte holds vocab x C elements (or, vocabulary-parallel, `rows` x C: the ids [vocab_begin,
// vocab_begin + rows), a token outside them adding nothing; rows < 0: vocab), wpe at least
// T x C (null: no position term), y B x T x C.
void embedding_forward(const std::int32_t* tokens, TensorRef wte, TensorRef wpe, TensorRef y, int B,
                       int T, int C, int vocab, int* bad_token_flag, cudaStream_t stream,
                       int vocab_begin = 0, int rows = -1);
// dwte[tokens[i] - vocab_begin] += dy[i] for the local rows; dwpe[t] += sum_b dy[b, t] (fp32,
// accumulated; nothing when dwpe is null).
void embedding_backward(const std::int32_t* tokens, TensorRef dy, float* dwte, float* dwpe, int B,
                        int T, int C, int vocab, cudaStream_t stream, int vocab_begin = 0,
                        int rows = -1);

// ---- AdamW on an fp32 master shard ---------------------------------------------------------
// The backend's one hyper-parameter struct (backend/adamw_params.hpp).
using backend::AdamWParams;
// Decoupled weight decay (Loshchilov & Hutter): p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p).
// `grad` is multiplied by grad_scale first (e.g. 1 / loss scale). When `param_copy` is not
// empty, the updated parameter is also written there in its type (the compute copy that the
// next all-gather sends; n elements), saving a separate cast pass.
void adamw_step(float* param, const float* grad, float* m, float* v, std::size_t n,
                const AdamWParams& hp, float grad_scale, TensorRef param_copy, cudaStream_t stream);

// ---- reductions used by tests and the executor ---------------------------------------------
// out[0] = sum of fp32 x (single block tree; deterministic).
void sum_fp32(const float* x, std::size_t n, float* out, cudaStream_t stream);
// Spins on the device for about `cycles` clock cycles: tests use it to make a producer kernel
// slow so that a copy that ignored event ordering would read stale data.
void spin(long long cycles, cudaStream_t stream);
// Counter-based uniform random values in [lo, hi) (splitmix64 of seed + index): initialises
// large parameter buffers on the device without a host round trip. Deterministic per seed.
void fill_uniform(TensorRef x, std::uint64_t seed, float lo, float hi, cudaStream_t stream);
// Fills every element with a value (poisoning outputs before tests).
void fill(TensorRef x, float value, cudaStream_t stream);

}  // namespace cephalo::cuda

#pragma once
// Transformer kernels behind plain host functions. Every function enqueues work on `stream`
// and returns without synchronising; launch errors are checked (RuntimeFailure).
//
// Conventions (shared with the tests' CPU references):
//  * matrices are row-major; activations are [rows = tokens, cols = features];
//  * `dtype` is the storage type of activations and gathered parameters (FP32, BF16 or FP16;
//    TF32 is stored as FP32); arithmetic is always fp32;
//  * per-row statistics (layer-norm mean / rstd, cross-entropy log-sum-exp) are fp32;
//  * parameter gradients are fp32 and ACCUMULATED into (+=), so micro-batches of one layer
//    add into one buffer (layered gradient accumulation) without extra passes;
//  * backward kernels may run in place (dx == dy) where noted.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cephalo/backend/adamw_params.hpp"
#include "cephalo/core/dtype.hpp"

namespace cephalo::cuda {

// ---- dtype casts and elementwise ----------------------------------------------------------
// dst[i] = src[i] converted (round to nearest even). Any pair of FP32/BF16/FP16.
void cast(const void* src, Dtype src_dtype, void* dst, Dtype dst_dtype, std::size_t n,
          cudaStream_t stream);
// dst[i] += alpha * src[i] (fp32 arithmetic), any pair of FP32/BF16/FP16: gradient
// accumulators, master shards.
void axpy(float alpha, const void* src, Dtype src_dtype, void* dst, Dtype dst_dtype, std::size_t n,
          cudaStream_t stream);
// y[i] = a[i] + b[i] (residual connections); y may alias a or b.
void add(const void* a, const void* b, void* y, std::size_t n, Dtype dtype, cudaStream_t stream);
// x[i] *= scale (in place).
void scale(void* x, float factor, std::size_t n, Dtype dtype, cudaStream_t stream);
// y[r, c] += bias[c]  (bias in `dtype`, like y).
void add_bias(void* y, const void* bias, int rows, int cols, Dtype dtype, cudaStream_t stream);
// dbias[c] += sum_r dy[r, c].
void bias_backward(const void* dy, float* dbias, int rows, int cols, Dtype dtype,
                   cudaStream_t stream);

// ---- GELU (tanh approximation, as GPT-2) --------------------------------------------------
void gelu_forward(const void* x, void* y, std::size_t n, Dtype dtype, cudaStream_t stream);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(const void* x, const void* dy, void* dx, std::size_t n, Dtype dtype,
                   cudaStream_t stream);

// ---- layer norm over the last dimension ---------------------------------------------------
// y = (x - mean) * rstd * gamma + beta; writes mean[rows], rstd[rows] for the backward.
void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int rows, int cols, float eps, Dtype dtype,
                       cudaStream_t stream);
// dx = (overwritten) input gradient; dgamma, dbeta accumulated (fp32). dx may alias dy.
void layernorm_backward(const void* dy, const void* x, const void* gamma, const float* mean,
                        const float* rstd, void* dx, float* dgamma, float* dbeta, int rows,
                        int cols, Dtype dtype, cudaStream_t stream);

// ---- causal softmax over attention scores [batch, T, T] -----------------------------------
// Scores (and their gradient dprobs) are fp32 or of the probabilities' dtype; attention keeps
// them fp32 (accuracy, see kernels.cu). In-place calls need equal dtypes.
// probs[b, i, j] = softmax_j(scale * scores[b, i, j]) for j <= i, 0 for j > i.
// When `lse` is not null, lse[b * T + i] = log sum_j exp(scale * scores[b, i, j]) (fp32).
void causal_softmax_forward(const void* scores, Dtype scores_dtype, void* probs, Dtype probs_dtype,
                            float* lse, int batch, int T, float scale, cudaStream_t stream);
// Recomputes probs from scores and the saved lse (one pass, no reductions).
void causal_softmax_recompute(const void* scores, Dtype scores_dtype, const float* lse, void* probs,
                              Dtype probs_dtype, int batch, int T, float scale,
                              cudaStream_t stream);
// dscores (probs_dtype) = scale * p * (dp - sum_j p * dp), 0 above the diagonal.
void causal_softmax_backward(const void* probs, Dtype probs_dtype, const void* dprobs,
                             Dtype dprobs_dtype, void* dscores, int batch, int T, float scale,
                             cudaStream_t stream);

// ---- head permutations for attention -------------------------------------------------------
// qkv [B, T, 3, H, D] -> q, k, v each [B, H, T, D].
void split_qkv_heads(const void* qkv, void* q, void* k, void* v, int B, int T, int H, int D,
                     Dtype dtype, cudaStream_t stream);
// Inverse: dq, dk, dv [B, H, T, D] -> dqkv [B, T, 3, H, D].
void merge_qkv_heads(const void* dq, const void* dk, const void* dv, void* dqkv, int B, int T,
                     int H, int D, Dtype dtype, cudaStream_t stream);
// y [B, H, T, D] -> out [B, T, H, D]  (forward: heads back into features).
void merge_heads(const void* y, void* out, int B, int T, int H, int D, Dtype dtype,
                 cudaStream_t stream);
// dout [B, T, H, D] -> dy [B, H, T, D]  (backward of merge_heads).
void split_heads(const void* dout, void* dy, int B, int T, int H, int D, Dtype dtype,
                 cudaStream_t stream);

// ---- softmax cross-entropy over logits [rows, vocab] ---------------------------------------
// losses[r] = scale * (logsumexp(logits[r]) - logits[r, targets[r]]); lse[r] saved.
// Rows whose target is negative are ignored (loss 0, gradient 0).
void cross_entropy_forward(const void* logits, const std::int32_t* targets, float* losses,
                           float* lse, int rows, int vocab, float scale, Dtype dtype,
                           cudaStream_t stream);
// dlogits = scale * (softmax(logits) - onehot(target)); dlogits may alias logits.
void cross_entropy_backward(const void* logits, const std::int32_t* targets, const float* lse,
                            void* dlogits, int rows, int vocab, float scale, Dtype dtype,
                            cudaStream_t stream);

// ---- token + position embedding ------------------------------------------------------------
// y[b*T + t] = wte[tokens[b*T + t]] + wpe[t]; tokens out of [0, vocab) are reported through
// `bad_token_flag` (device int, set to 1) and give a zero row instead of reading out of bounds.
void embedding_forward(const std::int32_t* tokens, const void* wte, const void* wpe, void* y, int B,
                       int T, int C, int vocab, int* bad_token_flag, Dtype dtype,
                       cudaStream_t stream);
// dwte[tokens[i]] += dy[i]; dwpe[t] += sum_b dy[b, t] (fp32, accumulated).
void embedding_backward(const std::int32_t* tokens, const void* dy, float* dwte, float* dwpe, int B,
                        int T, int C, int vocab, Dtype dtype, cudaStream_t stream);

// ---- AdamW on an fp32 master shard ---------------------------------------------------------
// The backend's one hyper-parameter struct (backend/adamw_params.hpp).
using backend::AdamWParams;
// Decoupled weight decay (Loshchilov & Hutter): p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p).
// `grad` is multiplied by grad_scale first (e.g. 1 / loss scale). When `param_copy` is not
// null, the updated parameter is also written there in `copy_dtype` (the compute copy that
// the next all-gather sends), saving a separate cast pass.
void adamw_step(float* param, const float* grad, float* m, float* v, std::size_t n,
                const AdamWParams& hp, float grad_scale, void* param_copy, Dtype copy_dtype,
                cudaStream_t stream);

// ---- reductions used by tests and the executor ---------------------------------------------
// out[0] = sum of fp32 x (single block tree; deterministic).
void sum_fp32(const float* x, std::size_t n, float* out, cudaStream_t stream);
// Spins on the device for about `cycles` clock cycles: tests use it to make a producer kernel
// slow so that a copy that ignored event ordering would read stale data.
void spin(long long cycles, cudaStream_t stream);
// Counter-based uniform random values in [lo, hi) (splitmix64 of seed + index): initialises
// large parameter buffers on the device without a host round trip. Deterministic per seed.
void fill_uniform(void* x, std::size_t n, std::uint64_t seed, float lo, float hi, Dtype dtype,
                  cudaStream_t stream);
// Fills `n` elements with a value (poisoning outputs before tests).
void fill(void* x, float value, std::size_t n, Dtype dtype, cudaStream_t stream);

}  // namespace cephalo::cuda

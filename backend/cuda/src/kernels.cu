// All elementwise, normalisation, softmax, embedding and optimiser kernels of the CUDA backend
// in one translation unit (nvcc time on 2 cores is the constraint: one .cu file, each kernel
// instantiated for the three storage types only). Arithmetic is fp32 throughout; storage types
// are converted on load and store with round-to-nearest-even.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/kernels.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::cuda {
namespace {

using bf16 = __nv_bfloat16;
using fp16 = __half;

__device__ __forceinline__ float load(const float* p, std::size_t i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ float load(const fp16* p, std::size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, std::size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(bf16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store(fp16* p, std::size_t i, float v) {
  p[i] = __float2half_rn(v);
}

constexpr int kThreads = 256;

// Grid size for grid-stride elementwise loops: enough blocks to fill any current GPU, never
// more than the work needs.
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
struct WarpSum {
  __device__ __forceinline__ float operator()(float v) const { return warp_sum(v); }
};
struct WarpMax {
  __device__ __forceinline__ float operator()(float v) const { return warp_max(v); }
};
// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `scratch` needs 32 floats; the leading __syncthreads makes back-to-back calls safe. `identity`
// fills the lanes beyond the block's warps.
template <typename WarpReduce>
__device__ __forceinline__ float block_reduce(float v, float* scratch, float identity) {
  const WarpReduce reduce;
  v = reduce(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  return reduce(v);
}
__device__ float block_sum(float v, float* scratch) {
  return block_reduce<WarpSum>(v, scratch, 0.0f);
}
__device__ float block_max(float v, float* scratch) {
  return block_reduce<WarpMax>(v, scratch, -INFINITY);
}

// Calls `f` with a null pointer of the storage type for `dtype` (type tag dispatch).
template <typename F>
void dispatch(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::FP32:
    case Dtype::TF32:
      f(static_cast<float*>(nullptr));
      return;
    case Dtype::BF16:
      f(static_cast<bf16*>(nullptr));
      return;
    case Dtype::FP16:
      f(static_cast<fp16*>(nullptr));
      return;
  }
  throw Error("cuda kernels: unknown dtype");
}

// ---- elementwise ----------------------------------------------------------------------------
template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(dst, i, load(src, i));
}

template <typename S, typename D>
__global__ void axpy_kernel(float alpha, const S* src, D* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(dst, i, load(dst, i) + alpha * load(src, i));
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(y, i, load(a, i) + load(b, i));
}

template <typename T>
__global__ void scale_kernel(T* x, float s, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(x, i, s * load(x, i));
}

template <typename T>
__global__ void fill_kernel(T* x, float value, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(x, i, value);
}

// One block per row: no per-element index division (64-bit division is slow on GPUs and these
// kernels would otherwise be bound by it rather than by memory).
template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int cols) {
  T* yr = y + std::size_t(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) store(yr, c, load(yr, c) + load(bias, c));
}

// Column sums over rows: block (32, 8) covers 32 columns; blocks along y split the rows; one
// atomicAdd per column per block (few atomics, coalesced row reads).
constexpr int kColRows = 8;
unsigned column_row_blocks(int rows) {
  const int b = (rows + 4 * kColRows - 1) / (4 * kColRows);
  return static_cast<unsigned>(b < 256 ? (b < 1 ? 1 : b) : 256);
}

template <typename T>
__global__ void bias_backward_kernel(const T* dy, float* dbias, int rows, int cols) {
  __shared__ float partial[kColRows][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int r = blockIdx.y * kColRows + threadIdx.y; r < rows; r += gridDim.y * kColRows)
      acc += load(dy, std::size_t(r) * cols + c);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < kColRows; ++k) s += partial[k][threadIdx.x];
    atomicAdd(dbias + c, s);
  }
}

// ---- GELU -----------------------------------------------------------------------------------
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = load(x, i);
    const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
    store(y, i, 0.5f * v * (1.0f + t));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = load(x, i);
    const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
    const float d =
        0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
    store(dx, i, load(dy, i) * d);
  }
}

// ---- layer norm -----------------------------------------------------------------------------
template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean_out, float* rstd_out, int cols, float eps) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += load(xr, c);
  const float mean = block_sum(s, scratch) / cols;
  // Two-pass variance: numerically safe for rows with a large mean (the row stays in L1/L2).
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = load(xr, c) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, scratch) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    store(yr, c, (load(xr, c) - mean) * rstd * load(gamma, c) + load(beta, c));
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const T* gamma,
                                             const float* mean, const float* rstd, T* dx,
                                             int cols) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const T* dyr = dy + row * cols;
  const T* xr = x + row * cols;
  T* dxr = dx + row * cols;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = load(dyr, c) * load(gamma, c);
    sg += g;
    sgx += g * (load(xr, c) - mu) * rs;
  }
  const float mg = block_sum(sg, scratch) / cols;
  const float mgx = block_sum(sgx, scratch) / cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = load(dyr, c) * load(gamma, c);
    const float xhat = (load(xr, c) - mu) * rs;
    store(dxr, c, rs * (g - mg - xhat * mgx));
  }
}

template <typename T>
__global__ void layernorm_backward_params_kernel(const T* dy, const T* x, const float* mean,
                                                 const float* rstd, float* dgamma, float* dbeta,
                                                 int rows, int cols) {
  __shared__ float pg[kColRows][33];
  __shared__ float pb[kColRows][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float ag = 0.0f, ab = 0.0f;
  if (c < cols)
    for (int r = blockIdx.y * kColRows + threadIdx.y; r < rows; r += gridDim.y * kColRows) {
      const std::size_t i = std::size_t(r) * cols + c;
      const float d = load(dy, i);
      ag += d * (load(x, i) - mean[r]) * rstd[r];
      ab += d;
    }
  pg[threadIdx.y][threadIdx.x] = ag;
  pb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sg = 0.0f, sb = 0.0f;
    for (int k = 0; k < kColRows; ++k) {
      sg += pg[k][threadIdx.x];
      sb += pb[k][threadIdx.x];
    }
    atomicAdd(dgamma + c, sg);
    atomicAdd(dbeta + c, sb);
  }
}

// ---- causal softmax -------------------------------------------------------------------------
// One block per score row (b, i); only columns j <= i take part. S is the type of scores and of
// their gradient dP (fp32 in attention, so the rounding of bf16 scores never enters the
// exponent and dP - rowsum(P dP) does not cancel in bf16); P is the type of probabilities and
// of dS (the GEMM operands).
template <typename S, typename P>
__global__ void causal_softmax_forward_kernel(const S* scores, P* probs, float* lse, int T_,
                                              float scale) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const int i = static_cast<int>(row % T_);
  const S* sr = scores + row * T_;
  P* pr = probs + row * T_;
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, scale * load(sr, j));
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) s += expf(scale * load(sr, j) - m);
  const float total = block_sum(s, scratch);
  const float inv = 1.0f / total;
  for (int j = threadIdx.x; j < T_; j += blockDim.x)
    store(pr, j, j <= i ? expf(scale * load(sr, j) - m) * inv : 0.0f);
  if (lse && threadIdx.x == 0) lse[row] = m + logf(total);
}

template <typename S, typename P>
__global__ void causal_softmax_recompute_kernel(const S* scores, const float* lse, P* probs, int T_,
                                                float scale) {
  const std::size_t row = blockIdx.x;
  const int i = static_cast<int>(row % T_);
  const S* sr = scores + row * T_;
  P* pr = probs + row * T_;
  const float l = lse[row];
  for (int j = threadIdx.x; j < T_; j += blockDim.x)
    store(pr, j, j <= i ? expf(scale * load(sr, j) - l) : 0.0f);
}

template <typename S, typename P>
__global__ void causal_softmax_backward_kernel(const P* probs, const S* dprobs, P* dscores, int T_,
                                               float scale) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const int i = static_cast<int>(row % T_);
  const P* pr = probs + row * T_;
  const S* dpr = dprobs + row * T_;
  P* dsr = dscores + row * T_;
  float s = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) s += load(pr, j) * load(dpr, j);
  s = block_sum(s, scratch);
  for (int j = threadIdx.x; j < T_; j += blockDim.x)
    store(dsr, j, j <= i ? scale * load(pr, j) * (load(dpr, j) - s) : 0.0f);
}

// ---- head permutations ----------------------------------------------------------------------
// One block per token row (b, t); threads walk the C = H * D features of the row, one 32-bit
// division per element (h = j / D) shared by q, k and v.
template <typename T>
__global__ void qkv_heads_kernel(const T* qkv_in, T* q, T* k, T* v, T* qkv_out, int T_, int H,
                                 int D, bool to_heads) {
  const unsigned bt = blockIdx.x;
  const unsigned b = bt / T_, t = bt % T_;
  const unsigned C = unsigned(H) * D;
  const std::size_t row = std::size_t(bt) * 3 * C;
  for (unsigned j = threadIdx.x; j < C; j += blockDim.x) {
    const unsigned h = j / D, d = j - h * D;
    const std::size_t hd = ((std::size_t(b) * H + h) * T_ + t) * D + d;
    if (to_heads) {
      q[hd] = qkv_in[row + j];
      k[hd] = qkv_in[row + C + j];
      v[hd] = qkv_in[row + 2 * C + j];
    } else {
      qkv_out[row + j] = q[hd];
      qkv_out[row + C + j] = k[hd];
      qkv_out[row + 2 * C + j] = v[hd];
    }
  }
}

// [B, H, T, D] <-> [B, T, H, D]; one block per token row of the [B, T, H, D] side.
template <typename T>
__global__ void heads_kernel(const T* in, T* out, int T_, int H, int D, bool merge) {
  const unsigned bt = blockIdx.x;
  const unsigned b = bt / T_, t = bt % T_;
  const unsigned C = unsigned(H) * D;
  const std::size_t row = std::size_t(bt) * C;
  for (unsigned j = threadIdx.x; j < C; j += blockDim.x) {
    const unsigned h = j / D, d = j - h * D;
    const std::size_t hd = ((std::size_t(b) * H + h) * T_ + t) * D + d;
    if (merge)
      out[row + j] = in[hd];
    else
      out[hd] = in[row + j];
  }
}

// ---- cross-entropy --------------------------------------------------------------------------
// The largest of a row's `vocab` logits, on every thread of the block.
template <typename T>
__device__ float row_max_of(const T* lr, int vocab, float* scratch) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, load(lr, j));
  return block_max(m, scratch);
}

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const std::int32_t* targets,
                                             float* losses, float* lse_out, int vocab,
                                             float scale) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const T* lr = logits + row * vocab;
  const float m = row_max_of(lr, vocab, scratch);
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(load(lr, j) - m);
  const float lse = m + logf(block_sum(s, scratch));
  if (threadIdx.x == 0) {
    const int t = targets[row];
    lse_out[row] = lse;
    losses[row] = (t >= 0 && t < vocab) ? scale * (lse - load(lr, t)) : 0.0f;
  }
}

// With vocab_begin > 0 the logits are columns [vocab_begin, vocab_begin + vocab) of the full
// vocabulary (a tensor-parallel rank's): a target in another rank's columns subtracts nothing
// here. A negative target ignores the row, as before; on one rank (vocab_begin 0) a target past
// the vocabulary does too.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const std::int32_t* targets,
                                              const float* lse, T* dlogits, int vocab, float scale,
                                              int vocab_begin) {
  const std::size_t row = blockIdx.x;
  const T* lr = logits + row * vocab;
  T* dr = dlogits + row * vocab;
  const int t = targets[row] - vocab_begin;
  const bool valid = targets[row] >= 0 && (vocab_begin > 0 || t < vocab);
  const float l = lse[row];
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(load(lr, j) - l);
    store(dr, j, valid ? scale * (p - (j == t ? 1.0f : 0.0f)) : 0.0f);
  }
}

// The vocabulary-parallel cross-entropy's row statistics (kernels.hpp), one block per row.
template <typename T>
__global__ void cross_entropy_row_max_kernel(const T* logits, float* row_max, int vocab) {
  __shared__ float scratch[32];
  const float m = row_max_of(logits + std::size_t(blockIdx.x) * vocab, vocab, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void cross_entropy_partial_sums_kernel(const T* logits, const std::int32_t* targets,
                                                  const float* row_max, float* sum_exp,
                                                  float* target_logit, int vocab, int vocab_begin) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const T* lr = logits + row * vocab;
  const float m = row_max[row];
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(load(lr, j) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const int t = targets[row] - vocab_begin;
    sum_exp[row] = s;
    target_logit[row] = t >= 0 && t < vocab ? load(lr, t) : 0.0f;
  }
}

__global__ void cross_entropy_combine_kernel(const float* row_max, const float* sum_exp,
                                             const float* target_logit, float* losses, float* lse,
                                             int rows) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    const float l = row_max[r] + logf(sum_exp[r]);
    lse[r] = l;
    losses[r] = l - target_logit[r];
  }
}

// ---- embedding ------------------------------------------------------------------------------
// wte holds the rows of ids [vocab_begin, vocab_begin + rows) of a vocabulary of `vocab` ids
// (all of it on one rank); a token outside the local rows adds nothing, a null wpe no position.
template <typename T>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const T* wte, const T* wpe,
                                         T* y, int B, int T_, int C, int vocab, int vocab_begin,
                                         int rows, int* bad) {
  const std::size_t n = std::size_t(B) * T_ * C;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t bt = i / C;
    const std::size_t c = i % C;
    const std::size_t t = bt % T_;
    const int tok = tokens[bt];
    if (tok < 0 || tok >= vocab) {
      if (bad) *bad = 1;
      store(y, i, 0.0f);
    } else {
      const int local = tok - vocab_begin;
      const bool here = local >= 0 && local < rows;
      const float e = here ? load(wte, std::size_t(local) * C + c) : 0.0f;
      store(y, i, wpe ? (here ? e + load(wpe, t * C + c) : load(wpe, t * C + c)) : e);
    }
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const std::int32_t* tokens, const T* dy, float* dwte,
                                          float* dwpe, int B, int T_, int C, int vocab,
                                          int vocab_begin, int rows) {
  const std::size_t n = std::size_t(B) * T_ * C;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t bt = i / C;
    const std::size_t c = i % C;
    const std::size_t t = bt % T_;
    const float g = load(dy, i);
    const int tok = tokens[bt];
    const int local = tok - vocab_begin;
    if (tok >= 0 && tok < vocab && local >= 0 && local < rows)
      atomicAdd(dwte + std::size_t(local) * C + c, g);
    if (dwpe) atomicAdd(dwpe + t * C + c, g);
  }
}

// ---- AdamW ----------------------------------------------------------------------------------
// Evaluated in the order of the CPU device's adamw_step (backend/src/cpu_device.cpp, PyTorch's
// AdamW): decay first, then p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with the two
// bias-correction factors formed in double on the host, so both devices round alike.
template <typename T>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::size_t n,
                             float decay, float step_size, float bc2_sqrt, float b1, float b2,
                             float eps, float grad_scale, T* copy) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    p[i] = pi;
    if (copy) store(copy, i, pi);
  }
}

// ---- misc -----------------------------------------------------------------------------------
__global__ void sum_kernel(const float* x, std::size_t n, float* out) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) t += scratch[w];
    *out = static_cast<float>(t);
  }
}

template <typename T>
__global__ void fill_uniform_kernel(T* x, std::size_t n, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 bits in [0, 1)
    store(x, i, lo + (hi - lo) * u);
  }
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

void check_dims(long long a, const char* what) {
  if (a <= 0) throw Error(std::string("cuda kernels: ") + what + " must be positive");
}

// Typed views of the launchers' untyped buffers.
template <typename T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* out(void* p) {
  return static_cast<T*>(p);
}

// The storage dtype of a buffer (F32 also holds TF32 data: stored as fp32).
Dtype dtype_of(const TensorRef& t) {
  switch (t.type) {
    case backend::ElemType::F32:
      return Dtype::FP32;
    case backend::ElemType::BF16:
      return Dtype::BF16;
    case backend::ElemType::F16:
      return Dtype::FP16;
    case backend::ElemType::I32:
      break;
  }
  throw Error("cuda kernels: an i32 buffer where a floating one is expected");
}

// The one check of every launcher: `t` holds at least the `want` elements its shape needs (the
// backend's contract: a buffer may be larger, e.g. sized for the largest micro-batch), or the
// call is refused naming the kernel and the buffer.
void expect_numel(const char* kernel, const char* buffer, const TensorRef& t, long long want) {
  if (t.numel >= want) return;
  throw Error(std::string("cuda kernels: ") + kernel + ": " + buffer + " holds " +
              std::to_string(t.numel) + " elements, needs " + std::to_string(want));
}

// One storage type for buffers a kernel reads and writes as the same T.
void expect_same_type(const char* kernel, const TensorRef& a, const TensorRef& b) {
  if (a.type != b.type)
    throw Error(std::string("cuda kernels: ") + kernel + ": buffers of types " +
                backend::to_string(a.type) + " and " + backend::to_string(b.type) +
                ", expected one type");
}

}  // namespace

// The one shape of every typed launcher: `T` names the storage type of `dtype` inside the
// launch statement(s), which are checked once after. (A macro rather than a template: nvcc here
// compiles C++17, so a generic lambda cannot name its type parameter.)
#define CEPHALO_LAUNCH_TYPED(dtype, T, ...)            \
  do {                                                 \
    dispatch((dtype), [&](auto* tag_) {                \
      using T = std::remove_pointer_t<decltype(tag_)>; \
      __VA_ARGS__;                                     \
    });                                                \
    CEPHALO_CUDA_CHECK_LAUNCH();                       \
  } while (0)

// The same over two storage types (source S, destination D).
#define CEPHALO_LAUNCH_TYPED2(s_dtype, S, d_dtype, D, ...) \
  do {                                                     \
    dispatch((s_dtype), [&](auto* s_tag_) {                \
      using S = std::remove_pointer_t<decltype(s_tag_)>;   \
      dispatch((d_dtype), [&](auto* d_tag_) {              \
        using D = std::remove_pointer_t<decltype(d_tag_)>; \
        __VA_ARGS__;                                       \
      });                                                  \
    });                                                    \
    CEPHALO_CUDA_CHECK_LAUNCH();                           \
  } while (0)

void cast(TensorRef src, TensorRef dst, cudaStream_t stream) {
  expect_numel("cast", "dst", dst, src.numel);
  const std::size_t n = std::size_t(src.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED2(dtype_of(src), S, dtype_of(dst), D,
                        cast_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(
                            in<S>(src.data), out<D>(dst.data), n));
}

void axpy(float alpha, TensorRef src, TensorRef dst, cudaStream_t stream) {
  expect_numel("axpy", "dst", dst, src.numel);
  const std::size_t n = std::size_t(src.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED2(dtype_of(src), S, dtype_of(dst), D,
                        axpy_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(
                            alpha, in<S>(src.data), out<D>(dst.data), n));
}

void add(TensorRef a, TensorRef b, TensorRef y, cudaStream_t stream) {
  expect_numel("add", "b", b, a.numel);
  expect_numel("add", "y", y, a.numel);
  expect_same_type("add", a, b);
  expect_same_type("add", a, y);
  const std::size_t n = std::size_t(a.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(a), T,
                       add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                           in<T>(a.data), in<T>(b.data), out<T>(y.data), n));
}

void scale(TensorRef x, float factor, cudaStream_t stream) {
  const std::size_t n = std::size_t(x.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       scale_kernel<T>
                       <<<blocks_for(n), kThreads, 0, stream>>>(out<T>(x.data), factor, n));
}

void fill(TensorRef x, float value, cudaStream_t stream) {
  const std::size_t n = std::size_t(x.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       fill_kernel<T>
                       <<<blocks_for(n), kThreads, 0, stream>>>(out<T>(x.data), value, n));
}

void add_bias(TensorRef y, TensorRef bias, int rows, int cols, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(cols, "cols");
  expect_numel("add_bias", "y", y, std::int64_t(rows) * cols);
  expect_numel("add_bias", "bias", bias, cols);
  expect_same_type("add_bias", y, bias);
  CEPHALO_LAUNCH_TYPED(dtype_of(y), T,
                       add_bias_kernel<T>
                       <<<rows, kThreads, 0, stream>>>(out<T>(y.data), in<T>(bias.data), cols));
}

void bias_backward(TensorRef dy, float* dbias, int rows, int cols, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(cols, "cols");
  expect_numel("bias_backward", "dy", dy, std::int64_t(rows) * cols);
  const dim3 grid((cols + 31) / 32, column_row_blocks(rows)), block(32, kColRows);
  CEPHALO_LAUNCH_TYPED(dtype_of(dy), T,
                       bias_backward_kernel<T>
                       <<<grid, block, 0, stream>>>(in<T>(dy.data), dbias, rows, cols));
}

void gelu_forward(TensorRef x, TensorRef y, cudaStream_t stream) {
  expect_numel("gelu_forward", "y", y, x.numel);
  expect_same_type("gelu_forward", x, y);
  const std::size_t n = std::size_t(x.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       gelu_forward_kernel<T>
                       <<<blocks_for(n), kThreads, 0, stream>>>(in<T>(x.data), out<T>(y.data), n));
}

void gelu_backward(TensorRef x, TensorRef dy, TensorRef dx, cudaStream_t stream) {
  expect_numel("gelu_backward", "dy", dy, x.numel);
  expect_numel("gelu_backward", "dx", dx, x.numel);
  expect_same_type("gelu_backward", x, dy);
  expect_same_type("gelu_backward", x, dx);
  const std::size_t n = std::size_t(x.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       gelu_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                           in<T>(x.data), in<T>(dy.data), out<T>(dx.data), n));
}

void layernorm_forward(TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y, float* mean,
                       float* rstd, int rows, int cols, float eps, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(cols, "cols");
  expect_numel("layernorm_forward", "x", x, std::int64_t(rows) * cols);
  expect_numel("layernorm_forward", "y", y, std::int64_t(rows) * cols);
  expect_numel("layernorm_forward", "gamma", gamma, cols);
  expect_numel("layernorm_forward", "beta", beta, cols);
  for (const TensorRef* t : {&gamma, &beta, &y}) expect_same_type("layernorm_forward", x, *t);
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       layernorm_forward_kernel<T><<<rows, kThreads, 0, stream>>>(
                           in<T>(x.data), in<T>(gamma.data), in<T>(beta.data), out<T>(y.data), mean,
                           rstd, cols, eps));
}

void layernorm_backward(TensorRef dy, TensorRef x, TensorRef gamma, const float* mean,
                        const float* rstd, TensorRef dx, float* dgamma, float* dbeta, int rows,
                        int cols, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(cols, "cols");
  for (const TensorRef* t : {&dy, &x, &dx})
    expect_numel("layernorm_backward",
                 t == &dy  ? "dy"
                 : t == &x ? "x"
                           : "dx",
                 *t, std::int64_t(rows) * cols);
  expect_numel("layernorm_backward", "gamma", gamma, cols);
  for (const TensorRef* t : {&dy, &gamma, &dx}) expect_same_type("layernorm_backward", x, *t);
  const dim3 grid((cols + 31) / 32, column_row_blocks(rows)), block(32, kColRows);
  // Parameter gradients first: they read dy, which the dx pass may overwrite in place.
  CEPHALO_LAUNCH_TYPED(
      dtype_of(x), T,
      layernorm_backward_params_kernel<T><<<grid, block, 0, stream>>>(
          in<T>(dy.data), in<T>(x.data), mean, rstd, dgamma, dbeta, rows, cols);
      layernorm_backward_dx_kernel<T><<<rows, kThreads, 0, stream>>>(
          in<T>(dy.data), in<T>(x.data), in<T>(gamma.data), mean, rstd, out<T>(dx.data), cols));
}

// Score-side type S is either FP32 or the probability type P: five instantiations per kernel
// instead of nine.
template <typename F>
void dispatch_score_prob(Dtype score_dtype, Dtype prob_dtype, F&& f) {
  if (score_dtype == Dtype::FP32 || score_dtype == Dtype::TF32) {
    dispatch(prob_dtype, [&](auto* p_tag) { f(static_cast<float*>(nullptr), p_tag); });
    return;
  }
  if (score_dtype != prob_dtype)
    throw Error("causal softmax: scores must be fp32 or of the probabilities' type");
  dispatch(prob_dtype, [&](auto* p_tag) { f(p_tag, p_tag); });
}

// One block per score row (b, i) of a causal softmax launcher; S and P as dispatch_score_prob.
#define CEPHALO_LAUNCH_SOFTMAX(s_dtype, p_dtype, ...)                              \
  do {                                                                             \
    check_dims(batch, "batch");                                                    \
    check_dims(T, "T");                                                            \
    const unsigned rows = static_cast<unsigned>(batch) * static_cast<unsigned>(T); \
    dispatch_score_prob((s_dtype), (p_dtype), [&](auto* s_tag_, auto* p_tag_) {    \
      using S = std::remove_pointer_t<decltype(s_tag_)>;                           \
      using P = std::remove_pointer_t<decltype(p_tag_)>;                           \
      __VA_ARGS__;                                                                 \
    });                                                                            \
    CEPHALO_CUDA_CHECK_LAUNCH();                                                   \
  } while (0)

void causal_softmax_forward(TensorRef scores, TensorRef probs, float* lse, int batch, int T,
                            float s, cudaStream_t stream) {
  const long long n = (long long)batch * T * T;
  expect_numel("causal_softmax_forward", "scores", scores, n);
  expect_numel("causal_softmax_forward", "probs", probs, n);
  CEPHALO_LAUNCH_SOFTMAX(dtype_of(scores), dtype_of(probs),
                         causal_softmax_forward_kernel<S, P><<<rows, kThreads, 0, stream>>>(
                             in<S>(scores.data), out<P>(probs.data), lse, T, s));
}

void causal_softmax_recompute(TensorRef scores, const float* lse, TensorRef probs, int batch, int T,
                              float s, cudaStream_t stream) {
  const long long n = (long long)batch * T * T;
  expect_numel("causal_softmax_recompute", "scores", scores, n);
  expect_numel("causal_softmax_recompute", "probs", probs, n);
  CEPHALO_LAUNCH_SOFTMAX(dtype_of(scores), dtype_of(probs),
                         causal_softmax_recompute_kernel<S, P><<<rows, kThreads, 0, stream>>>(
                             in<S>(scores.data), lse, out<P>(probs.data), T, s));
}

void causal_softmax_backward(TensorRef probs, TensorRef dprobs, TensorRef dscores, int batch, int T,
                             float s, cudaStream_t stream) {
  const long long n = (long long)batch * T * T;
  expect_numel("causal_softmax_backward", "probs", probs, n);
  expect_numel("causal_softmax_backward", "dprobs", dprobs, n);
  expect_numel("causal_softmax_backward", "dscores", dscores, n);
  expect_same_type("causal_softmax_backward", probs, dscores);
  CEPHALO_LAUNCH_SOFTMAX(dtype_of(dprobs), dtype_of(probs),
                         causal_softmax_backward_kernel<S, P><<<rows, kThreads, 0, stream>>>(
                             in<P>(probs.data), in<S>(dprobs.data), out<P>(dscores.data), T, s));
}

namespace {

// [B, T, 3C] <-> q, k, v of [B, H, T, D]: `split` reads qkv and writes q, k, v; otherwise the
// reverse (the kernel takes q, k, v non-const for one signature and only reads them then).
void permute_qkv(const char* kernel, TensorRef qkv, TensorRef q, TensorRef k, TensorRef v, int B,
                 int T, int H, int D, bool split, cudaStream_t stream) {
  check_dims(std::int64_t(B) * T, "B * T");
  const long long heads = (long long)B * H * T * D;
  expect_numel(kernel, "qkv", qkv, 3 * heads);
  for (const TensorRef* t : {&q, &k, &v}) {
    expect_numel(kernel, t == &q ? "q" : t == &k ? "k" : "v", *t, heads);
    expect_same_type(kernel, qkv, *t);
  }
  CEPHALO_LAUNCH_TYPED(dtype_of(qkv), E,
                       qkv_heads_kernel<E><<<unsigned(B) * unsigned(T), kThreads, 0, stream>>>(
                           in<E>(split ? qkv.data : nullptr), out<E>(q.data), out<E>(k.data),
                           out<E>(v.data), out<E>(split ? nullptr : qkv.data), T, H, D, split));
}

// [B, H, T, D] <-> [B, T, H, D]; `merge` goes from heads to rows.
void permute_heads(const char* kernel, TensorRef from, TensorRef to, int B, int T, int H, int D,
                   bool merge, cudaStream_t stream) {
  check_dims(std::int64_t(B) * T, "B * T");
  const long long n = (long long)B * H * T * D;
  expect_numel(kernel, "input", from, n);
  expect_numel(kernel, "output", to, n);
  expect_same_type(kernel, from, to);
  CEPHALO_LAUNCH_TYPED(dtype_of(from), E,
                       heads_kernel<E><<<unsigned(B) * unsigned(T), kThreads, 0, stream>>>(
                           in<E>(from.data), out<E>(to.data), T, H, D, merge));
}

}  // namespace

void split_qkv_heads(TensorRef qkv, TensorRef q, TensorRef k, TensorRef v, int B, int T, int H,
                     int D, cudaStream_t stream) {
  permute_qkv("split_qkv_heads", qkv, q, k, v, B, T, H, D, true, stream);
}

void merge_qkv_heads(TensorRef dq, TensorRef dk, TensorRef dv, TensorRef dqkv, int B, int T, int H,
                     int D, cudaStream_t stream) {
  permute_qkv("merge_qkv_heads", dqkv, dq, dk, dv, B, T, H, D, false, stream);
}

void merge_heads(TensorRef y, TensorRef out, int B, int T, int H, int D, cudaStream_t stream) {
  permute_heads("merge_heads", y, out, B, T, H, D, true, stream);
}

void split_heads(TensorRef dout, TensorRef dy, int B, int T, int H, int D, cudaStream_t stream) {
  permute_heads("split_heads", dout, dy, B, T, H, D, false, stream);
}

void cross_entropy_forward(TensorRef logits, const std::int32_t* targets, float* losses, float* lse,
                           int rows, int vocab, float s, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(vocab, "vocab");
  expect_numel("cross_entropy_forward", "logits", logits, std::int64_t(rows) * vocab);
  CEPHALO_LAUNCH_TYPED(dtype_of(logits), T,
                       cross_entropy_forward_kernel<T><<<rows, 512, 0, stream>>>(
                           in<T>(logits.data), targets, losses, lse, vocab, s));
}

void cross_entropy_backward(TensorRef logits, const std::int32_t* targets, const float* lse,
                            TensorRef dlogits, int rows, int vocab, float s, cudaStream_t stream,
                            int vocab_begin) {
  check_dims(rows, "rows");
  check_dims(vocab, "vocab");
  expect_numel("cross_entropy_backward", "logits", logits, std::int64_t(rows) * vocab);
  expect_numel("cross_entropy_backward", "dlogits", dlogits, std::int64_t(rows) * vocab);
  expect_same_type("cross_entropy_backward", logits, dlogits);
  CEPHALO_LAUNCH_TYPED(dtype_of(logits), T,
                       cross_entropy_backward_kernel<T>
                       <<<rows, 512, 0, stream>>>(in<T>(logits.data), targets, lse,
                                                  out<T>(dlogits.data), vocab, s, vocab_begin));
}

void cross_entropy_row_max(TensorRef logits, float* row_max, int rows, int vocab,
                           cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(vocab, "vocab");
  expect_numel("cross_entropy_row_max", "logits", logits, std::int64_t(rows) * vocab);
  CEPHALO_LAUNCH_TYPED(dtype_of(logits), T,
                       cross_entropy_row_max_kernel<T>
                       <<<rows, 512, 0, stream>>>(in<T>(logits.data), row_max, vocab));
}

void cross_entropy_partial_sums(TensorRef logits, const std::int32_t* targets, const float* row_max,
                                float* sum_exp, float* target_logit, int rows, int vocab,
                                int vocab_begin, cudaStream_t stream) {
  check_dims(rows, "rows");
  check_dims(vocab, "vocab");
  expect_numel("cross_entropy_partial_sums", "logits", logits, std::int64_t(rows) * vocab);
  CEPHALO_LAUNCH_TYPED(dtype_of(logits), T,
                       cross_entropy_partial_sums_kernel<T>
                       <<<rows, 512, 0, stream>>>(in<T>(logits.data), targets, row_max, sum_exp,
                                                  target_logit, vocab, vocab_begin));
}

void cross_entropy_combine(const float* row_max, const float* sum_exp, const float* target_logit,
                           float* losses, float* lse, int rows, cudaStream_t stream) {
  if (rows == 0) return;
  check_dims(rows, "rows");
  cross_entropy_combine_kernel<<<blocks_for(std::size_t(rows)), kThreads, 0, stream>>>(
      row_max, sum_exp, target_logit, losses, lse, rows);
  CEPHALO_CUDA_CHECK_LAUNCH();
}

void embedding_forward(const std::int32_t* tokens, TensorRef wte, TensorRef wpe, TensorRef y, int B,
                       int T, int C, int vocab, int* bad_token_flag, cudaStream_t stream,
                       int vocab_begin, int rows) {
  const std::size_t n = std::size_t(B) * T * C;
  if (rows < 0) rows = vocab;
  expect_numel("embedding_forward", "wte", wte, (long long)rows * C);
  if (wpe.data) {
    expect_numel("embedding_forward", "wpe", wpe, (long long)T * C);
    expect_same_type("embedding_forward", wte, wpe);
  }
  expect_numel("embedding_forward", "y", y, (long long)n);
  expect_same_type("embedding_forward", wte, y);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(y), E,
                       embedding_forward_kernel<E><<<blocks_for(n), kThreads, 0, stream>>>(
                           tokens, in<E>(wte.data), in<E>(wpe.data), out<E>(y.data), B, T, C, vocab,
                           vocab_begin, rows, bad_token_flag));
}

void embedding_backward(const std::int32_t* tokens, TensorRef dy, float* dwte, float* dwpe, int B,
                        int T, int C, int vocab, cudaStream_t stream, int vocab_begin, int rows) {
  const std::size_t n = std::size_t(B) * T * C;
  if (rows < 0) rows = vocab;
  expect_numel("embedding_backward", "dy", dy, (long long)n);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(dy), E,
                       embedding_backward_kernel<E><<<blocks_for(n), kThreads, 0, stream>>>(
                           tokens, in<E>(dy.data), dwte, dwpe, B, T, C, vocab, vocab_begin, rows));
}

void adamw_step(float* param, const float* grad, float* m, float* v, std::size_t n,
                const AdamWParams& hp, float grad_scale, TensorRef param_copy,
                cudaStream_t stream) {
  if (param_copy.data) expect_numel("adamw_step", "param_copy", param_copy, (long long)n);
  const Dtype copy_dtype = param_copy.data ? dtype_of(param_copy) : Dtype::FP32;
  if (n == 0) return;
  if (hp.step < 1) throw Error("adamw_step: step is 1-based");
  const double bc1 = 1.0 - std::pow(double(hp.beta1), double(hp.step));
  const double bc2 = 1.0 - std::pow(double(hp.beta2), double(hp.step));
  const float step_size = static_cast<float>(hp.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  CEPHALO_LAUNCH_TYPED(copy_dtype, T,
                       adamw_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                           param, grad, m, v, n, decay, step_size, bc2_sqrt, hp.beta1, hp.beta2,
                           hp.eps, grad_scale, out<T>(param_copy.data)));
}

void sum_fp32(const float* x, std::size_t n, float* out, cudaStream_t stream) {
  sum_kernel<<<1, 1024, 0, stream>>>(x, n, out);
  CEPHALO_CUDA_CHECK_LAUNCH();
}

void fill_uniform(TensorRef x, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  const std::size_t n = std::size_t(x.numel);
  if (n == 0) return;
  CEPHALO_LAUNCH_TYPED(dtype_of(x), T,
                       fill_uniform_kernel<T>
                       <<<blocks_for(n), kThreads, 0, stream>>>(out<T>(x.data), n, seed, lo, hi));
}

void spin(long long cycles, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  CEPHALO_CUDA_CHECK_LAUNCH();
}

}  // namespace cephalo::cuda

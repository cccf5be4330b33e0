// The device side of kernels.cu: storage conversions, block reductions and every __global__
// kernel, each instantiated by kernels.cu's launchers for the three storage types. Included by
// kernels.cu only, inside its anonymous namespace, so the backend's kernels stay one nvcc
// translation unit (nvcc time on 2 cores is the constraint) while each file does one job.
#pragma once

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

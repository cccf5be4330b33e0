// The launchers of every elementwise, normalisation, softmax, embedding and optimiser kernel of
// the CUDA backend: argument checks, grid sizes and the typed launch. The kernels themselves are
// in kernels_device.cuh, included below so that all of it is one translation unit (nvcc time on
// 2 cores is the constraint: each kernel instantiated for the three storage types only).
// Arithmetic is fp32 throughout; storage types are converted on load and store with
// round-to-nearest-even.
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

#include "kernels_device.cuh"

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

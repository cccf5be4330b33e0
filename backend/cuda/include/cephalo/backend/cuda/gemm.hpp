#pragma once
// Matrix products through cuBLAS, row-major, with fp32 accumulation for every storage type.
// The cuBLAS handle and its workspace live behind a pointer so that cublas_v2.h stays private.
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "cephalo/core/dtype.hpp"

namespace cephalo::cuda {

struct GemmShape {
  int m = 0, n = 0, k = 0;
  bool trans_a = false;  // A is stored [k, m] and used transposed
  bool trans_b = false;  // B is stored [n, k] and used transposed
};

class Gemm {
 public:
  // Creates the cuBLAS handle on the current device. `allow_tf32` lets FP32 products use
  // tensor cores (about 3e-4 relative error instead of 1e-6); off by default because the
  // fp32 path is the one checked against the CPU backend at 1e-5.
  explicit Gemm(bool allow_tf32 = false);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C[m, n] = alpha * op(A) op(B) + beta * C, row-major. A and B are in `ab_dtype`; C is in
  // `c_dtype`, which is either ab_dtype or FP32 (weight gradients accumulate straight into
  // fp32 buffers with beta = 1). Accumulation is always fp32.
  void run(cudaStream_t stream, const GemmShape& shape, float alpha, const void* A, const void* B,
           float beta, void* C, Dtype ab_dtype, Dtype c_dtype) const;

  // `batch` independent products with constant strides (elements) between matrices, as used
  // by attention (one product per (sample, head)).
  void run_batched(cudaStream_t stream, const GemmShape& shape, float alpha, const void* A,
                   long long stride_a, const void* B, long long stride_b, float beta, void* C,
                   long long stride_c, int batch, Dtype ab_dtype, Dtype c_dtype) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// FLOPs of one product (2mnk), for TFLOP/s reporting.
inline double gemm_flops(const GemmShape& s) { return 2.0 * s.m * s.n * double(s.k); }

}  // namespace cephalo::cuda

#include "cephalo/backend/cuda/gemm.hpp"

#include <map>
#include <string>

#include "cephalo/core/error.hpp"
#include "check_private.hpp"

namespace cephalo::cuda {

namespace {

cudaDataType_t cuda_type(Dtype d) {
  switch (d) {
    case Dtype::FP32:
    case Dtype::TF32:
      return CUDA_R_32F;
    case Dtype::BF16:
      return CUDA_R_16BF;
    case Dtype::FP16:
      return CUDA_R_16F;
  }
  throw Error("gemm: unknown dtype");
}

void check_shape(const GemmShape& s, Dtype ab, Dtype c) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0)
    throw Error("gemm: dimensions must be positive (m=" + std::to_string(s.m) +
                " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + ")");
  if (c != ab && c != Dtype::FP32)
    throw Error("gemm: C must be stored in the input dtype or in fp32, got " + to_string(c) +
                " for " + to_string(ab) + " inputs");
}

}  // namespace

// 32 MiB of workspace (cuBLAS's recommendation for Hopper): cuBLAS picks faster split-K /
// stream-K kernels for the large tiles when it has one, and an explicit workspace keeps the
// handle graph-capturable.
constexpr std::size_t kWorkspaceBytes = 32u << 20;

struct Gemm::Impl {
  cublasHandle_t handle = nullptr;
  bool allow_tf32 = false;
  bool bound = false;  // set_stream has run once
  cudaStream_t stream = nullptr;
  // One workspace per stream: GEMMs on two streams may run concurrently and must not share
  // scratch (as in PyTorch's per-(handle, stream) workspaces).
  std::map<cudaStream_t, void*> workspaces;

  // cublasSetStream unconditionally resets the handle to cuBLAS's default workspace pool, so
  // the workspace must be set again after every stream change (it was silently dropped when it
  // was set once at construction and the stream on every call).
  void set_stream(cudaStream_t s) {
    if (bound && s == stream) return;
    void*& ws = workspaces[s];
    if (ws == nullptr) CEPHALO_CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
    CEPHALO_CUBLAS_CHECK(cublasSetStream(handle, s));
    CEPHALO_CUBLAS_CHECK(cublasSetWorkspace(handle, ws, kWorkspaceBytes));
    stream = s;
    bound = true;
  }
};

Gemm::Gemm(bool allow_tf32) : impl_(std::make_unique<Impl>()) {
  impl_->allow_tf32 = allow_tf32;
  CEPHALO_CUBLAS_CHECK(cublasCreate(&impl_->handle));
}

Gemm::~Gemm() {
  if (impl_) {
    cublasDestroy(impl_->handle);
    for (auto& [stream, ws] : impl_->workspaces)
      if (ws) cudaFree(ws);  // cudaFree waits for the device, so no GEMM still uses it
  }
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass B first, swap m and
// n, and use the row strides as leading dimensions.
void Gemm::run(cudaStream_t stream, const GemmShape& s, float alpha, const void* A, const void* B,
               float beta, void* C, Dtype ab, Dtype c) const {
  run_batched(stream, s, alpha, A, 0, B, 0, beta, C, 0, 1, ab, c);
}

void Gemm::run_batched(cudaStream_t stream, const GemmShape& s, float alpha, const void* A,
                       long long stride_a, const void* B, long long stride_b, float beta, void* C,
                       long long stride_c, int batch, Dtype ab, Dtype c) const {
  check_shape(s, ab, c);
  if (batch <= 0) throw Error("gemm: batch must be positive");
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = s.trans_a ? s.m : s.k;
  const int ldb = s.trans_b ? s.k : s.n;
  const int ldc = s.n;
  const cublasComputeType_t compute =
      (ab == Dtype::FP32 || ab == Dtype::TF32)
          ? (impl_->allow_tf32 || ab == Dtype::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F)
          : CUBLAS_COMPUTE_32F;
  impl_->set_stream(stream);
  if (batch == 1) {
    CEPHALO_CUBLAS_CHECK(cublasGemmEx(impl_->handle, op_b, op_a, s.n, s.m, s.k, &alpha, B,
                                      cuda_type(ab), ldb, A, cuda_type(ab), lda, &beta, C,
                                      cuda_type(c), ldc, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    CEPHALO_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        impl_->handle, op_b, op_a, s.n, s.m, s.k, &alpha, B, cuda_type(ab), ldb, stride_b, A,
        cuda_type(ab), lda, stride_a, &beta, C, cuda_type(c), ldc, stride_c, batch, compute,
        CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace cephalo::cuda

#pragma once
// cuBLAS and NCCL error checks. Private: only this library's sources include cuBLAS and NCCL
// headers. Messages carry the failed call, file:line and the library's own error string.
#include <cublas_v2.h>
#include <nccl.h>

#include "cephalo/backend/cuda/check.hpp"

namespace cephalo::cuda::detail {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expression,
                                     const char* file, int line);
// Aborts `comm` (when not null) before throwing: a failed collective can leave peers blocked
// inside NCCL, and ncclCommAbort is the documented way to tear the communicator down so that
// every rank's pending operations fail and the ranks can exit instead of hanging.
[[noreturn]] void throw_nccl_error(ncclResult_t status, ncclComm_t comm, const char* expression,
                                   const char* file, int line);

}  // namespace cephalo::cuda::detail

#define CEPHALO_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                         \
    const cublasStatus_t cephalo_status_ = (expr);                                             \
    if (cephalo_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::cephalo::cuda::detail::throw_cublas_error(cephalo_status_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CEPHALO_NCCL_CHECK(comm, expr)                                                    \
  do {                                                                                    \
    const ncclResult_t cephalo_status_ = (expr);                                          \
    if (cephalo_status_ != ncclSuccess)                                                   \
      ::cephalo::cuda::detail::throw_nccl_error(cephalo_status_, (comm), #expr, __FILE__, \
                                                __LINE__);                                \
  } while (0)

#pragma once
// Error checking for the CUDA runtime. Every CUDA call in the backend goes through
// CEPHALO_CUDA_CHECK so a failure reports the call, file:line and CUDA's own error string as a
// typed RuntimeFailure (exit code 4 in the CLI). cuBLAS and NCCL have their own macros in the
// private header src/check_private.hpp so their headers never leak to users of this library.
#include <cuda_runtime.h>

#include <string>

namespace cephalo::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expression, const char* file,
                                   int line);

// Number of CUDA devices, or 0 with `why` set to CUDA's error string (e.g. "no CUDA-capable
// device is detected") when the driver or device is missing. Never throws: used to decide
// between running and skipping.
int device_count(std::string* why = nullptr);

}  // namespace cephalo::cuda

#define CEPHALO_CUDA_CHECK(expr)                                                     \
  do {                                                                               \
    const cudaError_t cephalo_status_ = (expr);                                      \
    if (cephalo_status_ != cudaSuccess)                                              \
      ::cephalo::cuda::throw_cuda_error(cephalo_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CEPHALO_CUDA_CHECK_LAUNCH() CEPHALO_CUDA_CHECK(cudaGetLastError())

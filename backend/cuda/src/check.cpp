#include <sstream>

#include "cephalo/core/error.hpp"
#include "check_private.hpp"

namespace cephalo::cuda {

namespace {
std::string where(const char* library, const char* expression, const char* file, int line) {
  std::ostringstream out;
  out << library << " call failed at " << file << ":" << line << ": " << expression << ": ";
  return out.str();
}
}  // namespace

void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line) {
  throw RuntimeFailure(where("CUDA", expression, file, line) + cudaGetErrorName(status) + " (" +
                       cudaGetErrorString(status) + ")");
}

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why) *why = cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount reported 0 devices";
  return count;
}

namespace detail {

void throw_cublas_error(cublasStatus_t status, const char* expression, const char* file, int line) {
  throw RuntimeFailure(where("cuBLAS", expression, file, line) + cublasGetStatusName(status) +
                       " (" + cublasGetStatusString(status) + ")");
}

void throw_nccl_error(ncclResult_t status, ncclComm_t comm, const char* expression,
                      const char* file, int line) {
  std::string message = where("NCCL", expression, file, line) + ncclGetErrorString(status);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') message += std::string(": ") + last;
    ncclCommAbort(comm);  // peers blocked in collectives with us now fail instead of hanging
    message += " (communicator aborted)";
  }
  throw RuntimeFailure(message);
}

}  // namespace detail
}  // namespace cephalo::cuda

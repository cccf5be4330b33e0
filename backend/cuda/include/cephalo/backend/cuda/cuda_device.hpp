#pragma once
// The CUDA implementation of backend::Device (backend/include/cephalo/backend/device.hpp).
// Streams are non-blocking cudaStream_t, events are cudaEvent_t, GEMMs go through cuBLAS with
// fp32 accumulation, kernels are those of kernels.hpp, memory comes from a stream-ordered pool
// with byte accounting. Only <cuda_runtime.h> is included here.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "cephalo/backend/device.hpp"

namespace cephalo::cuda {

struct CudaDeviceOptions {
  int device = 0;           // CUDA device ordinal (one process per device: usually local rank)
  bool allow_tf32 = false;  // FP32 GEMMs on tensor cores (TF32 jobs)
  // Attention keeps T x T scores and their gradient in fp32 (accurate; ~1.5x the score memory
  // traffic of bf16/fp16). false stores them in the compute type, as a plain bf16 framework
  // would; gpu_layer_bench measures both.
  bool attention_scores_fp32 = true;
};

// Throws RuntimeFailure with CUDA's reason ("no CUDA-capable device is detected", ...) when
// there is no usable device, so `cephalo run --device cuda` on a machine without a GPU fails
// with a clear message and exit code 4.
std::unique_ptr<backend::Device> make_cuda_device(const CudaDeviceOptions& options = {});

// The device this process should use when one process runs per GPU: the launcher's node-local
// rank (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK, SLURM_LOCALID) modulo the
// visible device count; 0 when no launcher says. Never throws.
int local_device_index();

// The cudaStream_t behind a stream of a CUDA device; RuntimeFailure for any other stream
// (e.g. a CPU stream handed to the NCCL communicator by mistake).
cudaStream_t native_stream(backend::Stream& stream);
// The CUDA ordinal of a device made by make_cuda_device (RuntimeFailure for other devices).
int native_device(const backend::Device& device);

}  // namespace cephalo::cuda

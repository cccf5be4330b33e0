#pragma once
// The CPU implementation of Device: fp32 kernels on Eigen (bf16 / fp16 tensors are widened to
// fp32 and rounded back once per output, device.hpp's element-type contract), a compute
// "stream" that runs inline on the calling thread, and worker threads for the comm and copy
// streams (so collectives overlap compute, as CUDA streams do). Memory is the process heap
// behind a cache of freed blocks, accounted per space (allocated bytes, not cached ones).
#include <cstddef>
#include <memory>

#include "cephalo/backend/device.hpp"

namespace cephalo::backend {

struct CpuDeviceOptions {
  int ordinal = 0;
  int threads = 1;           // Eigen/OpenMP threads for GEMMs on this rank
  std::size_t capacity = 0;  // bytes reported as capacity (0 = unknown)
  // Freed blocks kept for reuse per memory space (exact-size cache; beyond this many cached
  // bytes a freed block goes back to the heap). 0 = no cache.
  std::size_t cache_bytes = std::size_t{2} << 30;
};

std::unique_ptr<Device> make_cpu_device(const CpuDeviceOptions& options);

}  // namespace cephalo::backend

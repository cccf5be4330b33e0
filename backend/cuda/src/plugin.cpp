// The CUDA backend as a plugin the CLI loads on demand (cephalo/backend/cuda_plugin.hpp): builds
// this rank's CUDA device on its local GPU and, under mpirun, the NCCL communicator
// bootstrapped over the caller's MPI communicator.
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/nccl_communicator.hpp"
#include "cephalo/backend/cuda_plugin.hpp"

namespace cb = cephalo::backend;

extern "C" __attribute__((visibility("default"))) int cephalo_cuda_plugin_abi() {
  return cb::kCudaPluginAbi;
}

extern "C" __attribute__((visibility("default"))) void cephalo_cuda_plugin_make(
    const cb::CudaPluginRequest& request, cb::CudaPluginParts& parts) {
  namespace cuda = cephalo::cuda;
  cuda::CudaDeviceOptions d;
  d.device = cuda::local_device_index();
  d.allow_tf32 = request.allow_tf32;
  parts.device = cuda::make_cuda_device(d);
  // NCCL's unique id travels over MPI; device buffers never go through MPI itself.
  if (request.bootstrap)
    parts.nccl = cuda::make_nccl_communicator(*parts.device, *request.bootstrap);
}

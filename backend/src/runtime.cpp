#include "cephalo/backend/runtime.hpp"

#include "cephalo/backend/single_rank_communicator.hpp"
#include "cephalo/core/error.hpp"
#ifdef CEPHALO_HAVE_CUDA
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/nccl_communicator.hpp"
#endif

namespace cephalo::backend {

Runtime make_runtime(const MpiRuntime& mpi, const RuntimeOptions& o) {
  Runtime rt;
  if (mpi.initialized()) rt.mpi = make_mpi_communicator({o.uneven});
  if (o.device == "cuda") {
#ifdef CEPHALO_HAVE_CUDA
    cuda::CudaDeviceOptions d;
    d.device = cuda::local_device_index();
    d.allow_tf32 = o.allow_tf32;
    rt.device = cuda::make_cuda_device(d);
    cuda::NcclOptions n;
    n.uneven = o.uneven == UnevenCollective::Padded ? cuda::UnevenAlgorithm::PaddedRing
                                                    : cuda::UnevenAlgorithm::GroupedBroadcastReduce;
    // NCCL's unique id travels over MPI; device buffers never go through MPI itself.
    if (rt.mpi) rt.nccl = cuda::make_nccl_communicator(*rt.device, *rt.mpi, n);
#else
    throw RuntimeFailure(
        "this build of cephalo has no CUDA backend (configure with a CUDA toolkit and NCCL; "
        "see backend/cuda/)");
#endif
  } else {
    rt.device = make_cpu_device(o.cpu);
  }
  if (!rt.mpi && !rt.nccl) rt.single = make_single_rank_communicator(*rt.device);
  rt.comm = rt.nccl ? rt.nccl.get() : rt.mpi ? rt.mpi.get() : rt.single.get();
  return rt;
}

}  // namespace cephalo::backend

#include "cephalo/backend/runtime.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "cephalo/backend/cuda_plugin.hpp"
#include "plugin_loader.hpp"
#include "single_rank_communicator.hpp"

namespace cephalo::backend {

CudaPluginMakeFn open_cuda_plugin(const std::filesystem::path& path) {
  PluginKind kind;
  kind.context = "--device cuda";
  kind.title = "the CUDA backend plugin";
  kind.short_name = "CUDA";
#ifdef CEPHALO_CUDA_PLUGIN_BUILT
  kind.missing = "the CUDA backend plugin " + path.string() +
                 " is missing (build the target cephalo_cuda_plugin, or point "
                 "CEPHALO_CUDA_PLUGIN at libcephalo_cuda.so)";
#else
  kind.missing = "this build of cephalo has no CUDA backend (no plugin at " + path.string() +
                 "; configure with a CUDA toolkit and NCCL, see backend/cuda/README.md)";
#endif
  kind.dlopen_flags = RTLD_NOW | RTLD_LOCAL;
  kind.abi_symbol = kCudaPluginAbiSymbol;
  kind.abi = kCudaPluginAbi;
  kind.entry_symbol = kCudaPluginMakeSymbol;
  return reinterpret_cast<CudaPluginMakeFn>(open_plugin(path, kind));
}

Runtime make_runtime(const MpiRuntime& mpi, const RuntimeOptions& o) {
  Runtime rt;
  if (mpi.initialized()) rt.mpi = make_mpi_communicator();
  if (o.device == "cuda") {
    CudaPluginRequest request;
    request.allow_tf32 = o.allow_tf32;
    request.bootstrap = rt.mpi.get();
    // Opened the first time a CUDA device is asked for; a failed open is retried next time.
    static std::mutex mu;
    static CudaPluginMakeFn make = nullptr;
    {
      std::lock_guard lock(mu);
      if (!make) make = open_cuda_plugin(plugin_path(kCudaPluginFile, "CEPHALO_CUDA_PLUGIN"));
    }
    CudaPluginParts parts;
    make(request, parts);
    rt.device = std::move(parts.device);
    rt.nccl = std::move(parts.nccl);
  } else {
    rt.device = make_cpu_device(o.cpu);
  }
  if (!rt.mpi && !rt.nccl) rt.single = make_single_rank_communicator(*rt.device);
  rt.comm = rt.nccl ? rt.nccl.get() : rt.mpi ? rt.mpi.get() : rt.single.get();
  return rt;
}

}  // namespace cephalo::backend

#include "cephalo/backend/runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>

#include "cephalo/backend/cuda_plugin.hpp"
#include "cephalo/core/error.hpp"
#include "single_rank_communicator.hpp"

namespace cephalo::backend {

namespace fs = std::filesystem;

namespace {

// The plugin sits beside the executable in the build tree (bin/), or in ../lib/cephalo/ of an
// installed prefix; CEPHALO_CUDA_PLUGIN names another file.
fs::path cuda_plugin_path() {
  if (const char* env = std::getenv("CEPHALO_CUDA_PLUGIN"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return kCudaPluginFile;
  const fs::path beside = exe.parent_path() / kCudaPluginFile;
  if (fs::exists(beside, ec)) return beside;
  const fs::path installed = exe.parent_path().parent_path() / "lib" / "cephalo" / kCudaPluginFile;
  return fs::exists(installed, ec) ? installed : beside;
}

std::string dl_reason() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic loader error";
}

}  // namespace

CudaPluginMakeFn open_cuda_plugin(const std::filesystem::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
#ifdef CEPHALO_CUDA_PLUGIN_BUILT
    throw RuntimeFailure("--device cuda: the CUDA backend plugin " + path.string() +
                         " is missing (build the target cephalo_cuda_plugin, or point "
                         "CEPHALO_CUDA_PLUGIN at libcephalo_cuda.so)");
#else
    throw RuntimeFailure("--device cuda: this build of cephalo has no CUDA backend (no plugin at " +
                         path.string() +
                         "; configure with a CUDA toolkit and NCCL, see backend/cuda/README.md)");
#endif
  }
  // Never closed: the device and communicator it makes run its code until the process exits.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw RuntimeFailure("--device cuda: cannot load the CUDA backend plugin " + path.string() +
                         ": " + dl_reason());
  dlerror();  // clear, so a null symbol is told apart from an error
  auto abi = reinterpret_cast<CudaPluginAbiFn>(dlsym(handle, kCudaPluginAbiSymbol));
  if (!abi)
    throw RuntimeFailure("--device cuda: " + path.string() + " is not a cephalo CUDA plugin (" +
                         kCudaPluginAbiSymbol + ": " + dl_reason() + ")");
  if (const int got = abi(); got != kCudaPluginAbi)
    throw RuntimeFailure("--device cuda: " + path.string() + " was built for plugin interface " +
                         std::to_string(got) + ", this cephalo needs " +
                         std::to_string(kCudaPluginAbi) + " (rebuild both from one tree)");
  auto make = reinterpret_cast<CudaPluginMakeFn>(dlsym(handle, kCudaPluginMakeSymbol));
  if (!make)
    throw RuntimeFailure("--device cuda: " + path.string() + " lacks " + kCudaPluginMakeSymbol +
                         ": " + dl_reason());
  return make;
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
      if (!make) make = open_cuda_plugin(cuda_plugin_path());
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

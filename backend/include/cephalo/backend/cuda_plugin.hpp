#pragma once
// The boundary between the CLI and the CUDA backend's plugin (libcephalo_cuda.so, built from
// backend/cuda/src/plugin.cpp). Commands that never touch a GPU (plan, simulate, --help, a CPU
// run) must not pay for loading CUDA, cuBLAS, cuBLASLt and NCCL (about 70 ms and 200 MB of
// resident memory at start-up), so `cephalo` does not link them: `make_runtime` dlopen()s the
// plugin the first time `--device cuda` asks for it and calls its one entry point.
//
// Both sides are built by this project with one compiler, so the entry point passes C++ types;
// kCudaPluginAbi guards against a plugin left over from another build of these structs.
#include <memory>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

// Bump whenever CudaPluginRequest, CudaPluginParts or the Device / Communicator interfaces
// change layout.
inline constexpr int kCudaPluginAbi = 3;

struct CudaPluginRequest {
  bool allow_tf32 = false;
  // The MPI communicator NCCL bootstraps over (its unique id travels through it); null for a
  // single process, which then gets no NCCL communicator.
  Communicator* bootstrap = nullptr;
};

struct CudaPluginParts {
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> nccl;  // null without a bootstrap communicator
};

// The plugin's file name (beside the `cephalo` executable, see make_runtime) and its exported
// symbols (C linkage, so dlsym finds them by these names).
inline constexpr const char* kCudaPluginFile = "libcephalo_cuda.so";
inline constexpr const char* kCudaPluginAbiSymbol = "cephalo_cuda_plugin_abi";
inline constexpr const char* kCudaPluginMakeSymbol = "cephalo_cuda_plugin_make";
using CudaPluginAbiFn = int (*)();
// Throws cephalo::RuntimeFailure (CUDA's reason when there is no usable GPU).
using CudaPluginMakeFn = void (*)(const CudaPluginRequest& request, CudaPluginParts& parts);

}  // namespace cephalo::backend

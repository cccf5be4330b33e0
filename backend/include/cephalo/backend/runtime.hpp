#pragma once
// One factory for a rank's device and communicator (`cephalo run` and `cephalo profile`):
// the CPU device with MPI (or, without mpirun, the single-rank communicator), or the CUDA
// device of this rank's local GPU with NCCL bootstrapped over MPI. The CUDA part comes from the
// plugin libcephalo_cuda.so (cuda_plugin.hpp), opened only when a CUDA device is asked for.
#include <filesystem>
#include <memory>
#include <string>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/cuda_plugin.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

struct RuntimeOptions {
  std::string device = "cpu";  // "cpu" or "cuda"
  CpuDeviceOptions cpu;        // --device cpu
  bool allow_tf32 = false;     // --device cuda: FP32 GEMMs on tensor cores (TF32 jobs)
  // (How uneven shards move is per call: the graph's variant, Communicator::all_gather_v.)
};

// The communicators are owned here; `comm` is the one to use (NCCL on CUDA under mpirun, MPI on
// CPU under mpirun, the single-rank communicator without it).
struct Runtime {
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> mpi, nccl, single;
  Communicator* comm = nullptr;
};

// RuntimeFailure for --device cuda in a build without the CUDA backend, when the plugin is
// missing or does not load (its path and the loader's reason), or with CUDA's reason on a
// machine without a usable GPU; ValidationError-free (the device name is checked by the
// command line).
// make_runtime looks for the plugin in $CEPHALO_CUDA_PLUGIN, else beside the executable, else in
// ../lib/cephalo/ of it.
Runtime make_runtime(const MpiRuntime& mpi, const RuntimeOptions& options);

// dlopen()s the CUDA plugin at `path` and returns its entry point; RuntimeFailure naming the path
// and the loader's reason (dlerror) when the file is missing, does not load, is not a cephalo
// plugin or was built for another plugin interface. make_runtime calls it once per process.
CudaPluginMakeFn open_cuda_plugin(const std::filesystem::path& path);

}  // namespace cephalo::backend

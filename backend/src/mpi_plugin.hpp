#pragma once
// The boundary between the backend and its MPI plugin (libcephalo_mpi.so, built from
// src/mpi_communicator.cpp). Commands that never run MPI (plan, simulate, validate, --help, a
// run or profile started without mpirun) must not pay for loading libmpi and what it pulls in
// (libopen-rte, libopen-pal, libhwloc, libevent, libudev: their relocations were most of the
// dynamic loader's 4.4 M instructions at every start, bench/README.md "Start-up"), so nothing
// `cephalo` links needs MPI: MpiRuntime and make_mpi_communicator (mpi_communicator.hpp)
// dlopen() the plugin the first time MPI is needed, as runtime.cpp loads the CUDA plugin.
//
// Both sides are built by this project with one compiler, so the interface passes C++ types;
// kMpiPluginAbi guards against a plugin left over from another build.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/communicator.hpp"

namespace cephalo::backend {

// Bump whenever MpiLibrary or the Communicator interface changes layout.
inline constexpr int kMpiPluginAbi = 1;

// What the plugin does with MPI; every call throws RuntimeFailure naming the failed MPI call.
class MpiLibrary {
 public:
  // MPI_Init_thread with MPI_THREAD_MULTIPLE (refused when the library provides less), errors
  // returned instead of aborting; this process's rank and size in MPI_COMM_WORLD.
  virtual void init(int* argc, char*** argv, int& rank, int& size) const = 0;
  // MPI_Finalize unless finalized already.
  virtual void finalize() const noexcept = 0;
  // MpiRuntime::gather_strings_to_root over MPI_COMM_WORLD (this process is `rank` of `size`).
  virtual std::vector<std::string> gather_strings_to_root(const std::string& mine, int rank,
                                                          int size) const = 0;
  // make_mpi_communicator: collectives over MPI_COMM_WORLD.
  virtual std::unique_ptr<Communicator> make_communicator() const = 0;

 protected:
  ~MpiLibrary() = default;  // the plugin's one instance lives until the process exits
};

// The plugin's file name (found as the CUDA plugin is: $CEPHALO_MPI_PLUGIN, else beside the
// executable, else ../lib/cephalo/) and its exported symbols (C linkage).
inline constexpr const char* kMpiPluginFile = "libcephalo_mpi.so";
inline constexpr const char* kMpiPluginEnv = "CEPHALO_MPI_PLUGIN";
inline constexpr const char* kMpiPluginAbiSymbol = "cephalo_mpi_plugin_abi";
inline constexpr const char* kMpiPluginLibrarySymbol = "cephalo_mpi_plugin_library";
using MpiPluginAbiFn = int (*)();
using MpiPluginLibraryFn = const MpiLibrary* (*)();

// dlopen()s the MPI plugin at `path` (RTLD_GLOBAL: Open MPI's own components, which it dlopen()s
// in MPI_Init, do not link libmpi and need its symbols global) and returns its library;
// RuntimeFailure naming the path and the loader's reason when the file is missing, does not
// load, is not a cephalo MPI plugin or was built for another interface.
const MpiLibrary& open_mpi_plugin(const std::filesystem::path& path);

// The process's MPI library: the plugin found as above, opened on first use (a failed open is
// retried on the next call).
const MpiLibrary& mpi_library();

}  // namespace cephalo::backend

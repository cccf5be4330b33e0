// MpiRuntime and make_mpi_communicator on this side of the MPI plugin (mpi_plugin.hpp): nothing
// here calls MPI, so the library and the `cephalo` executable link no MPI; the plugin is loaded
// only when a process started by a launcher (or a test's check program) asks for MPI.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "cephalo/backend/mpi_communicator.hpp"
#include "mpi_plugin.hpp"
#include "plugin_loader.hpp"

namespace cephalo::backend {

const MpiLibrary& open_mpi_plugin(const std::filesystem::path& path) {
  PluginKind kind;
  kind.context = "MPI";
  kind.title = "the MPI plugin";
  kind.short_name = "MPI";
  kind.missing = "the MPI plugin " + path.string() +
                 " is missing (build the target cephalo_mpi_plugin, or point " + kMpiPluginEnv +
                 " at " + kMpiPluginFile + ")";
  kind.dlopen_flags = RTLD_NOW | RTLD_GLOBAL;
  kind.abi_symbol = kMpiPluginAbiSymbol;
  kind.abi = kMpiPluginAbi;
  kind.entry_symbol = kMpiPluginLibrarySymbol;
  return *reinterpret_cast<MpiPluginLibraryFn>(open_plugin(path, kind))();
}

const MpiLibrary& mpi_library() {
  static std::mutex mu;
  static const MpiLibrary* library = nullptr;
  std::lock_guard lock(mu);
  if (!library) library = &open_mpi_plugin(plugin_path(kMpiPluginFile, kMpiPluginEnv));
  return *library;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv, bool only_under_launcher) {
  if (only_under_launcher && !launched_by_mpirun()) return;  // rank 0 of 1, no MPI
  mpi_library().init(argc, argv, rank_, size_);
  initialized_ = true;
}

MpiRuntime::~MpiRuntime() {
  if (initialized_) mpi_library().finalize();
}

bool MpiRuntime::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

std::vector<std::string> MpiRuntime::gather_strings_to_root(const std::string& mine) const {
  if (!initialized_ || size_ == 1) return {mine};
  return mpi_library().gather_strings_to_root(mine, rank_, size_);
}

std::unique_ptr<Communicator> make_mpi_communicator() { return mpi_library().make_communicator(); }

}  // namespace cephalo::backend

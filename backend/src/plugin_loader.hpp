#pragma once
// Finding and opening the backend's plugins (the CUDA backend's libcephalo_cuda.so and the MPI
// communicator's libcephalo_mpi.so): one search order and one set of refusals for both.
#include <filesystem>
#include <string>

namespace cephalo::backend {

// $<env> when set and non-empty, else `file` beside the executable (the build tree's bin/), else
// in ../lib/cephalo/ of it (an installed prefix); the path beside the executable when neither
// exists, so that a refusal names where the plugin was expected.
std::filesystem::path plugin_path(const char* file, const char* env);

// What a refusal says about the plugin being opened.
struct PluginKind {
  std::string context;     // what needed it, the message's prefix ("--device cuda")
  std::string title;       // "the CUDA backend plugin" in "cannot load <title> <path>"
  std::string short_name;  // "CUDA" in "<path> is not a cephalo <short_name> plugin"
  std::string missing;     // the whole refusal of a missing file after "<context>: "
  int dlopen_flags = 0;    // RTLD_NOW | RTLD_LOCAL or RTLD_GLOBAL
  const char* abi_symbol = nullptr;
  int abi = 0;
  const char* entry_symbol = nullptr;
};

// dlopen()s `path` and returns its entry point `kind.entry_symbol` after checking that
// `kind.abi_symbol()` returns `kind.abi`. Never closed (its code runs until the process exits).
// RuntimeFailure "<context>: ..." naming the path and the loader's reason (dlerror) when the
// file is missing, does not load, lacks either symbol or reports another interface version.
void* open_plugin(const std::filesystem::path& path, const PluginKind& kind);

}  // namespace cephalo::backend

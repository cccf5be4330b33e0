#include "plugin_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <system_error>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {

namespace fs = std::filesystem;

namespace {

std::string dl_reason() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic loader error";
}

}  // namespace

fs::path plugin_path(const char* file, const char* env) {
  if (const char* named = std::getenv(env); named && *named) return named;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return file;
  const fs::path beside = exe.parent_path() / file;
  if (fs::exists(beside, ec)) return beside;
  const fs::path installed = exe.parent_path().parent_path() / "lib" / "cephalo" / file;
  return fs::exists(installed, ec) ? installed : beside;
}

void* open_plugin(const fs::path& path, const PluginKind& kind) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw RuntimeFailure(kind.context + ": " + kind.missing);
  void* handle = dlopen(path.c_str(), kind.dlopen_flags);
  if (!handle)
    throw RuntimeFailure(kind.context + ": cannot load " + kind.title + " " + path.string() + ": " +
                         dl_reason());
  dlerror();  // clear, so a null symbol is told apart from an error
  auto abi = reinterpret_cast<int (*)()>(dlsym(handle, kind.abi_symbol));
  if (!abi)
    throw RuntimeFailure(kind.context + ": " + path.string() + " is not a cephalo " +
                         kind.short_name + " plugin (" + kind.abi_symbol + ": " + dl_reason() +
                         ")");
  if (const int got = abi(); got != kind.abi)
    throw RuntimeFailure(kind.context + ": " + path.string() + " was built for plugin interface " +
                         std::to_string(got) + ", this cephalo needs " + std::to_string(kind.abi) +
                         " (rebuild both from one tree)");
  void* entry = dlsym(handle, kind.entry_symbol);
  if (!entry)
    throw RuntimeFailure(kind.context + ": " + path.string() + " lacks " + kind.entry_symbol +
                         ": " + dl_reason());
  return entry;
}

}  // namespace cephalo::backend

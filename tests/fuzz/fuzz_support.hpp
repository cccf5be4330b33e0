#pragma once
// Shared by the libFuzzer harnesses (one per reader; see tests/README.md).
//
// Every reader takes a path, so the input bytes are written to a scratch file and the reader is
// called on it: the fuzzer exercises read_json_file as well as the schema code. The scratch
// folder links the shipped `clusters`, `jobs`, `plans` and `calibration` folders, so relative
// references inside fuzzed scenarios reach real files and the loaders get deeper.
//
// A typed cephalo::Error is the expected answer to bad input. Anything else that escapes (an
// nlohmann exception, std::bad_alloc, std::out_of_range) is a finding, like a crash: libFuzzer
// reports the uncaught exception and keeps the input.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cephalo/core/error.hpp"

namespace cephalo::fuzz {

inline std::filesystem::path scratch_folder() {
  namespace fs = std::filesystem;
  static const fs::path folder = [] {
    std::error_code ec;
    fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path dir = base / ("cephalo-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* sub : {"clusters", "jobs", "plans", "calibration", "catalog"}) {
      fs::path target = fs::path(CEPHALO_SOURCE_DIR) / "scenarios" / sub;
      if (!fs::exists(dir / sub, ec)) fs::create_directory_symlink(target, dir / sub, ec);
    }
    return dir;
  }();
  return folder;
}

// Writes the input to <scratch>/<name> and calls `read(path)`; typed errors are swallowed.
template <class Reader>
int read_bytes(const std::uint8_t* data, std::size_t size, const char* name, Reader&& read) {
  const std::filesystem::path file = scratch_folder() / name;
  if (std::FILE* out = std::fopen(file.c_str(), "wb")) {
    if (size) std::fwrite(data, 1, size, out);
    std::fclose(out);
  } else {
    std::perror(file.c_str());
    std::abort();
  }
  try {
    read(file);
  } catch (const cephalo::Error&) {
    // The clean answer to bad input.
  }
  return 0;
}

}  // namespace cephalo::fuzz

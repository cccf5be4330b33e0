// Checkpoint manifest reader (backend/checkpoint.hpp): parse_checkpoint_manifest validates a
// manifest completely from its text, before any shard is opened.
#include <string_view>

#include "cephalo/backend/checkpoint.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)cephalo::backend::parse_checkpoint_manifest(
        std::string_view(reinterpret_cast<const char*>(data), size), "manifest.json");
  } catch (const cephalo::Error&) {
    // The clean answer to bad input.
  }
  return 0;
}

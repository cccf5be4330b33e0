// Checkpoint shard headers (backend/checkpoint.hpp): parse_shard_header reads the fixed-width
// header every shard starts with, and check_shard_header compares it with a manifest (here a
// fixed 2-rank, 4-unit one), so a swapped, foreign or malformed shard is refused by name.
#include <string_view>

#include "cephalo/backend/checkpoint.hpp"
#include "fuzz_support.hpp"

namespace {

const cephalo::backend::CheckpointManifest& manifest() {
  static const cephalo::backend::CheckpointManifest m = [] {
    cephalo::backend::CheckpointManifest x;
    x.run = {"gpt-tiny", "0123456789abcdef", 42, "fedcba9876543210"};
    x.unit_numel = {10, 7, 7, 4};
    x.offsets = {{0, 6, 10}, {0, 3, 7}, {0, 0, 7}, {0, 4, 4}};
    x.shards = {{"rank_00000.bin", 0, 0}, {"rank_00001.bin", 0, 0}};
    return x;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto h = cephalo::backend::parse_shard_header(bytes, "rank_00001.bin");
    cephalo::backend::check_shard_header(h, manifest(), h.rank % 2, "rank_00001.bin",
                                         "manifest.json");
  } catch (const cephalo::Error&) {
    // The clean answer to bad input.
  }
  return 0;
}

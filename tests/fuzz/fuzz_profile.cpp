// Calibration readers: layer-latency profiles (Cephalo's model_latencies.json and the project's
// cephalo-profile format, chosen by content) and memory profiles.
#include "cephalo/costmodels/profile.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cephalo::fuzz::read_bytes(data, size, "profile.json", [](const auto& file) {
    (void)cephalo::costmodels::ProfileTables::load(file);
  });
  return cephalo::fuzz::read_bytes(data, size, "memory.json", [](const auto& file) {
    (void)cephalo::costmodels::MemoryProfiles::load(file);
  });
}

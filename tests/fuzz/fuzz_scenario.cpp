// Scenario reader: costmodels::load_scenario (names resolved against the built-in catalogs;
// cluster and job given inline or by file).
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "scenario.json", [](const auto& file) {
    (void)cephalo::costmodels::load_scenario(file);
  });
}

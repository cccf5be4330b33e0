// SimResult / RunResult reader (the records `cephalo compare` reads).
#include "cephalo/traces/report.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "result.json", [](const auto& file) {
    (void)cephalo::traces::load_iteration_report(file);
  });
}

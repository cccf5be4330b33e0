// `cephalo compare`'s reader (traces::load_result): a SimResult, or a RunResult whose record
// wraps the report in "report", reduced to the schema's keys before parsing.
#include "cephalo/traces/compare.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "run.result.json", [](const auto& file) {
    (void)cephalo::traces::load_result(file);
  });
}

// PyTorch profiler trace reader (traces/kineto_trace.hpp: `calibrate stack --trace`, `compare
// SIM TRACE`), on the bytes as they are and as a file named .gz (gzip's own checks and the
// bound on what it inflates to, here 1 MiB so that a bomb is refused within the fuzzer's
// memory limit; the command line's bound is kMaxTraceBytes).
#include <string>

#include "cephalo/traces/kineto_trace.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const char* name : {"trace.json", "trace.json.gz"}) {
    try {
      const auto trace = cephalo::traces::parse_kineto_trace(bytes, name, std::uint64_t{1} << 20);
      (void)cephalo::traces::to_json(trace).dump();
      (void)cephalo::traces::render_kineto_trace(trace);
      if (!trace.steps.empty()) (void)trace.median_step();
    } catch (const cephalo::Error&) {
      // The clean answer to bad input.
    }
  }
  return 0;
}

// Sweep spec reader (cephalo sweep --spec): pool, node shape, job, strategy, constraints.
#include "cephalo/planner/sweep.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "sweep.json", [](const auto& file) {
    (void)cephalo::planner::load_sweep_spec(file);
  });
}

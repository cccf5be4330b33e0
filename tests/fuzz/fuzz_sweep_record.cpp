// Collective sweep record reader (cephalo-collective-sweep, written by `cephalo profile` under
// mpirun and read as calibration by the communication model).
#include "alpha_beta_comm.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "collectives.sweep.json", [](const auto& file) {
    (void)cephalo::costmodels::load_collective_sweep(file);
  });
}

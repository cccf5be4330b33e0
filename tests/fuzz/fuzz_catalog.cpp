// Catalog readers: the GPU catalog and the model catalog formats.
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cephalo::fuzz::read_bytes(data, size, "gpus.json", [](const auto& file) {
    (void)cephalo::costmodels::GpuCatalog::load(file);
  });
  return cephalo::fuzz::read_bytes(data, size, "models.json", [](const auto& file) {
    (void)cephalo::costmodels::ModelCatalog::load(file);
  });
}

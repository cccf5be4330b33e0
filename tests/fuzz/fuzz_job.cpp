// Job reader: load_job against the built-in catalogs (catalog model or inline architecture).
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "job.json", [](const auto& file) {
    (void)cephalo::load_job(file, cephalo::costmodels::CatalogLookup::builtin());
  });
}

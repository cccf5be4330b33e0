// Cluster reader: load_cluster against the built-in catalogs.
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "cluster.json", [](const auto& file) {
    (void)cephalo::load_cluster(file, cephalo::costmodels::CatalogLookup::builtin());
  });
}

// The communication model's calibration path: a collective sweep read and fitted against a
// three-node cluster of GPUs and CPU ranks (calibrate_comm: groups, link kinds, collective
// kinds on CPU ranks, least squares on whatever points survive the reader), and the same bytes
// read as a profile's host-copy points (fit_profile_copies).
#include "alpha_beta_comm.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

namespace {

const cephalo::Cluster& cluster() {
  static const cephalo::Cluster c = [] {
    const cephalo::Json doc = {
        {"name", "fuzz"},
        {"nodes",
         {{{"name", "a"},
           {"gpus", {"a100-40gb", "a100-40gb"}},
           {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
           {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}},
          {{"name", "b"},
           {"gpus", {"l4", "l4"}},
           {"intra_link", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
           {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}},
          // CPU ranks: their points are also fitted per collective kind.
          {{"name", "c"},
           {"gpus", {"cpu", "cpu"}},
           {"intra_link", {{"kind", "shm"}, {"bandwidth", "5GB/s"}, {"latency", "2us"}}},
           {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}}}}};
    cephalo::JsonReader reader(doc, "<fuzz cluster>");
    return cephalo::parse_cluster(reader, cephalo::costmodels::CatalogLookup::builtin());
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)cluster();  // built once, outside the measured reader
  return cephalo::fuzz::read_bytes(data, size, "collectives.sweep.json", [](const auto& file) {
    try {
      (void)cephalo::costmodels::calibrate_comm(cluster(),
                                                cephalo::costmodels::load_collective_sweep(file));
    } catch (const cephalo::Error&) {
    }
    (void)cephalo::costmodels::fit_profile_copies(file);
  });
}

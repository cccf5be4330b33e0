#pragma once
// The small sweep spec the planner CLI tests share: at most 2 RTX A6000 + 2 L4 in 4-GPU PCIe
// nodes over 100 Gbit/s Ethernet, GPT-2.7B at sequence 512: 3 × 3 − 1 = 8 mixes.
#include <filesystem>
#include <fstream>
#include <string>

namespace cephalo::test_support {

inline void write_small_sweep_spec(const std::filesystem::path& file, const std::string& strategy) {
  std::ofstream(file) << R"({"name": "s", "pool": [{"gpu": "a6000", "max_count": 2},
    {"gpu": "l4", "max_count": 2}], "node": {"gpus_per_node": 4,
    "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
    "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
    "job": ")" << CEPHALO_SOURCE_DIR
                      << R"(/scenarios/jobs/gpt-2.7b-s512.json", "strategy": ")" << strategy
                      << R"("})";
}

}  // namespace cephalo::test_support

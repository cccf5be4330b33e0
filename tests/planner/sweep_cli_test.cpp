// `cephalo sweep` from the command line: the CSV it writes (a Pareto column over the mixes),
// a bad spec named by file and JSON path, and a search space above --max-mixes refused with its
// count before anything is planned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../support/run_command.hpp"
#include "sweep_spec_fixture.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::test_support::run_cephalo;

fs::path sweep_file(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_sweep_cli");
  fs::create_directories(dir);
  return dir / name;
}

TEST(SweepCli, WritesCsvWithAParetoFrontier) {
  const auto spec = sweep_file("sweep.json");
  cephalo::test_support::write_small_sweep_spec(spec, "optimal");
  const auto csv = sweep_file("sweep.csv");
  const auto r = run_cephalo("sweep --quiet --spec " + spec.string() + " -o " + csv.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(csv);
  std::string line;
  int rows = 0, pareto = 0;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("mix,network,gpus,nodes,cost_per_hour,family", 0), 0u);
  while (std::getline(in, line)) {
    ++rows;
    // pareto is the 14th column; mixes and networks are quoted and contain no commas
    int commas = 0;
    std::size_t i = 0;
    for (; i < line.size() && commas < 13; ++i) commas += line[i] == ',';
    pareto += line.compare(i, 1, "1") == 0;
  }
  EXPECT_EQ(rows, 8);  // 3 × 3 − 1 mixes
  EXPECT_GE(pareto, 1);
}

TEST(SweepCli, BadSpecNamesFileAndPath) {
  const auto spec = sweep_file("bad-sweep.json");
  std::ofstream(spec) << R"({"pool": [{"gpu": "l4", "max_count": 2, "colour": "red"}],
    "node": {"intra_link": {"kind": "pcie"}, "nic": {"kind": "ethernet"}}, "job": {}})";
  const auto r = run_cephalo("sweep --spec " + spec.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad-sweep.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("colour"), std::string::npos) << r.output;
}

TEST(SweepCli, ASpaceAboveMaxMixesIsRefusedWithItsCountBeforePlanning) {
  const auto spec = sweep_file("huge-sweep.json");
  // 4097^4 - 1 ≈ 2.8e14 combinations of counts, no budget.
  std::ofstream(spec) << R"({"name": "huge", "pool": [{"gpu": "a6000", "max_count": 4096},
    {"gpu": "l4", "max_count": 4096}, {"gpu": "t4", "max_count": 4096},
    {"gpu": "a10g", "max_count": 4096}], "node": {"gpus_per_node": 8,
    "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
    "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
    "job": ")" << CEPHALO_SOURCE_DIR
                      << R"(/scenarios/jobs/gpt-2.7b-s512.json"})";
  auto r = run_cephalo("sweep --spec " + spec.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("huge-sweep.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("281749955297280"), std::string::npos) << r.output;  // 4097^4 - 1
  EXPECT_NE(r.output.find("more than 5000 mixes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("samples/s"), std::string::npos) << r.output;  // nothing was planned
  // The bound is the flag's: the 8-mix sweep passes with 8 and is refused with 7.
  const auto small = sweep_file("sweep.json");
  cephalo::test_support::write_small_sweep_spec(small, "even");
  r = run_cephalo("sweep --quiet --max-mixes 7 --spec " + small.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("more than 7 mixes"), std::string::npos) << r.output;
  r = run_cephalo("sweep --quiet --max-mixes 8 --spec " + small.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(run_cephalo("sweep --max-mixes 0 --spec " + small.string()).exit_code, 2);
}

}  // namespace

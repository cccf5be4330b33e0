// `cephalo plan` and `cephalo sweep` end to end: valid plans out, clear errors and exit codes
// for infeasible and malformed requests.
#include <gtest/gtest.h>

#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out;
};

Run run(const std::string& args) {
  auto r = cephalo::test_support::run_combined(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.output};
}

fs::path tmp(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_planner_cli");
  fs::create_directories(dir);
  return dir / name;
}

const std::string kDefault = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";

void write_scenario(const fs::path& file, const std::string& model, int batch) {
  std::ofstream(file)
      << R"({"name": "t", "cluster": ")" << CEPHALO_SOURCE_DIR
      << R"(/scenarios/clusters/paper-4gpu.json", "job": {"name": "j", "model": ")" << model
      << R"(", "sequence_length": 512, "global_batch": )" << batch
      << R"(, "precision": {"params": "fp32", "compute": "fp16", "reduce": "fp32"}}})";
}

TEST(PlanCli, EveryStrategyWritesAValidPlan) {
  for (const std::string s : {"even", "proportional", "cephalo", "optimal", "search"}) {
    const auto out = tmp("default-" + s + ".plan.json");
    const auto r = run("plan --scenario " + kDefault + " --strategy " + s + " -o " + out.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("predicted iteration"), std::string::npos) << r.out;
    const auto v = run("validate " + out.string() + " --scenario " + kDefault);
    EXPECT_EQ(v.code, 0) << v.out;
    std::ifstream in(out);
    const auto plan = nlohmann::json::parse(in);
    int total = 0;
    for (const auto& rank : plan["ranks"]) total += rank["batch"].get<int>();
    EXPECT_EQ(total, 64);
    EXPECT_EQ(plan["strategy"], s);
  }
}

TEST(PlanCli, JsonIsThePlanWithItsPrediction) {
  const auto r = run("plan --scenario " + kDefault + " --strategy optimal --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["ranks"].size(), 4u);
  EXPECT_GT(plan["predicted"]["predicted_iteration_s"].get<double>(), 0);
  EXPECT_EQ(plan["predicted"]["ranks"].size(), 4u);
}

TEST(PlanCli, BatchSmallerThanGpuCountIsInfeasible) {
  const auto f = tmp("small-batch.json");
  write_scenario(f, "gpt-2.7b", 3);
  for (const std::string s : {"even", "cephalo", "optimal"}) {
    const auto r = run("plan --scenario " + f.string() + " --strategy " + s);
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_NE(r.out.find("raise the global batch"), std::string::npos) << r.out;
  }
}

TEST(PlanCli, ModelThatCannotFitNamesTheShortfall) {
  const auto f = tmp("huge-model.json");
  write_scenario(f, "gpt-175b", 64);
  const auto r = run("plan --scenario " + f.string() + " --strategy optimal");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("shortfall"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TiB"), std::string::npos) << r.out;  // 175B × 16 B does not fit 4 GPUs
}

TEST(PlanCli, UnknownStrategyIsAUsageError) {
  EXPECT_EQ(run("plan --scenario " + kDefault + " --strategy fastest").code, 2);
}

TEST(SweepCli, WritesCsvWithAParetoFrontier) {
  const auto spec = tmp("sweep.json");
  std::ofstream(spec) << R"({"name": "s", "pool": [{"gpu": "a6000", "max_count": 2},
    {"gpu": "l4", "max_count": 2}], "node": {"gpus_per_node": 4,
    "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
    "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
    "job": ")" << CEPHALO_SOURCE_DIR
                      << R"(/scenarios/jobs/gpt-2.7b-s512.json", "strategy": "optimal"})";
  const auto csv = tmp("sweep.csv");
  const auto r = run("sweep --quiet --spec " + spec.string() + " -o " + csv.string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(csv);
  std::string line;
  int rows = 0, pareto = 0;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("mix,gpus,cost_per_hour", 0), 0u);
  while (std::getline(in, line)) {
    ++rows;
    // pareto is the 9th column; mixes are quoted and contain no commas
    int commas = 0;
    std::size_t i = 0;
    for (; i < line.size() && commas < 8; ++i) commas += line[i] == ',';
    pareto += line.compare(i, 1, "1") == 0;
  }
  EXPECT_EQ(rows, 8);  // 3 × 3 − 1 mixes
  EXPECT_GE(pareto, 1);
}

TEST(SweepCli, BadSpecNamesFileAndPath) {
  const auto spec = tmp("bad-sweep.json");
  std::ofstream(spec) << R"({"pool": [{"gpu": "l4", "max_count": 2, "colour": "red"}],
    "node": {"intra_link": {"kind": "pcie"}, "nic": {"kind": "ethernet"}}, "job": {}})";
  const auto r = run("sweep --spec " + spec.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad-sweep.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("colour"), std::string::npos) << r.out;
}

TEST(SweepCli, ASpaceAboveMaxMixesIsRefusedWithItsCountBeforePlanning) {
  const auto spec = tmp("huge-sweep.json");
  // 4097^4 - 1 ≈ 2.8e14 combinations of counts, no budget.
  std::ofstream(spec) << R"({"name": "huge", "pool": [{"gpu": "a6000", "max_count": 4096},
    {"gpu": "l4", "max_count": 4096}, {"gpu": "t4", "max_count": 4096},
    {"gpu": "a10g", "max_count": 4096}], "node": {"gpus_per_node": 8,
    "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
    "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
    "job": ")" << CEPHALO_SOURCE_DIR
                      << R"(/scenarios/jobs/gpt-2.7b-s512.json"})";
  auto r = run("sweep --spec " + spec.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("huge-sweep.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("281749955297280"), std::string::npos) << r.out;  // 4097^4 - 1
  EXPECT_NE(r.out.find("more than 5000 mixes"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("samples/s"), std::string::npos) << r.out;  // nothing was planned
  // The bound is the flag's: the 8-mix sweep passes with 8 and is refused with 7.
  const auto small = tmp("sweep.json");
  std::ofstream(small) << R"({"name": "s", "pool": [{"gpu": "a6000", "max_count": 2},
    {"gpu": "l4", "max_count": 2}], "node": {"gpus_per_node": 4,
    "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
    "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
    "job": ")" << CEPHALO_SOURCE_DIR
                       << R"(/scenarios/jobs/gpt-2.7b-s512.json", "strategy": "even"})";
  r = run("sweep --quiet --max-mixes 7 --spec " + small.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("more than 7 mixes"), std::string::npos) << r.out;
  r = run("sweep --quiet --max-mixes 8 --spec " + small.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(run("sweep --max-mixes 0 --spec " + small.string()).code, 2);
}

}  // namespace

// Plans by rank class through the CLI (scenarios/README.md, "Plans by rank class"): `plan`
// writes the compact form above 256 ranks and on request, its tables print one row per run of
// alike ranks (`--per-rank`: every rank), and a compact plan simulates to the same record, to
// the nanosecond, as its per-rank form.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string all;  // stdout then stderr
};

Result run(const std::string& args) {
  auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return Result{r.code, r.out, r.out + r.err};
}

fs::path tmp(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (std::to_string(::getpid()) + "_rank_class_cli");
  fs::create_directories(dir);
  return dir / name;
}

// `nodes` repeated nodes of 8 H100 (one "count" entry), Llama-7B at sequence 512, 2 per GPU.
fs::path h100_scenario(int nodes) {
  const fs::path file = tmp("h100x" + std::to_string(nodes) + ".json");
  std::ofstream(file)
      << R"({"name": "h100x)" << nodes << R"(", "cluster": {"name": "c", "nodes": [
      {"name": "h", "count": )"
      << nodes << R"(, "gpus": [{"type": "H100-SXM", "count": 8}],
       "intra_link": {"kind": "nvlink", "bandwidth": "450GB/s", "latency": "2us"},
       "nic": {"kind": "infiniband", "count": 8, "bandwidth": "400Gbit/s", "latency": "5us"}}]},
    "job": {"name": "j", "model": "llama-7b", "sequence_length": 512, "global_batch": )"
      << nodes * 16
      << R"(, "precision": {"params": "fp32", "compute": "bf16", "reduce": "fp32"}}})";
  return file;
}

Json read(const fs::path& file) { return Json::parse(std::ifstream(file)); }

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    if (text.compare(at, prefix.size(), prefix) == 0) ++n;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return n;
}

TEST(RankClassCli, PlanWritesCompactAboveTheThresholdAndOnRequest) {
  const fs::path small = h100_scenario(32);  // 256 ranks: per rank by default
  const fs::path per_rank = tmp("small.plan.json"), compact = tmp("small.compact.plan.json");
  const auto r =
      run("plan --scenario " + small.string() + " --strategy even -o " + per_rank.string());
  ASSERT_EQ(r.code, 0) << r.all;
  EXPECT_EQ(read(per_rank)["ranks"].size(), 256u);
  // The table: one row for the 256 alike ranks, with their range.
  EXPECT_NE(r.out.find("\n0-255 "), std::string::npos) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "255 "), 0) << r.out;
  const auto all = run("plan --scenario " + small.string() + " --strategy even --per-rank");
  ASSERT_EQ(all.code, 0) << all.all;
  EXPECT_EQ(count_lines_starting(all.out, "255 "), 1) << all.out;
  ASSERT_EQ(
      run("plan --scenario " + small.string() + " --strategy even --compact -o " + compact.string())
          .code,
      0);
  const Json c = read(compact);
  ASSERT_TRUE(c.contains("rank_classes")) << c.dump();
  EXPECT_EQ(c["rank_classes"].size(), 1u);
  EXPECT_EQ(c["rank_classes"][0]["ranks"], Json::array({0, 255}));
  EXPECT_TRUE(c["predicted"].contains("rank_classes"));
  const auto checked = run("validate " + compact.string() + " --scenario " + small.string());
  EXPECT_EQ(checked.code, 0) << checked.all;
  EXPECT_NE(checked.out.find("plan, 256 ranks in 1 class(es), matches scenario h100x32"),
            std::string::npos)
      << checked.out;
  // The two forms simulate to the same record, to the last digit.
  const auto a =
      run("simulate --scenario " + small.string() + " --plan " + per_rank.string() + " --json");
  const auto b =
      run("simulate --scenario " + small.string() + " --plan " + compact.string() + " --json");
  ASSERT_EQ(a.code, 0) << a.all;
  ASSERT_EQ(b.code, 0) << b.all;
  EXPECT_EQ(a.out, b.out);
  // The simulate table prints the class; --per-rank every rank.
  const auto table = run("simulate --scenario " + small.string() + " --plan " + compact.string());
  ASSERT_EQ(table.code, 0) << table.all;
  EXPECT_NE(table.out.find("\n0-255 "), std::string::npos) << table.out;
  const auto rows =
      run("simulate --scenario " + small.string() + " --plan " + compact.string() + " --per-rank");
  EXPECT_EQ(count_lines_starting(rows.out, "255 "), 1) << rows.out;

  const fs::path large = h100_scenario(33);  // 264 ranks: compact by default
  const fs::path written = tmp("large.plan.json");
  ASSERT_EQ(
      run("plan --scenario " + large.string() + " --strategy even -o " + written.string()).code, 0);
  EXPECT_TRUE(read(written).contains("rank_classes"));
  ASSERT_EQ(run("plan --scenario " + large.string() + " --strategy even --per-rank -o " +
                written.string())
                .code,
            0);
  EXPECT_EQ(read(written)["ranks"].size(), 264u);
  // The two flags contradict each other: a bad command line.
  EXPECT_EQ(run("plan --scenario " + large.string() + " --per-rank --compact").code, 2);
}

TEST(RankClassCli, ACompactPlanForAnotherClusterIsRefusedNamingTheClass) {
  const fs::path two = h100_scenario(2);
  const fs::path plan = tmp("two.compact.plan.json");
  ASSERT_EQ(
      run("plan --scenario " + two.string() + " --strategy even --compact -o " + plan.string())
          .code,
      0);
  Json j = read(plan);
  j["scenario"] = "h100x3";
  std::ofstream(plan) << j.dump();
  const auto r =
      run("simulate --scenario " + h100_scenario(3).string() + " --plan " + plan.string());
  EXPECT_EQ(r.code, 1) << r.all;
  // The class that ends short of the cluster, the ranks the classes cover and the cluster's.
  for (const char* w : {"rank_classes[0].ranks", "[0, 15]", "16 ranks", "24 device(s)"})
    EXPECT_NE(r.all.find(w), std::string::npos) << w << "\n" << r.all;
}

}  // namespace

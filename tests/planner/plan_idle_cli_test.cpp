// Leaving GPUs out for real (planner/README.md "Leaving GPUs out", scenarios/README.md "Plans
// of some nodes"), through the binary: `plan` writes the plan of the nodes that are faster
// alone, with its "nodes", says which GPUs idle and why, and `simulate` of the written plan
// against the scenario given replays to the printed prediction; `--use-all` keeps every GPU;
// a plan's bad "nodes" are refused by every reader with exit 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out, err;
};

Result run(const std::string& args) {
  auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.out, r.err};
}

fs::path dir() {
  const fs::path d = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_idle");
  fs::create_directories(d);
  return d;
}

void write(const fs::path& file, const json& j) { std::ofstream(file) << j.dump(2) << "\n"; }

// The case: 2 nodes of 8 A100-80GB and 6 nodes of 8 L4, one 25 Gbit/s NIC per node.
fs::path a100_l4_25g() {
  const json nic = {
      {"kind", "ethernet"}, {"count", 1}, {"bandwidth", "25Gbit/s"}, {"latency", "15us"}};
  const json scenario = {
      {"name", "a100x2-l4x6-25g"},
      {"cluster",
       {{"name", "a100x2-l4x6-25g"},
        {"nodes",
         {{{"name", "a100"},
           {"count", 2},
           {"gpus", {{{"type", "A100-80GB"}, {"count", 8}}}},
           {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
           {"nic", nic}},
          {{"name", "l4"},
           {"count", 6},
           {"gpus", {{{"type", "L4"}, {"count", 8}}}},
           {"intra_link", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
           {"nic", nic}}}}}},
      {"job", std::string(CEPHALO_SOURCE_DIR) + "/scenarios/jobs/llama-7b-s2048-b128.json"}};
  const fs::path file = dir() / "a100x2-l4x6-25g.json";
  write(file, scenario);
  return file;
}

json parse(const std::string& text) { return json::parse(text); }

}  // namespace

TEST(PlanIdle, SlowL4NodesAreLeftOutAndTheWrittenPlanSimulatesToThePrediction) {
  const fs::path scenario = a100_l4_25g();
  const fs::path plan = dir() / "plan.json";
  const std::string base = "plan --scenario " + scenario.string() + " --parallelism fsdp";
  auto r = run(base + " -o " + plan.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // The summary says which GPUs idle and both simulated times; the table what it runs on.
  EXPECT_NE(r.out.find("left idle: 48x L4 (ranks 16-63, nodes "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--use-all plans every GPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("idle: 48x L4 (nodes "), std::string::npos) << r.out;
  std::ifstream in(plan);
  const json written = json::parse(in);
  EXPECT_EQ(written["nodes"], json::array({0, 1}));
  EXPECT_EQ(written["ranks"].size(), 16u);
  const json& idle = written["predicted"]["faster_without"];
  EXPECT_EQ(idle["idle_gpus"], "48x L4");
  EXPECT_LT(idle["without_s"].get<double>(), idle["with_all_s"].get<double>() * 0.99);
  const double predicted = written["predicted"]["simulated_iteration_s"].get<double>();
  EXPECT_DOUBLE_EQ(predicted, idle["without_s"].get<double>());

  // simulate of the written plan against the scenario as given: the printed figure.
  r = run("simulate --scenario " + scenario.string() + " --plan " + plan.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json sim = parse(r.out);
  EXPECT_DOUBLE_EQ(sim["iteration_time_s"].get<double>(), predicted);
  EXPECT_EQ(sim["ranks"].size(), 16u);
  r = run("simulate --scenario " + scenario.string() + " --plan " + plan.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("idle: 48x L4 (nodes l4"), std::string::npos) << r.out;
  EXPECT_NE(run("validate " + plan.string() + " --scenario " + scenario.string())
                .out.find(": ok (plan, 16 ranks on nodes 0-1 (the others idle), matches"),
            std::string::npos);
  // compare and predict memory read it against the same cut: 16 ranks, the plan's graph.
  const fs::path sim_file = dir() / "sim.json", again = dir() / "again.json";
  std::ofstream(sim_file) << sim.dump(2) << "\n";
  json measured = sim;  // as if measured: compare's second file is a run
  measured["source"] = "cuda";
  std::ofstream(again) << measured.dump(2) << "\n";
  r = run("compare " + sim_file.string() + " " + again.string() + " --scenario " +
          scenario.string() + " --plan " + plan.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  r = run("predict memory --scenario " + scenario.string() + " --plan " + plan.string() +
          " --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("A100-80GB"), std::string::npos);
  EXPECT_EQ(r.out.find("\"L4\""), std::string::npos) << r.out;

  // --use-all: every GPU, no "nodes", the time the idle line compared against.
  r = run(base + " --use-all --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json all = parse(r.out);
  EXPECT_FALSE(all.contains("nodes"));
  EXPECT_EQ(all["ranks"].size(), 64u);
  EXPECT_FALSE(all["predicted"].contains("faster_without"));
  EXPECT_DOUBLE_EQ(all["predicted"]["simulated_iteration_s"].get<double>(),
                   idle["with_all_s"].get<double>());
}

TEST(PlanIdle, BadNodesAreRefusedByEveryReaderWithExitOne) {
  const fs::path scenario = a100_l4_25g();
  const fs::path good = dir() / "good.json";
  ASSERT_EQ(
      run("plan --scenario " + scenario.string() + " --parallelism fsdp -o " + good.string()).code,
      0);
  std::ifstream in(good);
  const json plan = json::parse(in);
  struct Case {
    json nodes;
    std::string fragment;
  };
  for (const Case& c : {Case{json::array({0, 8}), "node 8"}, Case{json::array({1, 0}), "nodes[1]"},
                        Case{json::array({0, 0}), "nodes[1]"}, Case{json::array(), "at least one"},
                        Case{json::array({0, 2}), "ranks[8].gpu"},
                        Case{json::array({json::array({0, 2})}), "24 ranks"}}) {
    json bad = plan;
    bad["nodes"] = c.nodes;
    const fs::path file = dir() / "bad.json";
    write(file, bad);
    for (const std::string& command :
         {"simulate --scenario " + scenario.string() + " --plan " + file.string(),
          "predict memory --scenario " + scenario.string() + " --plan " + file.string(),
          "validate " + file.string() + " --scenario " + scenario.string()}) {
      const auto r = run(command);
      EXPECT_EQ(r.code, 1) << command << "\n" << c.nodes.dump() << "\n" << r.out << r.err;
      EXPECT_NE((r.out + r.err).find(file.string()), std::string::npos) << r.out << r.err;
      EXPECT_NE((r.out + r.err).find(c.fragment), std::string::npos) << command << "\n"
                                                                     << c.nodes.dump() << "\n"
                                                                     << r.out << r.err;
    }
  }
}

// A split plan of some nodes (the golden default plan of modern-mix-llama7b leaves its L4 node
// idle) is estimated by `predict 3d` on those nodes, and simulated to the golden record.
TEST(PlanIdle, ASplitPlanOfSomeNodesIsEstimatedAndSimulatedOnThem) {
  const std::string root = CEPHALO_SOURCE_DIR;
  const std::string scenario = root + "/scenarios/modern-mix-llama7b.json";
  const std::string plan = root + "/tests/golden/modern-mix-llama7b.plan.json";
  std::ifstream in(plan);
  const json golden = json::parse(in);
  ASSERT_TRUE(golden.contains("nodes") && golden.contains("model_split"));
  auto r = run("predict 3d --scenario " + scenario + " --split " + plan + " --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GT(parse(r.out)["iteration_s"].get<double>(), 0);
  r = run("simulate --scenario " + scenario + " --plan " + plan + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(parse(r.out)["iteration_time_s"].get<double>(),
                   golden["predicted"]["simulated_iteration_s"].get<double>());
}

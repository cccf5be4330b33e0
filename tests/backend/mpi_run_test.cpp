// Real multi-process runs of `cephalo run` under mpirun (1-4 ranks): uneven plans against a
// single-rank full-batch step, loss decrease, checkpoint resume under another plan, injected
// rank failure, and plans refused before any compute.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"
#include "../support/run_command.hpp"
#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/executor.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "single_rank_communicator.hpp"

namespace fs = std::filesystem;
using namespace cephalo::test_support;
using cephalo::load_plan;
using cephalo::Plan;
using cephalo::Scenario;
using cephalo::validate_plan_for;

namespace {

// One step of the single-rank full-batch reference (computed once per test binary).
struct Reference {
  std::vector<float> params, grads;
};
const Reference& single_rank_reference() {
  static Reference ref = [] {
    TempDir dir;
    auto o = mpirun(1, "--scenario " + scenario(1) + " --plan " + plan("cpu-1rank-full") +
                           " --steps 1 --dump-params " + (dir.path / "p.bin").string() +
                           " --dump-grads " + (dir.path / "g.bin").string());
    EXPECT_EQ(o.code, 0) << o.output;
    return Reference{read_floats(dir.path / "p.bin"), read_floats(dir.path / "g.bin")};
  }();
  return ref;
}

// gpt-tiny's parameters before any step (the executor's deterministic initialisation).
std::vector<float> initial_parameters() {
  static const std::vector<float> init = [] {
    const Scenario sc = cephalo::costmodels::load_scenario(scenario(1));
    cephalo::backend::GptModel model(
        cephalo::backend::GptConfig::from_spec(sc.job.model, sc.job.sequence_length));
    std::vector<float> all;
    for (int u = 0; u < model.num_units(); ++u) {
      auto x = model.initial_unit(u);
      all.insert(all.end(), x.begin(), x.end());
    }
    return all;
  }();
  return init;
}

// One step of `plan_file` on `scenario_file` under mpirun -np `ranks` against the reference.
void expect_step_matches_reference(const std::string& scenario_file, const std::string& plan_file,
                                   int ranks, const std::string& plan_name) {
  const auto& ref = single_rank_reference();
  ASSERT_EQ(ref.params.size(), [] {
    std::size_t n = 0;
    for (auto u : tiny_units()) n += u;
    return n;
  }());
  TempDir dir;
  auto o = mpirun(ranks, "--scenario " + scenario_file + " --plan " + plan_file +
                             " --steps 1 --dump-params " + (dir.path / "p.bin").string() +
                             " --dump-grads " + (dir.path / "g.bin").string());
  ASSERT_EQ(o.code, 0) << o.output;
  auto p = read_floats(dir.path / "p.bin"), g = read_floats(dir.path / "g.bin");
  ASSERT_EQ(p.size(), ref.params.size());
  ASSERT_EQ(g.size(), ref.grads.size());
  // The reduce-scattered gradient is the full-batch gradient (sample sums / global batch).
  EXPECT_LT(worst_element_relative(g, ref.grads), 1e-5) << plan_name;
  EXPECT_LT(worst_unit_relative(g, ref.grads), 1e-5) << plan_name;
  // Parameters after AdamW. Per unit: Adam's first step is ~lr*sign(g), so directions whose
  // true gradient is exactly zero (the key bias: softmax is shift-invariant) carry fp32
  // summation noise amplified by lr/eps; the unit norm is the meaningful fp32 comparison.
  EXPECT_LT(worst_unit_relative(p, ref.params), 1e-5) << plan_name;
  // And it is a real step: every unit moved from its initial values (by about lr relative to
  // the weights; 1e-6 is far above fp32 noise and far below one AdamW step).
  EXPECT_GT(worst_unit_relative(p, initial_parameters()), 1e-6) << plan_name;
  for (std::size_t u = 0, off = 0; u < tiny_units().size(); off += tiny_units()[u], ++u) {
    const auto init = initial_parameters();
    double d = 0;
    for (std::size_t i = off; i < off + tiny_units()[u]; ++i) d += std::fabs(p[i] - init[i]);
    EXPECT_GT(d, 0.0) << plan_name << ": unit " << u << " did not move";
  }
}

void expect_one_step_matches_reference(const std::string& plan_name, int ranks = 3) {
  expect_step_matches_reference(scenario(ranks), plan(plan_name), ranks, plan_name);
}

}  // namespace

TEST(MpiRun, UnevenLayeredStepEqualsSingleRankFullBatch) {
  expect_one_step_matches_reference("cpu-3rank-uneven-layered");
}

TEST(MpiRun, SingleRankCommunicatorWithoutMpiEqualsTheMpiRun) {
  // The executor in this process (no MPI_Init) over the single-rank communicator, against
  // `mpirun -np 1 cephalo run`: same device, same program, so the same numbers.
  const auto& ref = single_rank_reference();
  const Scenario sc = cephalo::costmodels::load_scenario(scenario(1));
  const Plan pl = load_plan(plan("cpu-1rank-full"));
  validate_plan_for(pl, sc, plan("cpu-1rank-full"));
  const auto graph = cephalo::traces::build_training_graph(pl, sc);
  auto dev = cephalo::backend::make_cpu_device({});
  auto comm = cephalo::backend::make_single_rank_communicator(*dev);
  EXPECT_EQ(comm->size(), 1);
  cephalo::backend::Executor exec(
      sc, pl, graph, cephalo::backend::GptConfig::from_spec(sc.job.model, sc.job.sequence_length),
      *dev, *comm, {});
  const auto step = exec.run_step();
  EXPECT_TRUE(std::isfinite(step.loss));
  const auto p = exec.gather_parameters(), g = exec.gather_gradients();
  ASSERT_EQ(p.size(), ref.params.size());
  ASSERT_EQ(g.size(), ref.grads.size());
  EXPECT_LT(worst_element_relative(g, ref.grads), 1e-6);
  EXPECT_LT(worst_unit_relative(p, ref.params), 1e-6);
  // A mismatched collective is refused, not silently truncated.
  auto small = dev->allocate(4, cephalo::backend::ElemType::F32);
  auto large = dev->allocate(8, cephalo::backend::ElemType::F32);
  auto& s = dev->stream(cephalo::backend::StreamKind::Comm);
  EXPECT_THROW(comm->all_gather(s, small.ref(), large.ref()), cephalo::RuntimeFailure);
  EXPECT_THROW(
      comm->all_gather_v(s, small.ref(), large.ref(), {4, 4}, cephalo::UnevenCollective::Grouped),
      cephalo::RuntimeFailure);
}

TEST(MpiRun, UntiedHeadUnevenStepEqualsSingleRankFullBatch) {
  // The head owns its [vocab x hidden] weight: its phases gather and reduce only the head unit
  // (no embedding brought along), and the split step still equals the full-batch step.
  TempDir dir;
  auto untied = [](nlohmann::json& job) {
    job["model"] = {{"name", "gpt-tiny-untied"},
                    {"family", "gpt"},
                    {"layers", 2},
                    {"hidden", 64},
                    {"heads", 4},
                    {"vocab_size", 256},
                    {"max_positions", 64},
                    {"tied_embeddings", false}};
  };
  auto run = [&](int ranks, const std::string& plan_name) {
    const auto p = dir.path / (plan_name + ".p.bin"), g = dir.path / (plan_name + ".g.bin");
    auto o = mpirun(ranks, "--scenario " + scenario_variant(dir.path, ranks, "untied", untied) +
                               " --plan " + plan(plan_name) + " --steps 1 --dump-params " +
                               p.string() + " --dump-grads " + g.string());
    EXPECT_EQ(o.code, 0) << o.output;
    return std::make_pair(read_floats(p), read_floats(g));
  };
  const auto [ref_p, ref_g] = run(1, "cpu-1rank-full");
  const auto [p, g] = run(3, "cpu-3rank-uneven-layered");
  // Tied size plus the head's own weight (256 x 64).
  std::size_t tied = 0;
  for (auto n : tiny_units()) tied += n;
  ASSERT_EQ(ref_g.size(), tied + 256 * 64);
  ASSERT_EQ(g.size(), ref_g.size());
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - ref_g[i]));
  double scale = 0;
  for (float x : ref_g) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  EXPECT_LT(worst, 1e-5 * scale);
  // The head's weight received a gradient of its own.
  double head_norm = 0;
  for (std::size_t i = tied; i < g.size(); ++i) head_norm += std::fabs(g[i]);
  EXPECT_GT(head_norm, 0.0);
  double pd = 0, pn = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    pd += (static_cast<double>(p[i]) - ref_p[i]) * (static_cast<double>(p[i]) - ref_p[i]);
    pn += static_cast<double>(ref_p[i]) * ref_p[i];
  }
  EXPECT_LT(std::sqrt(pd / pn), 1e-5);
}

TEST(MpiRun, UnevenPaddedCollectivesStepEqualsSingleRankFullBatch) {
  // uneven_collective: padded — shards padded to the largest around MPI_Allgather /
  // MPI_Reduce_scatter_block instead of the -v calls.
  expect_one_step_matches_reference("cpu-3rank-uneven-padded");
}

TEST(MpiRun, UnevenStandardStepEqualsSingleRankFullBatch) {
  expect_one_step_matches_reference("cpu-3rank-uneven-standard");
}

TEST(MpiRun, OffloadAndNoPrefetchStepEqualSingleRankFullBatch) {
  expect_one_step_matches_reference("cpu-3rank-uneven-offload");
  expect_one_step_matches_reference("cpu-3rank-noprefetch");
}

TEST(MpiRun, EvenSharesOnFourRanksStepEqualsSingleRankFullBatch) {
  // Equal shares of units whose sizes divide by 4: the even collectives (MPI_Allgather,
  // MPI_Reduce_scatter_block) instead of the -v variants.
  expect_one_step_matches_reference("cpu-4rank-even", 4);
}

TEST(MpiRun, RankWithoutSamplesAndRankWithoutStateStepEqualsSingleRankFullBatch) {
  // Rank 0 computes everything and owns nothing; rank 1 owns everything and computes nothing
  // (it still joins every collective with zero gradients). Standard accumulation, host offload.
  expect_one_step_matches_reference("cpu-2rank-idle-rank", 2);
}

TEST(MpiRun, LossFallsOverFiftySteps) {
  auto o = mpirun(2, "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-uneven") +
                         " --steps 50 --json");
  ASSERT_EQ(o.code, 0) << o.output;
  auto j = nlohmann::json::parse(o.output.substr(o.output.find('{')));
  const auto& steps = j.at("steps");
  ASSERT_EQ(steps.size(), 50u);
  const double first = steps[0].at("loss").get<double>();
  double last5 = 0;
  for (int i = 45; i < 50; ++i)
    last5 += steps[static_cast<std::size_t>(i)].at("loss").get<double>() / 5;
  EXPECT_NEAR(first, std::log(256.0), 0.2) << "an untrained model is near uniform";
  EXPECT_LT(last5, first - 1.0) << "loss did not fall: " << first << " -> " << last5;
  // The measured record is the SimResult schema.
  const auto& result = j.at("report");
  EXPECT_EQ(result.at("source"), "cpu");
  EXPECT_EQ(result.at("ranks").size(), 2u);
  EXPECT_GT(result.at("iteration_time_s").get<double>(), 0.0);
  EXPECT_GT(result.at("ranks")[0].at("peak_memory_bytes").get<double>(), 0.0);
}

TEST(MpiRun, ReportDescribesTheMedianOrFastestStepAfterTheFirst) {
  for (const std::string statistic : {"median", "min", "last"}) {
    auto o = mpirun(2, "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-uneven") +
                           " --steps 6 --json --report " + statistic);
    ASSERT_EQ(o.code, 0) << o.output;
    auto j = nlohmann::json::parse(o.output.substr(o.output.find('{')));
    const auto& steps = j.at("steps");
    ASSERT_EQ(steps.size(), 6u);
    // Steps 1-5 (the first pays for first-touch allocations) sorted by time.
    std::vector<std::pair<double, int>> by_time;
    for (int i = 1; i < 6; ++i)
      by_time.push_back({steps[static_cast<std::size_t>(i)].at("time_s").get<double>(), i});
    std::sort(by_time.begin(), by_time.end());
    const int want = statistic == "median" ? by_time[2].second
                     : statistic == "min"  ? by_time[0].second
                                           : 5;
    EXPECT_EQ(j.at("report_step").get<int>(), want) << statistic;
    EXPECT_EQ(j.at("report_statistic"), statistic);
    // The report is that step's: the slowest rank's wall time is the step time.
    EXPECT_DOUBLE_EQ(j.at("report").at("iteration_time_s").get<double>(),
                     steps[static_cast<std::size_t>(want)].at("time_s").get<double>())
        << statistic;
  }
}

TEST(MpiRun, ResumeUnderAnotherPlanMatchesUninterruptedRun) {
  // Resume on 2 ranks with other shares and micro-batches.
  TempDir dir;
  std::vector<float> full;
  expect_resume_matches(dir.path, dir.path / "ckpt", {3, "cpu-3rank-uneven-layered"},
                        {2, "cpu-2rank-uneven"}, 6, 3, &full);
}

TEST(MpiRun, ResumeAtAnotherSequenceLength) {
  // The position table has the model's 64 rows whatever the sequence, so a checkpoint written
  // at sequence 16 resumes at 32 (the usual "train short, then long" schedule).
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  auto first = run_to_checkpoint(2, "cpu-2rank-uneven", 2, ckpt);
  ASSERT_EQ(first.code, 0) << first.output;
  const auto longer = scenario_variant(dir.path, 2, "seq32",
                                       [](nlohmann::json& job) { job["sequence_length"] = 32; });
  auto second = mpirun(2, "--scenario " + longer + " --plan " + plan("cpu-2rank-uneven") +
                              " --steps 4 --json --resume " + ckpt.string());
  ASSERT_EQ(second.code, 0) << second.output;
  auto j = nlohmann::json::parse(second.output.substr(second.output.find('{')));
  ASSERT_EQ(j.at("steps").size(), 2u);  // steps 2 and 3
  EXPECT_EQ(j.at("steps")[0].at("step"), 2);
  for (const auto& st : j.at("steps")) EXPECT_TRUE(std::isfinite(st.at("loss").get<double>()));
  // Trained for two steps already: below the untrained level log(256) = 5.55.
  EXPECT_LT(j.at("steps")[0].at("loss").get<double>(), 5.5);
}

TEST(MpiRun, InjectedRankFailureEndsEveryRankWithItsCause) {
  auto o = run_plan(3, "cpu-3rank-uneven-layered", "--steps 20 --inject-failure 1:2", 60);
  expect_every_rank_ended(o);
  EXPECT_NE(o.output.find("rank 1 of 3"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("injected failure at step 2"), std::string::npos) << o.output;
}

TEST(MpiRun, RankKilledBySignalEndsEveryRank) {
  auto o = run_plan(3, "cpu-3rank-uneven-layered", "--steps 20 --inject-failure 2:1:kill", 60);
  expect_every_rank_ended(o);
  // mpirun names the dead process and the signal.
  EXPECT_NE(o.output.find("rank 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("signal 9"), std::string::npos) << o.output;
}

TEST(MpiRun, BadRunAndProfileValuesAreRefusedNamingTheFlag) {
  // One process, no mpirun: the command line is checked before anything starts.
  const std::string cli = CEPHALO_CLI;
  const std::string job = " --scenario " + scenario(1) + " --plan " + plan("cpu-1rank-full");
  struct Case {
    std::string args, flag;
  };
  for (const auto& c : std::vector<Case>{
           {"run" + job + " --loss-scale -1", "--loss-scale"},
           {"run" + job + " --loss-scale 0", "--loss-scale"},
           {"run" + job + " --report mean", "--report"},
           {"profile --model gpt-tiny --seq 16 --dtype bf17", "--dtype"},
       }) {
    auto r = cephalo::test_support::run_command(cli + " " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(MpiRun, PlanForAnotherRankCountIsRefusedBeforeCompute) {
  auto o = mpirun(2, "--scenario " + scenario(3) + " --plan " + plan("cpu-3rank-uneven-layered") +
                         " --steps 1");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("mpirun -np 3"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("step 0"), std::string::npos) << "compute ran:\n" << o.output;
}

TEST(MpiRun, PlanThatDoesNotMatchTheScenarioIsRefusedBeforeCompute) {
  // A 2-rank plan against the 3-device cluster, and batches that miss the global batch.
  auto o =
      mpirun(2, "--scenario " + scenario(3) + " --plan " + plan("cpu-2rank-uneven") + " --steps 1");
  EXPECT_EQ(o.code, 1) << o.output;
  // Refused for its rank count or, first, for naming another scenario.
  EXPECT_TRUE(o.output.find("ranks") != std::string::npos ||
              o.output.find("a plan is made for one scenario") != std::string::npos)
      << o.output;
  TempDir dir;
  auto bad = nlohmann::json::parse(std::ifstream(plan("cpu-3rank-uneven-layered")));
  bad["ranks"][2]["batch"] = 4;
  bad["ranks"][2]["micro_batches"] = 2;
  std::ofstream(dir.path / "bad.json") << bad.dump(2);
  auto o2 = mpirun(3, "--scenario " + scenario(3) + " --plan " + (dir.path / "bad.json").string() +
                          " --steps 1");
  EXPECT_EQ(o2.code, 1) << o2.output;
  EXPECT_NE(o2.output.find("global batch 9"), std::string::npos) << o2.output;
  EXPECT_EQ(o2.output.find("step 0"), std::string::npos) << "compute ran:\n" << o2.output;
}

TEST(MpiRun, PlanOfSomeNodesRunsOnThemAndEqualsSingleRankFullBatch) {
  // A plan of the middle node of three ("nodes": [1], scenarios/README.md "Plans of some
  // nodes"): its two ranks are that node's two CPUs, the other nodes' devices start no process
  // and join nothing, and the step is the single-rank full-batch step.
  struct Inputs {  // not a TempDir: the reference check's own TempDir is this test's folder
    fs::path path = fs::temp_directory_path() / ("cephalo-nodes-" + std::to_string(::getpid()));
    Inputs() { fs::create_directories(path); }
    ~Inputs() { fs::remove_all(path); }
  } dir;
  nlohmann::json sc = nlohmann::json::parse(std::ifstream(scenario(2)));
  sc["name"] = "cpu-three-nodes";
  sc["job"] = kSrc + "/scenarios/jobs/gpt-tiny-cpu.json";
  nlohmann::json node = sc["cluster"]["nodes"][0];
  node["nic"] = {{"kind", "ethernet"}, {"bandwidth", "10Gbit/s"}, {"latency", "15us"}};
  nlohmann::json idle = node;
  idle["gpus"] = {"cpu"};
  sc["cluster"]["nodes"] = nlohmann::json::array({idle, node, idle});
  sc["cluster"]["nodes"][0]["name"] = "idle-0";
  sc["cluster"]["nodes"][2]["name"] = "idle-2";
  nlohmann::json pl = nlohmann::json::parse(std::ifstream(plan("cpu-2rank-uneven")));
  pl["scenario"] = "cpu-three-nodes";
  pl["nodes"] = {1};
  const std::string sc_file = (dir.path / "three-nodes.json").string();
  const std::string pl_file = (dir.path / "middle-node.json").string();
  std::ofstream(sc_file) << sc.dump();
  std::ofstream(pl_file) << pl.dump();
  expect_step_matches_reference(sc_file, pl_file, 2, "cpu-2rank-uneven on node 1 of 3");
  // Its report names the nodes that ran nothing.
  auto said = mpirun(2, "--scenario " + sc_file + " --plan " + pl_file + " --steps 1");
  ASSERT_EQ(said.code, 0) << said.output;
  EXPECT_NE(said.output.find("idle: 2x "), std::string::npos) << said.output;
  EXPECT_NE(said.output.find("(nodes idle-0, idle-2: 2 of the scenario's 3 nodes"),
            std::string::npos)
      << said.output;
  // The same rows against the whole cluster of four CPUs: a plan of 2 ranks for 4 devices.
  pl.erase("nodes");
  std::ofstream(pl_file) << pl.dump();
  auto o = mpirun(2, "--scenario " + sc_file + " --plan " + pl_file + " --steps 1");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("4 ranks, one per device"), std::string::npos) << o.output;
}

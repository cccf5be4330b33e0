// What `cephalo plan` and `cephalo simulate` tell a user: a short summary under the plan (the
// search log behind --explain and in the record), tokens/s, MFU and HFU that agree with the
// simulator's, and tables that say how their columns add up.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "../support/run_command.hpp"
#include "cephalo/planner/plan_request.hpp"

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out;  // stdout alone
};

Run run(const std::string& args) {
  auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.out};
}

fs::path tmp(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_plan_summary");
  fs::create_directories(dir);
  return dir / name;
}

const std::string kDefault = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";

// The job's sequence length as the scenario states it (its "job" inline or a file beside it).
double sequence_length(const std::string& scenario) {
  std::ifstream in(scenario);
  const auto s = nlohmann::json::parse(in);
  if (s["job"].is_object()) return s["job"]["sequence_length"].get<double>();
  std::ifstream job(fs::path(scenario).parent_path() / s["job"].get<std::string>());
  return nlohmann::json::parse(job)["sequence_length"].get<double>();
}

// A mix whose L4 node slows it (planner/README.md, "Leaving GPUs out"): the summary and the
// record name the GPUs the plan leaves idle; `--use-all` weighs no subset.
TEST(PlanSummary, SaysWhenLeavingGpusIdleIsFasterUnlessUseAll) {
  const std::string mix = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/modern-mix-gpt2.7b.json";
  const std::string plan = "plan --scenario " + mix + " --parallelism fsdp";
  auto r = run(plan);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string summary = r.out.substr(r.out.find("chosen: "));
  EXPECT_NE(summary.find("\nleft idle: 4x L4 (ranks "), std::string::npos) << summary;
  int lines = 0;
  std::istringstream in(summary);
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_LE(lines, cephalo::planner::kPlanSummaryLines) << summary;
  r = run(plan + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto with = nlohmann::json::parse(r.out)["predicted"];
  ASSERT_TRUE(with.contains("faster_without")) << r.out;
  EXPECT_LT(with["faster_without"]["without_s"].get<double>(),
            with["faster_without"]["with_all_s"].get<double>());
  EXPECT_EQ(with["faster_without"]["idle_ranks"].size(), 4u);
  r = run(plan + " --use-all --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto all = nlohmann::json::parse(r.out)["predicted"];
  EXPECT_FALSE(all.contains("faster_without")) << r.out;
  EXPECT_EQ(all["explanation"].get<std::string>().find("weighed leaving"), std::string::npos);
  EXPECT_DOUBLE_EQ(all["simulated_iteration_s"].get<double>(),
                   with["faster_without"]["with_all_s"].get<double>());
}

TEST(PlanSummary, IsShortAndExplainPrintsTheLog) {
  for (const std::string flags : {"--strategy optimal", "--parallelism auto"}) {
    const auto r = run("plan --scenario " + kDefault + " " + flags);
    ASSERT_EQ(r.code, 0) << r.out;
    ASSERT_NE(r.out.find("chosen: "), std::string::npos) << r.out;
    const std::string summary = r.out.substr(r.out.find("chosen: "));
    int lines = 0;
    std::istringstream in(summary);
    for (std::string line; std::getline(in, line); ++lines) EXPECT_LE(line.size(), 400u) << line;
    EXPECT_LE(lines, cephalo::planner::kPlanSummaryLines) << summary;
    EXPECT_NE(summary.find("runner-up: "), std::string::npos) << summary;
    EXPECT_EQ(r.out.find("\nsearch log: "), std::string::npos) << r.out;
    // --explain adds the log: the record's "explanation", printed whole.
    const auto json = run("plan --scenario " + kDefault + " " + flags + " --json");
    ASSERT_EQ(json.code, 0);
    const std::string log =
        nlohmann::json::parse(json.out)["predicted"]["explanation"].get<std::string>();
    EXPECT_GT(log.size(), 40u);
    // The time printed and recorded is the whole answer's (both families, their replays), not
    // the FSDP strategy's alone.
    EXPECT_NE(summary.find("planned in "), std::string::npos) << summary;
    EXPECT_GT(nlohmann::json::parse(json.out)["predicted"]["planning_s"].get<double>(), 0.0);
    const auto explained = run("plan --scenario " + kDefault + " " + flags + " --explain");
    ASSERT_EQ(explained.code, 0);
    EXPECT_NE(explained.out.find("\nsearch log: " + log), std::string::npos) << explained.out;
  }
}

TEST(PlanSummary, TokensMfuAndHfuAgreeWithTheSimulator) {
  const std::string h200 = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/h200-gpt1.3b.json";
  const std::pair<std::string, std::string> cases[] = {
      {kDefault, "--strategy even --activation-checkpointing full"},
      {h200, "--strategy even --activation-checkpointing none"},
      {kDefault, "--parallelism 3d"}};
  for (const auto& [scenario, flags] : cases) {
    const auto file = tmp("plan.json");
    const auto r = run("plan --scenario " + scenario + " " + flags + " --json -o " + file.string());
    ASSERT_EQ(r.code, 0) << flags;
    const auto predicted = nlohmann::json::parse(r.out)["predicted"];
    const double samples = predicted["predicted_samples_per_s"];
    const double tokens = samples * sequence_length(scenario);
    EXPECT_NEAR(predicted["predicted_tokens_per_s"].get<double>(), tokens, 1e-9 * tokens);
    const auto sim =
        run("simulate --scenario " + scenario + " --plan " + file.string() + " --json");
    ASSERT_EQ(sim.code, 0) << sim.out;
    const auto report = nlohmann::json::parse(sim.out);
    EXPECT_NEAR(tokens, report["tokens_per_s"].get<double>(), 1e-6 * tokens) << flags;
    const double mfu = predicted["predicted_mfu"], hfu = predicted["predicted_hfu"];
    EXPECT_GT(mfu, 0);
    EXPECT_NEAR(mfu, report["mfu"].get<double>(), 1e-6 * mfu) << flags;
    EXPECT_NEAR(hfu, report["hfu"].get<double>(), 1e-6 * hfu) << flags;
    // HFU counts the recomputed forwards: a third more with every layer recomputed (a
    // forward is a third of forward + backward), only the head's logits without checkpointing.
    if (flags.find("checkpointing full") != std::string::npos) {
      EXPECT_GT(hfu, mfu * 1.25);
      const auto text = run("plan --scenario " + scenario + " " + flags);
      EXPECT_NE(text.out.find("tokens/s, MFU "), std::string::npos) << text.out;
      EXPECT_NE(text.out.find(", HFU "), std::string::npos) << text.out;
    }
    if (flags.find("checkpointing none") != std::string::npos) {
      EXPECT_GT(hfu, mfu);
      EXPECT_LT(hfu, mfu * 1.05);
    }
  }
}

TEST(PlanSummary, TablesSayHowTheirColumnsAddUp) {
  const auto file = tmp("even.plan.json");
  const auto plan = run("plan --scenario " + kDefault + " --strategy even -o " + file.string());
  ASSERT_EQ(plan.code, 0);
  EXPECT_NE(plan.out.find("compute + optimizer step + exposed communication + idle"),
            std::string::npos)
      << plan.out;
  const auto sim = run("simulate --scenario " + kDefault + " --plan " + file.string());
  ASSERT_EQ(sim.code, 0);
  EXPECT_NE(sim.out.find("compute + exposed comm + idle = the iteration time"), std::string::npos)
      << sim.out;
  // The footer's sum holds in the record: every rank's columns add up to the iteration.
  const auto json = nlohmann::json::parse(
      run("simulate --scenario " + kDefault + " --plan " + file.string() + " --json").out);
  const double t = json["iteration_time_s"];
  for (const auto& k : json["ranks"])
    EXPECT_NEAR(k["compute_s"].get<double>() + k["exposed_comm_s"].get<double>() +
                    k["idle_s"].get<double>(),
                t, 1e-6 * t);
  const auto split = tmp("split.plan.json");
  const auto split_plan =
      run("plan --scenario " + kDefault + " --parallelism 3d -o " + split.string());
  ASSERT_EQ(split_plan.code, 0);
  EXPECT_NE(split_plan.out.find("the bubble (waiting for pipeline neighbours) is idle"),
            std::string::npos)
      << split_plan.out;
  const auto split_sim = run("simulate --scenario " + kDefault + " --plan " + split.string());
  EXPECT_NE(split_sim.out.find("the bubble (waiting for pipeline neighbours) is part of idle"),
            std::string::npos)
      << split_sim.out;
}

// Selective recompute is a plan choice under every parallelism: the written plan says
// "selective", simulates as planned, and its time lies between no recompute and full recompute
// (the attention core alone is rerun). Python's plan() takes the same request.
TEST(PlanCli, SelectiveRecomputeIsWrittenAndSimulatesAsPlannedUnderEveryParallelism) {
  const std::string nemotron =
      std::string(CEPHALO_SOURCE_DIR) + "/scenarios/h100x16-nemotron4-15b.json";
  for (const std::string parallelism : {"fsdp", "3d", "auto"}) {
    SCOPED_TRACE(parallelism);
    auto simulated = [&](const std::string& ck) {
      const auto file = tmp(parallelism + "-" + ck + ".plan.json");
      const auto r = run("plan --scenario " + nemotron + " --parallelism " + parallelism +
                         " --activation-checkpointing " + ck + " -o " + file.string() + " --json");
      EXPECT_EQ(r.code, 0) << r.out;
      if (r.code != 0) return 0.0;
      const auto written = nlohmann::json::parse(std::ifstream(file));
      // (full is the default: the key is left out)
      EXPECT_EQ(written.value("activation_checkpointing", nlohmann::json("full")), ck) << file;
      const auto sim =
          run("simulate --scenario " + nemotron + " --plan " + file.string() + " --json");
      EXPECT_EQ(sim.code, 0) << sim.out;
      const double t = nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>();
      EXPECT_DOUBLE_EQ(
          t, nlohmann::json::parse(r.out)["predicted"]["simulated_iteration_s"].get<double>());
      return t;
    };
    const double none = simulated("none"), selective = simulated("selective"),
                 full = simulated("full");
    EXPECT_LT(none, selective);
    EXPECT_LT(selective, full);
  }
}

}  // namespace

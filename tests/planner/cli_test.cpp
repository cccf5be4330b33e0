// `cephalo plan` and `cephalo sweep` end to end: valid plans out, clear errors and exit codes
// for infeasible and malformed requests.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out;   // stdout then stderr, for the messages
  std::string json;  // stdout alone: warnings on stderr must not break the record
};

Run run(const std::string& args) {
  auto r = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " " + args);
  return {r.code, r.out + r.err, r.out};
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
  const auto plan = nlohmann::json::parse(r.json);
  EXPECT_EQ(plan["ranks"].size(), 4u);
  EXPECT_GT(plan["predicted"]["predicted_iteration_s"].get<double>(), 0);
  EXPECT_EQ(plan["predicted"]["ranks"].size(), 4u);
  // The record carries the warnings `simulate`'s does: default.json's P40 has no fp16 rate.
  const auto& warnings = plan["predicted"]["warnings"];
  ASSERT_EQ(warnings.size(), 1u) << warnings.dump();
  EXPECT_NE(warnings[0].get<std::string>().find("P40 has no fp16 tensor-core rate"),
            std::string::npos)
      << warnings.dump();
}

TEST(PlanCli, ThreeDWritesThePlanThatSimulatesAsPlannedAndPredict3dReadsIt) {
  const auto split = tmp("default.split.json");
  const auto r =
      run("plan --parallelism 3d --scenario " + kDefault + " -o " + split.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto record = nlohmann::json::parse(r.json);
  const auto& predicted = record["predicted"];
  const double planned = predicted["estimate"]["iteration_s"].get<double>();
  EXPECT_GT(planned, 0);
  EXPECT_GT(predicted["evaluated"].get<int>(), 0);
  // The written plan is a Plan: `simulate` of it gives the time the planner printed.
  const auto sim = run("simulate --scenario " + kDefault + " --plan " + split.string() + " --json");
  ASSERT_EQ(sim.code, 0) << sim.out;
  const double simulated = predicted["simulated_iteration_s"].get<double>();
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.json)["iteration_time_s"].get<double>(), simulated);
  const auto p = run(
      "predict 3d --scenario " + kDefault + " --split " + split.string() +
      (predicted["recompute"].get<bool>() ? " --activation-checkpointing full" : "") + " --json");
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NEAR(nlohmann::json::parse(p.json)["iteration_s"].get<double>(), planned, 1e-9 * planned);
  // The table: one row per stage, and the best other pipeline depth.
  const auto t = run("plan --parallelism 3d --scenario " + kDefault);
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("best other pipeline depth"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("peak memory"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("simulated "), std::string::npos) << t.out;
}

// 2 nodes x (4 A100 + 4 L4), 10 Gbit/s between (planner/README.md, "3D plans: stages that mix
// GPU types"): the search's stages of whole nodes and per-node slices with replicas balanced by
// speed are replayed with the rest, and the written plan simulates as printed.
TEST(PlanCli, ThreeDOnMixedNodesReplaysStagesWithUnevenReplicasAndWritesWhatSimulates) {
  const std::string mixed =
      std::string(CEPHALO_SOURCE_DIR) + "/scenarios/a100-l4-mixed-10g-llama7b.json";
  const auto file = tmp("mixed.split.json");
  const auto r = run("plan --parallelism 3d --scenario " + mixed + " -o " + file.string());
  ASSERT_EQ(r.code, 0) << r.out;
  // Among the replayed finalists, a split whose stages' replicas carry unequal samples.
  EXPECT_NE(r.out.find("; replica micro-batches "), std::string::npos) << r.out;
  const auto plan = nlohmann::json::parse(std::ifstream(file));
  const double printed = plan["predicted"]["simulated_iteration_s"].get<double>();
  EXPECT_LE(printed, 12.0);  // FSDP 28.0 s, stages of one type with even replicas 18.1 s
  const auto sim = run("simulate --scenario " + mixed + " --plan " + file.string() + " --json");
  ASSERT_EQ(sim.code, 0) << sim.out;
  EXPECT_NEAR(nlohmann::json::parse(sim.json)["iteration_time_s"].get<double>(), printed,
              0.02 * printed);
  // A written plan with unequal replicas is priced with its own samples by predict 3d.
  const auto two = tmp("mixed.pp2.json");
  const auto r2 = run("plan --parallelism 3d --pipeline-stages 2 --tensor-parallel 2 --scenario " +
                      mixed + " -o " + two.string() + " --json");
  ASSERT_EQ(r2.code, 0) << r2.out;
  const auto rec = nlohmann::json::parse(r2.json)["predicted"];
  const auto written = nlohmann::json::parse(std::ifstream(two));
  const auto& ranks = written["ranks"];
  EXPECT_NE(ranks[0]["micro_batch"], ranks[4]["micro_batch"]) << ranks.dump();  // A100 vs L4
  // The search prices what the replay runs: per-unit DP collectives, a copy per TP rank.
  const auto p = run("predict 3d --scenario " + mixed + " --split " + two.string() +
                     (rec["recompute"].get<bool>() ? " --activation-checkpointing full" : "") +
                     " --dp-overlap per-unit --no-scatter-gather --json");
  ASSERT_EQ(p.code, 0) << p.out;
  const double estimate = rec["estimate"]["iteration_s"].get<double>();
  EXPECT_NEAR(nlohmann::json::parse(p.json)["iteration_s"].get<double>(), estimate,
              1e-9 * estimate);
}

TEST(PlanCli, ThreeDRefusesTheFsdpScheduleFlagsAndFixesWhatItIsGiven) {
  const auto r = run("plan --parallelism 3d --micro-batch 2 --scenario " + kDefault);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--micro-batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--micro-batches"), std::string::npos) << r.out;
  // Fixing the depth the open search chose and another schedule gives exactly those.
  const auto open = run("plan --parallelism 3d --scenario " + kDefault + " --json");
  ASSERT_EQ(open.code, 0) << open.out;
  const auto chosen = nlohmann::json::parse(open.json)["model_split"];
  const std::size_t depth = chosen["stages"].size();
  const std::string schedule = chosen.value("schedule", "1f1b") == "gpipe" ? "1f1b" : "gpipe";
  const auto fixed =
      run("plan --parallelism 3d --pipeline-stages " + std::to_string(depth) +
          " --pipeline-schedule " + schedule + " --scenario " + kDefault + " --json");
  ASSERT_EQ(fixed.code, 0) << fixed.out;
  const auto split = nlohmann::json::parse(fixed.json)["model_split"];
  EXPECT_EQ(split["stages"].size(), depth) << split.dump();
  EXPECT_EQ(split.value("schedule", "1f1b"), schedule) << split.dump();
}

// Bad values of the 3D flags and split files: a clear error naming where, the value and what
// was expected, and nothing written over an input.
TEST(PlanCli, ThreeDBadInputNamesTheFlagOrFileAndOverwritesNothing) {
  struct Case {
    std::string args;
    int code;
    std::vector<std::string> says;
  };
  const std::string s = " --scenario " + kDefault;
  const std::vector<Case> cases = {
      {"plan --parallelism 3d --pipeline-schedule bogus" + s,
       2,
       {"--pipeline-schedule", "bogus", "interleaved:V"}},
      {"plan --parallelism 3d --pipeline-schedule interleaved:1" + s,
       2,
       {"--pipeline-schedule", "interleaved:1"}},
      {"plan --parallelism 3d --tensor-parallel 3" + s, 2, {"--tensor-parallel", "3", "heads"}},
      {"plan --parallelism 3d --tensor-parallel 0" + s, 2, {"--tensor-parallel"}},
      {"plan --parallelism 3d --activation-checkpointing every:2" + s,
       2,
       {"--activation-checkpointing", "every:2", "full, none, selective or auto"}},
      {"plan --parallelism 4d" + s, 2, {"--parallelism", "4d"}},
      {"plan --parallelism fsdp --sharding optimizer" + s,
       2,
       {"--sharding", "optimizer", "--parallelism 3d"}},
  };
  for (const auto& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.out;
    for (const auto& w : c.says)
      EXPECT_NE(r.out.find(w), std::string::npos) << c.args << "\n" << r.out;
  }
  // Split files (the written plan carries one): missing, not JSON, overlapping stages.
  const auto good = tmp("good.split.json");
  ASSERT_EQ(run("plan --parallelism 3d" + s + " -o " + good.string()).code, 0);
  auto split = nlohmann::json::parse(std::ifstream(good))["model_split"];
  ASSERT_GE(split["stages"].size(), 2u) << split.dump();
  std::ofstream(tmp("bare.split.json")) << nlohmann::json{{"model_split", split}}.dump();
  // Stage 1 starts one layer early (its first chunk, when the split interleaves).
  auto& start = split["stages"][1]["layers"][0];
  if (start.is_array())
    start[0] = start[0].get<int>() - 1;
  else
    start = start.get<int>() - 1;
  const auto overlap = tmp("overlap.split.json");
  std::ofstream(overlap) << nlohmann::json{{"model_split", split}}.dump();
  const auto broken = tmp("broken.split.json");
  std::ofstream(broken) << "{\"stages\": [";
  const std::vector<Case> files = {
      {"predict 3d" + s + " --split " + tmp("missing.split.json").string(),
       5,
       {"missing.split.json"}},
      {"predict 3d" + s + " --split " + broken.string(), 1, {"broken.split.json"}},
      {"predict 3d" + s + " --split " + overlap.string(),
       1,
       {"overlap.split.json", "model_split.stages[1].layers", "overlap"}},
      {"predict 3d" + s + " --split " + good.string() + " --activation-checkpointing attention",
       2,
       {"--activation-checkpointing", "attention", "selective"}},
  };
  for (const auto& c : files) {
    const auto r = run(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.out;
    for (const auto& w : c.says)
      EXPECT_NE(r.out.find(w), std::string::npos) << c.args << "\n" << r.out;
  }
  // Selective recompute prices between none and full (the flag on the bare split, not the plan).
  auto iteration = [&](const std::string& checkpointing) {
    const auto r = run("predict 3d" + s + " --split " + tmp("bare.split.json").string() +
                       " --activation-checkpointing " + checkpointing + " --json");
    EXPECT_EQ(r.code, 0) << checkpointing << "\n" << r.out;
    // The record, without the warnings around it (stderr shares the output).
    const auto from = r.out.find('{'), to = r.out.rfind('}');
    return nlohmann::json::parse(r.out.substr(from, to - from + 1))["iteration_s"].get<double>();
  };
  const double none = iteration("none"), selective = iteration("selective"),
               full = iteration("full");
  EXPECT_LT(none, selective);
  EXPECT_LT(selective, full);
  // -o onto the scenario it reads is refused before any search, and the scenario is unchanged.
  const auto scenario = tmp("own.scenario.json");
  std::filesystem::copy_file(kDefault, scenario, std::filesystem::copy_options::overwrite_existing);
  std::ifstream before_in(scenario);
  const std::string before((std::istreambuf_iterator<char>(before_in)), {});
  const auto r =
      run("plan --parallelism 3d --scenario " + scenario.string() + " -o " + scenario.string());
  EXPECT_NE(r.code, 0) << r.out;
  std::ifstream after_in(scenario);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after_in)), {}), before);
}

TEST(PlanCli, AutoPrintsTheFasterFamilyAndWhyTheOtherLost) {
  const auto r = run("plan --parallelism auto --scenario " + kDefault);
  ASSERT_EQ(r.code, 0) << r.out;
  const bool fsdp_lost = r.out.find("fsdp lost:") != std::string::npos;
  const bool split_lost = r.out.find("3d lost:") != std::string::npos;
  EXPECT_NE(fsdp_lost, split_lost) << r.out;
  // The winner is printed as its own mode prints it.
  EXPECT_NE(r.out.find(fsdp_lost ? "best other pipeline depth" : "predicted iteration"),
            std::string::npos)
      << r.out;
}

// 3 samples on 4 GPUs: no FSDP plan (a sample per device); with both families open a pipeline
// runs them, and the answer says why FSDP lost.
TEST(PlanCli, BatchSmallerThanGpuCountIsInfeasibleForFsdpAndLeftToTheSplit) {
  const auto f = tmp("small-batch.json");
  write_scenario(f, "gpt-2.7b", 3);
  for (const std::string s : {"even", "cephalo", "optimal", ""}) {
    const auto r = run("plan --scenario " + f.string() + (s.empty() ? "" : " --strategy " + s));
    EXPECT_EQ(r.code, s.empty() ? 0 : 3) << r.out;
    EXPECT_NE(r.out.find(s.empty() ? "fsdp lost: it has no plan here" : "raise the global batch"),
              std::string::npos)
        << r.out;
  }
}

TEST(PlanCli, ModelThatCannotFitNamesTheShortfall) {
  // 175B × 16 B does not fit 4 GPUs; with both families open the refusal names both.
  const auto f = tmp("huge-model.json");
  write_scenario(f, "gpt-175b", 64);
  for (const std::string flags : {" --strategy optimal", ""}) {
    const auto r = run("plan --scenario " + f.string() + flags + " -o " + tmp("no.json").string());
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_NE(r.out.find("shortfall"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(flags.empty() ? "; 3d: no 3D split fits" : "TiB"), std::string::npos);
    EXPECT_FALSE(fs::exists(tmp("no.json")));
  }
}

TEST(PlanCli, ScheduleFlagsFixWhatTheUserFixedOnEveryStrategy) {
  // GPT-1.3B: no_sync's unsharded fp32 gradient (5.3 GB) fits beside the L4s' shards.
  const auto f = tmp("gpt-1.3b-flags.json");
  write_scenario(f, "gpt-1.3b", 64);
  for (const std::string s : {"even", "proportional", "cephalo", "optimal", "search"}) {
    SCOPED_TRACE(s);
    const auto out = tmp("flags-" + s + ".plan.json");
    const auto r = run("plan --scenario " + f.string() + " --strategy " + s +
                       " --micro-batch 2 --accumulation no_sync --activation-checkpointing "
                       "every:3 -o " +
                       out.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(run("validate " + out.string() + " --scenario " + f.string()).code, 0);
    const auto plan = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(plan["accumulation"], "no_sync");
    EXPECT_EQ(plan["activation_checkpointing"]["every"], 3);
    int total = 0;
    for (const auto& rank : plan["ranks"]) {
      total += rank["batch"].get<int>();
      EXPECT_EQ(rank["micro_batch"], std::min(2, rank["batch"].get<int>()));
    }
    EXPECT_EQ(total, 64);
  }
}

TEST(PlanCli, ChosenCheckpointingIsTheLeastRecomputeThatFits) {
  // gpt-test on the default cluster fits without any checkpointing; gpt-2.7b at batch 64 on
  // the same GPUs with equal shares does not, and must fall back to checkpointing.
  const auto tiny = tmp("tiny-auto.json");
  write_scenario(tiny, "gpt-test", 8);
  auto r = run("plan --scenario " + tiny.string() +
               " --strategy even --activation-checkpointing auto --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.json)["activation_checkpointing"], "none");
  r = run("plan --scenario " + kDefault +
          " --strategy even --activation-checkpointing auto --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(nlohmann::json::parse(r.json).value("activation_checkpointing", nlohmann::json("full")),
            "none");
}

// `--activation-checkpointing auto` is chosen jointly by every strategy that can weigh it:
// even / proportional (least recompute that fits), optimal (each candidate solved, fastest
// simulated), search (its seeds and neighbours); cephalo refuses it.
TEST(PlanCli, AutoCheckpointingIsChosenByEveryStrategyThatCanAndRefusedByCephalo) {
  const auto tiny = tmp("tiny-auto-all.json");
  write_scenario(tiny, "gpt-test", 8);
  for (const std::string s : {"even", "proportional", "optimal", "search"}) {
    SCOPED_TRACE(s);
    // stdout alone: search reports its candidates on stderr.
    const auto r = cephalo::test_support::run_command(
        std::string(CEPHALO_CLI) + " plan --scenario " + tiny.string() + " --strategy " + s +
        " --activation-checkpointing auto --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto plan = nlohmann::json::parse(r.out);
    EXPECT_EQ(plan["activation_checkpointing"], "none");  // no recompute fits here
  }
  const auto r = run("plan --scenario " + tiny.string() +
                     " --strategy optimal --activation-checkpointing auto --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string note = nlohmann::json::parse(r.json)["predicted"]["explanation"];
  EXPECT_NE(note.find("schedules (accumulation / checkpointing / offload) solved"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("layered / none / offload none"), std::string::npos) << note;
  EXPECT_NE(note.find("every:2"), std::string::npos) << note;
  const auto refused = run("plan --scenario " + tiny.string() +
                           " --strategy cephalo --activation-checkpointing auto");
  EXPECT_EQ(refused.code, 2) << refused.out;
  for (const std::string part : {"--activation-checkpointing", "auto", "--strategy cephalo",
                                 "full, none, selective or every:K"})
    EXPECT_NE(refused.out.find(part), std::string::npos) << part << ": " << refused.out;
}

// optimal's auto choice is by simulation, so it is never slower in simulation than its plan with
// full checkpointing, the choice auto also weighs (GPT-2.7B on the default cluster, where no
// recompute does not fit every GPU).
TEST(PlanCli, OptimalAutoCheckpointingSimulatesNoSlowerThanFull) {
  auto simulated = [](const std::string& checkpointing) {
    const auto out = tmp("optimal-" + checkpointing + ".plan.json");
    const auto r =
        run("plan --scenario " + kDefault + " --strategy optimal --activation-checkpointing " +
            checkpointing + " -o " + out.string());
    EXPECT_EQ(r.code, 0) << r.out;
    const auto sim =
        cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " simulate --scenario " +
                                           kDefault + " --plan " + out.string() + " --json");
    EXPECT_EQ(sim.code, 0) << sim.err;
    return nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>();
  };
  const double full = simulated("full");
  const double chosen = simulated("auto");
  EXPECT_LE(chosen, full);
}

TEST(PlanCli, InfeasibleScheduleStatesRankPositiveShortfallAndWhatFits) {
  // Equal shares of gpt-2.7b with every layer's activations kept for 16 samples per rank do
  // not fit the 24 GB L4.
  const auto r = run("plan --scenario " + kDefault +
                     " --strategy even --activation-checkpointing none --micro-batch 16");
  EXPECT_EQ(r.code, 3) << r.out;
  const auto at = r.out.find("shortfall ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out[at + 10], '-') << r.out;  // positive, in bytes
  EXPECT_GT(std::stoll(r.out.substr(at + 10)), 0) << r.out;
  EXPECT_NE(r.out.find("rank "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would fit: "), std::string::npos) << r.out;
}

TEST(PlanCli, BadScheduleFlagsAreUsageErrors) {
  for (const std::string bad :
       {"--activation-checkpointing every:0", "--activation-checkpointing every:-2",
        "--activation-checkpointing partial", "--accumulation nosync", "--micro-batch 0"}) {
    const auto r = run("plan --scenario " + kDefault + " --strategy even " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
  }
  const auto r =
      run("plan --scenario " + kDefault + " --strategy even --activation-checkpointing every:0");
  EXPECT_NE(r.out.find("every:K"), std::string::npos) << r.out;
}

// A combination that cannot hold whatever the plan is refused with the reason before any search
// (exit 2, naming the flags and what is allowed), by every strategy.
TEST(PlanCli, ImpossibleFlagCombinationsAreRefusedBeforeAnySearch) {
  for (const std::string s : {"even", "optimal", "search"}) {
    SCOPED_TRACE(s);
    auto r = run("plan --scenario " + kDefault + " --strategy " + s +
                 " --offload host --activation-checkpointing none");
    EXPECT_EQ(r.code, 2) << r.out;
    for (const std::string part :
         {"--offload", "host", "--activation-checkpointing none", "checkpointing full"})
      EXPECT_NE(r.out.find(part), std::string::npos) << part << ": " << r.out;
    // default.json: global batch 64 over 4 devices, so no rank's batch exceeds 61.
    r = run("plan --scenario " + kDefault + " --strategy " + s + " --micro-batch 62");
    EXPECT_EQ(r.code, 2) << r.out;
    for (const std::string part : {"--micro-batch", "62", "1 to 61", "global batch 64"})
      EXPECT_NE(r.out.find(part), std::string::npos) << part << ": " << r.out;
  }
  // The largest possible micro-batch is allowed (a plan may give one rank 61 samples).
  EXPECT_NE(run("plan --scenario " + kDefault + " --strategy even --micro-batch 61").code, 2);
}

// A fixed schedule no plan can fit: exit 3 naming a rank, the bytes it needs and has usable, and
// the least change that fits; optimal says it too (its equal-share fallback names the rank).
TEST(PlanCli, AnInfeasibleFixedScheduleNamesTheRankTheBytesAndWhatFits) {
  for (const std::string s : {"even", "optimal"}) {
    SCOPED_TRACE(s);
    const auto r = run("plan --scenario " + kDefault + " --strategy " + s +
                       " --activation-checkpointing none --micro-batch 16 --accumulation layered");
    EXPECT_EQ(r.code, 3) << r.out;
    for (const std::string part : {"rank ", "needs ", "usable", "shortfall ", "would fit: "})
      EXPECT_NE(r.out.find(part), std::string::npos) << part << ": " << r.out;
  }
}

// The message of an infeasible fixed schedule reads "rank R (GPU) needs X GiB, Y GiB usable (...)"
// and ends with the least change that fits: each single flag that alone fits, keeping the rest
// of the schedule. Every suggestion, applied to the same command, plans; a suggested period is
// the largest that fits (one more does not).
TEST(PlanCli, AnInfeasibleFixedScheduleSuggestsTheLeastChangeThatFits) {
  const std::string llama = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/modern-mix-llama7b.json";
  struct Case {
    std::string scenario;
    std::map<std::string, std::string> flags;
  };
  for (const Case& c :
       {Case{llama,
             {{"--activation-checkpointing", "none"},
              {"--micro-batch", "8"},
              {"--accumulation", "layered"}}},
        Case{kDefault, {{"--activation-checkpointing", "none"}, {"--micro-batch", "16"}}}}) {
    auto command = [&](const std::map<std::string, std::string>& flags) {
      std::string cmd = "plan --scenario " + c.scenario + " --strategy even";
      for (const auto& [flag, value] : flags) cmd += " " + flag + " " + value;
      return cmd;
    };
    const auto r = run(command(c.flags));
    SCOPED_TRACE(command(c.flags));
    ASSERT_EQ(r.code, 3) << r.out;
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(r.out, m,
                          std::regex(R"(rank (\d+) \((\S+)\) needs ([0-9.]+) GiB, ([0-9.]+) )"
                                     R"(GiB usable \(([0-9.]+) GiB less the planners' )"
                                     R"(128 MiB headroom\))")))
        << r.out;
    EXPECT_GT(std::stod(m[3]), std::stod(m[4])) << r.out;  // needs more than it has
    EXPECT_GT(std::stod(m[5]), std::stod(m[4])) << r.out;  // the headroom comes off usable
    const auto at = r.out.find("would fit: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    std::string fits = r.out.substr(at + 11);
    fits = fits.substr(0, fits.find('\n'));
    if (const auto each = fits.find(" (each alone)"); each != std::string::npos)
      fits = fits.substr(0, each);
    std::vector<std::string> suggestions;
    for (std::size_t from = 0;;) {
      const auto sep = fits.find(", or ", from);
      suggestions.push_back(fits.substr(from, sep - from));
      if (sep == std::string::npos) break;
      from = sep + 5;
    }
    for (const auto& suggestion : suggestions) {
      SCOPED_TRACE(suggestion);
      const auto space = suggestion.find(' ');
      ASSERT_NE(space, std::string::npos);
      ASSERT_EQ(suggestion.rfind("--", 0), 0u) << "a single flag: " << suggestion;
      auto flags = c.flags;
      flags[suggestion.substr(0, space)] = suggestion.substr(space + 1);
      const auto fixed = run(command(flags));
      EXPECT_EQ(fixed.code, 0) << fixed.out;
      if (suggestion.rfind("--activation-checkpointing every:", 0) == 0) {
        const int k = std::stoi(suggestion.substr(suggestion.find(':') + 1));
        flags["--activation-checkpointing"] = "every:" + std::to_string(k + 1);
        EXPECT_EQ(run(command(flags)).code, 3) << "every:" << k + 1 << " fits too";
      }
    }
  }
}

// The printed prediction is the simulator's replay of the written plan, under fixed schedules
// too (the issue's example: standard accumulation with micro-batches of 2).
TEST(PlanCli, ThePredictionIsWhatSimulateReportsForTheWrittenPlan) {
  const std::string modern = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/modern-mix-gpt2.7b.json";
  for (const std::string flags :
       {"--micro-batch 2 --accumulation standard", "--micro-batch 1 --accumulation no_sync", ""}) {
    SCOPED_TRACE(flags);
    const auto out = tmp("prediction.plan.json");
    std::filesystem::remove(out);
    const auto r =
        run("plan --scenario " + modern + " --strategy optimal " + flags + " -o " + out.string());
    ASSERT_EQ(r.code, 0) << r.out;
    const auto plan = nlohmann::json::parse(std::ifstream(out));
    const double predicted = plan["predicted"]["predicted_iteration_s"].get<double>();
    const auto sim =
        cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " simulate --scenario " +
                                           modern + " --plan " + out.string() + " --json");
    ASSERT_EQ(sim.code, 0) << sim.err;
    const double simulated = nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>();
    EXPECT_NEAR(predicted, simulated, 0.005 * simulated);
  }
}

// A scenario on an inline cluster of `nodes` (each a JSON list of catalog GPU names) joined by
// 25 Gbit/s Ethernet, running `model` at sequence 512 and batch `batch`.
void write_nodes_scenario(const fs::path& file, const std::vector<std::string>& nodes,
                          const std::string& model, int batch) {
  std::ofstream out(file);
  out << R"({"name": "t", "cluster": {"name": "c", "nodes": [)";
  for (std::size_t n = 0; n < nodes.size(); ++n)
    out << (n ? ", " : "") << R"({"name": "node)" << n << R"(", "gpus": )" << nodes[n]
        << R"(, "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
        "nic": {"kind": "ethernet", "bandwidth": "25Gbit/s", "latency": "10us"}})";
  out << R"(]}, "job": {"name": "j", "model": ")" << model
      << R"(", "sequence_length": 512, "global_batch": )" << batch
      << R"(, "precision": {"params": "fp32", "compute": "fp16", "reduce": "fp32"}}})";
}

TEST(PlanCli, BadShardingFlagsNameTheFlagTheValueAndWhatIsAllowed) {
  const auto two = tmp("two-nodes.json");
  write_nodes_scenario(two, {R"(["l4", "l4"])", R"(["l4", "l4"])"}, "gpt-1.3b", 16);
  struct Case {
    std::string flags, value, allowed;
  };
  const std::vector<Case> cases = {
      {"--sharding hsdp", "hsdp", "hybrid"},
      {"--sharding Hybrid", "Hybrid", "hybrid"},
      {"--sharding hybrid --group-size 0", "0", "--group-size"},
      {"--sharding hybrid --group-size -2", "-2", "--group-size"},
      {"--sharding hybrid --group-size two", "two", "--group-size"},
      {"--sharding auto --group-size 1.5", "1.5", "--group-size"},
      // Full sharding has no groups.
      {"--group-size 1", "1", "--sharding hybrid or auto"},
      {"--sharding full --group-size 2", "2", "--sharding hybrid or auto"},
      // More nodes per group than the scenario has: the flag, the value and the range.
      {"--sharding hybrid --group-size 3", "3", "1 to 2"},
      {"--sharding auto --group-size 5", "5", "1 to 2"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    const auto r = run("plan --scenario " + two.string() + " --strategy even " + c.flags);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(c.value), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.allowed), std::string::npos) << r.out;
    if (c.allowed == "1 to 2") {
      EXPECT_NE(r.out.find("--group-size"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(two.string()), std::string::npos) << r.out;  // whose node count
    }
  }
}

TEST(PlanCli, AGroupSizeThatDoesNotDivideTheNodesLeavesASmallerLastGroup) {
  // 3 nodes in groups of 2 nodes: [nodes 0, 1] and [node 2], each holding a full copy.
  const auto three = tmp("three-nodes.json");
  write_nodes_scenario(three, {R"(["a6000", "a6000"])", R"(["a6000", "a6000"])", R"(["a6000"])"},
                       "gpt-1.3b", 20);
  const auto out = tmp("three-nodes.plan.json");
  const auto r = run("plan --scenario " + three.string() +
                     " --strategy even --sharding hybrid --group-size 2 -o " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(run("validate " + out.string() + " --scenario " + three.string()).code, 0);
  const auto plan = nlohmann::json::parse(std::ifstream(out));
  const nlohmann::json groups = {{0, 1, 2, 3}, {4}};
  EXPECT_EQ(plan["sharding"]["groups"], groups);
  EXPECT_DOUBLE_EQ(plan["ranks"][4]["state_share"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(plan["ranks"][0]["state_share"].get<double>(), 0.25);
}

TEST(PlanCli, AGroupThatCannotHoldItsCopyOfTheStateIsRefused) {
  // GPT-2.7B's training state (16 B per parameter, 43 GB) cannot sit in one T4 (16 GB), while
  // full sharding over the T4 and two A100s holds it with uneven shares (optimal).
  const auto f = tmp("t4-group.json");
  write_nodes_scenario(f, {R"(["t4"])", R"(["a100-80gb", "a100-80gb"])"}, "gpt-2.7b", 6);
  auto r = run("plan --scenario " + f.string() + " --strategy optimal --sharding hybrid");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("group 0 (1 devices from rank 0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("copy of the state"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no sharding candidate fits"), std::string::npos) << r.out;
  // auto keeps full sharding and says why the hybrid lost (--use-all: the A100s alone win).
  r = run("plan --scenario " + f.string() + " --strategy optimal --sharding auto --use-all --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto chosen = nlohmann::json::parse(r.json);
  EXPECT_EQ(chosen.value("sharding", nlohmann::json("full")), "full");
  EXPECT_NE(chosen["predicted"]["explanation"].get<std::string>().find("does not fit"),
            std::string::npos);
  // A hand-written plan with that grouping: validate names the file, the JSON path, the group
  // and the bytes it would need.
  auto plan = chosen;
  plan.erase("predicted");
  plan["sharding"] = {{"kind", "hybrid"}, {"groups", {{0}, {1, 2}}}};
  plan["ranks"][0]["state_share"] = 1.0;
  plan["ranks"][1]["state_share"] = 0.5;
  plan["ranks"][2]["state_share"] = 0.5;
  const auto bad = tmp("t4-group.plan.json");
  std::ofstream(bad) << plan.dump(2);
  r = run("validate " + bad.string() + " --scenario " + f.string());
  EXPECT_EQ(r.code, 1) << r.out;
  for (const std::string& part : {bad.string(), std::string("sharding.groups[0]"),
                                  std::string("ranks [0]"), std::string("one full copy")})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << ": " << r.out;
}

TEST(PlanCli, UnknownStrategyIsAUsageError) {
  EXPECT_EQ(run("plan --scenario " + kDefault + " --strategy fastest").code, 2);
}

}  // namespace

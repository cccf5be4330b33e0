// The schedule choices (the plan keys of scenarios/README.md) run for real (label mpi): activation
// checkpointing none and every 2, and no_sync accumulation (also without checkpointing), under
// mpirun on the CPU backend with uneven batches and shares.
//  * One step's gradients and parameters equal the full-checkpointing run of the same
//    accumulation (layered / standard) and the single-rank full-batch step within 1e-5; so do
//    the framework schedules' (DeepSpeed ZeRO-3's gathers, DDP's replicas) and FSDP2's.
//  * The measured peak memory per rank matches the simulator's replay of the graph and the
//    memory model (costmodels::predict_memory) within 10 % plus the spread of three runs.
//  * The simulator and the backend execute the same ops: the RunResult's per-op records and
//    the SimResult's (`--ops`) carry exactly the graph's op ids, and the graph has the
//    Recompute ops the setting defines (core/plan.hpp), counted here from the definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"
#include "../support/run_command.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/traces/training_graph.hpp"

using namespace cephalo::test_support;
using nlohmann::json;

namespace {

struct Dump {
  std::vector<float> params, grads;
};

// One step's dumps, written into `dir` (one TempDir per test: they are named by the test).
Dump run_step(const TempDir& dir, int ranks, const std::string& scenario_file,
              const std::string& plan_file) {
  const auto p = dir.path / "p.bin", g = dir.path / "g.bin";
  std::filesystem::remove(p);
  std::filesystem::remove(g);
  auto o =
      mpirun(ranks, "--scenario " + scenario_file + " --plan " + plan_file +
                        " --steps 1 --dump-params " + p.string() + " --dump-grads " + g.string());
  EXPECT_EQ(o.code, 0) << o.output;
  return {read_floats(p), read_floats(g)};
}

void expect_equal_steps(const Dump& a, const Dump& ref, const std::string& what) {
  ASSERT_EQ(a.params.size(), ref.params.size()) << what;
  ASSERT_EQ(a.grads.size(), ref.grads.size()) << what;
  EXPECT_LT(worst_element_relative(a.grads, ref.grads), 1e-5) << what;
  EXPECT_LT(worst_unit_relative(a.grads, ref.grads), 1e-5) << what;
  EXPECT_LT(worst_unit_relative(a.params, ref.params), 1e-5) << what;
}

// The shipped uneven 3-rank plans with the schedule choice written in.
std::string variant(const TempDir& dir, const std::string& base, const std::string& name,
                    const std::function<void(json&)>& edit) {
  json p = json::parse(std::ifstream(plan(base)));
  edit(p);
  const auto file = dir.path / (name + ".plan.json");
  std::ofstream(file) << p.dump(2);
  return file.string();
}

struct Choice {
  std::string name, base;  // base: the full-checkpointing plan of the same accumulation
  std::string accumulation;
  json checkpointing;
};

const std::vector<Choice>& choices() {
  static const std::vector<Choice> c = {
      {"layered-none", "cpu-3rank-uneven-layered", "layered", "none"},
      {"layered-every2", "cpu-3rank-uneven-layered", "layered", {{"every", 2}}},
      {"no-sync", "cpu-3rank-uneven-standard", "no_sync", "full"},
      {"no-sync-none", "cpu-3rank-uneven-standard", "no_sync", "none"},
      {"standard-every2", "cpu-3rank-uneven-standard", "standard", {{"every", 2}}},
      {"layered-selective", "cpu-3rank-uneven-layered", "layered", "selective"},
      {"standard-selective", "cpu-3rank-uneven-standard", "standard", "selective"},
  };
  return c;
}

}  // namespace

TEST(MpiScheduleChoices, StepEqualsFullCheckpointingAndSingleRankFullBatch) {
  TempDir dir;
  const Dump single = run_step(dir, 1, scenario(1), plan("cpu-1rank-full"));
  for (const std::string base : {"cpu-3rank-uneven-layered", "cpu-3rank-uneven-standard"}) {
    const Dump full = run_step(dir, 3, scenario(3), plan(base));
    expect_equal_steps(full, single, base);
    for (const auto& c : choices()) {
      if (c.base != base) continue;
      SCOPED_TRACE(c.name);
      const auto file = variant(dir, base, c.name, [&](json& p) {
        p["accumulation"] = c.accumulation;
        p["activation_checkpointing"] = c.checkpointing;
      });
      const Dump d = run_step(dir, 3, scenario(3), file);
      expect_equal_steps(d, full, c.name + " vs " + base);
      expect_equal_steps(d, single, c.name + " vs single-rank full batch");
    }
  }
}

TEST(MpiScheduleChoices, PeakMemoryMatchesSimulatorAndMemoryModel) {
  // The memory test's job (gpt-tiny at sequence 64, global batch 16, fp32): activations
  // dominate the peak, so the kept activations of a setting are what is being compared.
  TempDir dir;
  const std::string sc = scenario_variant(dir.path, 2, "schedule", [](json& job) {
    job["sequence_length"] = 64;
    job["global_batch"] = 16;
  });
  const cephalo::Scenario scenario = cephalo::costmodels::load_scenario(sc);
  auto plan_of = [](const std::string& acc, const json& ckpt) {
    json p = {{"version", 1},
              {"scenario", "cpu-2rank"},
              {"strategy", "test"},
              {"accumulation", acc},
              {"offload", "none"},
              {"prefetch", true},
              {"activation_checkpointing", ckpt},
              {"ranks", json::array()}};
    const int batch[2] = {11, 5}, mb[2] = {6, 3};
    const double share[2] = {0.6, 0.4};
    for (int r = 0; r < 2; ++r)
      p["ranks"].push_back({{"rank", r},
                            {"node", 0},
                            {"gpu", "cpu"},
                            {"batch", batch[r]},
                            {"micro_batch", mb[r]},
                            {"micro_batches", 2},
                            {"state_share", share[r]}});
    return p;
  };
  struct Case {
    std::string name;
    json plan;
  };
  const std::vector<Case> cases = {
      {"layered-full", plan_of("layered", "full")},
      {"layered-none", plan_of("layered", "none")},
      {"layered-every2", plan_of("layered", {{"every", 2}})},
      {"standard-none", plan_of("standard", "none")},
      {"no-sync", plan_of("no_sync", "full")},
      {"no-sync-none", plan_of("no_sync", "none")},
      {"selective-layered", plan_of("layered", "selective")},
  };
  std::vector<double> layered_peaks;
  double selective_peak = 0;
  std::map<std::string, double> modelled;  // rank 0's memory model, per case
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto plan_file = dir.path / (c.name + ".plan.json");
    const auto result_file = dir.path / (c.name + ".run.json");
    std::ofstream(plan_file) << c.plan.dump(2);
    const cephalo::Plan plan = cephalo::load_plan(plan_file);
    cephalo::validate_plan_for(plan, scenario, plan_file.string());
    auto sim = run_command(std::string(CEPHALO_CLI) + " simulate --scenario " + sc + " --plan " +
                           plan_file.string() + " --json --ops");
    ASSERT_EQ(sim.code, 0) << sim.err;
    const json simulated = json::parse(sim.out);
    // The measured peak depends on thread timing (a collective that completes late keeps its
    // buffers into the next op: one buffer, +115 KB on rank 1 of layered-none in some runs and
    // not others), never below the schedule's own peak: the smallest of three runs is
    // compared, and the bound widens by the spread the runs show (the noise it lives with).
    // The deterministic part is stable: layered-every2's rank 1 measured 3,301,948 B in every
    // run (simulated -7.1 %, the largest gap, 2026-12-02).
    std::vector<double> measured, highest;
    json run_record;
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto run = mpirun(2, "--scenario " + sc + " --plan " + plan_file.string() +
                               " --steps 2 --result " + result_file.string());
      ASSERT_EQ(run.code, 0) << run.output;
      run_record = json::parse(std::ifstream(result_file));
      std::vector<double> m;
      for (const auto& r : run_record.at("ranks")) m.push_back(r.at("peak_memory_bytes"));
      if (measured.empty()) measured = highest = m;
      for (int r = 0; r < 2; ++r) {
        measured[r] = std::min(measured[r], m[r]);
        highest[r] = std::max(highest[r], m[r]);
      }
    }
    for (int r = 0; r < 2; ++r) {
      const double sim_peak = simulated.at("ranks").at(r).at("peak_memory_bytes");
      const double model = cephalo::costmodels::predict_memory(scenario, plan, r).total;
      ASSERT_GT(measured[r], 0.0);
      const double sim_error = (sim_peak - measured[r]) / measured[r];
      const double model_error = (model - measured[r]) / measured[r];
      const double spread = (highest[r] - measured[r]) / measured[r];
      const double bound = 0.10 + spread;
      EXPECT_LT(std::abs(sim_error), bound)
          << "rank " << r << ": simulated " << sim_peak << " B, measured " << measured[r]
          << " B (runs spread " << 100 * spread << " %)";
      EXPECT_LT(std::abs(model_error), bound)
          << "rank " << r << ": memory model " << model << " B, measured " << measured[r]
          << " B (runs spread " << 100 * spread << " %)";
      std::printf(
          "%-16s rank %d: measured %.0f B (spread %.1f %%), simulated %+.1f %%, memory model "
          "%+.1f %%\n",
          c.name.c_str(), r, measured[r], 100 * spread, 100 * sim_error, 100 * model_error);
    }
    if (c.name.rfind("layered", 0) == 0) layered_peaks.push_back(measured[0]);
    if (c.name == "selective-layered") selective_peak = measured[0];
    modelled[c.name] = cephalo::costmodels::predict_memory(scenario, plan, 0).total;

    // The same ops on both sides: exactly the graph's ids.
    const auto graph = cephalo::traces::build_training_graph(plan, scenario);
    std::set<std::uint64_t> sim_ids, run_ids;
    for (const auto& o : simulated.at("ops")) sim_ids.insert(o.at("id").get<std::uint64_t>());
    for (const auto& o : run_record.at("ops")) run_ids.insert(o.at("id").get<std::uint64_t>());
    EXPECT_EQ(sim_ids.size(), graph.num_ops());
    EXPECT_EQ(sim_ids, run_ids);
    // And the setting's recompute ops, counted from its definition: per micro-batch, every
    // checkpointed layer (every layer's attention core under selective), the embedding unless
    // none or selective, and the head.
    const auto& ck = plan.activation_checkpointing;
    const int layers = scenario.job.model.num_layers;
    const bool selective = ck.kind == cephalo::ActivationCheckpointing::Kind::Selective;
    int per_mb = 1 + (ck.kind == cephalo::ActivationCheckpointing::Kind::None || selective ? 0 : 1);
    for (int l = 1; l <= layers; ++l) per_mb += ck.checkpoints_layer(l) || selective ? 1 : 0;
    int rc = 0;
    for (const auto& o : graph.ops()) rc += o.kind == cephalo::traces::OpKind::Recompute;
    EXPECT_EQ(rc, per_mb * 2 * 2);  // 2 micro-batches on each of 2 ranks
  }
  // Keeping activations costs memory: full < every 2 < none (layered, rank 0).
  ASSERT_EQ(layered_peaks.size(), 3u);
  EXPECT_LT(layered_peaks[0], layered_peaks[2]);
  EXPECT_LT(layered_peaks[2], layered_peaks[1]);
  // Selective keeps all but the attention core's state: above full (measured), below none. What
  // it frees on this tiny model (the log-sum-exps, 17 KB on rank 0) is below the measured peak's
  // run-to-run noise (a late collective's buffer, ~115 KB), so "below none" is held on the
  // memory model, deterministic; the measured peak meets the simulator and the model within the
  // bounds above.
  EXPECT_LT(layered_peaks[0], selective_peak);
  EXPECT_LT(modelled.at("selective-layered"), modelled.at("layered-none"));
  EXPECT_GT(modelled.at("selective-layered"), modelled.at("layered-full"));
}

// A framework changes when the gathers are issued (DeepSpeed ZeRO-3's prefetch bucket holds the
// whole tiny model, so every gather starts at once) or how the state is laid out (DDP: a replica
// per rank), never what a step computes: one step of each equals FSDP2's within 1e-5.
TEST(MpiScheduleChoices, FrameworksChangeTheScheduleNotTheStep) {
  TempDir dir;
  const std::string base = "cpu-3rank-uneven-layered";
  const Dump fsdp2 = run_step(dir, 3, scenario(3), plan(base));
  const std::string zero3 = scenario_variant(dir.path, 3, "zero3", [](json& job) {
    job["implementation"]["framework"] = "deepspeed_zero3";
  });
  expect_equal_steps(run_step(dir, 3, zero3, plan(base)), fsdp2, "deepspeed_zero3");
  const std::string ddp = scenario_variant(
      dir.path, 3, "ddp", [](json& job) { job["implementation"]["framework"] = "ddp"; });
  const auto replicas = variant(dir, base, "replicas", [](json& p) {
    p["sharding"] = {{"kind", "hybrid"}, {"groups", {{0}, {1}, {2}}}};
    for (auto& r : p["ranks"]) r["state_share"] = 1.0;
  });
  expect_equal_steps(run_step(dir, 3, ddp, replicas), fsdp2, "ddp");
  // The plan the FSDP2 run took is refused for DDP, naming the key.
  auto refused = mpirun(3, "--scenario " + ddp + " --plan " + plan(base) + " --steps 1");
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("one group per rank for framework ddp"), std::string::npos)
      << refused.output;
}

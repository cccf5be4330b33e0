// Hostile input, round three, through the built CLI: every flag applies to what is planned or
// is refused, an empty path is refused rather than read as "none", a measured run is fitted only
// whole, unknown keys are refused, and each error names the flag, value and rule or the file,
// JSON path, value and expectation (tests/README.md, "Hostile input, round three").
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"
#include "hostile_cli.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kDefault = kRoot + "/scenarios/default.json";
const std::string kCpu4 = kRoot + "/scenarios/cpu-4rank.json";

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;

class HostileRoundThree : public cephalo::test_support::HostileCliTest {};

}  // namespace

TEST_F(HostileRoundThree, EveryPlanFlagAppliesToTheChosenParallelismOrIsRefused) {
  const std::string s = " --scenario " + kDefault;
  expect_cases({
      // 3D flags with --parallelism fsdp.
      {"plan --parallelism fsdp --tensor-parallel 2" + s,
       2,
       {"--tensor-parallel", "2", "--parallelism fsdp"}},
      {"plan --parallelism fsdp --pipeline-stages 2" + s,
       2,
       {"--pipeline-stages", "--parallelism 3d"}},
      {"plan --parallelism fsdp --micro-batches 4" + s, 2, {"--micro-batches", "4"}},
      {"plan --parallelism fsdp --pipeline-schedule gpipe" + s,
       2,
       {"--pipeline-schedule", "gpipe"}},
      {"plan --parallelism fsdp --sequence-parallel" + s, 2, {"--sequence-parallel"}},
      // Without --parallelism a split's flag fixes the family: it plans splits, never drops it
      // (a stage count no split of these 4 ranks can take is infeasible, as under 3d).
      {"plan --micro-batches 4" + s, 0, {"4 micro-batches"}},
      {"plan --pipeline-stages 2" + s, 3, {"no 3D split"}},
      // ... and an FSDP flag fixes FSDP plans.
      {"plan --strategy even" + s, 0, {"strategy even"}},
      // FSDP flags with it, a default value given explicitly too.
      {"plan --parallelism 3d --offload host" + s, 2, {"--offload", "host", "--parallelism 3d"}},
      {"plan --parallelism 3d --strategy even" + s, 2, {"--strategy", "even"}},
      {"plan --parallelism 3d --strategy optimal" + s, 2, {"--strategy", "optimal"}},
      {"plan --parallelism 3d --group-size 1" + s, 2, {"--group-size", "1"}},
      {"plan --parallelism 3d --cephalo-shares min_util" + s, 2, {"--cephalo-shares"}},
      {"plan --parallelism 3d --search-neighbours 3" + s, 2, {"--search-neighbours", "3"}},
      {"plan --parallelism 3d --cephalo-corrected-share-memory" + s,
       2,
       {"--cephalo-corrected-share-memory"}},
      {"plan --parallelism 3d --progress" + s, 2, {"--progress"}},
      {"plan --parallelism 3d --accumulation standard" + s, 2, {"--accumulation", "standard"}},
  });
}

TEST_F(HostileRoundThree, FlagsOfOtherCommandsApplyOrAreRefused) {
  const std::string cpu = " --scenario " + kRoot + "/scenarios/cpu-1rank.json --plan " + kRoot +
                          "/scenarios/plans/cpu-1rank-full.json";
  expect_cases({
      // An uneven variant of even shards.
      {"predict collective --scenario " + kDefault +
           " --kind all-gather --bytes 1MiB --uneven "
           "padded",
       2,
       {"--uneven", "padded", "--shares"}},
      // A loss scale for a job that computes in fp32 (refused with the run's inputs).
      {"run" + cpu + " --steps 1 --loss-scale 1024", 1, {"--loss-scale", "1024", "fp32"}},
      // The table's options with no table.
      {"sweep --spec " + kRoot + "/scenarios/sweeps/gpt2.7b-mixes.json --json --wide",
       2,
       {"--wide"}},
      {"profile --no-collectives --sweep-out x.json", 2, {"--sweep-out"}},
  });
}

TEST_F(HostileRoundThree, AnEmptyPathIsRefusedNamingTheOptionNotReadAsNone) {
  const std::string plan = kRoot + "/scenarios/plans/default-even.json";
  const std::string s = " --scenario " + kDefault;
  const std::string cpu = " --scenario " + kRoot + "/scenarios/cpu-1rank.json --plan " + kRoot +
                          "/scenarios/plans/cpu-1rank-full.json";
  expect_cases({
      {"plan" + s + " -o ''", 2, {"--output", "empty"}},
      {"plan" + s + " --stack ''", 2, {"--stack", "empty"}},
      {"simulate" + s + " --plan " + plan + " --trace ''", 2, {"--trace", "empty"}},
      {"calibrate stack" + s + " --plan " + plan + " --measured-tokens-per-s 100 -o ''",
       2,
       {"--output", "empty"}},
      {"run" + cpu + " --result ''", 2, {"--result", "empty"}},
      {"run" + cpu + " --trace ''", 2, {"--trace", "empty"}},
      {"run" + cpu + " --checkpoint-dir '' --checkpoint-every 1", 2, {"--checkpoint-dir"}},
      {"run" + cpu + " --resume ''", 2, {"--resume"}},
      {"sweep --spec ''", 2, {"--spec"}},
      {"plan --scenario ''", 2, {"--scenario", "empty"}},
  });
}

TEST_F(HostileRoundThree, ImpossibleFixedSplitDimensionsNameTheFlagValueAndRule) {
  const std::string s = " --scenario " + kDefault + " --parallelism 3d";  // 32 layers, 4 ranks
  expect_cases({
      {"plan" + s + " --pipeline-stages 33", 2, {"--pipeline-stages", "33", "32 layers"}},
      {"plan" + s + " --pipeline-stages 2 --micro-batches 1",
       2,
       {"--micro-batches", "1", "at least --pipeline-stages 2"}},
      {"plan" + s + " --micro-batches 1048576",
       2,
       {"--micro-batches", "1048576", "divisor of the global batch 64"}},
      {"plan" + s + " --pipeline-schedule interleaved:5",
       2,
       {"--pipeline-schedule", "interleaved:5", "dividing the model's 32 layers"}},
      {"plan" + s + " --pipeline-stages 1 --pipeline-schedule interleaved:2",
       2,
       {"--pipeline-schedule", "2 or more stages"}},
      {"plan" + s + " --tensor-parallel 1 --sequence-parallel",
       2,
       {"--sequence-parallel", "--tensor-parallel above 1"}},
  });
}

TEST_F(HostileRoundThree, TheCpuScenariosThreeDPlanIsOneTheBackendRuns) {
  const auto o = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(
      "plan --scenario " + kCpu4 + " --parallelism 3d --json"));
  ASSERT_EQ(o.code, 0) << o.err;
  const json split = json::parse(o.out).at("model_split");
  EXPECT_FALSE(split.value("sequence_parallel", false)) << split.dump();
  expect_cases({{"plan --scenario " + kCpu4 + " --parallelism 3d --sequence-parallel",
                 2,
                 {"--sequence-parallel", "does not run sequence parallelism"}}});
}

TEST_F(HostileRoundThree, UnknownKeysBesideASplitAndInAStackFileAreRefusedNamingThem) {
  const std::string split = fs::path(dir_ / "s.json").string();
  ASSERT_EQ(cephalo::test_support::run_cephalo("plan --scenario " + kDefault +
                                               " --parallelism 3d -o " + split)
                .exit_code,
            0);
  const json plan = json::parse(std::ifstream(split));
  const std::string wrapped =
      write("wrapped.json", {{"model_split", plan.at("model_split")}, {"stagse", 2}});
  json three = plan.at("model_split");
  three["micro_batches"] = 3;  // 64 samples do not split into 3 micro-batches
  const std::string m3 = write("m3.json", {{"model_split", three}});
  const std::string stack_file = fs::path(dir_ / "stack.json").string();
  ASSERT_EQ(cephalo::test_support::run_cephalo(
                "calibrate stack --scenario " + kDefault + " --plan " + kRoot +
                "/scenarios/plans/default-even.json --measured-tokens-per-s 1000 -o " + stack_file)
                .exit_code,
            0);
  json stack = json::parse(std::ifstream(stack_file));
  stack["factorz"] = 1;
  const std::string extra = write("extra.stack.json", stack);
  stack.erase("factorz");
  stack["factors"]["compute"]["value"] = 10.0000001;
  const std::string over = write("over.stack.json", stack);
  expect_cases({
      {"predict 3d --scenario " + kDefault + " --split " + wrapped, 1, {"wrapped.json", "stagse"}},
      {"simulate --scenario " + kDefault + " --plan " + kRoot +
           "/scenarios/plans/default-even.json --stack " + extra,
       1,
       {"extra.stack.json", "factorz"}},
      {"simulate --scenario " + kDefault + " --plan " + kRoot +
           "/scenarios/plans/default-even.json --stack " + over,
       1,
       {"over.stack.json", "factors.compute.value", "10.0000001", "[1/64, 10]"}},
  });
}

TEST_F(HostileRoundThree, CalibrateStackFitsOnlyAWholeRun) {
  const std::string plan = kRoot + "/scenarios/plans/default-even.json";
  const auto sim = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(
      "simulate --scenario " + kDefault + " --plan " + plan + " --ops --json"));
  ASSERT_EQ(sim.code, 0) << sim.err;
  json run = json::parse(sim.out);
  run["source"] = "cpu";  // as a RunResult says
  const std::size_t n = run.at("ops").size();
  ASSERT_GT(n, 4u);
  json half = run, none = run, twice = run;
  half["ops"].erase(half["ops"].begin() + static_cast<std::ptrdiff_t>(n / 2), half["ops"].end());
  none["ops"] = json::array();
  twice["ops"][1]["id"] = twice["ops"][0]["id"];
  const std::string base = "calibrate stack --scenario " + kDefault + " --plan " + plan + " -o " +
                           (dir_ / "out.stack.json").string() + " --run ";
  expect_cases({
      {base + write("half.run.json", half), 1, {"half.run.json", "$.ops", "ops missing"}},
      {base + write("none.run.json", none), 1, {"none.run.json", "$.ops", "no op records"}},
      {base + write("twice.run.json", twice), 1, {"twice.run.json", "$.ops[1].id", "once"}},
  });
  EXPECT_FALSE(fs::exists(dir_ / "out.stack.json"));
  // The whole run is fitted.
  expect_cases({{base + write("whole.run.json", run), 0, {"stack written to"}}});
}

TEST_F(HostileRoundThree, AJobsMissingStackFileIsAFileErrorNamingIt) {
  json job = json::parse(std::ifstream(kRoot + "/scenarios/jobs/gpt-2.7b-s512.json"));
  job["implementation"]["stack"] = "missing.stack.json";
  const std::string job_file = write("job.json", job);
  const std::string scenario =
      write("scenario.json", {{"name", "s"},
                              {"cluster", kRoot + "/scenarios/clusters/paper-4gpu.json"},
                              {"job", job_file}});
  // Before: "expected a readable job file", exit 1, naming the job.
  expect_cases({{"plan --scenario " + scenario, 5, {"missing.stack.json", "no such file"}}});
}

TEST_F(HostileRoundThree, AStackOnTheBackendsOwnImplementationGivesNoWarning) {
  const std::string cpu = kRoot + "/scenarios/cpu-1rank.json";
  const std::string plan = kRoot + "/scenarios/plans/cpu-1rank-full.json";
  const std::string stack = (dir_ / "cpu.stack.json").string();
  const auto predicted = cephalo::test_support::run_command(cephalo::test_support::cephalo_command(
      "simulate --scenario " + cpu + " --plan " + plan + " --json"));
  ASSERT_EQ(predicted.code, 0) << predicted.err;
  const double tokens = json::parse(predicted.out).at("tokens_per_s").get<double>();
  ASSERT_EQ(cephalo::test_support::run_cephalo("calibrate stack --scenario " + cpu + " --plan " +
                                               plan + " --measured-tokens-per-s " +
                                               std::to_string(tokens) + " -o " + stack)
                .exit_code,
            0);
  json scenario = json::parse(std::ifstream(cpu));
  json job = json::parse(std::ifstream(kRoot + "/scenarios/jobs/gpt-tiny-cpu.json"));
  job["implementation"]["stack"] = stack;  // eager, unfused: what the backend runs
  scenario["job"] = job;
  const std::string file = write("cpu-1rank.json", scenario);
  const auto o = cephalo::test_support::run_cephalo("run --scenario " + file + " --plan " + plan +
                                                    " --steps 1");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  // Before: 'declares "eager, unfused" but the backend runs "eager, unfused"'.
  EXPECT_EQ(o.output.find("declares implementation"), std::string::npos) << o.output;
}

TEST_F(HostileRoundThree, AGlobalBatchNoPlanCanScheduleIsInfeasibleAtOnce) {
  json job = json::parse(std::ifstream(kRoot + "/scenarios/jobs/gpt-2.7b-s512.json"));
  job["global_batch"] = 1 << 20;  // 2^20 micro-batches of 1 x 34 units > 2^24 unit passes
  const std::string scenario = write(
      "scenario.json",
      {{"name", "s"}, {"cluster", kRoot + "/scenarios/clusters/paper-4gpu.json"}, {"job", job}});
  expect_cases({{"plan --scenario " + scenario + " --strategy even --micro-batch 1",
                 3,
                 {"global batch 1048576", "unit passes", "16777216", "--micro-batch 1"}}});
}

TEST_F(HostileRoundThree, ASplitPlansFaultIsBlamedWhereItIs) {
  const std::string file = (dir_ / "split.plan.json").string();
  ASSERT_EQ(cephalo::test_support::run_cephalo("plan --scenario " + kDefault +
                                               " --parallelism 3d --pipeline-stages 3 -o " + file)
                .exit_code,
            0);
  const json plan = json::parse(std::ifstream(file));
  ASSERT_EQ(plan.at("model_split").at("stages").size(), 3u) << plan.dump();
  // The split's count missing (so 1) while every rank runs its real count: the split's key is
  // at fault. Before: "expected the split's 1 micro-batches" on ranks[0].
  json absent = plan;
  absent["model_split"].erase("micro_batches");
  // Stage 0's one rank given another micro-batch (stages 1 and 2 agree). Before: blamed on
  // stage 1, "as stage 0's do".
  json stage0 = plan;
  const int first = stage0["model_split"]["stages"][0]["ranks"][0].get<int>();
  auto& rank = stage0["ranks"][static_cast<std::size_t>(first)];
  rank["micro_batch"] = rank["micro_batch"].get<int>() + 1;
  rank["batch"] = rank["micro_batch"].get<int>() * rank["micro_batches"].get<int>();
  expect_cases({
      {"validate " + write("absent.plan.json", absent),
       1,
       {"absent.plan.json: at model_split.micro_batches", "(absent)", "every rank runs"}},
      {"validate " + write("stage0.plan.json", stage0),
       1,
       {"stage 0's replicas", "as most stages' do"}},
  });
}

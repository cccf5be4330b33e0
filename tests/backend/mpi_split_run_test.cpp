// Split plans (DESIGN §4, "A split in the plan and the graph") trained by `cephalo run` under
// mpirun on 4 ranks against single-rank training of the same job, fp32:
//  * the loss of every step within 1e-5 (relative), the parameters after the last step within
//    1e-5 (per unit, relative norm: Adam's update of an element whose true gradient is ~0, the
//    key bias, is lr·sign(noise), so elements are compared at their unit's scale);
//  * the gradients of the last step within 1e-5 of the unit's largest, against a single-rank
//    step from the same parameters and optimizer state: the split run's checkpoint before its
//    last step, resumed on one rank (a split checkpoint holds the single-rank model). The same
//    step from the initial parameters would compare the two runs' accumulated fp32 differences
//    too, which Adam amplifies in the near-zero-gradient directions;
//  * checkpoint -> resume under another split equals the uninterrupted run.
// Also the refusals (sequence parallelism, a TP degree above the vocabulary) on every rank
// before any step, and that TP ranks report their measured TP collectives.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/mpi_cli.hpp"

namespace fs = std::filesystem;
using namespace cephalo::test_support;
using nlohmann::json;

namespace {

struct RankSpec {
  int micro_batch = 0;
  double share = 1.0;
  int node = 0;
  int sub_steps = 1;
};

// A split plan for the scenario named `scenario_name`: every rank runs its share of each of the
// split's m micro-batches as `sub_steps` sub-steps of `micro_batch` samples.
std::string write_plan(const fs::path& dir, const std::string& name,
                       const std::string& scenario_name, const json& split,
                       const std::vector<RankSpec>& ranks, const std::string& checkpointing = "") {
  const int m = split.at("micro_batches").get<int>();
  json rs = json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r)
    rs.push_back({{"rank", r},
                  {"node", ranks[r].node},
                  {"gpu", "cpu"},
                  {"batch", ranks[r].micro_batch * m * ranks[r].sub_steps},
                  {"micro_batch", ranks[r].micro_batch},
                  {"micro_batches", m * ranks[r].sub_steps},
                  {"state_share", ranks[r].share}});
  json plan = {{"version", 1},
               {"scenario", scenario_name},
               {"strategy", "test"},
               {"model_split", split},
               {"ranks", rs}};
  if (!checkpointing.empty()) plan["activation_checkpointing"] = checkpointing;
  const fs::path file = dir / (name + ".plan.json");
  std::ofstream(file) << plan.dump(1);
  return file.string();
}

json stages(std::initializer_list<std::pair<json, json>> list) {
  json out = json::array();
  for (const auto& [layers, ranks] : list) out.push_back({{"layers", layers}, {"ranks", ranks}});
  return out;
}

// A scenario of `ranks` CPU ranks (on `nodes` nodes) training a gpt-tiny variant: `layers`
// layers, global batch `batch`, tied or untied head. The shipped scenario's name, so the
// shipped one-rank plans (and the plans above) name it.
std::string variant(const fs::path& dir, int ranks, int nodes, int layers, int batch, bool tied) {
  json sc = json::parse(std::ifstream(scenario(ranks)));
  json job = json::parse(std::ifstream(kSrc + "/scenarios/jobs/gpt-tiny-cpu.json"));
  job["name"] = "gpt-tiny-cpu-l" + std::to_string(layers) + (tied ? "" : "-untied");
  job["global_batch"] = batch;
  job["model"] = {{"name", "gpt-tiny-l" + std::to_string(layers) + (tied ? "" : "-untied")},
                  {"family", "gpt"},
                  {"layers", layers},
                  {"hidden", 64},
                  {"heads", 4},
                  {"vocab_size", 256},
                  {"max_positions", 64},
                  {"tied_embeddings", tied}};
  sc["job"] = job;
  if (nodes > 1) {
    json node_list = json::array();
    for (int n = 0; n < nodes; ++n)
      node_list.push_back(
          {{"name", "host" + std::to_string(n)},
           {"gpus", json(std::vector<std::string>(static_cast<std::size_t>(ranks / nodes), "cpu"))},
           {"intra_link", {{"kind", "shm"}, {"bandwidth", "5GB/s"}, {"latency", "2us"}}},
           {"nic", {{"kind", "ethernet"}, {"bandwidth", "1GB/s"}, {"latency", "10us"}}}});
    sc["cluster"]["nodes"] = node_list;
  }
  const fs::path file = dir / ("v" + std::to_string(ranks) + "-" + std::to_string(nodes) + "-" +
                               std::to_string(layers) + "-" + std::to_string(batch) +
                               (tied ? "" : "-untied") + ".json");
  std::ofstream(file) << sc.dump(1);
  return file.string();
}

// The one-rank plan of a global batch `batch` (one micro-batch).
std::string one_rank_plan(const fs::path& dir, int batch) {
  const json plan = {{"version", 1},
                     {"scenario", "cpu-1rank"},
                     {"strategy", "test"},
                     {"ranks",
                      {{{"rank", 0},
                        {"node", 0},
                        {"gpu", "cpu"},
                        {"batch", batch},
                        {"micro_batch", batch},
                        {"micro_batches", 1},
                        {"state_share", 1.0}}}}};
  const fs::path file = dir / ("one-rank-" + std::to_string(batch) + ".plan.json");
  std::ofstream(file) << plan.dump(1);
  return file.string();
}

struct RunOut {
  std::vector<double> losses;
  std::vector<float> params, grads;
  json report;
};

// `cephalo run` of a plan for `steps` steps: losses, the parameters after and the last step's
// gradients. `extra`: checkpoint / resume flags.
RunOut run(int ranks, const std::string& scen, const std::string& plan_file, int steps,
           const fs::path& dir, const std::string& tag, const std::string& extra = "") {
  const fs::path p = dir / (tag + ".p.bin"), g = dir / (tag + ".g.bin");
  const Outcome o = mpirun(ranks, "--scenario " + scen + " --plan " + plan_file + " --steps " +
                                      std::to_string(steps) + " --json --dump-params " +
                                      p.string() + " --dump-grads " + g.string() + " " + extra);
  RunOut r;
  EXPECT_EQ(o.code, 0) << tag << "\n" << o.output;
  if (o.code != 0) return r;
  const json j = json::parse(o.output.substr(o.output.find('{')));
  for (const auto& s : j.at("steps")) r.losses.push_back(s.at("loss").get<double>());
  r.report = j.at("report");
  r.params = read_floats(p);
  r.grads = read_floats(g);
  return r;
}

// Per unit of `units` (sizes): ||a - b|| / ||b|| (norm) or max |a - b| / max |b| (element).
double unit_error(const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<std::size_t>& units, bool element) {
  double worst = 0;
  std::size_t off = 0;
  for (std::size_t n : units) {
    double d = 0, r = 0;
    for (std::size_t i = off; i < off + n; ++i) {
      const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
      d = element ? std::max(d, e) : d + e * e;
      r = element ? std::max(r, std::fabs(static_cast<double>(b[i])))
                  : r + static_cast<double>(b[i]) * b[i];
    }
    worst = std::max(worst, element ? d / std::max(r, 1e-30) : std::sqrt(d / std::max(r, 1e-60)));
    off += n;
  }
  return worst;
}

std::vector<std::size_t> units_of(int layers, bool tied) {
  const std::size_t C = 64, F = 256, V = 256, P = 64;
  const std::size_t layer = 4 * C + C * 3 * C + 3 * C + C * C + C + C * F + F + F * C + C;
  std::vector<std::size_t> u{V * C + P * C};
  for (int l = 0; l < layers; ++l) u.push_back(layer);
  u.push_back(2 * C + (tied ? 0 : V * C));
  return u;
}

struct Job {
  int layers = 2;
  int batch = 9;
  bool tied = true;
  int nodes = 1;
  std::string checkpointing;  // the plan key ("" leaves it out: full)
};

// The split plan against single-rank training of the same job over `steps` steps, and its
// last step's gradients against a single-rank step from its own checkpoint.
void expect_equivalent(const Job& job, const json& split, const std::vector<RankSpec>& ranks,
                       const std::string& what, int steps = 3) {
  TempDir dir;
  const auto units = units_of(job.layers, job.tied);
  const std::string one = variant(dir.path, 1, 1, job.layers, job.batch, job.tied);
  const std::string four = variant(dir.path, 4, job.nodes, job.layers, job.batch, job.tied);
  const std::string one_plan = one_rank_plan(dir.path, job.batch);
  const std::string plan_file =
      write_plan(dir.path, "split", "cpu-4rank", split, ranks, job.checkpointing);
  const RunOut ref = run(1, one, one_plan, steps, dir.path, "ref");
  const fs::path ckpt = dir.path / "ckpt";
  const std::string before_last = std::to_string(steps - 1);
  const RunOut got =
      run(4, four, plan_file, steps, dir.path, "split",
          "--checkpoint-dir " + ckpt.string() + " --checkpoint-every " + before_last);
  ASSERT_EQ(ref.losses.size(), static_cast<std::size_t>(steps));
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  for (std::size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s]))
        << what << ": step " << s;
  ASSERT_EQ(got.params.size(), ref.params.size()) << what;
  const double params = unit_error(got.params, ref.params, units, false);
  EXPECT_LT(params, 1e-5) << what;
  // The same last step on one rank from the split run's checkpoint (and so its parameters).
  const RunOut same = run(1, one, one_plan, steps, dir.path, "same", "--resume " + ckpt.string());
  ASSERT_EQ(same.grads.size(), got.grads.size()) << what;
  const double grads = unit_error(got.grads, same.grads, units, true);
  EXPECT_LT(grads, 1e-5) << what;
  ASSERT_EQ(same.losses.size(), 1u);
  EXPECT_NEAR(got.losses.back(), same.losses[0], 1e-5 * std::fabs(same.losses[0])) << what;
  // The comparison can fail: the last step's gradients differ from the first step's (the run
  // trained), far beyond the bound.
  EXPECT_GT(unit_error(ref.grads, run(1, one, one_plan, 1, dir.path, "first").grads, units, true),
            1e-3)
      << what;
  std::printf(
      "[ split ] %s: %d steps, loss within %.2e, parameters (unit norm) %.2e, last "
      "step's gradients (element / unit max) %.2e\n",
      what.c_str(), steps,
      [&] {
        double w = 0;
        for (std::size_t s = 0; s < ref.losses.size(); ++s)
          w = std::max(w, std::fabs(got.losses[s] - ref.losses[s]) / ref.losses[s]);
        return w;
      }(),
      params, grads);
}

json split_of(int tp, const std::string& schedule, int m, const std::string& sharding,
              const json& stage_list) {
  return {{"tensor_parallel", tp},
          {"schedule", schedule},
          {"micro_batches", m},
          {"sharding", sharding},
          {"stages", stage_list}};
}

}  // namespace

TEST(MpiSplitRun, TensorParallelTwoEqualsSingleRankTraining) {
  // Two TP groups of 2 (replicas of 2 and 1 samples of every micro-batch, uneven shares).
  expect_equivalent({}, split_of(2, "1f1b", 3, "full", stages({{{0, 2}, {0, 1, 2, 3}}})),
                    {{2, 0.7}, {2, 0.7}, {1, 0.3}, {1, 0.3}}, "TP 2");
}

TEST(MpiSplitRun, PipelineTwoEqualsSingleRankTraining) {
  // Two stages of two replicas that split each micro-batch differently (2 + 1 against 1 + 2),
  // so transfers cross between replicas; the tied head's word embedding is all-reduced.
  expect_equivalent({},
                    split_of(1, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                    {{2, 0.6}, {1, 0.4}, {1, 0.5}, {2, 0.5}}, "PP 2 (1F1B)");
}

TEST(MpiSplitRun, TensorTwoTimesPipelineTwoEqualsSingleRankTraining) {
  expect_equivalent({},
                    split_of(2, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                    {{3}, {3}, {3}, {3}}, "TP 2 x PP 2 (1F1B)");
}

TEST(MpiSplitRun, SelectiveRecomputeUnderTensorAndPipelineParallelismEqualsSingleRankTraining) {
  // Every layer keeps its activations but the attention core's, rerun on each TP rank's heads.
  Job job;
  job.checkpointing = "selective";
  expect_equivalent(job,
                    split_of(2, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                    {{3}, {3}, {3}, {3}}, "TP 2 x PP 2 (1F1B), selective recompute");
}

TEST(MpiSplitRun, GPipeWithTheDistributedOptimizerEqualsSingleRankTraining) {
  expect_equivalent(
      {}, split_of(2, "gpipe", 3, "optimizer", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
      {{3}, {3}, {3}, {3}}, "TP 2 x PP 2 (GPipe, optimizer sharding)");
}

TEST(MpiSplitRun, InterleavedWithTensorParallelismEqualsSingleRankTraining) {
  // 4 layers in 4 chunks, two per stage (virtual stages 0..3 alternate between the stages).
  Job job;
  job.layers = 4;
  job.batch = 8;
  const json chunks0 = {{0, 1}, {2, 3}}, chunks1 = {{1, 2}, {3, 4}};
  expect_equivalent(
      job, split_of(2, "interleaved:2", 4, "full", stages({{chunks0, {0, 1}}, {chunks1, {2, 3}}})),
      {{2}, {2}, {2}, {2}}, "TP 2 x PP 2 (interleaved 1F1B, V = 2)");
  expect_equivalent(
      job, split_of(1, "interleaved:2", 4, "none", stages({{chunks0, {0, 1}}, {chunks1, {2, 3}}})),
      {{1, 0.5}, {1, 0.5}, {1, 0.5}, {1, 0.5}}, "PP 2 x DP 2 (interleaved, DDP)");
}

TEST(MpiSplitRun, HybridShardingAcrossNodesEqualsSingleRankTraining) {
  // Each data-parallel domain has one rank per node: sharded within, all-reduced across.
  Job job;
  job.nodes = 2;
  expect_equivalent(job, split_of(2, "1f1b", 3, "hybrid", stages({{{0, 2}, {0, 1, 2, 3}}})),
                    {{2, 0.5, 0}, {2, 0.5, 0}, {1, 0.5, 1}, {1, 0.5, 1}}, "TP 2, hybrid sharding");
}

TEST(MpiSplitRun, UntiedHeadOnAStageWithOtherReplicaCountsEqualsSingleRankTraining) {
  // Three replicas of one sample feed one rank of three (and its gradient back).
  Job job;
  job.tied = false;
  expect_equivalent(job,
                    split_of(1, "1f1b", 3, "full", stages({{{0, 1}, {0, 1, 2}}, {{1, 2}, {3}}})),
                    {{1, 0.3}, {1, 0.3}, {1, 0.4}, {3, 1.0}}, "PP 2, 3 replicas -> 1, untied");
}

TEST(MpiSplitRun, UnequalBatchesAndSubStepsInsideStagesEqualSingleRankTraining) {
  // 12 samples in 3 micro-batches of 4: stage 0's replicas take 3 (in 3 sub-steps of 1) and 1
  // of each, stage 1's 2 (in 2 sub-steps of 1) and 2 (in one step): the transfers are cut at
  // both sides' sub-step boundaries, and the replicas differ in shares too.
  Job job;
  job.batch = 12;
  expect_equivalent(
      job, split_of(1, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
      {{1, 0.7, 0, 3}, {1, 0.3}, {1, 0.4, 0, 2}, {2, 0.6}}, "PP 2, sub-steps 3 + 1 against 2 + 1");
}

TEST(MpiSplitRun, TensorParallelGroupsInSubStepsEqualSingleRankTraining) {
  // Stage 0's TP group runs its 3 samples of every micro-batch in 3 sub-steps (its TP
  // collectives one per sub-step), stage 1's in one; GPipe, the distributed optimizer.
  expect_equivalent(
      {}, split_of(2, "gpipe", 3, "optimizer", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
      {{1, 1.0, 0, 3}, {1, 1.0, 0, 3}, {3}, {3}},
      "TP 2 x PP 2 (GPipe, optimizer), sub-steps 3 / 1");
}

// Four steps of `first_plan` uninterrupted, against two steps of it checkpointed at step 2 and
// resumed for steps 2 and 3 under `other_plan`: the resumed losses and parameters equal the
// uninterrupted run's, while the run stopped at step 2 is far from it (the check can fail).
struct Resumed {
  RunOut full;
  double error = 0;  // parameters after step 4, resumed against uninterrupted
};
Resumed stop_and_resume(const std::string& scen, const std::string& first_plan,
                        const std::string& other_plan, const fs::path& ckpt, const fs::path& dir,
                        const std::vector<std::size_t>& units) {
  Resumed out;
  out.full = run(4, scen, first_plan, 4, dir, "full");
  const RunOut first = run(4, scen, first_plan, 2, dir, "first",
                           "--checkpoint-dir " + ckpt.string() + " --checkpoint-every 2");
  const RunOut resumed = run(4, scen, other_plan, 4, dir, "resumed", "--resume " + ckpt.string());
  const RunOut& full = out.full;
  out.error = std::numeric_limits<double>::infinity();
  // Steps 2 and 3 resumed against the uninterrupted run's; the same parameters.
  EXPECT_EQ(full.losses.size(), 4u);
  EXPECT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.params.size(), full.params.size());
  if (full.losses.size() != 4 || resumed.losses.size() != 2 ||
      resumed.params.size() != full.params.size())
    return out;
  for (std::size_t s = 0; s < 2; ++s)
    EXPECT_NEAR(resumed.losses[s], full.losses[s + 2], 1e-5 * full.losses[s + 2]);
  out.error = unit_error(resumed.params, full.params, units, false);
  EXPECT_LT(out.error, 1e-5);
  EXPECT_GT(unit_error(first.params, full.params, units, false), 1e-3);
  return out;
}

TEST(MpiSplitRun, ResumingUnderAnotherSplitEqualsTheUninterruptedRun) {
  TempDir dir;
  const auto units = units_of(2, true);
  const std::string four = variant(dir.path, 4, 1, 2, 9, true);
  const std::string tp_pp =
      write_plan(dir.path, "tp2pp2", "cpu-4rank",
                 split_of(2, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                 {{3}, {3}, {3}, {3}});
  const std::string tp =
      write_plan(dir.path, "tp2", "cpu-4rank",
                 split_of(2, "gpipe", 3, "optimizer", stages({{{0, 2}, {0, 1, 2, 3}}})),
                 {{2, 0.5}, {2, 0.5}, {1, 0.5}, {1, 0.5}});
  const fs::path ckpt = dir.path / "ckpt";
  const Resumed r = stop_and_resume(four, tp_pp, tp, ckpt, dir.path, units);
  const RunOut& full = r.full;
  // An FSDP plan resumes it too, and the split run resumes an FSDP checkpoint.
  const fs::path fsdp_ckpt = dir.path / "fsdp";
  const RunOut fsdp = run(4, four, plan("cpu-4rank-even"), 4, dir.path, "fsdp",
                          "--resume " + ckpt.string() + " --checkpoint-dir " + fsdp_ckpt.string() +
                              " --checkpoint-every 3");
  EXPECT_LT(unit_error(fsdp.params, full.params, units, false), 1e-5);
  const RunOut back = run(4, four, tp_pp, 4, dir.path, "back", "--resume " + fsdp_ckpt.string());
  ASSERT_EQ(back.losses.size(), 1u);
  EXPECT_LT(unit_error(back.params, full.params, units, false), 1e-5);
  std::printf(
      "[ split ] TP 2 x PP 2 stopped at step 2, resumed under TP 2 (optimizer): "
      "parameters after step 4 within %.2e\n",
      r.error);
}

// Two stages of layer 0 and layer 1 (tied head): `first` (1F1B) stopped at step 2 and resumed
// under `other` (GPipe), ranks given per plan, with a global batch `batch`.
void resume_two_stages(int batch, const std::vector<RankSpec>& first,
                       const std::vector<RankSpec>& other, const std::string& what) {
  TempDir dir;
  const auto units = units_of(2, true);
  const std::string four = variant(dir.path, 4, 1, 2, batch, true);
  const json list = stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}});
  const std::string first_plan =
      write_plan(dir.path, "first", "cpu-4rank", split_of(1, "1f1b", 3, "full", list), first);
  const std::string other_plan =
      write_plan(dir.path, "other", "cpu-4rank", split_of(1, "gpipe", 3, "full", list), other);
  const Resumed r =
      stop_and_resume(four, first_plan, other_plan, dir.path / "ckpt", dir.path, units);
  std::printf("[ split ] %s: parameters after step 4 within %.2e\n", what.c_str(), r.error);
}

TEST(MpiSplitRun, UnevenReplicasResumeUnderAnotherUnevenSplit) {
  // Two stages whose replicas carry unequal samples and shares (2 + 1 against 1 + 2 of every
  // micro-batch, as the planner's stages of mixed GPUs do), stopped at step 2 and resumed under
  // another split of the same space: GPipe, the samples dealt 1 + 2 and 2 + 1, other shares.
  resume_two_stages(9, {{2, 0.6}, {1, 0.4}, {1, 0.5}, {2, 0.5}},
                    {{1, 0.2}, {2, 0.8}, {2, 0.7}, {1, 0.3}},
                    "uneven PP 2 stopped at step 2, resumed under another uneven PP 2");
}

TEST(MpiSplitRun, SubStepsResumeUnderAnotherPlanOfTheSpace) {
  // The sub-step plan above stopped at step 2 and resumed under other shares and sub-steps
  // (stage 0: 2 in 2 sub-steps + 2 in one; stage 1: 1 + 3 in 3 sub-steps).
  resume_two_stages(12, {{1, 0.7, 0, 3}, {1, 0.3}, {1, 0.4, 0, 2}, {2, 0.6}},
                    {{1, 0.5, 0, 2}, {2, 0.5}, {1, 0.2}, {1, 0.8, 0, 3}},
                    "PP 2 with sub-steps stopped at step 2, resumed under other sub-steps");
}

TEST(MpiSplitRun, TensorParallelRanksReportTheirMeasuredCollectives) {
  TempDir dir;
  const std::string plan_file =
      write_plan(dir.path, "tp2pp2", "cpu-4rank",
                 split_of(2, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                 {{3}, {3}, {3}, {3}});
  const RunOut r = run(4, scenario(4), plan_file, 2, dir.path, "r");
  ASSERT_TRUE(r.report.contains("ranks"));
  for (const auto& rank : r.report.at("ranks")) {
    // Every rank of the two TP groups ran TP collectives inside its compute ops and sent or
    // received activations: both are reported as the graph's TP and PP ops.
    EXPECT_GT(rank.at("tp_comm_s").get<double>(), 0.0) << rank.dump();
    EXPECT_GT(rank.at("pp_comm_s").get<double>(), 0.0) << rank.dump();
    EXPECT_GE(rank.at("stage").get<int>(), 0);
  }
}

TEST(MpiSplitRun, SequenceParallelismIsRefusedOnEveryRankBeforeAnyStep) {
  TempDir dir;
  json split = split_of(2, "1f1b", 3, "full", stages({{{0, 2}, {0, 1, 2, 3}}}));
  split["sequence_parallel"] = true;
  const std::string plan_file =
      write_plan(dir.path, "sp", "cpu-4rank", split, {{2, 0.5}, {2, 0.5}, {1, 0.5}, {1, 0.5}});
  const Outcome o = mpirun(4, "--scenario " + scenario(4) + " --plan " + plan_file + " --steps 2");
  EXPECT_EQ(o.code, 3) << o.output;
  EXPECT_NE(o.output.find("does not run sequence parallelism (model_split.sequence_parallel)"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("step 0"), std::string::npos) << o.output;
}

TEST(MpiSplitRun, ATensorParallelDegreeAboveTheVocabularyIsRefusedNamingTheNumbers) {
  TempDir dir;
  json sc = json::parse(std::ifstream(scenario(4)));
  json job = json::parse(std::ifstream(kSrc + "/scenarios/jobs/gpt-tiny-cpu.json"));
  job["model"] = {{"name", "gpt-tiny-v3"},
                  {"family", "gpt"},
                  {"layers", 2},
                  {"hidden", 64},
                  {"heads", 4},
                  {"vocab_size", 3},
                  {"max_positions", 64},
                  {"tied_embeddings", true}};
  job["global_batch"] = 8;
  sc["job"] = job;
  const fs::path scen = dir.path / "v3.json";
  std::ofstream(scen) << sc.dump(1);
  const std::string plan_file = write_plan(
      dir.path, "tp4", "cpu-4rank",
      split_of(4, "1f1b", 1, "full", stages({{{0, 2}, {0, 1, 2, 3}}})), {{8}, {8}, {8}, {8}});
  const Outcome o =
      mpirun(4, "--scenario " + scen.string() + " --plan " + plan_file + " --steps 1");
  EXPECT_EQ(o.code, 3) << o.output;
  EXPECT_NE(o.output.find("stage 0: tensor-parallel degree 4 exceeds the vocabulary of 3 ids"),
            std::string::npos)
      << o.output;
}

TEST(MpiSplitRun, EmptyShardsSwappedWithTheirChecksumsAreRefusedNamingTheShard) {
  // A TP 2 x PP 2 checkpoint: the second rank of each TP group writes no unit, so its shard is
  // a header alone, needed by no rank on resume; its header still says whose it is.
  TempDir dir;
  const std::string four = variant(dir.path, 4, 1, 2, 9, true);
  const std::string tp_pp =
      write_plan(dir.path, "tp2pp2", "cpu-4rank",
                 split_of(2, "1f1b", 3, "full", stages({{{0, 1}, {0, 1}}, {{1, 2}, {2, 3}}})),
                 {{3}, {3}, {3}, {3}});
  const fs::path ckpt = dir.path / "ckpt";
  const Outcome w =
      mpirun(4, "--scenario " + four + " --plan " + tp_pp + " --steps 1 --checkpoint-dir " +
                    ckpt.string() + " --checkpoint-every 1");
  ASSERT_EQ(w.code, 0) << w.output;
  const fs::path step = ckpt / "step_00000001";
  const fs::path manifest = step / "manifest.json";
  json m = json::parse(std::ifstream(manifest));
  ASSERT_EQ(m["shards"][1]["bytes"], m["shards"][3]["bytes"]) << m.dump();
  fs::rename(step / "rank_00001.bin", step / "swap.bin");
  fs::rename(step / "rank_00003.bin", step / "rank_00001.bin");
  fs::rename(step / "swap.bin", step / "rank_00003.bin");
  std::swap(m["shards"][1]["xxh64"], m["shards"][3]["xxh64"]);
  std::ofstream(manifest) << m.dump(2);
  // Before: resumed without reading either.
  const Outcome o =
      mpirun(4, "--scenario " + four + " --plan " + tp_pp + " --steps 2 --resume " + ckpt.string());
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("rank_00001.bin: at header.rank: got 3"), std::string::npos) << o.output;
}

// Hostile input, round nine, through the built CLI: every documented spelling of a dtype is
// read as the dtype it names and any other is refused with the list; plan files (compact and
// per rank, split plans edited by hand) are refused at the key that is wrong, before anything
// is expanded; node names tell nodes apart; `run` says what no launch can fix before the
// process count (tests/README.md, "Hostile input, round nine").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"
#include "hostile_cli.hpp"

using nlohmann::json;

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kTwo = kRoot + "/scenarios/cpu-2rank.json";
const std::string kTwoPlan = kRoot + "/scenarios/plans/cpu-2rank-even.json";
const std::string kMix = kRoot + "/scenarios/modern-mix-gpt2.7b.json";
const std::string kMixSplitPlan = kRoot + "/scenarios/plans/modern-mix-gpt2.7b-3d.json";
const std::string kQwen = kRoot + "/scenarios/models/qwen2-0.5b.json";
const std::string kLayer =
    "predict layer --model gpt-2.7b --gpu H100 --seq 1024 --micro-batch 1 --dtype ";
const std::string kMixedCluster = kRoot + "/scenarios/clusters/a100-l4-mixed-10g.json";

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;

class HostileRoundNine : public cephalo::test_support::HostileCliTest {
 protected:
  json read(const std::string& file) { return json::parse(std::ifstream(file)); }
};

}  // namespace

TEST_F(HostileRoundNine, EveryDocumentedDtypeSpellingIsTheDtypeItNames) {
  // A Hugging Face config's checkpoint dtype: "torch.bfloat16" (PyTorch's name, as users and
  // some exporters write it) was "no compute dtype: not used" and the layer was priced in fp16.
  // transformers >= 4.56 writes the key as "dtype": it was ignored as an unknown key.
  const json qwen = read(kQwen);
  struct Row {
    const char* key;
    json value;
    std::string dtype;  // the dtype column `predict layer` prints
  };
  const std::vector<Row> rows = {
      {"torch_dtype", "torch.bfloat16", "bf16"},
      {"torch_dtype", "bfloat16", "bf16"},
      {"torch_dtype", "torch.float16", "fp16"},
      {"torch_dtype", "torch.half", "fp16"},
      {"torch_dtype", "half", "fp16"},
      {"torch_dtype", "torch.float32", "fp32"},
      {"torch_dtype", "torch.float", "fp32"},
      {"torch_dtype", "float32", "fp32"},
      {"dtype", "bfloat16", "bf16"},
      {"dtype", "torch.float32", "fp32"},
  };
  int n = 0;
  for (const auto& row : rows) {
    json config = qwen;
    config.erase("torch_dtype");
    config[row.key] = row.value;
    const std::string file = write("dtype" + std::to_string(n++) + ".json", config);
    const auto o = cephalo::test_support::run_cephalo("predict layer --model " + file +
                                                      " --gpu H100 --seq 1024 --micro-batch 1");
    EXPECT_EQ(o.exit_code, 0) << row.value << "\n" << o.output;
    EXPECT_NE(o.output.find("  " + row.dtype + "  "), std::string::npos)
        << row.key << " " << row.value << "\n"
        << o.output;
  }
  // Real PyTorch dtypes no job computes in are noted, not used; a typo is refused with the
  // accepted list, at the key the file has.
  std::vector<Case> cases;
  const std::string list = "one of fp32 (float32, float, torch.float32, torch.float), fp16";
  const std::vector<std::pair<json, std::string>> refused = {
      {"bfloat61", "got \"bfloat61\""}, {"torch.bf16", "got \"torch.bf16\""},
      {"BF16x", "got \"BF16x\""},       {"", "got \"\""},
      {"tf32", "got \"tf32\""},         {16, "got 16"}};
  for (const auto& [value, says] : refused) {
    json config = qwen;
    config["torch_dtype"] = value;
    const std::string file = write("bad" + std::to_string(n++) + ".json", config);
    cases.push_back({"validate " + file, 1, {"at torch_dtype", says, list}});
    cases.push_back({"predict layer --model " + file + " --gpu H100 --seq 1024 --micro-batch 1",
                     1,
                     {"at torch_dtype", list}});
  }
  for (const std::string storage : {"float8_e4m3fn", "auto", "float64"}) {
    json config = qwen;
    config["torch_dtype"] = storage;
    const std::string file = write("storage-" + storage + ".json", config);
    cases.push_back({"predict layer --model " + file + " --gpu H100 --seq 1024 --micro-batch 1",
                     0,
                     {"  fp16  "}});
  }
  // Both keys, disagreeing: the file names the checkpoint's dtype twice.
  json both = qwen;
  both["dtype"] = "bfloat16";
  both["torch_dtype"] = "float16";
  cases.push_back({"validate " + write("both.json", both),
                   1,
                   {"at torch_dtype", "got \"float16\"", "the same dtype as \"dtype\""}});
  // A job's precision and the flags read the same spellings and list them when refusing.
  json job = read(kRoot + "/scenarios/jobs/gpt-tiny-cpu.json");
  job["precision"]["compute"] = "torch.bfloat16";
  json scenario = read(kTwo);
  scenario["job"] = job;
  cases.push_back({"validate " + write("torch-job.json", scenario), 0, {"ok"}});
  job["precision"]["compute"] = "bfloat61";
  scenario["job"] = job;
  cases.push_back({"validate " + write("typo-job.json", scenario),
                   1,
                   {"at job.precision.compute", "got \"bfloat61\"", "torch.bfloat16"}});
  cases.push_back({kLayer + "torch.bfloat16", 0, {"bf16"}});
  cases.push_back({kLayer + "bf61", 2, {"--dtype", list}});
  cases.push_back({kLayer + "tf32", 2, {"--dtype", "got \"tf32\"", list}});
  expect_cases(cases);
}

TEST_F(HostileRoundNine, TwoNodesOfOneNameAreRefusedAtTheSecond) {
  // Node names label report rows, the idle nodes of a plan and trace processes: two nodes of
  // one name were accepted and every row of either read alike.
  const json cluster = read(kMixedCluster);
  struct Row {
    const char* name;
    json nodes;
    std::string at, says;
  };
  json twin = cluster["nodes"];
  twin[1]["name"] = "mixed-0";
  json unnamed = cluster["nodes"];  // the second entry unnamed: "node1", the first's name
  unnamed[0]["name"] = "node1";
  unnamed[1].erase("name");
  json counted = cluster["nodes"];  // "mixed" x2 makes mixed-0, mixed-1; then "mixed-1"
  counted[0]["name"] = "mixed";
  counted[0]["count"] = 2;
  counted[1]["name"] = "mixed-1";
  const std::vector<Row> rows = {
      {"twin", twin, "at nodes[1].name", "got \"mixed-0\" for node 1"},
      {"unnamed", unnamed, "at nodes[1]:", "got \"node1\" for node 1"},
      {"counted", counted, "at nodes[1].name", "got \"mixed-1\" for node 2"},
  };
  std::vector<Case> cases;
  for (const auto& row : rows) {
    json c = cluster;
    c["nodes"] = row.nodes;
    cases.push_back({"validate " + write(std::string(row.name) + ".json", c),
                     1,
                     {row.at, row.says, "a node name no other node has", "is already named so"}});
  }
  // Distinct names, counted or not, stay accepted.
  json fine = cluster;
  fine["nodes"][0]["name"] = "a";
  fine["nodes"][0]["count"] = 2;
  fine["nodes"][1]["name"] = "b";
  cases.push_back({"validate " + write("fine.json", fine), 0, {"ok (cluster"}});
  expect_cases(cases);
}

TEST_F(HostileRoundNine, APlanFileIsRefusedAtTheKeyThatIsWrongBeforeItIsExpanded) {
  // Compact plans (rank classes) and per-rank plans edited by hand, on the 2-rank CPU scenario
  // (global batch 9): every row is refused at the class, range or key, before a rank is made.
  const json per_rank = read(kTwoPlan);
  json base = per_rank;
  base.erase("ranks");
  const auto cls = [](json ranks, json extra = json::object()) {
    json c = {{"ranks", std::move(ranks)}, {"node", 0},          {"gpu", "cpu"},      {"batch", 4},
              {"micro_batch", 2},          {"micro_batches", 2}, {"state_share", 0.5}};
    c.update(extra);
    return c;
  };
  // A vector, not a json: `json{c}` of one json element is a copy of c under clang and an
  // array under gcc, so `{cls(...)}` must not be read as a json.
  const auto compact = [&](std::vector<json> classes, json extra = json::object()) {
    json p = base;
    p["rank_classes"] = json(std::move(classes));
    p.update(extra);
    return p;
  };
  struct Row {
    const char* name;
    json plan;
    std::vector<std::string> says;
  };
  const std::vector<Row> rows = {
      {"overlap", compact({cls({0, 1}), cls({1, 1})}), {"rank_classes[1].ranks", "overlaps"}},
      {"gap", compact({cls({0, 0}), cls({2, 2})}), {"rank_classes[1].ranks", "in no class"}},
      {"short", compact({cls({0, 0})}), {"rank_classes[0].ranks", "run to rank 1"}},
      {"beyond", compact({cls({0, 0}), cls({1, 2})}), {"rank_classes[1].ranks", "another cluster"}},
      {"past-2^31", compact({cls({0, 2147483653LL})}), {"rank_classes[0].ranks[1]", "2147483653"}},
      {"past-2^63", compact({cls({0, 9223372036854775808ULL})}), {"rank_classes[0].ranks[1]"}},
      {"negative", compact({cls({-1, 1})}), {"rank_classes[0].ranks[0]", "got -1"}},
      {"reversed", compact({cls({1, 0})}), {"rank_classes[0].ranks", "last >= first"}},
      {"fraction", compact({cls({0, 1.5})}), {"rank_classes[0].ranks[1]", "got 1.5"}},
      {"one-number", compact({cls({0})}), {"rank_classes[0].ranks", "[first, last]"}},
      {"out-of-order",
       compact({cls({1, 1}), cls({0, 0}, {{"batch", 5}, {"micro_batch", 3}})}),
       {"rank_classes[0].ranks", "rank 0 is in no class"}},
      {"both-forms",
       compact({cls({0, 1})}, {{"ranks", per_rank["ranks"]}}),
       {"at rank_classes", "beside \"ranks\""}},
      {"no-rows", base, {"at ranks: got nothing (missing)", "\"rank_classes\""}},
      {"even-typo",
       compact({cls({0, 1}, {{"state_share", "evenly"}})}),
       {"state_share", "\"even\""}},
      {"per-node-0",
       compact({cls({0, 1}, {{"node", {{"first", 0}, {"ranks_per_node", 0}}}})}),
       {"node.ranks_per_node", "got 0"}},
      {"per-node-2^40",
       compact({cls({0, 1}, {{"node", {{"first", 0}, {"ranks_per_node", 1099511627776LL}}}})}),
       {"node.ranks_per_node", "got 1099511627776"}},
      {"first-node-5",
       compact({cls({0, 1}, {{"node", {{"first", 5}, {"ranks_per_node", 2}}}})}),
       {"rank_classes[0].node", "got 5 for rank 0"}},
      {"gpu", compact({cls({0, 1}, {{"gpu", "H100"}})}), {"rank_classes[0].gpu", "\"cpu\""}},
      {"rank-key", compact({cls({0, 1}, {{"rank", 0}})}), {"rank_classes[0].rank", "\"ranks\""}},
      {"no-classes", compact({}), {"at rank_classes: got []"}},
      {"batch-2^40",
       compact({cls({0, 1}, {{"batch", 1099511627776LL}})}),
       {"rank_classes[0].batch", "1099511627776"}},
      {"micro-batches-0",
       compact({cls({0, 1}, {{"micro_batches", 0}})}),
       {"rank_classes[0].micro_batches", "got 0"}},
      {"batch-sum", compact({cls({0, 1}, {{"state_share", "even"}})}), {"[*].batch", "9"}},
      {"other-scenario",
       compact({cls({0, 1})}, {{"scenario", "default"}}),
       {"at scenario", "\"cpu-2rank\""}},
  };
  std::vector<Case> cases;
  for (const auto& row : rows) {
    const std::string file = write(std::string(row.name) + ".json", row.plan);
    for (const auto& args : {"simulate --scenario " + kTwo + " --plan " + file,
                             "run --scenario " + kTwo + " --plan " + file + " --steps 1"}) {
      auto says = row.says;
      says.push_back(file);
      cases.push_back({args, 1, says});
    }
  }
  expect_cases(cases);
}

TEST_F(HostileRoundNine, ASplitPlanEditedByHandNamesTheStageAndTheLayers) {
  // The shipped 3-stage split of modern-mix (32 layers, 10 ranks, TP 2): a range of one layer
  // was "layers 12..12 are in no stage".
  const json shipped = read(kMixSplitPlan);
  struct Row {
    const char* name;
    json split;
    std::vector<std::string> says;
  };
  const auto edit = [&](auto f) {
    json p = shipped;
    f(p["model_split"]);
    return p;
  };
  const std::vector<Row> rows = {
      {"gap-of-one",
       edit([](json& s) {
         s["stages"][1]["layers"] = {13, 22};
       }),
       {"stages[1].layers", "layer 12 is in no stage (a gap)"}},
      {"overlap-of-one",
       edit([](json& s) {
         s["stages"][1]["layers"] = {11, 22};
       }),
       {"stages[1].layers", "layer 11 is already in the stage before"}},
      {"short-by-one",
       edit([](json& s) {
         s["stages"][2]["layers"] = {22, 31};
       }),
       {"model_split.stages", "layer 31 is in no stage"}},
      {"gap-of-two",
       edit([](json& s) {
         s["stages"][1]["layers"] = {14, 22};
       }),
       {"layers 12..13 are in no stage"}},
      {"stages-reversed",
       edit([](json& s) { std::swap(s["stages"][0], s["stages"][2]); }),
       {"stages[0].layers", "layers 0..21 are in no stage"}},
      {"past-the-model",
       edit([](json& s) {
         s["stages"][2]["layers"] = {22, 40};
       }),
       {"stages[2].layers", "within the model's 32 layers"}},
      {"tensor-parallel-3",
       edit([](json& s) { s["tensor_parallel"] = 3; }),
       {"stages[0].ranks", "multiple of the tensor-parallel degree 3"}},
      {"micro-batches-0",
       edit([](json& s) { s["micro_batches"] = 0; }),
       {"model_split.micro_batches", "got 0"}},
      {"micro-batches-2",
       edit([](json& s) { s["micro_batches"] = 2; }),
       {"model_split.micro_batches", "as many micro-batches as pipeline stages (3)"}},
      {"interleaved-0",
       edit([](json& s) { s["schedule"] = "interleaved:0"; }),
       {"model_split.schedule", "interleaved:V"}},
      {"rank-twice",
       edit([](json& s) {
         s["stages"][1]["ranks"] = {4, 4};
       }),
       {"stages[1].ranks[1]", "each rank listed once"}},
      {"rank-50",
       edit([](json& s) {
         s["stages"][1]["ranks"] = {4, 50};
       }),
       {"stages[1].ranks[1]", "a rank of the cluster (0..9)"}},
  };
  std::vector<Case> cases;
  for (const auto& row : rows) {
    const std::string file = write(std::string(row.name) + ".json", row.split);
    for (const auto& args : {"validate " + file + " --scenario " + kMix,
                             "simulate --scenario " + kMix + " --plan " + file})
      cases.push_back({args, 1, row.says});
  }
  expect_cases(cases);
}

TEST_F(HostileRoundNine, RunSaysWhatNoLaunchCanFixBeforeTheProcessCount) {
  // Outside mpirun (one process) a 2-rank plan is refused for its process count; a job the
  // backend cannot run, an output that cannot be written or a flag the job cannot take were
  // said only after the user had started the ranks the first refusal asked for.
  json job = read(kRoot + "/scenarios/jobs/gpt-tiny-cpu.json");
  job["implementation"]["defer_embedding_wgrad_compute"] = true;
  json scenario = read(kTwo);
  scenario["job"] = job;
  const std::string deferred = write("deferred.json", scenario);
  const std::string plan = write("plan.json", read(kTwoPlan));
  const std::string run = "run --steps 1 --scenario ";
  expect_cases({
      {run + deferred + " --plan " + plan,
       1,
       {"job.implementation.defer_embedding_wgrad_compute", "false or absent for `cephalo run`"}},
      {run + kTwo + " --plan " + plan + " --loss-scale 1024", 1, {"--loss-scale", "fp32"}},
      {run + kTwo + " --plan " + plan + " --result " + (dir_ / "nowhere" / "r.json").string(),
       5,
       {"--result", "does not exist"}},
      {run + kTwo + " --plan " + plan + " --result " + plan,
       5,
       {"--result", "the same file as the input"}},
      // What only the launch fixes is still said, with the count to start.
      {run + kTwo + " --plan " + plan, 1, {"mpirun -np 2", "(this job has 1)"}},
  });
}

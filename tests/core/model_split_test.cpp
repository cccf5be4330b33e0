// The model split (core/model_split.hpp): the default means today's plan, the JSON form
// round-trips, and every refusal names the file, the field and the numbers.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"

using namespace cephalo;
using Kind = pipeline::PipelineSchedule::Kind;

namespace {

// Two nodes of four GPUs: ranks 0..3 on node 0, 4..7 on node 1.
const std::vector<int> kTwoNodes{0, 0, 0, 0, 1, 1, 1, 1};

SplitContext context(int layers = 24, int heads = 16, const std::vector<int>& nodes = kTwoNodes) {
  SplitContext c;
  c.layers = layers;
  c.heads = heads;
  c.node_of_rank = nodes;
  c.file = "plan.json";
  return c;
}

ModelSplit parse_text(const std::string& text) {
  const Json j = Json::parse(text);
  return parse_model_split(JsonReader(j, "plan.json", "model_split"));
}

PipelineStage stage(int begin, int end, std::vector<int> ranks, int tp = 0) {
  PipelineStage s;
  s.chunks = {LayerRange{begin, end}};
  s.ranks = std::move(ranks);
  s.tensor_parallel = tp;
  return s;
}

// Two stages of 12 layers on the two nodes, TP 2.
ModelSplit two_stages() {
  ModelSplit s;
  s.tensor_parallel = 2;
  s.micro_batches = 4;
  s.stages = {stage(0, 12, {0, 1, 2, 3}), stage(12, 24, {4, 5, 6, 7})};
  return s;
}

// Runs `f`, which must throw ValidationError; its message must contain every fragment.
void expect_refusal(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a refusal containing " << *fragments.begin();
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    for (const auto& frag : fragments)
      EXPECT_NE(what.find(frag), std::string::npos) << "missing \"" << frag << "\" in: " << what;
  }
}

void expect_check_refusal(const ModelSplit& split, const SplitContext& ctx,
                          std::initializer_list<std::string> fragments) {
  expect_refusal([&] { check_model_split(split, ctx); }, fragments);
}

}  // namespace

TEST(ModelSplit, TheDefaultIsTodaysPlanOneStageOfEveryLayerOnEveryRank) {
  const ModelSplit split;
  EXPECT_TRUE(split.is_default());
  EXPECT_EQ(split.tensor_parallel, 1);
  EXPECT_FALSE(split.sequence_parallel);
  EXPECT_EQ(split.sharding, ShardingKind::Full);
  const auto stages = resolved_stages(split, 24, 8);
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].chunks, (std::vector<LayerRange>{{0, 24}}));
  EXPECT_EQ(stages[0].ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_NO_THROW(check_model_split(split, context()));
  // Any cluster, any layer count: nothing to refuse (no pipeline, no tensor parallelism).
  EXPECT_NO_THROW(check_model_split(split, context(7, 3, {0, 1, 2})));
  // An empty object is the default too.
  EXPECT_EQ(parse_text("{}"), split);
  EXPECT_FALSE(two_stages().is_default());
  ModelSplit tp = split;
  tp.tensor_parallel = 2;
  EXPECT_FALSE(tp.is_default());
}

TEST(ModelSplit, JsonRoundTripsEveryField) {
  ModelSplit s;
  s.tensor_parallel = 2;
  s.sequence_parallel = true;
  s.schedule = {Kind::Interleaved, 2};
  s.micro_batches = 8;
  s.sharding = ShardingKind::Optimizer;
  PipelineStage a;
  a.chunks = {{0, 5}, {12, 18}};
  a.ranks = {0, 1, 2, 3};
  PipelineStage b;
  b.chunks = {{5, 12}, {18, 24}};
  b.ranks = {4, 5};
  b.tensor_parallel = 2;  // sequence parallelism: adjacent stages cut the sequence alike
  s.stages = {a, b};
  EXPECT_NO_THROW(check_model_split(s, context(24, 16, {0, 0, 0, 0, 1, 1})));
  const Json j = to_json(s);
  const ModelSplit back = parse_model_split(JsonReader(j, "x.json", "model_split"));
  EXPECT_EQ(back, s);
  EXPECT_EQ(to_json(back), j);
  // Every sharding and schedule spelling survives too.
  for (auto sharding :
       {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None})
    for (auto schedule : {pipeline::PipelineSchedule{Kind::GPipe, 1},
                          pipeline::PipelineSchedule{Kind::OneFOneB, 1}}) {
      ModelSplit t = two_stages();
      t.sharding = sharding;
      t.schedule = schedule;
      const Json tj = to_json(t);
      EXPECT_EQ(parse_model_split(JsonReader(tj, "x.json", "model_split")), t) << tj.dump();
    }
  // The written form of one stage: a half-open range of two integers.
  EXPECT_EQ(to_json(two_stages())["stages"][1]["layers"], Json::array({12, 24}));
}

TEST(ModelSplit, ReadingRefusesBadValuesNamingFilePathAndValue) {
  expect_refusal([] { parse_text(R"({"tensor_paralel": 2})"); },
                 {"plan.json", "model_split.tensor_paralel", "did you mean \"tensor_parallel\""});
  expect_refusal(
      [] { parse_text(R"({"sharding": "zero2"})"); },
      {"plan.json", "model_split.sharding", "\"zero2\"", "full", "hybrid", "optimizer", "none"});
  expect_refusal([] { parse_text(R"({"schedule": "interleaved:1"})"); },
                 {"model_split.schedule", "\"interleaved:1\"", "from 2 to"});
  expect_refusal([] { parse_text(R"({"micro_batches": 0})"); },
                 {"model_split.micro_batches", "from 1 to 65536"});
  expect_refusal([] { parse_text(R"({"tensor_parallel": 1.5})"); },
                 {"model_split.tensor_parallel", "1.5", "integer"});
  expect_refusal([] { parse_text(R"({"stages": [{"layers": [8, 4], "ranks": [0]}]})"); },
                 {"model_split.stages[0].layers", "[8, 4)", "begin < end"});
  expect_refusal([] { parse_text(R"({"stages": [{"layers": [0, 4, 8], "ranks": [0]}]})"); },
                 {"model_split.stages[0].layers", "[0,4,8]", "two integers"});
  expect_refusal([] { parse_text(R"({"stages": [{"layers": [0, 4], "ranks": ["a"]}]})"); },
                 {"model_split.stages[0].ranks[0]", "\"a\"", "integer"});
  expect_refusal([] { parse_text(R"({"stages": [{"layers": [0, 4]}]})"); },
                 {"model_split.stages[0].ranks", "required field \"ranks\""});
  expect_refusal([] { parse_text(R"({"stages": [{"layers": [0, 4], "ranks": [0], "gpu": 1}]})"); },
                 {"model_split.stages[0].gpu", "unknown key"});
  expect_refusal([] { parse_text(R"([1, 2])"); }, {"model_split", "a model_split object"});
}

TEST(ModelSplitCheck, TensorParallelMustDivideTheHeadsAndStayInANode) {
  ModelSplit s;
  s.tensor_parallel = 3;  // 16 heads
  expect_check_refusal(
      s, context(24, 16),
      {"plan.json", "model_split.tensor_parallel", "got 3", "16 attention heads", "16 / 3"});
  SplitContext gqa = context(24, 16);
  gqa.kv_heads = 2;
  s.tensor_parallel = 4;
  expect_check_refusal(s, gqa, {"model_split.tensor_parallel", "got 4", "2 key/value heads"});
  // T = 8 over two nodes of four: every group of 8 spans both.
  s.tensor_parallel = 8;
  expect_check_refusal(s, context(24, 16),
                       {"model_split.tensor_parallel", "[0, 1, 2, 3, 4, 5, 6, 7]",
                        "nodes [0, 0, 0, 0, 1, 1, 1, 1]", "on one node"});
  // A stage listing its ranks so that a pair straddles the nodes.
  ModelSplit t = two_stages();
  t.stages = {stage(0, 12, {0, 1, 2, 4}), stage(12, 24, {3, 5, 6, 7})};
  expect_check_refusal(t, context(),
                       {"model_split.stages[0].ranks", "group 1 [2, 4]", "nodes [0, 1]"});
  // A per-stage degree that does not divide the heads names the stage's key.
  ModelSplit u = two_stages();
  u.stages[1].tensor_parallel = 3;
  // With 24 heads 3 divides them, but not the stage's 4 ranks, which the split's degree 2
  // does: the stage's own key is the first cause, not its rank list.
  expect_check_refusal(u, context(24, 24),
                       {"model_split.stages[1].tensor_parallel", "4 ranks with tensor_parallel 3"});
  expect_check_refusal(u, context(24, 16), {"model_split.stages[1].tensor_parallel", "16 / 3"});
  // The same split with divisible numbers passes.
  EXPECT_NO_THROW(check_model_split(two_stages(), context()));
}

TEST(ModelSplitCheck, AStagesRankCountIsAMultipleOfItsTensorParallelDegree) {
  ModelSplit s = two_stages();
  s.stages = {stage(0, 12, {0, 1, 2}), stage(12, 24, {3, 4, 5, 6, 7})};
  expect_check_refusal(s, context(),
                       {"model_split.stages[0].ranks",
                        "3 ranks with "
                        "tensor_parallel 2",
                        "3 = 1 x 2 + 1"});
  ModelSplit whole;
  whole.tensor_parallel = 4;
  expect_check_refusal(whole, context(24, 16, {0, 0, 0, 0, 1, 1}),
                       {"model_split.tensor_parallel", "6 ranks with tensor_parallel 4"});
}

TEST(ModelSplitCheck, StagesCoverEveryLayerOnceInPipelineOrder) {
  ModelSplit gap = two_stages();
  gap.stages[1].chunks = {{14, 24}};
  expect_check_refusal(gap, context(),
                       {"model_split.stages[1].layers", "[14, 24)", "begin at layer 12",
                        "layers 12..13 are in no stage"});
  ModelSplit overlap = two_stages();
  overlap.stages[1].chunks = {{10, 24}};
  expect_check_refusal(overlap, context(),
                       {"model_split.stages[1].layers", "[10, 24)", "layers 10..11", "overlap"});
  ModelSplit short_of = two_stages();
  short_of.stages[1].chunks = {{12, 20}};
  expect_check_refusal(short_of, context(),
                       {"model_split.stages", "all 24 layers", "layers 20..23 are in no stage"});
  ModelSplit past = two_stages();
  past.stages[1].chunks = {{12, 30}};
  expect_check_refusal(
      past, context(),
      {"model_split.stages[1].layers", "[12, 30)", "within the model's 24 layers"});
  ModelSplit reversed = two_stages();
  std::swap(reversed.stages[0].chunks, reversed.stages[1].chunks);
  expect_check_refusal(reversed, context(),
                       {"model_split.stages[0].layers", "[12, 24)", "begin at layer 0",
                        "layers 0..11 are in no stage"});
  // Uneven layer counts are fine.
  ModelSplit uneven = two_stages();
  uneven.stages[0].chunks = {{0, 17}};
  uneven.stages[1].chunks = {{17, 24}};
  EXPECT_NO_THROW(check_model_split(uneven, context()));
}

TEST(ModelSplitCheck, EveryRankServesExactlyOneStage) {
  ModelSplit empty = two_stages();
  empty.stages = {stage(0, 12, {0, 1, 2, 3, 4, 5, 6, 7}), stage(12, 24, {})};
  expect_check_refusal(empty, context(),
                       {"model_split.stages[1].ranks", "no ranks", "stage 1 (layers [12, 24))"});
  ModelSplit twice = two_stages();
  twice.stages[1].ranks = {4, 5, 3, 7};
  expect_check_refusal(twice, context(),
                       {"model_split.stages[1].ranks[2]", "rank 3", "already serves stage 0"});
  ModelSplit repeated = two_stages();
  repeated.stages[1].ranks = {4, 5, 5, 7};
  expect_check_refusal(repeated, context(),
                       {"model_split.stages[1].ranks[2]", "rank 5", "listed once"});
  ModelSplit outside = two_stages();
  outside.stages[1].ranks = {4, 5, 6, 9};
  expect_check_refusal(outside, context(), {"model_split.stages[1].ranks[3]", "got 9", "(0..7)"});
  ModelSplit idle = two_stages();
  idle.stages[1].ranks = {4, 5};
  expect_check_refusal(idle, context(),
                       {"model_split.stages", "no stage with rank 6", "every rank 0..7"});
}

TEST(ModelSplitCheck, ThePipelineNeedsAtLeastOneMicroBatchPerStage) {
  ModelSplit s = two_stages();
  s.micro_batches = 1;
  expect_check_refusal(
      s, context(),
      {"model_split.micro_batches", "got 1", "as many micro-batches as pipeline stages (2)"});
  s.micro_batches = 2;
  EXPECT_NO_THROW(check_model_split(s, context()));
  // One stage: a single micro-batch is today's plan.
  ModelSplit one;
  EXPECT_NO_THROW(check_model_split(one, context()));
}

TEST(ModelSplitCheck, InterleavingNeedsVChunksPerStageAndWholeGroupsOfMicroBatches) {
  ModelSplit s;
  s.schedule = {Kind::Interleaved, 2};
  s.micro_batches = 4;
  PipelineStage a, b;
  a.chunks = {{0, 6}, {12, 18}};
  a.ranks = {0, 1, 2, 3};
  b.chunks = {{6, 12}, {18, 24}};
  b.ranks = {4, 5, 6, 7};
  s.stages = {a, b};
  EXPECT_NO_THROW(check_model_split(s, context()));
  ModelSplit odd = s;
  odd.micro_batches = 5;
  expect_check_refusal(
      odd, context(),
      {"model_split.micro_batches", "got 5", "multiple of the 2 pipeline stages", "5 = 2 x 2 + 1"});
  ModelSplit one_chunk = s;
  one_chunk.stages[1].chunks = {{6, 24}};
  expect_check_refusal(
      one_chunk, context(),
      {"model_split.stages[1].layers", "1 layer range", "2 layer ranges", "interleaved:2"});
  ModelSplit three = s;
  three.schedule = {Kind::Interleaved, 3};
  three.micro_batches = 4;
  expect_check_refusal(three, context(),
                       {"model_split.stages[0].layers", "2 layer ranges", "3 layer ranges"});
  // Virtual stage order is chunk·p + stage: stage 1's first chunk must follow stage 0's first.
  ModelSplit misordered = s;
  misordered.stages[0].chunks = {{0, 6}, {6, 12}};
  misordered.stages[1].chunks = {{12, 18}, {18, 24}};
  expect_check_refusal(misordered, context(),
                       {"model_split.stages[1].layers[0]", "virtual stage 1 (stage 1, chunk 0)",
                        "begin at layer 6"});
  ModelSplit single;
  single.schedule = {Kind::Interleaved, 2};
  single.micro_batches = 2;
  single.stages = {a};
  single.stages[0].chunks = {{0, 12}, {12, 24}};
  single.stages[0].ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  expect_check_refusal(
      single, context(),
      {"model_split.schedule", "\"interleaved:2\" with 1 stage", "at least 2 pipeline stages"});
  // Several ranges without interleaving are refused too.
  ModelSplit plain = s;
  plain.schedule = {};
  expect_check_refusal(
      plain, context(),
      {"model_split.stages[0].layers", "2 layer ranges", "only an interleaved schedule"});
}

TEST(ModelSplitCheck, SequenceParallelismNeedsTensorParallelism) {
  ModelSplit s;
  s.sequence_parallel = true;
  expect_check_refusal(s, context(), {"model_split.sequence_parallel", "tensor_parallel > 1"});
  s.tensor_parallel = 2;
  EXPECT_NO_THROW(check_model_split(s, context()));
}

TEST(ModelSplitCheck, ARefusalFromJsonNamesTheFileItCameFrom) {
  const ModelSplit s = parse_text(R"({"tensor_parallel": 2, "micro_batches": 4, "stages": [
      {"layers": [0, 12], "ranks": [0, 1, 2, 3]},
      {"layers": [12, 24], "ranks": [4, 5, 6]}]})");
  SplitContext ctx = context();
  ctx.file = "my_plan.json";
  expect_check_refusal(
      s, ctx, {"my_plan.json", "model_split.stages[1].ranks", "3 ranks with tensor_parallel 2"});
}

TEST(ModelSplit, DescribeNamesEachDimension) {
  EXPECT_EQ(describe(ModelSplit{}, 8), "TP 1 x PP 1 x DP 8, full sharding");
  ModelSplit s = two_stages();
  s.sequence_parallel = true;
  s.micro_batches = 8;
  s.sharding = ShardingKind::Optimizer;
  s.stages[1].ranks = {4, 5};
  s.stages[1].tensor_parallel = 1;
  EXPECT_EQ(describe(s, 6),
            "TP 2/1 (sequence parallel) x PP 2 (1F1B, 8 micro-batches) x DP 2, optimizer "
            "sharding");
  s.stages[1].ranks = {4};
  EXPECT_EQ(describe(s, 5).substr(0, 7), "TP 2/1 ");
  EXPECT_NE(describe(s, 5).find("x DP 2/1,"), std::string::npos) << describe(s, 5);
}

TEST(ModelSplitCheck, ThePipelinesStepsStayWithinTheBoundOfAPlansSchedule) {
  // 2 stages x 65536 micro-batches x 1024 virtual stages x 2 passes = 2^28 steps > 2^24.
  ModelSplit s;
  s.schedule = {Kind::Interleaved, 1024};
  s.micro_batches = 65536;
  s.stages = {stage(0, 12, {0, 1, 2, 3}), stage(12, 24, {4, 5, 6, 7})};
  expect_check_refusal(s, context(),
                       {"model_split.micro_batches", "stages 2", "micro_batches 65536",
                        "virtual stages 1024", "= 268435456", "at most 16777216"});
}

TEST(ModelSplit, APlansDefaultSplitIsItsFsdpPlan) {
  // A plan may spell the default split out; it is then the FSDP plan (tests/core/
  // split_plan_test.cpp has plans with real splits).
  const Json plan = Json::parse(R"({"version": 1, "ranks": [{"rank": 0, "node": 0, "gpu": "l4",
      "batch": 2, "micro_batch": 1, "micro_batches": 2, "state_share": 1}],
      "model_split": {"tensor_parallel": 1}})");
  JsonReader reader(plan, "plan.json");
  const Plan p = parse_plan(reader);
  EXPECT_FALSE(p.has_split());
  EXPECT_EQ(p.global_batch(), 2);
}

TEST(ModelSplitCheck, AgainstAScenarioReadsItsModelAndItsNodes) {
  // Nodes of 3 and 5 GPUs (an uneven cluster): ranks 0..2 on node 0, 3..7 on node 1.
  Scenario sc;
  sc.cluster.nodes.edit([](std::vector<Node>& n) {
    n.resize(2);
    n[0].devices.resize(3);
    n[1].devices.resize(5);
  });
  sc.job.model.num_layers = 10;
  sc.job.model.heads = 8;
  sc.job.model.kv_heads = 2;
  sc.job.model.tied_embeddings = false;  // end stages of different sizes (see below for tied)
  ModelSplit s;
  s.tensor_parallel = 2;
  s.micro_batches = 2;
  s.stages = {stage(0, 4, {0, 1}), stage(4, 10, {2, 3, 4, 5, 6, 7})};
  // Stage 1's first pair is ranks 2 (node 0) and 3 (node 1).
  expect_refusal([&] { check_model_split_for(s, sc, "p.json"); },
                 {"p.json", "model_split.stages[1].ranks", "group 0 [2, 3]", "nodes [0, 1]"});
  // One stage per node; the stages must cover the scenario's model's 10 layers.
  s.stages = {stage(0, 4, {0, 1, 2}, 1), stage(4, 10, {3, 4, 5, 6, 7}, 1)};
  EXPECT_NO_THROW(check_model_split_for(s, sc, "p.json"));
  // A tied head's word embedding is all-reduced rank by rank with the first stage's copy.
  sc.job.model.tied_embeddings = true;
  expect_refusal([&] { check_model_split_for(s, sc, "p.json"); },
                 {"model_split.stages[1].ranks", "got 5 ranks", "3 ranks", "ties its head"});
  sc.job.model.tied_embeddings = false;
  s.stages[1].chunks = {{4, 12}};
  expect_refusal([&] { check_model_split_for(s, sc, "p.json"); },
                 {"model_split.stages[1].layers", "[4, 12)", "model's 10 layers"});
  // 4 divides the 8 heads but not the 2 key/value heads.
  s.stages = {stage(0, 4, {0, 1, 2}, 1), stage(4, 10, {3, 4, 5, 6, 7}, 4)};
  expect_refusal([&] { check_model_split_for(s, sc, "p.json"); },
                 {"model_split.stages[1].tensor_parallel", "got 4", "2 key/value heads"});
}

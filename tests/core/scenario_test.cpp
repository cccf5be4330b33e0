#include <gtest/gtest.h>

#include <cmath>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo {
namespace {

const std::filesystem::path kScenarios = std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios";

TEST(Scenario, EveryShippedScenarioLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kScenarios)) {
    if (entry.path().extension() != ".json") continue;
    Scenario s = costmodels::load_scenario(entry.path());
    EXPECT_GT(s.cluster.num_ranks(), 0) << entry.path();
    EXPECT_GT(s.job.global_batch, 0) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 3);
}

TEST(Scenario, DefaultIsThePaperCluster) {
  Scenario s = costmodels::load_scenario(kScenarios / "default.json");
  ASSERT_EQ(s.cluster.num_ranks(), 4);
  auto ranks = s.cluster.ranks();
  EXPECT_EQ(ranks[0].slot->spec.name, "L4");
  EXPECT_EQ(ranks[2].slot->spec.name, "RTX-A6000");
  EXPECT_EQ(ranks[3].slot->spec.name, "P40");
  EXPECT_EQ(s.job.model.hidden, 2560);
  EXPECT_EQ(s.job.sequence_length, 512);
  EXPECT_EQ(s.job.precision.compute, Dtype::FP16);
  // PCIe gen3 x16 computed from generation and lanes.
  EXPECT_NEAR(s.cluster.nodes[0].intra_link.bandwidth, 0.985e9 * 16, 1.0);
}

TEST(Scenario, CountsExpandAcrossNodes) {
  Scenario s = costmodels::load_scenario(kScenarios / "v100-a10g-llama7b.json");
  EXPECT_EQ(s.cluster.num_ranks(), 16);
  auto ranks = s.cluster.ranks();
  EXPECT_EQ(ranks[7].node, 1);
  EXPECT_EQ(ranks[8].slot->spec.name, "A10G");
  EXPECT_EQ(ranks[15].local_index, 3);
}

// A self-contained record reads back to the scenario it was written from, with no catalog
// entry or config file to find; the plain to_json(Job) names the model only, which a config's
// folder name or an inline architecture's name is not in the catalog.
TEST(Scenario, SelfContainedJsonReadsBackToTheSameScenario) {
  const auto& catalog = costmodels::CatalogLookup::builtin();
  auto read_back = [&](const Json& j) {
    JsonReader r(j, "<record>");
    return parse_scenario(r, catalog, "/nonexistent");
  };
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kScenarios)) {
    if (entry.path().extension() != ".json") continue;
    const Scenario s = costmodels::load_scenario(entry.path());
    const Json once = to_self_contained_json(s);
    const Scenario again = read_back(once);
    EXPECT_EQ(to_self_contained_json(again), once) << entry.path();
    EXPECT_EQ(again.job.model_name, s.job.model_name) << entry.path();
    EXPECT_EQ(again.job.model.num_layers, s.job.model.num_layers) << entry.path();
    EXPECT_EQ(again.cluster.num_ranks(), s.cluster.num_ranks()) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 3);

  // A job whose model is a Hugging Face config: its name is the config's folder, no catalog
  // model, and its compute dtype is the config's torch_dtype.
  const auto config = kScenarios / "models" / "meta-llama-3-8b.json";
  Json job = {
      {"model", {{"hf_config", config.string()}}}, {"sequence_length", 1024}, {"global_batch", 8}};
  JsonReader jr(job, "<job>");
  const Job from_config = parse_job(jr, catalog);
  const Json record = to_self_contained_json(from_config);
  JsonReader rr(record, "<record>");
  const Job back = parse_job(rr, catalog);
  EXPECT_EQ(to_self_contained_json(back), record);
  EXPECT_EQ(back.model.kv_heads, from_config.model.kv_heads);
  EXPECT_EQ(back.precision.compute, from_config.precision.compute);
  Json plain = to_json(from_config);
  JsonReader pr(plain, "<plain>");
  EXPECT_THROW(parse_job(pr, catalog), ValidationError);

  // The architecture goes with a name; beside an inline or config model it is refused.
  Json both = record;
  both["model"] = {{"hf_config", config.string()}};
  JsonReader br(both, "<both>");
  try {
    parse_job(br, catalog);
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.json_path(), "model");
    EXPECT_NE(e.expected().find("model_spec"), std::string::npos) << e.what();
  }
}

TEST(Plan, RoundTripsThroughJson) {
  Json j = Json::parse(R"({"version":1,"scenario":"s","accumulation":"standard","offload":"host",
    "prefetch":false,"ranks":[
     {"rank":0,"node":0,"gpu":"l4","batch":13,"micro_batch":13,"micro_batches":1,"state_share":0.25},
     {"rank":1,"node":0,"gpu":"l4","batch":12,"micro_batch":6,"micro_batches":2,"state_share":0.25},
     {"rank":2,"node":0,"gpu":"a6000","batch":34,"micro_batch":34,"micro_batches":1,"state_share":0.25},
     {"rank":3,"node":0,"gpu":"p40","batch":5,"micro_batch":5,"micro_batches":1,"state_share":0.25}]})");
  JsonReader r(j, "plan.json");
  Plan plan = parse_plan(r);
  EXPECT_EQ(plan.accumulation, Accumulation::Standard);
  EXPECT_EQ(plan.offload, Offload::Host);
  EXPECT_FALSE(plan.prefetch);
  EXPECT_EQ(plan.global_batch(), 64);
  EXPECT_TRUE(plan.even_shares());
  Json again = to_json(plan);
  JsonReader r2(again, "again");
  Plan plan2 = parse_plan(r2);
  EXPECT_EQ(to_json(plan2), again);

  Scenario s = costmodels::load_scenario(kScenarios / "default.json");
  // Made for scenario "s", checked against "paper-gpt2.7b": refused although the ranks match.
  EXPECT_THROW(validate_plan_for(plan, s, "plan.json"), ValidationError);
  plan.scenario = s.name;
  EXPECT_NO_THROW(validate_plan_for(plan, s, "plan.json"));
  plan.ranks[3].gpu = "t4";
  try {
    validate_plan_for(plan, s, "plan.json");
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.json_path(), "ranks[3].gpu");
  }
}

// Selective recompute is a plan key value: read, written back, and refused with the file, the
// JSON path, the value and what was expected on a model whose layers have no attention core
// (heads 0 here, built in code: every family the model reader accepts has heads >= 1).
TEST(Plan, SelectiveRecomputeIsAPlanKeyAndNeedsAnAttentionCore) {
  Scenario s = costmodels::load_scenario(kScenarios / "default.json");
  Json j = Json::parse(R"({"version":1,"activation_checkpointing":"selective","ranks":[
     {"rank":0,"node":0,"gpu":"l4","batch":16,"micro_batch":16,"micro_batches":1,"state_share":0.25},
     {"rank":1,"node":0,"gpu":"l4","batch":16,"micro_batch":16,"micro_batches":1,"state_share":0.25},
     {"rank":2,"node":0,"gpu":"a6000","batch":16,"micro_batch":16,"micro_batches":1,"state_share":0.25},
     {"rank":3,"node":0,"gpu":"p40","batch":16,"micro_batch":16,"micro_batches":1,"state_share":0.25}]})");
  JsonReader r(j, "sel.plan.json");
  const Plan plan = parse_plan(r);
  EXPECT_EQ(plan.activation_checkpointing.kind, ActivationCheckpointing::Kind::Selective);
  EXPECT_EQ(to_json(plan)["activation_checkpointing"], "selective");
  EXPECT_EQ(parse_activation_checkpointing("selective", "--activation-checkpointing").kind,
            ActivationCheckpointing::Kind::Selective);
  EXPECT_NO_THROW(validate_plan_for(plan, s, "sel.plan.json"));
  Scenario no_core = s;
  no_core.job.model.heads = 0;
  try {
    validate_plan_for(plan, no_core, "sel.plan.json");
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "sel.plan.json");
    EXPECT_EQ(e.json_path(), "activation_checkpointing");
    EXPECT_EQ(e.value(), "\"selective\"");
    EXPECT_NE(e.expected().find("attention core"), std::string::npos) << e.what();
  }
  // A value the key does not know names every accepted one.
  Json bad = j;
  bad["activation_checkpointing"] = "partial";
  JsonReader rb(bad, "bad.plan.json");
  try {
    parse_plan(rb);
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.json_path(), "activation_checkpointing");
    EXPECT_NE(e.expected().find("\"selective\""), std::string::npos) << e.what();
  }
}

// The vocabulary's one table: every word parses (as a word, a flag and a plan key) to a kind
// that prints as the word; every:K is no word; the lists for messages keep the order.
TEST(Plan, CheckpointingWordsAreOneVocabulary) {
  EXPECT_EQ(checkpointing_words(), (std::vector<std::string>{"full", "none", "selective"}));
  for (const std::string& w : checkpointing_words()) {
    const auto c = parse_checkpointing_word(w);
    ASSERT_TRUE(c) << w;
    EXPECT_EQ(to_string(*c), w);
    EXPECT_EQ(parse_activation_checkpointing(w, "--activation-checkpointing"), *c);
  }
  EXPECT_FALSE(parse_checkpointing_word("every:2"));
  EXPECT_FALSE(parse_checkpointing_word("Full"));
  EXPECT_FALSE(parse_checkpointing_word(""));
  EXPECT_EQ(checkpointing_words_text(" or "), "full, none or selective");
  EXPECT_EQ(checkpointing_words_text(", ", true), "\"full\", \"none\", \"selective\"");
}

TEST(Plan, LastMicroBatchMayBeSmaller) {
  PlanRank r;
  r.batch = 7;
  r.micro_batch = 3;
  r.micro_batches = 3;
  EXPECT_EQ(r.micro_batch_sizes(), (std::vector<int>{3, 3, 1}));
}

TEST(Plan, BatchMustMatchScenario) {
  Scenario s = costmodels::load_scenario(kScenarios / "default.json");
  Plan plan;
  for (int i = 0; i < 4; ++i) {
    auto ranks = s.cluster.ranks();
    plan.ranks.push_back({i, 0, ranks[i].slot->type, 10, 10, 1, 0.25});
  }
  try {
    validate_plan_for(plan, s, "p.json");
    FAIL();
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("global batch 64"), std::string::npos) << e.what();
  }
}

TEST(Errors, ClosestNamesSuggestsNearMisses) {
  auto close = closest_names("a6001", {"a6000", "l4", "p40", "h100"});
  ASSERT_FALSE(close.empty());
  EXPECT_EQ(close.front(), "a6000");
}

}  // namespace
}  // namespace cephalo

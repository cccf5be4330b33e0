// The framework's layout in the planner: DDP keeps a full replica of the training state on every
// rank (schedule::replicates_state), so its plan shards in groups of one rank, every share 1;
// a plan or an option that shards it otherwise is refused at the key that says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cephalo/core/error.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "scenario_fixture.hpp"

namespace cephalo::planner {
namespace {

Scenario two_node_scenario(Framework framework) {
  Scenario s = test_support::inline_scenario("ddp", "ddp", test_support::two_a100_nodes(),
                                             "gpt-1.3b", 1024, 16, "<framework test>");
  s.job.implementation.framework = framework;
  return s;
}

TEST(FrameworkPlan, DdpPlansOneReplicaPerRank) {
  const Scenario s = two_node_scenario(Framework::DDP);
  for (const char* strategy : {"optimal", "even"}) {
    SCOPED_TRACE(strategy);
    PlannerOptions opt;
    opt.strategy = strategy;
    const PlanResult res = make_plan(s, opt);
    ASSERT_TRUE(res.plan.sharding.hybrid());
    ASSERT_EQ(res.plan.sharding.groups.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(res.plan.sharding.groups[static_cast<std::size_t>(r)], std::vector<int>{r});
      EXPECT_EQ(res.plan.ranks[static_cast<std::size_t>(r)].state_share, 1.0);
    }
    EXPECT_NE(res.note.find("replicas: 1 device per group"), std::string::npos) << res.note;
    EXPECT_NO_THROW(traces::check_plan_for(res.plan, s, "plan.json"));
  }
}

TEST(FrameworkPlan, DdpRefusesShardedPlansAndShardingOptions) {
  const Scenario ddp = two_node_scenario(Framework::DDP);
  PlannerOptions opt;
  opt.strategy = "even";
  const Plan sharded = make_plan(two_node_scenario(Framework::FSDP2), opt).plan;
  ASSERT_FALSE(sharded.sharding.hybrid());
  try {
    traces::check_plan_for(sharded, ddp, "plan.json");
    FAIL() << "a fully sharded plan was accepted for ddp";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("plan.json"), std::string::npos) << what;
    EXPECT_NE(what.find("at sharding"), std::string::npos) << what;
    EXPECT_NE(what.find("one group per rank for framework ddp"), std::string::npos) << what;
  }
  for (const char* mode : {"full", "hybrid"}) {
    PlannerOptions bad = opt;
    bad.sharding = mode;
    EXPECT_THROW(make_plan(ddp, bad), ValidationError) << mode;
  }
}

// A split plan's data-parallel sharding is its model_split's: under DDP (Megatron's local DDP
// too) every stage keeps its whole training state on each replica, so the search plans none
// sharding, and a split with any other sharding is refused at the key that holds it (the FSDP
// plans' sharding key, which a split plan does not use, is not what decides).
TEST(FrameworkPlan, DdpSplitPlansReplicateEachStage) {
  const Scenario ddp = two_node_scenario(Framework::DDP);
  PlanRequest request;
  request.parallelism = "3d";
  request.tensor_parallel = 2;
  const PlanResult answer = answer_plan(ddp, request);
  ASSERT_EQ(answer.family(), PlanFamily::Split);
  const Plan& plan = answer.plan;
  ASSERT_TRUE(plan.has_split());
  EXPECT_EQ(plan.model_split.sharding, ShardingKind::None);
  EXPECT_GT(answer.simulated_iteration_s.value_or(0.0), 0.0);
  EXPECT_NO_THROW(traces::check_plan_for(plan, ddp, "plan.json"));
  // A split answer reads as an FSDP one does: its prediction is its replay, its model time the
  // search's estimate, its log the finalists' replays, and its record says the same.
  ASSERT_TRUE(answer.split);
  EXPECT_EQ(answer.predicted_iteration_s, *answer.simulated_iteration_s);
  EXPECT_EQ(answer.model_iteration_s, answer.split->search.estimate.iteration_s);
  EXPECT_EQ(plan_explanation(answer).rfind("replayed the estimate's best", 0), 0u)
      << plan_explanation(answer);
  const Json record = plan_record(answer);
  EXPECT_EQ(record["predicted"]["simulated_iteration_s"].get<double>(),
            answer.predicted_iteration_s);
  EXPECT_EQ(record["predicted"]["predicted_samples_per_s"].get<double>(),
            answer.rate.samples_per_s);

  // The refusal's text, or "accepted" when nothing was refused.
  const auto refusal = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const ValidationError& e) {
      return e.what();
    }
    return "accepted";
  };
  PlanRequest optimizer = request;
  optimizer.sharding = "optimizer";
  const std::string asked = refusal([&] { answer_plan(ddp, optimizer); });
  EXPECT_NE(asked.find("sharding: got optimizer"), std::string::npos) << asked;
  EXPECT_NE(asked.find("none for framework ddp"), std::string::npos) << asked;
  Plan sharded = plan;
  sharded.model_split.sharding = ShardingKind::Optimizer;
  const std::string written = refusal([&] { traces::check_plan_for(sharded, ddp, "plan.json"); });
  EXPECT_NE(written.find("plan.json: at model_split.sharding: got optimizer"), std::string::npos)
      << written;
  // Under a framework that shards, the same split plan stands.
  EXPECT_NO_THROW(traces::check_plan_for(sharded, two_node_scenario(Framework::FSDP2), "p.json"));
}

// A sweep spec without "sharding" plans a DDP job's mixes as replicas (its default, full
// sharding, would be refused), and one that asks for full sharding is refused at its key.
TEST(FrameworkPlan, SweepOfADdpJobPlansReplicas) {
  const auto dir = std::filesystem::temp_directory_path() / "cephalo-framework-sweep";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "job.json") << R"({"name": "ddp", "model": "gpt-1.3b",
    "sequence_length": 512, "global_batch": 8,
    "precision": {"params": "fp32", "compute": "fp16", "reduce": "fp32"},
    "implementation": {"framework": "ddp"}})";
  auto spec_text = [](const std::string& extra) {
    return R"({"name": "s", "pool": [{"gpu": "a100-80gb", "max_count": 2}],
      "node": {"gpus_per_node": 2, "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s",
      "latency": "10us"}}, "job": "job.json", "strategy": "even")" +
           extra + "}";
  };
  std::ofstream(dir / "spec.json") << spec_text("");
  std::ofstream(dir / "full.json") << spec_text(R"(, "sharding": "full")");
  const SweepSpec spec = load_sweep_spec(dir / "spec.json");
  const SweepRow two = evaluate_mix(spec, {2});
  ASSERT_TRUE(two.feasible) << two.error;
  try {
    evaluate_mix(load_sweep_spec(dir / "full.json"), {2});
    FAIL() << "a sweep spec asking a ddp job for full sharding was accepted";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("full.json: at sharding: got full"), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

// The runtimes' buffer copies are one decision of the comm model (costmodels/README.md, "Each
// runtime's buffer copies"), read by the planner's fast model and by the simulator alike: for
// the same plan, a job that names FSDP2 or FSDP1 (whose gathers are scheduled as the
// default's) costs more in both than one that names no framework, which costs exactly what it
// did.
TEST(FrameworkPlan, PlannerAndSimulatorPriceTheNamedFrameworksCopies) {
  PlannerOptions opt;
  opt.strategy = "even";
  const Scenario plain = two_node_scenario(Framework::FSDP2);
  ASSERT_FALSE(plain.job.implementation.framework_declared);
  const PlanResult base = make_plan(plain, opt);
  ASSERT_TRUE(base.simulated_iteration_s);
  for (Framework f : {Framework::FSDP2, Framework::FSDP1}) {
    SCOPED_TRACE(to_string(f));
    Scenario named = two_node_scenario(f);
    named.job.implementation.framework_declared = true;
    const PlanResult res = make_plan(named, opt);
    ASSERT_TRUE(res.simulated_iteration_s);
    EXPECT_EQ(res.plan.ranks.size(), base.plan.ranks.size());
    EXPECT_GT(res.predicted_comm_s, base.predicted_comm_s);
    EXPECT_GT(*res.simulated_iteration_s, *base.simulated_iteration_s);
  }
  // Not named: exactly the default.
  Scenario unnamed = two_node_scenario(Framework::FSDP2);
  const PlanResult again = make_plan(unnamed, opt);
  EXPECT_EQ(again.predicted_comm_s, base.predicted_comm_s);
  EXPECT_EQ(*again.simulated_iteration_s, *base.simulated_iteration_s);
}

}  // namespace
}  // namespace cephalo::planner

// A stage's replicas priced by runs of alike ones (ReplicaLayout::run_end, Replicas::segments)
// against the same estimator pricing them one at a time (price_replica_by_replica): on random
// small clusters mixing GPU types, NIC speeds and node sizes, every split, sharding, replica
// deal and checkpointing gives the same estimate to the last bit, the same allocation, and the
// same refusal or error.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "split_estimator_impl.hpp"
#include "split_fixture.hpp"

namespace cephalo {
namespace {

using planner::ReplicaBatches;
using planner::SplitOptions;

// The estimate's every number, the allocation included (to_json leaves it out), or the error.
std::string priced(planner::SplitEstimator& estimator, const ModelSplit& split,
                   const SplitOptions& options) {
  try {
    const auto e = estimator.estimate(split, options);
    Json j = to_json(e);
    j["allocation"] = {{"micro_batch", e.allocation.micro_batch},
                       {"sub_steps", e.allocation.sub_steps},
                       {"state_share", e.allocation.state_share}};
    j["lower_bound_s"] = e.lower_bound_s;
    j["complete"] = e.complete;
    return j.dump();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

PipelineStage stage(int begin, int end, std::vector<int> ranks) {
  PipelineStage s;
  s.chunks = {LayerRange{begin, end}};
  s.ranks = std::move(ranks);
  return s;
}

TEST(SplitRuns, ReplicasByRunsPriceAsReplicaByReplica) {
  const std::vector<std::string> gpus = {"A100-80GB", "V100-SXM2-32GB", "A100-40GB"};
  std::mt19937 rng(20261207);
  int compared = 0, fitting = 0, uneven = 0, errors = 0;
  for (int trial = 0; trial < 12; ++trial) {
    // 2-6 nodes in runs of alike ones (a run of 1-3 nodes of one type, count and NIC).
    std::vector<test_support::SplitNode> nodes;
    const int node_count = 2 + static_cast<int>(rng() % 5);
    while (static_cast<int>(nodes.size()) < node_count) {
      test_support::SplitNode n;
      n.gpu = gpus[rng() % gpus.size()];
      n.count = rng() % 3 == 0 ? 2 : 4;
      n.nics = 1 + static_cast<int>(rng() % 4);
      if (rng() % 4 == 0) n.nic_bandwidth = "100Gbit/s";
      for (int k = 1 + static_cast<int>(rng() % 3);
           k > 0 && static_cast<int>(nodes.size()) < node_count; --k)
        nodes.push_back(n);
    }
    const bool mixed = trial % 4 == 3;  // a V100 in every node beside its own GPUs
    const Scenario s = test_support::split_scenario(nodes, 4, 48, 1024, 16, 1024,
                                                    mixed ? "V100-SXM2-32GB" : "", mixed ? 1 : 0);
    const auto models = costmodels::make_cost_models(s);
    planner::SplitEstimator by_runs(s, models);
    planner::SplitEstimator one_by_one(s, models);
    planner::split_detail::price_replica_by_replica(one_by_one);
    const auto& ranks = s.cluster.ranks();
    const int world = s.cluster.num_ranks();
    std::vector<int> all(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
    // Two stages cut at the node boundary nearest the middle.
    int cut = 0;
    for (int r = 1; r < world; ++r)
      if (ranks[static_cast<std::size_t>(r)].node != ranks[static_cast<std::size_t>(r - 1)].node &&
          std::abs(2 * r - world) < std::abs(2 * cut - world))
        cut = r;
    std::vector<ModelSplit> splits;
    for (ShardingKind sharding :
         {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::None, ShardingKind::Optimizer})
      for (int m : {1, 2, 4}) {
        ModelSplit one;
        one.micro_batches = m;
        one.sharding = sharding;
        one.stages = {stage(0, 4, all)};
        splits.push_back(one);
        if (!mixed) {  // T = 2 needs TP groups of one type
          ModelSplit tp = one;
          tp.tensor_parallel = 2;
          tp.sequence_parallel = m == 2;
          splits.push_back(tp);
        }
        if (cut > 0 && m > 1) {
          ModelSplit two = one;
          two.stages = {stage(0, 2, std::vector<int>(all.begin(), all.begin() + cut)),
                        stage(2, 4, std::vector<int>(all.begin() + cut, all.end()))};
          splits.push_back(two);
        }
      }
    for (int round = 0; round < 2; ++round)  // the second round finds every layout remembered
      for (const ModelSplit& split : splits)
        for (ReplicaBatches mode : {ReplicaBatches::Even, ReplicaBatches::BySpeed})
          for (auto ck :
               {ActivationCheckpointing::Kind::None, ActivationCheckpointing::Kind::Full}) {
            SplitOptions o;
            o.replica_batches = mode;
            o.activation_checkpointing.kind = ck;
            const std::string a = priced(by_runs, split, o);
            const std::string b = priced(one_by_one, split, o);
            ASSERT_EQ(a, b) << "trial " << trial << ": " << describe(split, world);
            ++compared;
            if (a.rfind("error: ", 0) == 0) {
              ++errors;
              continue;
            }
            const Json j = Json::parse(a);
            fitting += j["fits"].get<bool>() ? 1 : 0;
            for (const auto& st : j["stages"]) {
              const auto& b2 = st["replica_micro_batches"];
              for (std::size_t i = 1; i < b2.size(); ++i)
                if (b2[i] != b2[0]) {
                  ++uneven;
                  break;
                }
            }
          }
  }
  // The comparison covered splits that fit, deals of unequal samples, and errors.
  EXPECT_GT(compared, 500);
  EXPECT_GT(fitting, 100);
  EXPECT_GT(uneven, 20);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace cephalo

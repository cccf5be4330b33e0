// The estimate that ranks the 3D search's candidates against the simulator's replay of the plan
// each candidate is written as (planner/README.md, "3D plans: the estimate against the
// replay"): a property test over small mixed clusters, and the ranking test on small exhaustive
// cases (the estimate's pick replayed against the best replay of every candidate).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "cephalo/planner/split_search.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "split_fixture.hpp"

namespace cephalo {
namespace {

using K = pipeline::PipelineSchedule::Kind;
using CK = ActivationCheckpointing::Kind;

using test_support::plan_of;

struct Case {
  Scenario scenario;
  ModelSplit split;
  planner::SplitOptions options;
  std::string what;
};

// One random candidate on a random small mixed cluster, or nothing when the draw is not a
// valid split (the estimate's checks refuse it).
std::optional<Case> draw(std::mt19937& rng) {
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::pair<int, int>> nodes(static_cast<std::size_t>(pick(1, 2)));
  for (auto& n : nodes) {
    n = {pick(0, 2), pick(0, 2)};
    if (n.first + n.second == 0) n.first = 1;
  }
  const int gbit = std::vector<int>{10, 25, 50, 100}[static_cast<std::size_t>(pick(0, 3))];
  const int layers = 8, batch = std::vector<int>{12, 16, 24}[static_cast<std::size_t>(pick(0, 2))];
  Case c{test_support::mixed_cluster(nodes, gbit, layers, batch, pick(0, 1) == 1), {}, {}, {}};
  const int world = c.scenario.cluster.num_ranks();
  const int p = std::min(world, pick(1, 3));
  // Stages: p contiguous runs of ranks.
  std::vector<int> sizes(static_cast<std::size_t>(p), 1);
  for (int left = world - p; left > 0; --left) ++sizes[static_cast<std::size_t>(pick(0, p - 1))];
  std::vector<std::vector<int>> ranks;
  std::vector<int> tp;
  int next = 0;
  for (int sz : sizes) {
    ranks.emplace_back();
    for (int i = 0; i < sz; ++i) ranks.back().push_back(next++);
    tp.push_back(sz % 2 == 0 && pick(0, 2) == 0 ? 2 : 1);
  }
  const int V = p >= 2 && pick(0, 2) == 0 ? 2 : 1;
  std::vector<int> counts(static_cast<std::size_t>(p), V);
  for (int left = layers - p * V; left >= V; left -= V)
    counts[static_cast<std::size_t>(pick(0, p - 1))] += V;
  int placed = 0;
  for (int x : counts) placed += x;
  counts.back() += layers - placed;
  if (counts.back() % V != 0) return std::nullopt;
  test_support::place_stages(c.split, ranks, tp, counts, V);
  c.split.schedule = V > 1 ? pipeline::PipelineSchedule{K::Interleaved, V}
                           : pipeline::PipelineSchedule{pick(0, 1) ? K::GPipe : K::OneFOneB, 1};
  std::vector<int> ms;
  for (int m = p; m <= batch; ++m)
    if (batch % m == 0 && (V == 1 || m % p == 0)) ms.push_back(m);
  if (ms.empty()) return std::nullopt;
  c.split.micro_batches = ms[static_cast<std::size_t>(pick(0, static_cast<int>(ms.size()) - 1))];
  c.split.sharding =
      std::vector<ShardingKind>{ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer,
                                ShardingKind::None}[static_cast<std::size_t>(pick(0, 3))];
  c.split.sequence_parallel =
      std::any_of(tp.begin(), tp.end(), [](int t) { return t > 1; }) && pick(0, 1) == 1;
  c.split.tensor_parallel = tp.front();
  const std::vector<ActivationCheckpointing> cks = {
      {CK::None}, {CK::Full}, {CK::Selective}, {CK::Every, 2}};
  c.options.activation_checkpointing = cks[static_cast<std::size_t>(pick(0, 3))];
  c.options.replica_batches =
      pick(0, 2) == 0 ? planner::ReplicaBatches::Even : planner::ReplicaBatches::BySpeed;
  c.what =
      describe(c.split, world) + ", " + std::to_string(gbit) + " Gbit/s, " +
      std::to_string(nodes.size()) + " node(s) " + to_string(c.options.activation_checkpointing) +
      (c.options.replica_batches == planner::ReplicaBatches::BySpeed ? ", by speed" : ", even");
  return c;
}

// draw, or nothing when the draw's scenario is refused as built.
std::optional<Case> draw_valid(std::mt19937& rng) {
  try {
    return draw(rng);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// A stage whose data-parallel replicas span nodes: its gathers and reductions cross the NICs,
// where they meet other stages' collectives and the transfers (reported apart).
bool a_stage_spans_nodes(const ModelSplit& split, const Scenario& scenario) {
  const auto& ranks = scenario.cluster.ranks();
  for (const auto& st : split.stages)
    for (int r : st.ranks)
      if (ranks[static_cast<std::size_t>(r)].node !=
          ranks[static_cast<std::size_t>(st.ranks.front())].node)
        return true;
  return false;
}

// The spread of the property tests whose stages' DP reductions run under their last backward:
// priced one at a time by the estimate, sharing links in the replay. Sorts `errors` by size.
void expect_exposed_spread(std::vector<double>& errors, double worst_within,
                           const std::string& worst_within_case, const std::string& what) {
  std::sort(errors.begin(), errors.end(),
            [](double a, double b) { return std::abs(a) < std::abs(b); });
  EXPECT_LE(std::abs(errors[errors.size() / 2]), 0.005);
  EXPECT_LE(std::abs(errors[errors.size() * 9 / 10]), 0.035);
  EXPECT_LE(worst_within, 0.06) << worst_within_case;
  std::cout << what << "; median |estimate / replay − 1| "
            << 100 * std::abs(errors[errors.size() / 2]) << " %, 90th "
            << 100 * std::abs(errors[errors.size() * 9 / 10]) << " %, worst without stages "
            << "across nodes " << 100 * worst_within << " % (" << worst_within_case << ")\n";
}

// Estimate = replay: on random heterogeneous splits the estimate of a candidate and the
// simulator's replay of the plan it is written as agree. Reports the worst.
TEST(SplitAgreement, TheEstimateIsTheReplayOnSmallMixedClusters) {
  std::mt19937 rng(20261206);
  int compared = 0;
  double worst = 0, sum = 0, worst_within = 0;
  std::string worst_case, worst_within_case;
  std::vector<double> errors;
  for (int tries = 0; tries < 3000 && compared < 150; ++tries) {
    const std::optional<Case> c = draw_valid(rng);
    if (!c) continue;
    const auto models = costmodels::make_cost_models(c->scenario);
    planner::SplitEstimate e;
    try {
      e = planner::estimate_split(c->scenario, c->split, c->options, models);
    } catch (const Error&) {
      continue;  // not a split this cluster takes (T across types, batch not divisible, ...)
    }
    if (!e.fits) continue;
    const Plan plan = plan_of(c->scenario, c->split, e, c->options.activation_checkpointing);
    const auto replay = sim::simulate_plan(plan, c->scenario, *models.compute, *models.comm);
    const double err = e.iteration_s / replay.report.iteration_time_s - 1.0;
    if (!a_stage_spans_nodes(c->split, c->scenario) && std::abs(err) > worst_within) {
      worst_within = std::abs(err);
      worst_within_case = c->what;
    }
    errors.push_back(err);
    if (std::abs(err) > 0.02 && std::getenv("CEPHALO_AGREEMENT_LOG")) {
      std::cout << 100 * err << " %: " << c->what << "\n";
      if (std::getenv("CEPHALO_AGREEMENT_LOG")[0] == '2') {
        for (const auto& st : e.stages)
          std::cout << "  est stage " << st.stage << " " << st.gpu << " fwd " << st.forward_compute
                    << " bwd " << st.backward_compute << " tp " << st.tp_comm_forward << "+"
                    << st.tp_comm_backward << " end " << st.last_backward_end << " dp "
                    << st.dp_exposed << " opt " << st.optimizer_step << " bubble " << st.bubble
                    << "\n";
        std::cout << "  est p2p " << e.p2p_s << " makespan " << e.makespan_s << "\n";
        for (const auto& r : replay.report.ranks)
          std::cout << "  sim rank " << r.rank << " compute " << r.compute_s << " comm " << r.comm_s
                    << " exposed " << r.exposed_comm_s << " (tp " << r.exposed_tp_s << " pp "
                    << r.exposed_pp_s << " dp " << r.exposed_dp_s << ") idle " << r.idle_s
                    << " bubble " << r.bubble_s << "\n";
      }
    }
    sum += std::abs(err);
    if (std::abs(err) > worst) {
      worst = std::abs(err);
      worst_case = c->what + ": estimate " + std::to_string(e.iteration_s) + " s, replay " +
                   std::to_string(replay.report.iteration_time_s) + " s";
    }
    ++compared;
  }
  std::sort(errors.begin(), errors.end(),
            [](double a, double b) { return std::abs(a) < std::abs(b); });
  EXPECT_GE(compared, 100);
  // Measured 2026-12-07: median 0.00001 %, 90th percentile 0.40 % (1.7 % before the tied
  // embedding's all-reduce waited for both ends and a one-stage FSDP split's gathers hid under
  // its phases' m micro-batches), worst 8.8 % (2.4 % where no stage's replicas span nodes).
  // What is left across nodes is the NICs the replay shares between one stage's collectives,
  // the other stages' and the transfers, which the estimate prices apart.
  // planner/README.md, "3D plans: the estimate against the replay".
  EXPECT_LE(std::abs(errors[errors.size() / 2]), 0.001);
  EXPECT_LE(std::abs(errors[errors.size() * 9 / 10]), 0.005);
  EXPECT_LE(worst_within, 0.025) << worst_within_case;
  EXPECT_LE(worst, 0.10) << worst_case;
  std::cout << compared << " splits; mean |estimate / replay − 1| " << 100 * sum / compared
            << " %, median " << 100 * std::abs(errors[errors.size() / 2]) << " %, 90th "
            << 100 * std::abs(errors[errors.size() * 9 / 10]) << " %, worst " << 100 * worst
            << " % (" << worst_case << "); without sharded stages across nodes "
            << 100 * worst_within << " % (" << worst_within_case << ")\n";
}

// A rank's emulated slowdown (scenarios/cpu-2rank-emulated.json: rank 1 holds its compute
// stream twice as long) is a device class of its own, in the estimate as in the simulator:
// every compute step of a replica on it, the optimizer step included, costs slowdown times the
// device's, so the estimate of each split stays its replay, and dealing samples by speed gives
// the slowed rank fewer.
TEST(SplitAgreement, TheEstimateRunsAnEmulatedSlowdownAsTheReplayDoes) {
  const std::string dir = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/";
  const Scenario slowed = costmodels::load_scenario(dir + "cpu-2rank-emulated.json");
  const Scenario plain = costmodels::load_scenario(dir + "cpu-2rank.json");
  const auto models = costmodels::make_cost_models(slowed);
  const auto plain_models = costmodels::make_cost_models(plain);
  int compared = 0;
  for (const std::vector<std::vector<int>>& ranks :
       std::vector<std::vector<std::vector<int>>>{{{0}, {1}}, {{1}, {0}}, {{0, 1}}})
    for (const auto replicas : {planner::ReplicaBatches::Even, planner::ReplicaBatches::BySpeed}) {
      const int p = static_cast<int>(ranks.size());
      if (p == 2 && replicas == planner::ReplicaBatches::BySpeed) continue;
      if (p == 1 && replicas == planner::ReplicaBatches::Even) continue;  // 9 samples, 2 ranks
      ModelSplit split;
      test_support::place_stages(split, ranks, std::vector<int>(ranks.size(), 1),
                                 p == 2 ? std::vector<int>{1, 1} : std::vector<int>{2}, 1);
      split.micro_batches = p == 2 ? 3 : 1;
      split.schedule = {K::OneFOneB, 1};
      split.sharding = ShardingKind::Full;
      planner::SplitOptions options;
      options.replica_batches = replicas;
      const auto e = planner::estimate_split(slowed, split, options, models);
      ASSERT_TRUE(e.fits) << e.refusal;
      const Plan plan = plan_of(slowed, split, e, options.activation_checkpointing);
      const auto replay = sim::simulate_plan(plan, slowed, *models.compute, *models.comm);
      EXPECT_NEAR(e.iteration_s / replay.report.iteration_time_s, 1.0, 0.01) << e.split;
      // Priced slower than the same split on two real ranks (stage 0 holds the embedding,
      // the other the head: the slowed rank's stage is the bottleneck either way).
      const auto fast = planner::estimate_split(plain, split, options, plain_models);
      if (p == 2) {
        EXPECT_GT(e.iteration_s, 1.2 * fast.iteration_s) << e.split;
      } else {
        ASSERT_EQ(e.allocation.micro_batch.size(), 2u);
        EXPECT_GT(e.allocation.micro_batch[0], e.allocation.micro_batch[1]);
      }
      ++compared;
    }
  EXPECT_EQ(compared, 3);
}

// The same with the job's TP communication overlap (Transformer Engine's userbuffers,
// costmodels::tp_overlap_exposed_seconds, priced by the estimate's TP term and by the replay's
// TP op alike): on the drawn splits with sequence parallelism the estimate still agrees with
// the replay, the overlap never makes a split slower, and it hides TP time on some.
TEST(SplitAgreement, TheEstimateIsTheReplayWithTpCommOverlap) {
  std::mt19937 rng(20261207);
  int compared = 0, hidden = 0, tp_only = 0;
  std::vector<double> errors;
  double worst_within = 0;
  std::string worst_within_case;
  for (int tries = 0; tries < 3000 && compared < 40; ++tries) {
    const std::optional<Case> c = draw_valid(rng);
    if (!c || !c->split.sequence_parallel) continue;
    const auto exposed_models = costmodels::make_cost_models(c->scenario);
    planner::SplitEstimate exposed, e;
    Scenario overlapped = c->scenario;
    overlapped.job.implementation.tp_comm_overlap = true;
    const auto models = costmodels::make_cost_models(overlapped);
    try {
      exposed = planner::estimate_split(c->scenario, c->split, c->options, exposed_models);
      e = planner::estimate_split(overlapped, c->split, c->options, models);
    } catch (const Error&) {
      continue;
    }
    if (!e.fits) continue;
    double tp = 0, tp_exposed = 0;
    for (const auto& st : e.stages) tp += st.tp_comm_forward + st.tp_comm_backward;
    for (const auto& st : exposed.stages) tp_exposed += st.tp_comm_forward + st.tp_comm_backward;
    EXPECT_LE(tp, tp_exposed * (1 + 1e-12)) << c->what;
    EXPECT_LE(e.iteration_s, exposed.iteration_s * (1 + 1e-9)) << c->what;
    if (tp < 0.99 * tp_exposed) ++hidden;
    const Plan plan = plan_of(overlapped, c->split, e, c->options.activation_checkpointing);
    const auto replay = sim::simulate_plan(plan, overlapped, *models.compute, *models.comm);
    const double err = e.iteration_s / replay.report.iteration_time_s - 1.0;
    if (!a_stage_spans_nodes(c->split, overlapped) && std::abs(err) > worst_within) {
      worst_within = std::abs(err);
      worst_within_case = c->what;
    }
    // One stage of one TP group: the TP ops are its only communication, so the two prices of
    // the overlap meet with nothing else in between.
    if (c->split.stages.size() == 1 && c->split.stages.front().ranks.size() ==
                                           static_cast<std::size_t>(c->split.tensor_parallel)) {
      EXPECT_LE(std::abs(err), 0.001) << c->what;
      ++tp_only;
    }
    errors.push_back(err);
    ++compared;
    if (std::getenv("CEPHALO_AGREEMENT_LOG")) {
      const Plan p0 = plan_of(c->scenario, c->split, exposed, c->options.activation_checkpointing);
      const auto r0 =
          sim::simulate_plan(p0, c->scenario, *exposed_models.compute, *exposed_models.comm);
      std::cout << 100 * err
                << " % (exposed: " << 100 * (exposed.iteration_s / r0.report.iteration_time_s - 1)
                << " %, tp " << tp_exposed << " -> " << tp << "): " << c->what << "\n";
    }
  }
  ASSERT_GE(compared, 20);
  EXPECT_GE(tp_only, 5);
  EXPECT_GE(hidden, compared / 2);
  // Measured 2026-12-07 (38 splits): median 0.05 %, 90th percentile 2.8 %, worst 5.1 % where no
  // stage's replicas span nodes; one TP group alone 0.02 % at most. The spread is the exposed
  // case's (above): a stage's DP reductions under its last backward, priced one at a time by
  // the estimate, sharing links in the replay; the overlap shortens the backward they hide
  // under, so the worst split (TP 2 x DP 2, optimizer sharding, 25 Gbit/s) goes from 2.5 %
  // exposed to 5.1 %.
  expect_exposed_spread(errors, worst_within, worst_within_case,
                        std::to_string(compared) +
                            " splits with sequence parallelism and TP overlap (" +
                            std::to_string(hidden) + " hide TP time)");
}

// The same with the job's deferred output-layer weight gradient (Megatron-Core's
// defer_embedding_wgrad_compute; pipeline::deferred_wgrad_micro_batches decides which
// micro-batches, costmodels::output_weight_gradient_share how much): on drawn pipelines the
// estimate, whose schedule moves the head's weight gradient into the last stage's flush, agrees
// with the replay of the graph that runs it there (WeightGradient ops), and the deferral moves
// both on some splits.
TEST(SplitAgreement, TheEstimateIsTheReplayWithADeferredOutputWeightGradient) {
  std::mt19937 rng(20261208);
  int compared = 0, moved = 0;
  std::vector<double> errors;
  double worst_within = 0;
  std::string worst_within_case;
  for (int tries = 0; tries < 3000 && compared < 40; ++tries) {
    const std::optional<Case> c = draw_valid(rng);
    if (!c || c->split.stages.size() < 2) continue;
    Scenario deferred = c->scenario;
    deferred.job.implementation.defer_embedding_wgrad_compute = true;
    deferred.job.implementation.wgrad_deferral_limit = tries % 3;  // 0: every micro-batch
    const auto plain_models = costmodels::make_cost_models(c->scenario);
    const auto models = costmodels::make_cost_models(deferred);
    planner::SplitEstimate plain, e;
    try {
      plain = planner::estimate_split(c->scenario, c->split, c->options, plain_models);
      e = planner::estimate_split(deferred, c->split, c->options, models);
    } catch (const Error&) {
      continue;
    }
    if (!e.fits) continue;
    if (std::abs(e.iteration_s / plain.iteration_s - 1) > 1e-6) ++moved;
    const Plan plan = plan_of(deferred, c->split, e, c->options.activation_checkpointing);
    const auto replay = sim::simulate_plan(plan, deferred, *models.compute, *models.comm);
    const double err = e.iteration_s / replay.report.iteration_time_s - 1.0;
    if (!a_stage_spans_nodes(c->split, deferred) && std::abs(err) > worst_within) {
      worst_within = std::abs(err);
      worst_within_case = c->what;
    }
    errors.push_back(err);
    ++compared;
    if (std::getenv("CEPHALO_AGREEMENT_LOG"))
      std::cout << 100 * err << " % (limit " << deferred.job.implementation.wgrad_deferral_limit
                << ", estimate " << plain.iteration_s << " -> " << e.iteration_s
                << " s): " << c->what << "\n";
  }
  ASSERT_GE(compared, 20);
  EXPECT_GE(moved, compared / 2);
  // The bounds of the undeferred property test above (the same spread).
  expect_exposed_spread(errors, worst_within, worst_within_case,
                        std::to_string(compared) +
                            " pipelines with a deferred output weight gradient (" +
                            std::to_string(moved) + " moved)");
}

}  // namespace
}  // namespace cephalo

namespace cephalo {
namespace {

// Every candidate of a small case estimated and replayed: the estimate's pick (its replay) and
// the best replay, and each estimate's |estimate / replay − 1|.
struct Ranking {
  int replayed = 0;
  double best_estimate = std::numeric_limits<double>::infinity(), pick_replay = 0;
  double best_replay = std::numeric_limits<double>::infinity();
  std::string pick, best;
  std::vector<double> errors;  // ascending
};

// 2 nodes × (1 A100-80GB + 1 L4), 10 Gbit/s between them, an 8-layer GPT, batch 16: each stage
// layout of `layouts`, every layer composition, micro-batch count (p, 2p, 4p), GPipe and
// 1F1B, each of `shardings`, replicas balanced by speed.
Ranking rank_every_candidate(const std::vector<std::vector<std::vector<int>>>& layouts,
                             const std::vector<ShardingKind>& shardings) {
  const Scenario s = test_support::mixed_cluster({{1, 1}, {1, 1}}, 10, 8, 16, false);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  Ranking out;
  for (const auto& ranks : layouts) {
    const int p = static_cast<int>(ranks.size());
    std::vector<int> cur;
    test_support::compositions(8, p, 1, cur, [&](const std::vector<int>& counts) {
      for (int m : {p, 2 * p, 4 * p})
        for (K kind : {K::GPipe, K::OneFOneB})
          for (ShardingKind sharding : shardings) {
            ModelSplit split;
            test_support::place_stages(split, ranks, std::vector<int>(ranks.size(), 1), counts, 1);
            split.micro_batches = m;
            split.schedule = {kind, 1};
            split.sharding = sharding;
            planner::SplitOptions options;
            options.replica_batches = planner::ReplicaBatches::BySpeed;
            const auto e = estimator.estimate(split, options);
            if (!e.fits) continue;
            const Plan plan = plan_of(s, split, e, options.activation_checkpointing);
            const auto r = sim::simulate_plan(plan, s, *models.compute, *models.comm).report;
            ++out.replayed;
            if (r.oom) continue;
            out.errors.push_back(std::abs(e.iteration_s / r.iteration_time_s - 1));
            if (e.iteration_s < out.best_estimate) {
              out.best_estimate = e.iteration_s;
              out.pick_replay = r.iteration_time_s;
              out.pick = e.split;
            }
            if (r.iteration_time_s < out.best_replay) {
              out.best_replay = r.iteration_time_s;
              out.best = e.split;
            }
          }
    });
  }
  std::sort(out.errors.begin(), out.errors.end());
  std::cout << out.replayed << " candidates replayed; the estimate's pick " << out.pick
            << " replays at " << out.pick_replay << " s (estimated " << out.best_estimate
            << " s), the best replay " << out.best << " at " << out.best_replay
            << " s: " << 100 * (out.pick_replay / out.best_replay - 1) << " % behind\n";
  return out;
}

// The ranking (issue "one design", item 5): on a small case whose every candidate is
// enumerated, the candidate with the best estimate, replayed, loses at most 1 % against the
// best replay of all of them. One stage of all four, one per node, one per GPU; full and no
// sharding.
TEST(SplitAgreement, TheEstimatesPickLosesAtMostOnePercentAgainstReplayingEveryCandidate) {
  const Ranking r = rank_every_candidate({{{0, 1, 2, 3}}, {{0, 1}, {2, 3}}, {{0}, {1}, {2}, {3}}},
                                         {ShardingKind::Full, ShardingKind::None});
  EXPECT_GT(r.replayed, 400);
  EXPECT_LE(r.pick_replay, r.best_replay * 1.01);
}

// The ranking where the NICs matter: every candidate's stage spans both nodes, so its
// data-parallel gathers and reductions cross the 10 Gbit/s NICs: one stage of all four, or a
// stage of the A100s and one of the L4s (each pair across the nodes) in either order; all four
// shardings. The estimate's pick, replayed, loses at most 1 % against the best replay of all of
// them (1.08 % while the estimate held every stage back by the first micro-batch's gathers,
// where the prefetch rule holds a later stage's gathers back until that micro-batch arrives).
TEST(SplitAgreement, TheEstimatesPickHoldsWhenEveryStageSpansTheNodes) {
  const Ranking r = rank_every_candidate(
      {{{0, 1, 2, 3}}, {{0, 2}, {1, 3}}, {{1, 3}, {0, 2}}},
      {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None});
  EXPECT_GT(r.replayed, 300);
  EXPECT_LE(r.pick_replay, r.best_replay * 1.01);
  // Each estimate against its replay: measured 2026-12-07 median 0.08 %, 90th percentile 0.22 %,
  // worst 1.6 % (median 0.09 %, 90th 1.3 % with the first micro-batch's gathers ungated; median
  // 23 % under before the NICs were shared between stages' collectives).
  ASSERT_FALSE(r.errors.empty());
  std::cout << "median |estimate / replay - 1| " << 100 * r.errors[r.errors.size() / 2]
            << " %, 90th " << 100 * r.errors[r.errors.size() * 9 / 10] << " %, worst "
            << 100 * r.errors.back() << " %\n";
  EXPECT_LE(r.errors[r.errors.size() / 2], 0.002);
  EXPECT_LE(r.errors[r.errors.size() * 9 / 10], 0.005);
  EXPECT_LE(r.errors.back(), 0.025);
}

// The same with a stack's weight-gradient path (Implementation::weight_gradients, priced by
// costmodels::job_backward_seconds inside the cost models both read): the estimate of a drawn
// split agrees with the replay of its graph, and the path moves both on every split.
TEST(SplitAgreement, TheEstimateIsTheReplayWithAStacksWeightGradientPath) {
  std::mt19937 rng(20261209);
  int compared = 0, moved = 0;
  std::vector<double> errors;
  double worst_within = 0;
  std::string worst_within_case;
  const WeightGradients paths[] = {WeightGradients::MainGrad, WeightGradients::FusedMainGrad,
                                   WeightGradients::MainGradComputeDtype};
  for (int tries = 0; tries < 3000 && compared < 30; ++tries) {
    const std::optional<Case> c = draw_valid(rng);
    if (!c) continue;
    Scenario own = c->scenario;
    own.job.implementation.weight_gradients = paths[tries % 3];
    const auto plain_models = costmodels::make_cost_models(c->scenario);
    const auto models = costmodels::make_cost_models(own);
    planner::SplitEstimate plain, e;
    try {
      plain = planner::estimate_split(c->scenario, c->split, c->options, plain_models);
      e = planner::estimate_split(own, c->split, c->options, models);
    } catch (const Error&) {
      continue;
    }
    if (!e.fits) continue;
    if (e.iteration_s < plain.iteration_s * (1 - 1e-6)) ++moved;
    const Plan plan = plan_of(own, c->split, e, c->options.activation_checkpointing);
    const auto replay = sim::simulate_plan(plan, own, *models.compute, *models.comm);
    const double err = e.iteration_s / replay.report.iteration_time_s - 1.0;
    if (!a_stage_spans_nodes(c->split, own) && std::abs(err) > worst_within) {
      worst_within = std::abs(err);
      worst_within_case = c->what;
    }
    errors.push_back(err);
    ++compared;
  }
  ASSERT_GE(compared, 20);
  // Every path here moves fewer bytes per weight than the profiles' autocast path.
  EXPECT_EQ(moved, compared);
  expect_exposed_spread(errors, worst_within, worst_within_case,
                        std::to_string(compared) + " splits with a stack's weight-gradient path");
}

}  // namespace
}  // namespace cephalo

// The 3D search's family bounds (split_search_bound.hpp): no split of a family is estimated
// below the family's floor (every split of a small heterogeneous cluster enumerated), and the
// search that skips families by them returns the best of the search that prices every family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/planner/split_estimate.hpp"
#include "cephalo/planner/split_search.hpp"
#include "split_fixture.hpp"
#include "split_search_bound.hpp"

namespace cephalo {
namespace {

using Kind = pipeline::PipelineSchedule::Kind;
using planner::SplitOptions;
using planner::SplitSearchOptions;

// The split of an enumeration's stages, or nothing where check_model_split refuses it (no
// candidate of the search).
std::optional<ModelSplit> enumerated_split(const Scenario& s,
                                           const std::vector<std::vector<int>>& ranks,
                                           const std::vector<int>& tp,
                                           const std::vector<int>& counts,
                                           const pipeline::PipelineSchedule& schedule, int m,
                                           ShardingKind sharding, bool sp) {
  ModelSplit split;
  split.tensor_parallel = tp.front();
  split.sequence_parallel = sp;
  split.schedule = schedule;
  split.micro_batches = m;
  split.sharding = sharding;
  test_support::place_stages(split, ranks, tp, counts, schedule.virtual_stages);
  try {
    check_model_split_for(split, s, "<enumeration>");
  } catch (const ValidationError&) {
    return std::nullopt;
  }
  return split;
}

// Every split of 4 A100 (node 0) and 4 V100 (node 1) into stages of one type each (1 or 2 per
// type, either type first), every T per type, micro-batch count, schedule, boundary, sharding,
// sequence parallelism and checkpointing: its estimate is at least its family's floor (the
// steps of whole layers, the fill and drain, the DP tail, and 1F1B's round trips with their
// transfers), and its transfers take at least the transfer floor.
TEST(SplitBound, NoSplitIsEstimatedBelowItsFamilysFloor) {
  const int layers = 8, batch = 16;
  const Scenario s = test_support::split_scenario({{"A100-80GB", 4}, {"V100-SXM2-32GB", 4}}, layers,
                                                  batch, 1024, 16);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  const std::vector<std::vector<int>> type_ranks = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  long long checked = 0, crossing = 0, by_busy = 0, by_fill = 0;
  double closest = 1e30;  // the least estimate / floor
  for (int first : {0, 1})
    for (int per_type : {1, 2})
      for (int t0 : {1, 2})
        for (int t1 : {1, 2, 4}) {
          // Stages in pipeline order: the first type's, then the other's.
          std::vector<std::vector<int>> ranks;
          std::vector<int> tp;
          for (int type : {first, 1 - first}) {
            const auto& all = type_ranks[static_cast<std::size_t>(type)];
            const std::size_t size = all.size() / static_cast<std::size_t>(per_type);
            for (int i = 0; i < per_type; ++i) {
              ranks.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(i * size),
                                 all.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
              tp.push_back(type == 0 ? t0 : t1);
            }
          }
          const int p = static_cast<int>(ranks.size());
          bool fits_t = true;
          for (int i = 0; i < p; ++i)
            fits_t = fits_t && ranks[static_cast<std::size_t>(i)].size() %
                                       static_cast<std::size_t>(tp[static_cast<std::size_t>(i)]) ==
                                   0;
          if (!fits_t) continue;
          for (int m : {2, 4, 8, 16}) {
            if (m < p) continue;
            std::vector<double> floors[2], tails;  // floors without and with recompute
            bool divides = true;
            for (int i = 0; i < p; ++i) {
              const auto& r = ranks[static_cast<std::size_t>(i)];
              const int T = tp[static_cast<std::size_t>(i)];
              const int replicas = static_cast<int>(r.size()) / T;
              divides = divides && batch % (m * replicas) == 0;
              if (!divides) break;
              for (bool rc : {false, true}) {
                SplitOptions o;
                o.activation_checkpointing.kind =
                    rc ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
                floors[rc].push_back(estimator.layer_step_floor({r.begin(), r.begin() + T},
                                                                batch / (m * replicas), o));
              }
              std::vector<int> group;  // DP group 0: every TP group's first rank
              for (std::size_t k = 0; k < r.size(); k += static_cast<std::size_t>(T))
                group.push_back(r[k]);
              tails.push_back(estimator.tail_floor_per_parameter(group, {}) *
                              costmodels::layer_parameters(s.job.model) / T);
            }
            if (!divides) continue;
            std::vector<pipeline::PipelineSchedule> schedules = {{Kind::GPipe, 1},
                                                                 {Kind::OneFOneB, 1}};
            if (m % p == 0)
              for (int v = 2; v * p <= layers; v *= 2) schedules.push_back({Kind::Interleaved, v});
            for (const auto& schedule : schedules) {
              const int v = schedule.virtual_stages;
              // The transfer floor of one pass: every boundary crossed, the last stage's to the
              // first under interleaving.
              std::vector<long long> samples;
              for (int a = 0; a < p; ++a)
                samples.push_back(batch /
                                  (m * static_cast<int>(ranks[static_cast<std::size_t>(a)].size()) /
                                   tp[static_cast<std::size_t>(a)]));
              const double p2p =
                  planner::split_detail::layout_transfer_floor(s, models, ranks, tp, samples, v);
              const int trips =
                  planner::split_detail::round_trips(pipeline::stage_order(0, p, m, schedule));
              EXPECT_EQ(trips, schedule.kind == Kind::GPipe      ? 1
                               : schedule.kind == Kind::OneFOneB ? (m + p - 1) / p
                                                                 : trips);
              double floor[2], busy[2];
              for (int rc : {0, 1}) {
                // Whole layers in whole chunks: the busiest stage's steps and tail.
                std::vector<double> with_tail;
                for (int i = 0; i < p; ++i)
                  with_tail.push_back(floors[rc][static_cast<std::size_t>(i)] +
                                      tails[static_cast<std::size_t>(i)] / m);
                busy[rc] = planner::split_detail::busy_floor(
                    with_tail, std::vector<int>(static_cast<std::size_t>(p), 1), m, layers, {}, v);
                floor[rc] = std::max(
                    {busy[rc],
                     planner::split_detail::pipeline_floor(floors[rc], tails, m, v, layers),
                     schedule.kind == Kind::GPipe
                         ? 0.0
                         : planner::split_detail::round_trip_floor(floors[rc], trips, v, layers,
                                                                   p2p, tails.front())});
                by_busy += busy[rc] > planner::split_detail::pipeline_floor(floors[rc], tails, m, v,
                                                                            layers)
                               ? 1
                               : 0;
              }
              // Whole layers with the fill and drain and the transfers between: the least
              // time at which some placement is feasible (pipeline_feasible), by bisection.
              std::vector<double> hop(static_cast<std::size_t>(p), 0.0);
              for (int a = 1; a < p; ++a)
                hop[static_cast<std::size_t>(a)] =
                    hop[static_cast<std::size_t>(a - 1)] +
                    2 * planner::split_detail::boundary_transfer_floor(
                            s, models, ranks[static_cast<std::size_t>(a - 1)],
                            tp[static_cast<std::size_t>(a - 1)],
                            samples[static_cast<std::size_t>(a - 1)],
                            ranks[static_cast<std::size_t>(a)].front());
              for (int rc : {0, 1}) {
                double lo = 0, hi = 1e6;
                for (int i = 0; i < 200; ++i) {
                  const double mid = (lo + hi) / 2;
                  (planner::split_detail::pipeline_feasible(floors[rc], tails, hop, m, v, layers,
                                                            {}, mid)
                       ? hi
                       : lo) = mid;
                }
                by_fill += lo > floor[rc] * (1 + 1e-9) ? 1 : 0;
                floor[rc] = std::max(floor[rc], lo);
              }
              ASSERT_GT(floor[0], 0);
              ASSERT_GT(floor[1], floor[0]);
              std::vector<int> cur;
              test_support::compositions(layers, p, v, cur, [&](const std::vector<int>& counts) {
                for (ShardingKind sharding : {ShardingKind::Full, ShardingKind::None})
                  for (bool sp : {false, true})
                    for (bool rc : {false, true}) {
                      const auto split =
                          enumerated_split(s, ranks, tp, counts, schedule, m, sharding, sp);
                      if (!split) continue;
                      SplitOptions o;
                      o.activation_checkpointing.kind = rc ? ActivationCheckpointing::Kind::Full
                                                           : ActivationCheckpointing::Kind::None;
                      const auto e = estimator.estimate(*split, o);
                      ++checked;
                      // p2p_s is the slowest boundary's transfer; p2p sums the pass's crossings.
                      EXPECT_GE(e.p2p_s * (p * v - 1), p2p * (1 - 1e-9)) << to_json(*split).dump();
                      crossing += p2p > 0 ? 1 : 0;
                      EXPECT_GE(e.iteration_s, floor[rc] * (1 - 1e-9))
                          << to_json(*split).dump() << " recompute " << rc;
                      // Its own boundaries' floor (the search's per-candidate check).
                      EXPECT_GE(e.iteration_s * (1 + 1e-9),
                                planner::split_detail::placement_floor(floors[rc], tails, hop, m, v,
                                                                       counts))
                          << to_json(*split).dump() << " recompute " << rc;
                      // The test with the order open holds the split's own order too.
                      EXPECT_TRUE(planner::split_detail::family_feasible(
                          floors[rc], tails, std::vector<int>(static_cast<std::size_t>(p), 1), m, v,
                          layers, {}, e.iteration_s * (1 + 1e-9)))
                          << to_json(*split).dump() << " recompute " << rc;
                      closest = std::min(closest, e.iteration_s / floor[rc]);
                    }
              });
            }
          }
        }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(crossing, checked / 2);  // the transfer floor is above 0 where stages cross nodes
  EXPECT_GT(by_busy, 0);             // whole layers raise the floor of some families
  std::cout << checked << " splits; the closest to its floor at " << closest << " x; " << by_busy
            << " floors raised by whole layers, " << by_fill
            << " by whole layers with the fill and drain\n";
  // The floor is near some splits' estimate, not a vacuous 0.
  EXPECT_LT(closest, 1.5);
}

// Every split of 4 T4 (node 0) and 4 A100-40GB (node 1) running a model whose layers the T4s
// cannot all hold: no stage's estimated memory is below the search's memory floor for its
// layers at its place in the schedule's order (split_search_bound.hpp, stage_memory_floor with
// the forwards before its first backward), for every T, micro-batch count, schedule, boundary,
// sharding, sequence parallelism and checkpointing (none, selective, full), and the floor is
// near the estimate for some stages and refuses some layer counts, some only at their place.
TEST(SplitBound, NoStageIsEstimatedBelowItsMemoryFloor) {
  const int layers = 8, batch = 16;
  const Scenario s =
      test_support::split_scenario({{"T4", 4}, {"A100-40GB", 4}}, layers, batch, 5120, 40);
  const auto models = costmodels::make_cost_models(s);
  planner::SplitEstimator estimator(s, models);
  const double usable = costmodels::memory_constants().usable_fraction;
  const std::vector<std::vector<int>> type_ranks = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  long long checked = 0, refused = 0, over_floor = 0, by_place = 0;
  double closest = 1e30;  // the least estimate / floor
  for (int first : {0, 1})
    for (int per_type : {1, 2})
      for (int T : {1, 2}) {
        std::vector<std::vector<int>> ranks;
        for (int type : {first, 1 - first}) {
          const auto& all = type_ranks[static_cast<std::size_t>(type)];
          const std::size_t size = all.size() / static_cast<std::size_t>(per_type);
          for (int i = 0; i < per_type; ++i)
            ranks.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(i * size),
                               all.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
        }
        const int p = static_cast<int>(ranks.size());
        const std::vector<int> tp(ranks.size(), T);
        for (int m : {2, 4, 8}) {
          bool divides = m >= p;
          for (const auto& r : ranks)
            divides = divides && batch % (m * static_cast<int>(r.size()) / T) == 0;
          if (!divides) continue;
          std::vector<pipeline::PipelineSchedule> schedules = {{Kind::GPipe, 1},
                                                               {Kind::OneFOneB, 1}};
          if (m % p == 0 && 2 * p <= layers) schedules.push_back({Kind::Interleaved, 2});
          for (const auto& schedule : schedules) {
            const int v = schedule.virtual_stages;
            std::vector<int> cur;
            test_support::compositions(layers, p, v, cur, [&](const std::vector<int>& counts) {
              for (ShardingKind sharding : {ShardingKind::Full, ShardingKind::Hybrid,
                                            ShardingKind::Optimizer, ShardingKind::None})
                for (bool sp : {false, true})
                  for (auto ck : {ActivationCheckpointing::Kind::None,
                                  ActivationCheckpointing::Kind::Selective,
                                  ActivationCheckpointing::Kind::Full}) {
                    if (sp && T == 1) continue;
                    const auto split =
                        enumerated_split(s, ranks, tp, counts, schedule, m, sharding, sp);
                    if (!split) continue;
                    SplitOptions o;
                    o.activation_checkpointing.kind = ck;
                    const auto e = estimator.estimate(*split, o);
                    ++checked;
                    refused += e.fits ? 0 : 1;
                    const bool rc = ck == ActivationCheckpointing::Kind::Full;
                    for (int st = 0; st < p; ++st) {
                      const auto& r = ranks[static_cast<std::size_t>(st)];
                      const DeviceSpec& spec =
                          s.cluster.ranks()[static_cast<std::size_t>(r.front())].slot->spec;
                      const int replicas = static_cast<int>(r.size()) / T;
                      // At its place in the order: the forwards before its first backward.
                      const auto warmup = planner::split_detail::warmup_chunks(
                          pipeline::stage_order(st, p, m, schedule));
                      const double floor = planner::split_detail::stage_memory_floor(
                          s, SplitSearchOptions{}, spec, counts[static_cast<std::size_t>(st)], T,
                          batch / (m * replicas), 1.0 / replicas, rc, warmup, v);
                      // The floor of one forward holds at every place and is no higher.
                      const double anywhere = planner::split_detail::stage_memory_floor(
                          s, SplitSearchOptions{}, spec, counts[static_cast<std::size_t>(st)], T,
                          batch / (m * replicas), 1.0 / replicas, rc);
                      EXPECT_LE(anywhere, floor * (1 + 1e-12));
                      const auto& mem = e.stages[static_cast<std::size_t>(st)].memory;
                      EXPECT_GE(mem.total, floor * (1 - 1e-9))
                          << to_json(*split).dump() << " checkpointing " << static_cast<int>(ck);
                      closest = std::min(closest, mem.total / floor);
                      if (floor > spec.memory_bytes * usable) ++over_floor;
                      if (floor > spec.memory_bytes * usable &&
                          anywhere <= spec.memory_bytes * usable)
                        ++by_place;
                    }
                  }
            });
          }
        }
      }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(refused, 0);
  EXPECT_GT(over_floor, 0);  // the floor alone refuses some stages
  EXPECT_GT(by_place, 0);    // some only at their place: the micro-batches 1F1B holds there
  std::cout << checked << " splits, " << refused << " refused, " << over_floor
            << " stages refused by the floor (" << by_place
            << " only by the forwards before their first backward); the closest to its floor at "
            << closest << " x\n";
  EXPECT_LT(closest, 1.5);
}

// On small clusters of two and three GPU types (compute-, memory- and transfer-bound) the
// bounded search returns the split, the checkpointing and the estimate the search that prices
// every family returns, and skips some.
TEST(SplitBound, TheBoundedSearchReturnsTheBestOfTheFullSearch) {
  const std::vector<Scenario> cases = {
      test_support::split_scenario({{"A100-80GB", 4}, {"V100-SXM2-32GB", 4}}, 24, 8, 1024, 16),
      test_support::split_scenario({{"A100-80GB", 2}, {"V100-SXM2-32GB", 2}, {"T4", 4}}, 12, 16,
                                   1024, 16),
      // Memory-bound: the T4s cannot hold their share of the layers without recompute.
      test_support::split_scenario({{"T4", 4}, {"A100-40GB", 4}}, 8, 16, 4096, 32),
      test_support::split_scenario({{"A100-40GB", 2}, {"V100-SXM2-16GB", 2}, {"T4", 4}}, 12, 32,
                                   3072, 24),
      test_support::split_scenario({{"T4", 4}, {"V100-SXM2-16GB", 4}}, 8, 64, 5120, 40),
      // Transfer-bound: three types on nodes of one slow NIC each, so the order of the type
      // blocks (which boundaries cross which node) decides a split's transfers, and the
      // families are split by order and skipped on their layouts' transfer floors.
      test_support::split_scenario({{"A100-80GB", 2, 1, "10Gbit/s"},
                                    {"V100-SXM2-32GB", 2, 1, "10Gbit/s"},
                                    {"T4", 4, 1, "10Gbit/s"}},
                                   12, 32, 2048, 16)};
  long long skipped = 0;
  for (const Scenario& s : cases) {
    const auto models = costmodels::make_cost_models(s);
    SplitSearchOptions bounded, full;
    full.bound = false;
    if (&s != &cases.front() && &s != &cases[1] && &s != &cases.back()) {
      // The memory-bound cases: stages of one GPU type, T = 1, so the T4s hold their layers'
      // state whole.
      bounded.node_stages = full.node_stages = false;
      bounded.tensor_parallel = full.tensor_parallel = 1;
    }
    const bool memory_bound = !bounded.node_stages;
    const auto a = planner::search_split(s, bounded, models);
    const auto b = planner::search_split(s, full, models);
    EXPECT_EQ(to_json(a.split).dump(), to_json(b.split).dump());
    EXPECT_EQ(a.checkpointing, b.checkpointing);
    EXPECT_DOUBLE_EQ(a.estimate.iteration_s, b.estimate.iteration_s);
    EXPECT_EQ(b.bounded, 0);
    if (&s == &cases.back()) {
      EXPECT_GT(a.bounded, 0);  // the transfer-bound case skips on its own
    }
    // Memory refuses candidates there (what the memory floor lets the search skip).
    if (memory_bound) {
      EXPECT_GT(b.refused, 0);
    }
    EXPECT_LE(a.evaluated, b.evaluated);
    skipped += a.bounded;
    std::cout << to_json(a.split).dump() << " checkpointing "
              << to_string(ActivationCheckpointing{a.checkpointing}) << ": " << a.evaluated
              << " priced, " << a.bounded << " skipped by bound (" << b.evaluated << " without)\n";
  }
  EXPECT_GT(skipped, 0);
}

// Two nodes of two A100-80GB then two T4 each, on a 1 Gbit/s NIC: a node's stage of its A100s
// ({0, 1}) and its first stage of half of each type ({0, 2}) share first rank, size and T, yet
// not their GPUs. A GPT of long sequences whose activations bind the memory (the T4s hold
// fewer layers than the A100s).
Scenario two_types_per_node() {
  const test_support::SplitNode a100{"A100-80GB", 2, 1, "1Gbit/s"};
  return test_support::split_scenario({a100, a100}, 32, 8, 2048, 16, 8192, "T4", 2);
}

// There the bounded search returns the full search's best (a stage per node and type, the A100s
// holding most layers): each stage's memory cap is its own GPUs', not that of another stage of
// its first rank and size (a cap read off the mixed stage held the A100s' stage to the T4s' few
// layers, and the bound skipped the best).
TEST(SplitBound, StagesOfOneFirstRankAndSizeKeepTheirOwnMemoryCaps) {
  const Scenario s = two_types_per_node();
  const auto models = costmodels::make_cost_models(s);
  SplitSearchOptions bounded, full;
  full.bound = false;
  bounded.tensor_parallel = full.tensor_parallel = 1;
  const auto a = planner::search_split(s, bounded, models);
  const auto b = planner::search_split(s, full, models);
  EXPECT_EQ(to_json(a.split).dump(), to_json(b.split).dump());
  EXPECT_EQ(a.checkpointing, b.checkpointing);
  EXPECT_DOUBLE_EQ(a.estimate.iteration_s, b.estimate.iteration_s);
  EXPECT_GT(a.bounded, 0);  // the bound skips some, yet not the best
  std::cout << to_json(a.split).dump() << " checkpointing "
            << to_string(ActivationCheckpointing{a.checkpointing}) << ": " << a.estimate.iteration_s
            << " s; " << a.evaluated << " priced, " << a.bounded << " skipped by bound ("
            << b.evaluated << " without)\n";
}

// The floor deal (the search's second first deal) puts its busiest stage at busy_floor's level,
// deals every layer in whole units, at least one unit per stage and none past a cap; caps that
// cannot hold the layers, or more stages than units, give no deal.
TEST(SplitBound, TheFloorDealReachesTheBusyFloor) {
  const std::vector<std::vector<double>> per_layers = {
      {1.0, 1.0, 1.0}, {0.3, 1.7, 0.9, 2.4}, {5.0, 0.1}, {1.0, 2.0, 3.0, 4.0, 5.0}};
  int checked = 0;
  for (const auto& per_layer : per_layers)
    for (int unit : {1, 2, 4})
      for (int layers : {8, 24, 40})
        for (int cap_kind = 0; cap_kind < 3; ++cap_kind) {
          const std::size_t p = per_layer.size();
          std::vector<int> cap;
          if (cap_kind == 1) cap.assign(p, layers);
          if (cap_kind == 2)
            for (std::size_t s = 0; s < p; ++s) cap.push_back(static_cast<int>(4 + 3 * s));
          const std::vector<int> ones(p, 1);
          const double floor =
              planner::split_detail::busy_floor(per_layer, ones, 1, layers, cap, unit);
          const auto deal = planner::split_detail::floor_deal(per_layer, layers, unit, cap);
          if (!std::isfinite(floor)) {
            EXPECT_TRUE(deal.empty()) << layers << " layers, unit " << unit;
            continue;
          }
          ASSERT_EQ(deal.size(), p);
          int sum = 0;
          double busiest = 0;
          for (std::size_t s = 0; s < p; ++s) {
            EXPECT_GE(deal[s], unit);
            EXPECT_EQ(deal[s] % unit, 0);
            if (!cap.empty()) {
              EXPECT_LE(deal[s], cap[s]);
            }
            sum += deal[s];
            busiest = std::max(busiest, per_layer[s] * deal[s]);
          }
          EXPECT_EQ(sum, layers / unit * unit);
          EXPECT_NEAR(busiest, floor, 1e-12 * floor);
          ++checked;
        }
  EXPECT_GT(checked, 50);
  const std::vector<double> three(3, 1.0);
  EXPECT_TRUE(planner::split_detail::floor_deal(three, 2, 1).empty());
}

// A search that spends its budget of priced candidates before its queue of layouts is empty
// says what it left and the least floor of it; the search without the budget finds nothing
// below the smaller of the budgeted answer and that floor.
TEST(SplitBound, ABudgetedSearchStatesItsGap) {
  const Scenario s = test_support::split_scenario({{"A100-80GB", 2, 1, "10Gbit/s"},
                                                   {"V100-SXM2-32GB", 2, 1, "10Gbit/s"},
                                                   {"T4", 4, 1, "10Gbit/s"}},
                                                  12, 32, 2048, 16);
  const auto models = costmodels::make_cost_models(s);
  const auto whole = planner::search_split(s, SplitSearchOptions{}, models);
  EXPECT_EQ(whole.unexplored, 0);
  EXPECT_FALSE(std::isfinite(whole.unexplored_floor));
  EXPECT_EQ(whole.budget, 0);  // none ran out
  for (long long budget : {50LL, 300LL, 1000LL}) {
    SplitSearchOptions options;
    options.budget = budget;
    const auto cut = planner::search_split(s, options, models);
    ASSERT_LT(budget, whole.evaluated);
    EXPECT_GT(cut.unexplored, 0) << "budget " << budget;
    EXPECT_TRUE(std::isfinite(cut.unexplored_floor));
    EXPECT_EQ(cut.budget, budget);  // the budget that ran out, in candidates priced
    EXPECT_GE(cut.evaluated, budget);
    EXPECT_NE(planner::render_split_search(cut).find("search budget spent (" +
                                                     std::to_string(budget) + " candidates priced"),
              std::string::npos);
    EXPECT_LT(cut.evaluated, whole.evaluated);
    EXPECT_GE(cut.estimate.iteration_s, whole.estimate.iteration_s);
    EXPECT_GE(whole.estimate.iteration_s * (1 + 1e-12),
              std::min(cut.estimate.iteration_s, cut.unexplored_floor))
        << "budget " << budget;
    std::cout << "budget " << budget << ": " << cut.evaluated << " priced, best "
              << cut.estimate.iteration_s << " s, " << cut.unexplored << " left at least "
              << cut.unexplored_floor << " s (the whole search: " << whole.evaluated
              << " priced, best " << whole.estimate.iteration_s << " s)\n";
  }
}

// A ceiling (SplitSearchOptions::ceiling, a subset's search in weigh_subsets) is exact in the
// estimate: above the search's answer the search runs as without one (the same split, estimate,
// finalists and candidates priced); at or below it the search stops with SplitCeilingReached.
TEST(SplitBound, ACeilingStopsOnlyASearchWhoseAnswerIsNotBelowIt) {
  const std::vector<Scenario> cases = {
      test_support::split_scenario({{"A100-80GB", 4}, {"V100-SXM2-32GB", 4}}, 24, 8, 1024, 16),
      test_support::split_scenario({{"A100-80GB", 2}, {"V100-SXM2-32GB", 2}, {"T4", 4}}, 12, 16,
                                   1024, 16),
      test_support::split_scenario({{"A100-80GB", 2, 1, "10Gbit/s"},
                                    {"V100-SXM2-32GB", 2, 1, "10Gbit/s"},
                                    {"T4", 4, 1, "10Gbit/s"}},
                                   12, 32, 2048, 16)};
  for (const Scenario& s : cases) {
    const auto models = costmodels::make_cost_models(s);
    const auto whole = planner::search_split(s, SplitSearchOptions{}, models);
    const double best = whole.estimate.iteration_s;
    SplitSearchOptions above;
    above.ceiling = best * 1.001;
    const auto same = planner::search_split(s, above, models);
    EXPECT_EQ(to_json(same.split).dump(), to_json(whole.split).dump());
    EXPECT_EQ(same.estimate.iteration_s, best);
    EXPECT_EQ(same.evaluated, whole.evaluated);
    ASSERT_EQ(same.finalists.size(), whole.finalists.size());
    for (std::size_t i = 0; i < same.finalists.size(); ++i)
      EXPECT_EQ(same.finalists[i].estimate.iteration_s, whole.finalists[i].estimate.iteration_s);
    for (double ceiling : {best, best * 0.9}) {
      SplitSearchOptions below;
      below.ceiling = ceiling;
      try {
        planner::search_split(s, below, models);
        ADD_FAILURE() << "no stop at the ceiling " << ceiling << " s (the answer " << best << " s)";
      } catch (const planner::SplitCeilingReached& e) {
        EXPECT_NE(std::string(e.what()).find("is estimated below"), std::string::npos) << e.what();
        std::cout << e.what() << "\n";
      }
    }
  }
}

// A ceiling between the answer and the best split priced before the last climbs is asked
// while the search still has candidates to climb: it climbs them ahead of their turn, finds one
// ending below the ceiling, and runs on as without one, taking those climbs as its own when it
// comes to them (not climbing them again). The search is then the search without a ceiling:
// the same split, estimate, counts and finalists.
TEST(SplitBound, ClimbsAheadOfACeilingThatDoesNotStopAreTheSearchsOwn) {
  // Clusters whose best split is found only by the last climbs (of 40 random mixes, these and
  // one more): a ceiling just above it is asked with candidates left to climb.
  const std::vector<Scenario> cases = {
      test_support::split_scenario(
          {{"L4", 2, 1, "100Gbit/s"}, {"T4", 4, 1, "10Gbit/s"}, {"T4", 4, 1, "10Gbit/s"}}, 24, 64,
          2048, 16),
      test_support::split_scenario(
          {{"L4", 2, 1, "10Gbit/s"}, {"L4", 2, 1, "10Gbit/s"}, {"A10G", 8, 1, "100Gbit/s"}}, 24, 16,
          2048, 16)};
  long long climbed_ahead = 0;
  for (const Scenario& s : cases) {
    const auto models = costmodels::make_cost_models(s);
    const SplitSearchOptions none;
    const auto whole = planner::search_split(s, none, models);
    EXPECT_EQ(whole.climbed_ahead, 0);
    const double best = whole.estimate.iteration_s;
    for (double above : {1.0001, 1.001, 1.01, 1.1}) {
      SplitSearchOptions o = none;
      o.ceiling = best * above;
      const auto same = planner::search_split(s, o, models);
      std::cout << "ceiling x" << above << ": " << same.climbed_ahead << " climbs ahead\n";
      climbed_ahead += same.climbed_ahead;
      EXPECT_EQ(to_json(same.split).dump(), to_json(whole.split).dump()) << o.ceiling;
      EXPECT_EQ(same.estimate.iteration_s, best) << o.ceiling;
      EXPECT_EQ(same.evaluated, whole.evaluated) << o.ceiling;
      EXPECT_EQ(same.refused, whole.refused) << o.ceiling;
      EXPECT_EQ(same.pruned, whole.pruned) << o.ceiling;
      EXPECT_EQ(same.bounded, whole.bounded) << o.ceiling;
      EXPECT_EQ(same.unexplored, whole.unexplored) << o.ceiling;
      ASSERT_EQ(same.finalists.size(), whole.finalists.size()) << o.ceiling;
      for (std::size_t i = 0; i < same.finalists.size(); ++i)
        EXPECT_EQ(same.finalists[i].estimate.iteration_s, whole.finalists[i].estimate.iteration_s);
      ASSERT_EQ(same.best_per_stages.size(), whole.best_per_stages.size()) << o.ceiling;
      for (std::size_t i = 0; i < same.best_per_stages.size(); ++i)
        EXPECT_EQ(same.best_per_stages[i].estimate.iteration_s,
                  whole.best_per_stages[i].estimate.iteration_s);
    }
  }
  // Some ceiling of these was asked with candidates left to climb.
  EXPECT_GT(climbed_ahead, 0);
}

}  // namespace
}  // namespace cephalo

// The class replay of split plans equals the full replay (sim/README.md, "class replay of split
// plans"): over random small split plans (1–3 stages, T 1 or 2 with and without sequence
// parallelism, GPipe / 1F1B / interleaved, every stage sharding, uneven replica batches and
// state shares, nodes of two GPU types so stages mix them, stages on whole nodes or striped
// over shared nodes, tied and untied embeddings, forced OOMs), sim::simulate_plan's report
// equals the full replay's field for field (all but `events`, the replay's own work) and
// every op of every representative starts and ends at the same nanosecond. Plans whose
// stages differ in replicas or lay their samples out otherwise cannot form classes: they
// replay in full, and say why (SimResult::full_replay_reason, on `cephalo simulate`'s stderr).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/report.hpp"
#include "class_replay_support.hpp"

namespace cephalo::sim {
namespace {

struct SplitInstance {
  Scenario scenario;
  Plan plan;
  bool aligned = true;  // every stage as many replicas, alike sample layouts
};

int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A random split instance: `nodes` nodes of `per_node` GPUs (types drawn per node, or per
// half), P stages of equal rank counts laid on whole nodes in order or striped TP group by TP
// group, then (when `misaligned`) one stage's replica sizes changed so that its transfers cross
// replicas, and (when `sub_steps`) every rank with an even share of each micro-batch running it
// in two sub-steps (DESIGN §4, "Ranks").
SplitInstance random_split(std::mt19937& rng, bool misaligned, bool sub_steps) {
  const std::vector<std::string> gpu = {"a100x80", "l4"};
  const int per_node = pick(rng, 0, 1) ? 4 : 2;
  const int T = pick(rng, 0, 2) == 0 ? 1 : 2;
  const int P = pick(rng, 1, 3);
  const bool interleaved = P > 1 && pick(rng, 0, 2) == 0;
  int nodes = 0;
  do nodes = pick(rng, 2, 6);
  while ((nodes * per_node) % (P * T) != 0 || nodes * per_node / (P * T) < 2);
  const bool mixed = pick(rng, 0, 2) == 0;
  Json node_list = Json::array();
  for (int n = 0; n < nodes; ++n) {
    // Alike halves (or every node its own draw): alike lanes are common, not universal.
    const auto t = static_cast<std::size_t>(mixed ? pick(rng, 0, 1) : (2 * n / nodes) % 2);
    std::string name = std::to_string(n);
    name.insert(name.begin(), 'n');
    node_list.push_back(
        {{"name", name},
         {"gpus", Json::array({{{"type", gpu[t]}, {"count", per_node}}})},
         {"intra_link", t == 0
                            ? Json{{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "3us"}}
                            : Json{{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
         {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "8us"}}}});
  }
  const int ranks = nodes * per_node;
  const int replicas = ranks / (P * T);
  const int m = interleaved ? 2 * P : pick(rng, P, P + 2);
  const int per_micro_batch = replicas + pick(rng, 0, replicas);  // uneven when not a multiple
  const std::vector<std::string> shardings = {"full", "hybrid", "optimizer", "none"};
  const bool tied = pick(rng, 0, 1) == 1;
  SplitInstance in;
  in.scenario =
      testing::class_test_scenario("split-class", node_list, 6, per_micro_batch * m, tied);

  ModelSplit split;
  split.tensor_parallel = T;
  split.sequence_parallel = T > 1 && pick(rng, 0, 1) == 1;
  split.micro_batches = m;
  split.sharding = *parse_sharding_kind(shardings[static_cast<std::size_t>(pick(rng, 0, 3))]);
  split.schedule =
      interleaved ? pipeline::PipelineSchedule{pipeline::PipelineSchedule::Kind::Interleaved, 2}
      : pick(rng, 0, 1) ? pipeline::PipelineSchedule{pipeline::PipelineSchedule::Kind::GPipe, 1}
                        : pipeline::PipelineSchedule{pipeline::PipelineSchedule::Kind::OneFOneB, 1};
  const bool striped = pick(rng, 0, 1) == 1;
  const int virtual_stages = interleaved ? 2 * P : P;
  for (int s = 0; s < P; ++s) {
    PipelineStage st;
    if (interleaved) {
      st.chunks = {{6 * s / virtual_stages, 6 * (s + 1) / virtual_stages},
                   {6 * (s + P) / virtual_stages, 6 * (s + P + 1) / virtual_stages}};
    } else {
      st.chunks = {{6 * s / P, 6 * (s + 1) / P}};
    }
    for (int g = 0; g < replicas; ++g)
      for (int t = 0; t < T; ++t)
        st.ranks.push_back(striped ? (g * P + s) * T + t : (s * replicas + g) * T + t);
    split.stages.push_back(st);
  }
  in.plan = even_split_plan(in.scenario, split, "<split plan>");
  const SplitTopology topo(split, ranks);
  if (misaligned && P > 1) {
    // The last stage moves a sample of each micro-batch from its first replica to its last.
    in.aligned = false;
    const int s = P - 1;
    auto& first = in.plan.ranks;
    if (first[static_cast<std::size_t>(topo.rank_at(s, 0, 0))].micro_batch < 2) {
      in.aligned = true;  // nothing to move
    } else {
      for (int t = 0; t < T; ++t) {
        for (int r : {topo.rank_at(s, 0, t), topo.rank_at(s, replicas - 1, t)}) {
          PlanRank& row = first[static_cast<std::size_t>(r)];
          row.micro_batch += r == topo.rank_at(s, 0, t) ? -1 : 1;
          row.batch = row.micro_batch * m;
        }
      }
    }
  }
  // Uneven state shares in every domain for some plans: by GPU type.
  if (pick(rng, 0, 1)) {
    const auto& devices = in.scenario.cluster.ranks();
    for (int s = 0; s < P; ++s)
      for (int t = 0; t < T; ++t) {
        const auto domain = topo.domain(s, t);
        double sum = 0;
        for (int r : domain) sum += devices[static_cast<std::size_t>(r)].local_index % 2 + 1.0;
        double given = 0;
        for (int r : domain) {
          const double w = (devices[static_cast<std::size_t>(r)].local_index % 2 + 1.0) / sum;
          in.plan.ranks[static_cast<std::size_t>(r)].state_share = w;
          given += w;
        }
        in.plan.ranks[static_cast<std::size_t>(domain.back())].state_share += 1 - given;
      }
  }
  if (pick(rng, 0, 1)) in.plan.prefetch = false;
  // (No draw: the other plans stay what they were.) A TP group's ranks share their share, so
  // they all split it or none does.
  if (sub_steps)
    for (PlanRank& row : in.plan.ranks)
      if (row.micro_batch % 2 == 0) {
        row.micro_batch /= 2;
        row.micro_batches *= 2;
      }
  validate_plan_for(in.plan, in.scenario, "<split plan>");
  return in;
}

TEST(SplitClassReplay, EqualsTheFullReplayOnRandomSplitPlans) {
  std::mt19937 rng(20261206);
  int compressed = 0, ooms = 0, fallbacks = 0, shared_nodes = 0, stepped = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const SplitInstance in = random_split(rng, trial % 6 == 5, trial % 4 == 1);
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    SimOptions options;
    if (trial % 7 == 0) options.usable_fraction = 0.03;  // out-of-memory verdicts agree too
    const int ranks = in.scenario.cluster.num_ranks();
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(in.plan.model_split, ranks));
    const auto graph = traces::build_training_graph(in.plan, in.scenario, models.comm.get());
    const SimResult full =
        simulate(graph, in.scenario, in.plan, *models.compute, *models.comm, options);
    const SimResult byclass =
        simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, options);
    const std::string said = byclass.full_replay_reason;
    EXPECT_EQ(full.iteration_ns, byclass.iteration_ns);
    ASSERT_EQ(testing::comparable(full.report).dump(), testing::comparable(byclass.report).dump());
    ooms += full.report.oom;
    stepped += std::any_of(in.plan.ranks.begin(), in.plan.ranks.end(), [&](const PlanRank& r) {
      return r.sub_steps(in.plan.model_split.micro_batches) > 1;
    });
    // The planner's bound on a replay refuses it exactly above what it builds, saying that.
    const int built = byclass.replayed_ranks;
    EXPECT_EQ(testing::refused_above(in.plan, in.scenario, models, built), 0);
    if (built > 1) {
      EXPECT_EQ(testing::refused_above(in.plan, in.scenario, models, built - 1), built);
    }
    if (!in.aligned) {
      ++fallbacks;
      EXPECT_EQ(byclass.replayed_ranks, ranks);
      EXPECT_NE(said.find("transfers cross replicas"), std::string::npos) << said;
      if (fallbacks == 1) {
        // `cephalo simulate` says it on stderr, in what it prints of the replay.
        const Simulation run =
            simulate_checked(in.scenario, in.plan, "<split plan>", "roofline", options, {});
        EXPECT_NE(render_replay_summary(run, in.scenario, in.plan)
                      .find("note: every rank replayed (no rank classes: "),
                  std::string::npos);
      }
      continue;
    }
    EXPECT_EQ(said, "");
    if (byclass.replayed_ranks == ranks) continue;
    ++compressed;
    // Every representative's program, as (start, end) pairs in program order, in both replays.
    const RankClasses classes = rank_classes(graph, in.scenario, in.plan);
    ASSERT_EQ(static_cast<int>(classes.representatives.size()), byclass.replayed_ranks);
    const auto small = traces::build_training_graph_of_ranks(
        in.plan, in.scenario, classes.representatives, models.comm.get());
    for (int r : classes.representatives)
      ASSERT_EQ(testing::program_times(graph, full, r), testing::program_times(small, byclass, r))
          << "representative " << r;
    // Nodes holding several replicas' TP groups (lanes joined in one component) compress too.
    const SplitTopology topo(in.plan.model_split, ranks);
    std::map<int, std::set<std::pair<int, int>>> groups_on_node;
    for (int r = 0; r < ranks; ++r)
      groups_on_node[in.scenario.cluster.ranks()[static_cast<std::size_t>(r)].node].insert(
          {topo.place(r).stage, topo.place(r).replica});
    bool shared = false;
    for (const auto& [node, groups] : groups_on_node) shared |= groups.size() > 1;
    shared_nodes += shared;
  }
  EXPECT_GE(compressed, 35);
  EXPECT_GE(ooms, 15);
  EXPECT_GE(fallbacks, 10);
  EXPECT_GE(shared_nodes, 20);
  EXPECT_GE(stepped, 10);
}

// The planner replays a split's finalists light (SimOptions::rank_rows = false) and reads
// their time and out-of-memory verdict: those are the full report's to the bit, class replay
// or not.
TEST(SplitClassReplay, WithoutRankRowsTheTimeAndVerdictAreTheFullReports) {
  std::mt19937 rng(20261207);
  int ooms = 0, compressed = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const SplitInstance in = random_split(rng, trial % 6 == 5, trial % 4 == 1);
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    SimOptions rows;
    if (trial % 5 == 0) rows.usable_fraction = 0.03;
    SimOptions light = rows;
    light.rank_rows = false;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " +
                 describe(in.plan.model_split, in.scenario.cluster.num_ranks()));
    const SimResult a = simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, rows);
    const SimResult b = simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, light);
    compressed += b.replayed_ranks < in.scenario.cluster.num_ranks();
    ooms += a.report.oom;
    EXPECT_EQ(a.iteration_ns, b.iteration_ns);
    EXPECT_EQ(a.report.iteration_time_s, b.report.iteration_time_s);
    EXPECT_EQ(a.report.samples_per_s, b.report.samples_per_s);
    EXPECT_EQ(a.report.mfu, b.report.mfu);
    EXPECT_EQ(a.report.oom, b.report.oom);
    ASSERT_EQ(a.report.oom_detail.has_value(), b.report.oom_detail.has_value());
    if (a.report.oom_detail) {
      EXPECT_EQ(traces::render_oom_detail(*a.report.oom_detail),
                traces::render_oom_detail(*b.report.oom_detail));
      EXPECT_EQ(a.report.oom_detail->bytes, b.report.oom_detail->bytes);
      EXPECT_EQ(a.report.oom_detail->capacity_bytes, b.report.oom_detail->capacity_bytes);
    }
    EXPECT_TRUE(b.report.ranks.empty());
  }
  EXPECT_GE(ooms, 8);
  EXPECT_GE(compressed, 20);
}

}  // namespace
}  // namespace cephalo::sim

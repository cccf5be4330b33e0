// The class-representative replay equals the full replay (its whole contract: it may only be
// faster): over random small clusters and plans (device mixes, NVLink and PCIe nodes, one or
// several nodes, layered and standard accumulation, prefetch or not, host offload or not, equal and
// uneven shares, batch splits repeated within a device type), the report of sim::simulate_plan in
// class mode is exactly the full replay's (iteration time, every rank's times and peaks, the OOM
// verdict), and every op of every representative starts and ends at the same nanosecond.
#include <gtest/gtest.h>

#include <random>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"

namespace cephalo::sim {
namespace {

struct Instance {
  Scenario scenario;
  Plan plan;
};

Instance random_instance(std::mt19937& rng) {
  const auto& catalog = costmodels::GpuCatalog::builtin();
  const std::vector<std::string> types = {"A100-80GB", "L4", "T4", "RTX-A6000"};
  std::uniform_int_distribution<int> nodes_d(1, 4), per_node_d(1, 4), type_d(0, 3), coin(0, 1),
      layers_d(1, 4), mb_d(1, 3);
  Instance in;
  Scenario& sc = in.scenario;
  sc.name = "class-replay";
  sc.cluster.name = sc.name;
  const int nodes = nodes_d(rng);
  std::vector<int> type_of_node;
  for (int n = 0; n < nodes; ++n) {
    Node node;
    node.name = "node" + std::to_string(n);
    const int t = type_d(rng);
    type_of_node.push_back(t);
    const bool nvlink = t == 0 && coin(rng);
    node.intra_link = nvlink ? LinkSpec{"nvlink", 300e9, 3e-6} : LinkSpec{"pcie", 25e9, 5e-6};
    node.nic = LinkSpec{"infiniband", 12.5e9, 5e-6};
    const int count = per_node_d(rng);
    for (int g = 0; g < count; ++g) {
      DeviceSlot slot;
      slot.type = types[t];
      slot.spec = catalog.get(types[t]);
      node.devices.push_back(slot);
    }
    sc.cluster.nodes.push_back(node);
  }
  ModelSpec& m = sc.job.model;
  m.name = "class-gpt";
  m.num_layers = layers_d(rng);
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.vocab_size = 50257;  // odd: equal shares of the embedding are not equal slices
  m.max_positions = 1024;
  sc.job.model_name = m.name;
  sc.job.sequence_length = 1024;
  Plan& p = in.plan;
  p.scenario = sc.name;
  p.accumulation = coin(rng) ? Accumulation::Layered : Accumulation::Standard;
  p.prefetch = coin(rng);
  p.offload = coin(rng) ? Offload::Host : Offload::None;
  p.uneven_collective = coin(rng) ? UnevenCollective::Grouped : UnevenCollective::Padded;
  // One row per device type, so ranks of a type share it (the case classes exploit); with
  // uneven shares, a type's share is split equally among its ranks.
  std::vector<int> mb_size(4), mb_count(4);
  for (int t = 0; t < 4; ++t) {
    mb_size[t] = mb_d(rng);
    mb_count[t] = mb_d(rng);
  }
  const bool uneven = coin(rng);
  std::vector<double> weight(4);
  for (int t = 0; t < 4; ++t) weight[t] = uneven ? 1.0 + t : 1.0;
  int total = 0;
  double weights = 0;
  int rank = 0;
  for (int n = 0; n < nodes; ++n)
    for (std::size_t g = 0; g < sc.cluster.nodes[n].devices.size(); ++g) {
      const int t = type_of_node[n];
      PlanRank pr;
      pr.rank = rank++;
      pr.node = n;
      pr.gpu = types[t];
      pr.micro_batch = mb_size[t];
      pr.micro_batches = mb_count[t];
      pr.batch = mb_size[t] * mb_count[t];
      pr.state_share = weight[t];
      weights += weight[t];
      total += pr.batch;
      p.ranks.push_back(pr);
    }
  double sum = 0;
  for (auto& r : p.ranks) {
    r.state_share /= weights;
    sum += r.state_share;
  }
  p.ranks.back().state_share += 1 - sum;
  sc.job.global_batch = total;
  return in;
}

TEST(ClassReplay, EqualsTheFullReplayOnRandomClusters) {
  std::mt19937 rng(20261201);
  int compressed = 0, multi_node = 0, ooms = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Instance in = random_instance(rng);
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    SimOptions options;
    options.usable_fraction = trial % 7 == 0 ? 0.02 : -1;  // a few out-of-memory verdicts
    const auto graph = traces::build_training_graph(in.plan, in.scenario);
    const SimResult full =
        simulate(graph, in.scenario, in.plan, *models.compute, *models.comm, options);
    const SimResult byclass =
        simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, options);
    const int ranks = in.scenario.cluster.num_ranks();
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(ranks) + " ranks, " +
                 std::to_string(byclass.replayed_ranks) + " replayed");
    if (byclass.replayed_ranks < ranks) ++compressed;
    multi_node += in.scenario.cluster.nodes.size() > 1;
    ooms += full.report.oom;
    EXPECT_EQ(full.iteration_ns, byclass.iteration_ns);
    const auto& a = full.report;
    const auto& b = byclass.report;
    EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
    EXPECT_EQ(a.samples_per_s, b.samples_per_s);
    EXPECT_EQ(a.mfu, b.mfu);
    EXPECT_EQ(a.oom, b.oom);
    ASSERT_EQ(a.oom_detail.has_value(), b.oom_detail.has_value());
    if (a.oom_detail) {
      EXPECT_EQ(a.oom_detail->rank, b.oom_detail->rank);
      EXPECT_EQ(a.oom_detail->op_name, b.oom_detail->op_name);
      EXPECT_EQ(a.oom_detail->bytes, b.oom_detail->bytes);
    }
    ASSERT_EQ(a.ranks.size(), b.ranks.size());
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
      EXPECT_EQ(a.ranks[r].compute_s, b.ranks[r].compute_s) << "rank " << r;
      EXPECT_EQ(a.ranks[r].comm_s, b.ranks[r].comm_s) << "rank " << r;
      EXPECT_EQ(a.ranks[r].copy_s, b.ranks[r].copy_s) << "rank " << r;
      EXPECT_EQ(a.ranks[r].exposed_comm_s, b.ranks[r].exposed_comm_s) << "rank " << r;
      EXPECT_EQ(a.ranks[r].idle_s, b.ranks[r].idle_s) << "rank " << r;
      EXPECT_EQ(a.ranks[r].peak_memory_bytes, b.ranks[r].peak_memory_bytes) << "rank " << r;
    }
    if (byclass.replayed_ranks == ranks) continue;
    // Op by op: the representatives' programs in both graphs.
    const auto classes = rank_classes(graph, in.scenario, in.plan);
    const auto small =
        traces::build_training_graph_of_ranks(in.plan, in.scenario, classes.representatives);
    for (int r : classes.representatives) {
      const auto big_prog = graph.program(r);
      const auto small_prog = small.program(r);
      ASSERT_EQ(big_prog.size(), small_prog.size());
      for (std::size_t k = 0; k < big_prog.size(); ++k) {
        const auto i = big_prog[k].id, j = small_prog[k].id;
        ASSERT_EQ(full.start_ns[i], byclass.start_ns[j]) << graph.op_name(i);
        ASSERT_EQ(full.end_ns[i], byclass.end_ns[j]) << graph.op_name(i);
      }
    }
  }
  // The instances exercise what they claim to.
  EXPECT_GE(compressed, 100);
  EXPECT_GE(multi_node, 60);
  EXPECT_GE(ooms, 10);
}

// A replay without the report's per-rank rows (SimOptions::rank_rows = false, the planner's
// candidate replays) answers as the full report does: the same iteration, rates and OOM
// verdict, and SimResult's per-rank peaks and capacities are the rows' own, in class mode and
// in full. What it leaves out is left out: no rows, no plan hash.
TEST(ClassReplay, WithoutRankRowsTheVerdictAndPeaksAreTheFullReports) {
  std::mt19937 rng(20261207);
  int ooms = 0, compressed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Instance in = random_instance(rng);
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    SimOptions rows;
    rows.usable_fraction = trial % 5 == 0 ? 0.02 : -1;  // a few out-of-memory verdicts
    SimOptions light = rows;
    light.rank_rows = false;
    const auto graph = traces::build_training_graph(in.plan, in.scenario);
    const SimResult full =
        simulate(graph, in.scenario, in.plan, *models.compute, *models.comm, rows);
    SCOPED_TRACE("trial " + std::to_string(trial));
    for (const SimResult& b :
         {simulate_plan(in.plan, in.scenario, *models.compute, *models.comm, light),
          simulate(graph, in.scenario, in.plan, *models.compute, *models.comm, light)}) {
      compressed += b.replayed_ranks > 0 && b.replayed_ranks < in.scenario.cluster.num_ranks();
      const auto& a = full.report;
      EXPECT_EQ(full.iteration_ns, b.iteration_ns);
      EXPECT_EQ(a.iteration_time_s, b.report.iteration_time_s);
      EXPECT_EQ(a.samples_per_s, b.report.samples_per_s);
      EXPECT_EQ(a.tokens_per_s, b.report.tokens_per_s);
      EXPECT_EQ(a.mfu, b.report.mfu);
      EXPECT_EQ(a.hfu, b.report.hfu);
      EXPECT_EQ(a.oom, b.report.oom);
      ASSERT_EQ(a.oom_detail.has_value(), b.report.oom_detail.has_value());
      if (a.oom_detail) {
        EXPECT_EQ(a.oom_detail->rank, b.report.oom_detail->rank);
        EXPECT_EQ(a.oom_detail->op_name, b.report.oom_detail->op_name);
        EXPECT_EQ(a.oom_detail->bytes, b.report.oom_detail->bytes);
        EXPECT_EQ(a.oom_detail->capacity_bytes, b.report.oom_detail->capacity_bytes);
      }
      EXPECT_TRUE(b.report.ranks.empty());
      EXPECT_TRUE(b.report.plan_hash.empty());
      ASSERT_EQ(b.peak_bytes.size(), a.ranks.size());
      ASSERT_EQ(b.capacity_bytes.size(), a.ranks.size());
      ASSERT_EQ(full.peak_bytes.size(), a.ranks.size());
      for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        EXPECT_EQ(a.ranks[r].peak_memory_bytes, b.peak_bytes[r]) << "rank " << r;
        EXPECT_EQ(a.ranks[r].capacity_bytes, b.capacity_bytes[r]) << "rank " << r;
        EXPECT_EQ(a.ranks[r].peak_memory_bytes, full.peak_bytes[r]) << "rank " << r;
      }
    }
    ooms += full.report.oom;
  }
  EXPECT_GE(ooms, 20);
  EXPECT_GE(compressed, 100);
}

// replay_plan keeps the full graph exactly when it replayed in full: per-op records (and memory
// timelines) force the full replay, whose graph names every op the report lists; a class
// replay has no full graph to give and reports what simulate_plan reports.
TEST(ClassReplay, ReplayPlanKeepsTheGraphOfAFullReplay) {
  std::mt19937 rng(20261202);
  int classed = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance in = random_instance(rng);
    const auto models = costmodels::make_cost_models(in.scenario, "roofline");
    const int ranks = in.scenario.cluster.num_ranks();
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(ranks) + " ranks");
    const PlanReplay plain = replay_plan(in.plan, in.scenario, *models.compute, *models.comm);
    const SimResult by_simulate_plan =
        simulate_plan(in.plan, in.scenario, *models.compute, *models.comm);
    EXPECT_EQ(plain.result.iteration_ns, by_simulate_plan.iteration_ns);
    EXPECT_EQ(plain.result.replayed_ranks, by_simulate_plan.replayed_ranks);
    EXPECT_EQ(plain.graph.has_value(), plain.result.replayed_ranks == ranks);
    classed += !plain.graph;

    for (const bool memory : {false, true}) {
      SimOptions options;
      options.record_ops = !memory;
      options.record_memory = memory;
      const PlanReplay full =
          replay_plan(in.plan, in.scenario, *models.compute, *models.comm, options);
      ASSERT_TRUE(full.graph.has_value());
      EXPECT_EQ(full.result.replayed_ranks, ranks);
      EXPECT_EQ(full.result.iteration_ns, plain.result.iteration_ns);
      EXPECT_EQ(full.result.start_ns.size(), full.graph->num_ops());
      if (!memory) {
        ASSERT_EQ(full.result.report.ops.size(), full.graph->num_ops());
        for (const auto& op : full.result.report.ops)
          EXPECT_LE(full.result.start_ns[op.id], full.result.end_ns[op.id]) << op.id;
      } else {
        EXPECT_EQ(full.result.memory.size(), static_cast<std::size_t>(ranks));
      }
    }
  }
  EXPECT_GE(classed, 10);  // the class path is exercised too
}

}  // namespace
}  // namespace cephalo::sim

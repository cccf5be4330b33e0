// Collectives as NCCL runs them (costmodels/src/nccl_tuning.hpp): which algorithm the
// hardware allows and the tuner picks, and the bound no algorithm may beat: its busiest link.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <unistd.h>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {

struct NodeShape {
  std::string gpu = "A100-80GB";
  int gpus = 8;
  LinkSpec intra{"nvlink", 300e9, 2e-6};
  LinkSpec nic{"ethernet", 25e9 / 8, 10e-6};  // per NIC
  int nic_count = 1;
  bool nvls = false, sharp = false;
};

Cluster cluster_of(const std::vector<NodeShape>& shapes) {
  Cluster c;
  c.name = "test";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const NodeShape& s = shapes[i];
    Node n;
    n.name = "n" + std::to_string(i);
    n.intra_link = s.intra;
    n.nic = s.nic;
    n.nic.bandwidth *= s.nic_count;
    n.nic_count = s.nic_count;
    n.nvls = s.nvls;
    n.sharp = s.sharp;
    DeviceSlot slot;
    slot.type = s.gpu;
    slot.spec = GpuCatalog::builtin().get(s.gpu);
    n.devices.assign(static_cast<std::size_t>(s.gpus), slot);
    c.nodes.push_back(n);
  }
  return c;
}

CollectiveRequest even_request(CollectiveKind kind, int ranks, double bytes) {
  CollectiveRequest r;
  r.kind = kind;
  for (int i = 0; i < ranks; ++i) r.ranks.push_back(i);
  r.shard_bytes.assign(static_cast<std::size_t>(ranks), bytes / ranks);
  return r;
}

}  // namespace

// The issue's case: 2 nodes × 8 A100, one 25 Gbit/s NIC each. NCCL's ring crosses each node's
// NIC once, so the NIC carries 15/16 of a 1 GiB all-gather: at least 322 ms at line rate.
TEST(NcclCollectives, AnAllGatherAcrossNodesIsBoundByTheNic) {
  const Cluster c = cluster_of({NodeShape{}, NodeShape{}});
  AlphaBetaCommModel model;
  const double gib = 1024.0 * 1024 * 1024;
  const auto e = model.collective(c, even_request(CollectiveKind::AllGather, 16, gib));
  EXPECT_EQ(e.algorithm, "ring");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_GE(e.seconds, 15.0 / 16 * gib / (25e9 / 8));
  EXPECT_LE(e.busbw, 25e9 / 8);
  // Four rails: with at least four channels the ring's channels leave through four NICs.
  NodeShape railed;
  railed.nic_count = 4;
  const Cluster r = cluster_of({railed, railed});
  const auto big = model.collective(r, even_request(CollectiveKind::AllGather, 16, gib));
  EXPECT_GE(big.channels, 4);
  EXPECT_NEAR(big.seconds / e.seconds, 0.25, 0.01);
  // A small message gets one channel, so one rail.
  const auto small = model.collective(r, even_request(CollectiveKind::AllGather, 16, 4e3));
  EXPECT_EQ(small.channels, 1);
  EXPECT_LE(small.link_bandwidth, 25e9 / 8 + 1);
}

// PAT only with one GPU per node, where it wins for mid-sized messages at scale; NVLS only on
// NVSwitch systems that declare it (Hopper or newer); CollNet only on SHARP fabrics.
TEST(NcclCollectives, AlgorithmsRunOnlyWhereTheHardwareHasThem) {
  AlphaBetaCommModel model;
  NodeShape single;
  single.gpus = 1;
  single.nic = {"infiniband", 200e9 / 8, 5e-6};
  const Cluster one_per_node = cluster_of(std::vector<NodeShape>(64, single));
  bool pat = false;
  for (double bytes = 1024; bytes <= 4e9; bytes *= 4)
    pat |= model.collective(one_per_node, even_request(CollectiveKind::AllGather, 64, bytes))
               .algorithm == "pat";
  EXPECT_TRUE(pat) << "PAT never chosen on 64 nodes of one GPU";
  NodeShape eight = single;
  eight.gpus = 8;
  const Cluster eight_per_node = cluster_of(std::vector<NodeShape>(8, eight));
  for (double bytes = 1024; bytes <= 4e9; bytes *= 4)
    EXPECT_NE(model.collective(eight_per_node, even_request(CollectiveKind::AllGather, 64, bytes))
                  .algorithm,
              "pat");

  NodeShape h100;
  h100.gpu = "H100-SXM";
  h100.intra = {"nvlink", 450e9, 2e-6};
  const double big = 1e9;
  const auto ring =
      model.collective(cluster_of({h100}), even_request(CollectiveKind::AllReduce, 8, big));
  EXPECT_EQ(ring.algorithm, "ring");
  h100.nvls = true;
  const auto nvls =
      model.collective(cluster_of({h100}), even_request(CollectiveKind::AllReduce, 8, big));
  EXPECT_EQ(nvls.algorithm, "nvls");
  EXPECT_LT(nvls.seconds, ring.seconds);
  NodeShape a100 = h100;
  a100.gpu = "A100-80GB";  // NVLS needs Hopper's NVLink SHARP
  EXPECT_EQ(model.collective(cluster_of({a100}), even_request(CollectiveKind::AllReduce, 8, big))
                .algorithm,
            "ring");

  NodeShape ib = eight;
  const auto plain =
      model.collective(cluster_of({ib, ib}), even_request(CollectiveKind::AllReduce, 16, big));
  ib.sharp = true;
  const auto collnet =
      model.collective(cluster_of({ib, ib}), even_request(CollectiveKind::AllReduce, 16, big));
  EXPECT_EQ(collnet.algorithm, "collnet");
  EXPECT_LT(collnet.seconds, plain.seconds);
  EXPECT_NE(plain.algorithm, "collnet");
}

// The invariant, over random clusters, participants, sizes, kinds and shares: no prediction
// beats the busiest link of the algorithm that ran, measured on the cluster's own numbers (not
// the model's): a ring or tree spanning nodes moves its bus bandwidth through every node's
// NICs (all rails together), one inside a node through the node's link; NVLS moves (n−1)/n of
// the buffer through each GPU's link, CollNet the buffer through each NIC. An all-gather or
// reduce-scatter spanning N nodes takes at least (N−1)/N × B over the slowest node's NICs.
TEST(NcclCollectives, NoPredictionBeatsTheSlowestLinkOfItsAlgorithm) {
  std::mt19937 rng(41);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<>(lo, hi)(rng);
  };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng); };
  const std::vector<std::string> gpus = {"A100-80GB", "H100-SXM", "V100-SXM2-32GB", "L4", "H200"};
  AlphaBetaCommModel model;
  std::map<std::string, int> seen;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<NodeShape> shapes(static_cast<std::size_t>(pick(1, 6)));
    for (auto& s : shapes) {
      s.gpu = gpus[static_cast<std::size_t>(pick(0, static_cast<int>(gpus.size()) - 1))];
      s.gpus = pick(1, 8);
      const bool nvlink = pick(0, 1) == 1;
      s.intra = nvlink ? LinkSpec{"nvlink", uniform(100e9, 900e9), uniform(1e-6, 3e-6)}
                       : LinkSpec{"pcie", uniform(8e9, 64e9), uniform(3e-6, 8e-6)};
      const bool ib = pick(0, 1) == 1;
      s.nic = {ib ? "infiniband" : "ethernet", uniform(10e9, 400e9) / 8, uniform(2e-6, 20e-6)};
      s.nic_count = pick(1, 8);
      s.nvls = nvlink && pick(0, 1) == 1;
      s.sharp = ib && pick(0, 1) == 1;
    }
    const Cluster c = cluster_of(shapes);
    const int total_ranks = c.num_ranks();
    if (total_ranks < 2) continue;
    CollectiveRequest r;
    r.kind = static_cast<CollectiveKind>(pick(0, 3));
    std::vector<int> all(static_cast<std::size_t>(total_ranks));
    for (int i = 0; i < total_ranks; ++i) all[static_cast<std::size_t>(i)] = i;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<std::size_t>(pick(2, total_ranks)));
    r.ranks = all;
    const double bytes = std::exp(uniform(std::log(1.0), std::log(4e9)));
    const bool uneven = pick(0, 3) == 0 && (r.kind == CollectiveKind::AllGather ||
                                            r.kind == CollectiveKind::ReduceScatter);
    for (std::size_t i = 0; i < r.ranks.size(); ++i)
      r.shard_bytes.push_back(bytes / static_cast<double>(r.ranks.size()) *
                              (uneven ? uniform(0.2, 1.8) : 1.0));
    if (uneven) r.uneven = static_cast<UnevenCollective>(pick(0, 2));
    const CollectiveEstimate e = model.collective(c, r);
    const std::string what = "trial " + std::to_string(trial) + ": " + to_string(r.kind) + " " +
                             std::to_string(e.total_bytes) + " B over " +
                             std::to_string(r.ranks.size()) + " ranks, " + e.algorithm + "/" +
                             e.protocol + "/" + std::to_string(e.channels);
    ++seen[e.algorithm];
    // The cluster's own numbers for the participants.
    std::set<int> nodes;
    const auto& table = c.ranks();
    for (int rank : r.ranks) nodes.insert(table[static_cast<std::size_t>(rank)].node);
    double nic = std::numeric_limits<double>::infinity(), intra = nic;
    std::map<int, int> per_node;
    for (int rank : r.ranks) ++per_node[table[static_cast<std::size_t>(rank)].node];
    for (int node : nodes) {
      const Node& n = c.nodes[static_cast<std::size_t>(node)];
      nic = std::min(nic, n.nic.bandwidth);
      if (per_node[node] > 1) intra = std::min(intra, n.intra_link.bandwidth);
    }
    const double slowest = nodes.size() > 1 ? std::min(nic, intra) : intra;
    ASSERT_GT(e.seconds, 0) << what;
    EXPECT_LE(e.link_bytes / e.seconds, e.link_bandwidth * (1 + 1e-9)) << what;
    const std::string& a = e.algorithm;
    const int n = static_cast<int>(r.ranks.size());
    if (a == "nvls") {
      EXPECT_LE(e.algbw * (n - 1) / n, intra) << what;
    } else if (a == "collnet") {
      EXPECT_LE(e.algbw, nic) << what;
    } else if (!uneven) {
      EXPECT_LE(e.busbw, slowest * (1 + 1e-9)) << what;
    }
    const bool sharded =
        r.kind == CollectiveKind::AllGather || r.kind == CollectiveKind::ReduceScatter;
    if (sharded && nodes.size() > 1) {
      const double N = static_cast<double>(nodes.size());
      const double largest = *std::max_element(r.shard_bytes.begin(), r.shard_bytes.end());
      const double floor_bytes = uneven ? e.total_bytes - largest : (N - 1) / N * e.total_bytes;
      EXPECT_GE(e.seconds * (1 + 1e-9), floor_bytes / nic) << what;
    }
  }
  // The random clusters exercise more than the ring.
  EXPECT_GE(seen.size(), 4u);
}

// In-network reduction is declared where the switch is: `intra_link.nvls` (NVLink SHARP on an
// NVSwitch) and `nic.sharp` (SHARP in an InfiniBand fabric). Each is read, written back, and
// refused on a link that cannot have it, naming its path.
TEST(Scenario, NvlsAndSharpAreDeclaredOnTheirLinks) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-sharp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& intra, const std::string& nic) {
    auto f = dir / "s.json";
    std::ofstream(f) << R"({"cluster": {"nodes": [{"gpus": [{"type": "H100-SXM", "count": 8}], )"
                     << R"("intra_link": )" << intra << R"(, "nic": )" << nic
                     << R"(}]}, "job": {"model": "gpt-2.7b", "sequence_length": 512, )"
                     << R"("global_batch": 16}})";
    return f;
  };
  const std::string nvlink = R"({"kind": "nvlink", "bandwidth": "450GB/s", "nvls": true})";
  const std::string ib = R"({"kind": "infiniband", "count": 8, "bandwidth": "400Gbit/s", )"
                         R"("sharp": true})";
  const auto s = costmodels::load_scenario(write(nvlink, ib));
  EXPECT_TRUE(s.cluster.nodes[0].nvls);
  EXPECT_TRUE(s.cluster.nodes[0].sharp);
  const Json j = to_json(s.cluster);
  EXPECT_EQ(j["nodes"][0]["intra_link"]["nvls"], true);
  EXPECT_EQ(j["nodes"][0]["nic"]["sharp"], true);
  const auto plain = costmodels::load_scenario(
      write(R"({"kind": "nvlink", "bandwidth": "450GB/s"})", R"({"kind": "ethernet", )"
                                                             R"("bandwidth": "100Gbit/s"})"));
  EXPECT_FALSE(plain.cluster.nodes[0].nvls);
  EXPECT_FALSE(plain.cluster.nodes[0].sharp);
  EXPECT_FALSE(to_json(plain.cluster)["nodes"][0]["nic"].contains("sharp"));
  struct Bad {
    std::string intra, nic, path;
  };
  const std::vector<Bad> bad = {
      {R"({"kind": "pcie", "generation": 4, "nvls": true})", ib, "intra_link.nvls"},
      {nvlink, R"({"kind": "ethernet", "bandwidth": "100Gbit/s", "sharp": true})", "nic.sharp"},
      {nvlink, R"({"kind": "infiniband", "bandwidth": "100Gbit/s", "sharp": "yes"})", "nic.sharp"}};
  for (const auto& b : bad) {
    try {
      costmodels::load_scenario(write(b.intra, b.nic));
      ADD_FAILURE() << "accepted a bad " << b.path;
    } catch (const ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find(b.path), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

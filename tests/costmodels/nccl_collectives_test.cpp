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
#include "comm_topology.hpp"
#include "nccl_tuning.hpp"

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

namespace {

// The member-by-member walk the model's shape is checked against: every member's hop to the
// next one and every member's device flags, in ring order (the model walks a node's run of
// members at a time and adds a node's intra hop once).
costmodels::detail::CollectiveShape shape_member_by_member(const costmodels::detail::Topology& topo,
                                                           const Cluster& cluster,
                                                           const std::vector<int>& ranks) {
  costmodels::detail::CollectiveShape s;
  s.ranks = static_cast<int>(ranks.size());
  s.nic_bandwidth = std::numeric_limits<double>::infinity();
  s.rails = std::numeric_limits<int>::max();
  s.nvlink = s.ll128 = s.nvls = s.sharp = true;
  s.nvls_efficiency = 1;
  int run = 0, last_node = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RankDevice& d = topo.rank(ranks[i]);
    const int next = ranks[(i + 1) % ranks.size()];
    const costmodels::detail::Hop hop = topo.between(ranks[i], next);
    s.all.add(hop);
    if (topo.rank(next).node == d.node && ranks.size() > 1) s.intra.add(hop);
    const std::string& arch = d.slot->spec.architecture;
    s.host |= d.slot->spec.kind == "cpu";
    s.ll128 &= arch == "volta" || arch == "ampere" || arch == "hopper";
    s.nvls_efficiency = std::min(s.nvls_efficiency, arch == "hopper"      ? 0.85
                                                    : arch == "blackwell" ? 0.74
                                                                          : 0.0);
    run = d.node == last_node ? run + 1 : 1;
    s.per_node = std::max(s.per_node, run);
    if (d.node == last_node) continue;
    last_node = d.node;
    ++s.nodes;
    const Node& node = cluster.nodes[static_cast<std::size_t>(d.node)];
    const int rails = std::max(1, node.nic_count);
    const costmodels::detail::Hop nic = topo.nic(d.node);
    s.rails = std::min(s.rails, rails);
    s.nic_bandwidth = std::min(s.nic_bandwidth, nic.bandwidth / rails);
    s.nic_latency = std::max(s.nic_latency, nic.latency);
    s.nvlink &= node.intra_link.kind == "nvlink";
    s.nvls &= node.nvls;
    s.sharp &= node.sharp;
  }
  s.ll128 &= s.nvlink;
  s.nvls &= s.nvls_efficiency > 0 && s.per_node > 1;
  return s;
}

// The cross-group reduction priced one algorithm at a time, each walking every piece's ring
// (the model walks the hops once for both).
double cross_group_by_algorithm(const costmodels::detail::Topology& topo,
                                const std::vector<ReductionPiece>& pieces, int num_nodes) {
  double best = std::numeric_limits<double>::infinity();
  for (const bool tree : {false, true}) {
    std::vector<double> out(static_cast<std::size_t>(num_nodes), 0.0), in(out.size(), 0.0);
    std::map<int, double> intra_out, intra_bw;
    double latency = 0;
    int steps = 0;
    bool any_tree = false;
    for (const auto& p : pieces) {
      std::vector<int> owners = p.owners;
      std::sort(owners.begin(), owners.end());
      const int k = static_cast<int>(owners.size());
      if (k < 2 || p.bytes <= 0) continue;
      const bool use_tree = tree && k > 2;
      any_tree |= use_tree;
      const double per_hop = use_tree ? 2.0 * p.bytes : 2.0 * (k - 1) * p.bytes / k;
      steps = std::max(
          steps, use_tree ? 2 * static_cast<int>(std::ceil(std::log2(double(k)))) : 2 * (k - 1));
      for (int i = 0; i < k; ++i) {
        const int a = owners[static_cast<std::size_t>(i)];
        const int b = owners[static_cast<std::size_t>((i + 1) % k)];
        const costmodels::detail::Hop hop = topo.between(a, b);
        latency = std::max(latency, hop.latency);
        const int na = topo.rank(a).node, nb = topo.rank(b).node;
        if (na == nb) {
          intra_out[a] += per_hop;
          intra_bw[a] = hop.bandwidth;
        } else {
          out[static_cast<std::size_t>(na)] += per_hop;
          in[static_cast<std::size_t>(nb)] += per_hop;
        }
      }
    }
    if (tree && !any_tree) continue;
    double bandwidth_s = 0;
    for (int n = 0; n < num_nodes; ++n) {
      const double load =
          std::max(out[static_cast<std::size_t>(n)], in[static_cast<std::size_t>(n)]);
      if (load > 0) bandwidth_s = std::max(bandwidth_s, load / topo.nic(n).bandwidth);
    }
    for (const auto& [r, bytes] : intra_out)
      bandwidth_s = std::max(bandwidth_s, bytes / intra_bw[r]);
    best = std::min(best, steps * latency + bandwidth_s);
  }
  return best;
}

// Random clusters of mixed nodes (GPU types mixed inside a node too, PCIe and NVLink, CPU
// ranks), as collective_walk_cluster's callers below use them.
struct RandomClusters {
  std::mt19937 rng{43};
  double uniform(double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(rng); }
  int pick(int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng); }
  Cluster next() {
    const std::vector<std::string> gpus = {"A100-80GB", "H100-SXM", "V100-SXM2-32GB", "L4",
                                           "CPU-core"};
    std::vector<NodeShape> shapes(static_cast<std::size_t>(pick(1, 7)));
    for (auto& s : shapes) {
      s.gpu = gpus[static_cast<std::size_t>(pick(0, static_cast<int>(gpus.size()) - 1))];
      s.gpus = pick(1, 8);
      const bool nvlink = pick(0, 1) == 1;
      s.intra = nvlink ? LinkSpec{"nvlink", uniform(100e9, 900e9), uniform(1e-6, 3e-6)}
                       : LinkSpec{"pcie", uniform(8e9, 64e9), uniform(3e-6, 8e-6)};
      // Equal NIC speeds on some clusters, so that hops tie and the bottleneck's kind is the
      // first slowest hop's.
      s.nic = {pick(0, 1) == 1 ? "infiniband" : "ethernet",
               pick(0, 1) == 1 ? 50e9 : uniform(10e9, 400e9) / 8, uniform(2e-6, 20e-6)};
      s.nic_count = pick(1, 8);
      s.nvls = nvlink && pick(0, 1) == 1;
      s.sharp = pick(0, 1) == 1;
    }
    Cluster c = cluster_of(shapes);
    c.nodes.edit([&](std::vector<Node>& nodes) {
      for (Node& n : nodes)
        for (DeviceSlot& d : n.devices)
          if (pick(0, 5) == 0) {
            d.type = gpus[static_cast<std::size_t>(pick(0, 3))];
            d.spec = GpuCatalog::builtin().get(d.type);
          }
    });
    return c;
  }
  // A random subset of the cluster's ranks in rank order (at least `least` of them).
  std::vector<int> members(const Cluster& c, int least) {
    std::vector<int> all(static_cast<std::size_t>(c.num_ranks()));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    if (pick(0, 2) != 0) {
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(static_cast<std::size_t>(pick(least, static_cast<int>(all.size()))));
      std::sort(all.begin(), all.end());
    }
    return all;
  }
};

void expect_same_links(const costmodels::detail::RingLinks& a,
                       const costmodels::detail::RingLinks& b, const std::string& what) {
  EXPECT_EQ(a.bandwidth, b.bandwidth) << what;
  EXPECT_EQ(a.latency, b.latency) << what;
  EXPECT_EQ(a.bottleneck_kind, b.bottleneck_kind) << what;
}

}  // namespace

// The shape NCCL's tuner reads, walked a node's run of members at a time, is the member-by-member
// walk's in every field, on random mixed clusters and member sets.
TEST(NcclCollectives, TheShapeByNodeRunsIsTheMemberByMemberShape) {
  RandomClusters random;
  AlphaBetaCommModel model;
  for (int trial = 0; trial < 300; ++trial) {
    const Cluster c = random.next();
    const std::vector<int> ranks = random.members(c, 1);
    const auto kind = static_cast<CollectiveKind>(random.pick(0, 3));
    const costmodels::detail::Topology topo(c, model.calibration(), random.pick(0, 1) == 1, kind);
    const auto got = costmodels::detail::collective_shape(topo, c, ranks);
    const auto want = shape_member_by_member(topo, c, ranks);
    const std::string what =
        "trial " + std::to_string(trial) + ", " + std::to_string(ranks.size()) + " members";
    EXPECT_EQ(got.ranks, want.ranks) << what;
    EXPECT_EQ(got.nodes, want.nodes) << what;
    EXPECT_EQ(got.per_node, want.per_node) << what;
    EXPECT_EQ(got.host, want.host) << what;
    expect_same_links(got.all, want.all, what + " (all)");
    expect_same_links(got.intra, want.intra, what + " (intra)");
    EXPECT_EQ(got.nic_bandwidth, want.nic_bandwidth) << what;
    EXPECT_EQ(got.nic_latency, want.nic_latency) << what;
    EXPECT_EQ(got.rails, want.rails) << what;
    EXPECT_EQ(got.nvlink, want.nvlink) << what;
    EXPECT_EQ(got.ll128, want.ll128) << what;
    EXPECT_EQ(got.nvls, want.nvls) << what;
    EXPECT_EQ(got.nvls_efficiency, want.nvls_efficiency) << what;
    EXPECT_EQ(got.sharp, want.sharp) << what;
  }
}

// The grouped variant's hops, read once per run of a node's members, are Topology::between's
// hop by hop (a hop between nodes left to the NIC share when asked), on random mixed clusters
// (PCIe nodes, whose hops differ per GPU slot, among them) and member sets.
TEST(NcclCollectives, TheRingHopsByNodeRunsAreTheHopByHopLinks) {
  RandomClusters random;
  AlphaBetaCommModel model;
  for (int trial = 0; trial < 300; ++trial) {
    const Cluster c = random.next();
    const std::vector<int> ranks = random.members(c, 1);
    const costmodels::detail::Topology topo(c, model.calibration(), random.pick(0, 1) == 1,
                                            static_cast<CollectiveKind>(random.pick(0, 3)));
    for (const bool nic_share : {false, true}) {
      const auto got = costmodels::detail::ring_hop_bandwidths(topo, ranks, nic_share);
      ASSERT_EQ(got.size(), ranks.size());
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        const int prev = ranks[(i + ranks.size() - 1) % ranks.size()];
        const bool crosses = topo.rank(prev).node != topo.rank(ranks[i]).node;
        const double want = nic_share && crosses ? -1.0 : topo.between(prev, ranks[i]).bandwidth;
        EXPECT_EQ(got[i], want) << "trial " << trial << ", member " << i << ", nic share "
                                << nic_share;
      }
    }
  }
}

// A request is priced the same whether its members come in rank order (read in place) or in
// any other order (sorted with their shards), and a cross-group reduction the same as each
// algorithm priced by its own walk of the pieces.
TEST(NcclCollectives, AnyMemberOrderAndTheCrossGroupWalkPriceAlike) {
  RandomClusters random;
  AlphaBetaCommModel model;
  std::set<std::string> cross_algorithms;
  for (int trial = 0; trial < 300; ++trial) {
    const Cluster c = random.next();
    if (c.num_ranks() < 2) continue;
    CollectiveRequest in_order;
    in_order.kind = static_cast<CollectiveKind>(random.pick(0, 3));
    in_order.ranks = random.members(c, 2);
    const double bytes = std::exp(random.uniform(0, std::log(4e9)));
    const bool uneven = random.pick(0, 1) == 1;
    // Whole byte counts: their total is exact in any order (the model sums the shards in
    // request order, so fractional sizes could differ in the last bit between the orders).
    for (std::size_t i = 0; i < in_order.ranks.size(); ++i)
      in_order.shard_bytes.push_back(std::floor(bytes * (uneven ? random.uniform(0.2, 1.8) : 1.0)));
    in_order.uneven = static_cast<UnevenCollective>(random.pick(0, 2));
    const bool cross = random.pick(0, 2) == 0;
    if (cross) {
      // Pieces over the members, each owned by a few of them.
      in_order.kind = CollectiveKind::AllReduce;
      const int pieces = random.pick(1, 4);
      for (int p = 0; p < pieces; ++p) {
        ReductionPiece piece;
        piece.bytes = bytes / pieces;
        for (int r : in_order.ranks)
          if (random.pick(0, 2) != 0) piece.owners.push_back(r);
        std::shuffle(piece.owners.begin(), piece.owners.end(), random.rng);
        in_order.pieces.push_back(std::move(piece));
      }
    }
    CollectiveRequest shuffled = in_order;
    std::vector<std::size_t> order(in_order.ranks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), random.rng);
    for (std::size_t i = 0; i < order.size(); ++i) {
      shuffled.ranks[i] = in_order.ranks[order[i]];
      shuffled.shard_bytes[i] = in_order.shard_bytes[order[i]];
    }
    const std::string what = "trial " + std::to_string(trial);
    const CollectiveEstimate a = model.collective(c, in_order);
    const CollectiveEstimate b = model.collective(c, shuffled);
    EXPECT_EQ(a.seconds, b.seconds) << what;
    EXPECT_EQ(a.algorithm, b.algorithm) << what;
    EXPECT_EQ(a.protocol, b.protocol) << what;
    EXPECT_EQ(a.channels, b.channels) << what;
    EXPECT_EQ(a.link_bytes, b.link_bytes) << what;
    EXPECT_EQ(a.link_bandwidth, b.link_bandwidth) << what;
    EXPECT_EQ(a.variant, b.variant) << what;
    if (cross) {
      const costmodels::detail::Topology topo(c, model.calibration(), false,
                                              CollectiveKind::AllReduce);
      const double want =
          cross_group_by_algorithm(topo, in_order.pieces, static_cast<int>(c.nodes.size()));
      if (std::isfinite(want)) {
        EXPECT_EQ(a.seconds, want + model.calibration().launch_overhead_s) << what;
        cross_algorithms.insert(a.algorithm);
      }
    }
  }
  // Both cross-group algorithms won somewhere.
  EXPECT_EQ(cross_algorithms.size(), 2u);
}

// A bad member is named as before whichever way the members come: the first out-of-range one
// in request order, or the first repeat.
TEST(NcclCollectives, ABadMemberIsNamedInEitherOrder) {
  const Cluster c = cluster_of({NodeShape{}, NodeShape{}});
  AlphaBetaCommModel model;
  auto refused = [&](std::vector<int> ranks) {
    CollectiveRequest r;
    r.ranks = std::move(ranks);
    r.shard_bytes.assign(r.ranks.size(), 1e6);
    try {
      model.collective(c, r);
    } catch (const ValidationError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({0, 1, 16, 17}).find("16"), std::string::npos);
  EXPECT_NE(refused({0, 1, 16, 17}).find("a rank of the cluster (0..15)"), std::string::npos);
  EXPECT_NE(refused({-1, 0, 1}).find("-1"), std::string::npos);
  EXPECT_NE(refused({17, 3, 16}).find("17"), std::string::npos);
  EXPECT_NE(refused({3, 2, 3}).find("each rank at most once"), std::string::npos);
  EXPECT_EQ(refused({0, 1, 15}), "accepted");
}

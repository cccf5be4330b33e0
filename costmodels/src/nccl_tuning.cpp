#include "nccl_tuning.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace cephalo::costmodels::detail {

std::string to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::LL:
      return "LL";
    case Protocol::LL128:
      return "LL128";
    case Protocol::Simple:
      return "Simple";
    case Protocol::Host:
      return "host";
  }
  return "?";
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// NCCL's tuning constants (src/graph/tuning.cc, NCCL 2.2x; facts, restated): per-call base
// latency by algorithm and protocol, and per-step hardware latency by link class, in µs.
enum Family { kRing, kTree, kPat, kNvls, kCollNet, kFamilies };
enum LinkClass { kNvlinkClass, kPciClass, kNetClass };
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr double kBaseLatencyUs[kFamilies][3] = {
    {6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}, {0, 0, 8.0}, {0, 0, 0}, {0, 0, 0}};
constexpr double kStepLatencyUs[3][kFamilies][3] = {
    // ring, tree, PAT, NVLS, CollNet (chain)
    {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}, {0, 0, 4.0}, {0, 0, 25.0}, {0, 0, 2.8}},      // NVLink
    {{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}, {0, 0, 4.0}, {0, 0, 0}, {0, 0, 2.8}},          // PCI
    {{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}, {0, 0, 14.0}, {0, 0, 18.0}, {0, 0, 30.0}}};  // net

int index(Protocol p) { return p == Protocol::LL ? kLL : p == Protocol::LL128 ? kLL128 : kSimple; }

// The link's α (the cluster's, or the sweep's fit) is what one step of a Simple ring costs on
// it; other algorithms and protocols scale it as NCCL's constants do on that link class.
double step_latency(double alpha, LinkClass cls, Family family, Protocol p) {
  if (p == Protocol::Host) return alpha;
  return alpha * kStepLatencyUs[cls][family][index(p)] / kStepLatencyUs[cls][kRing][kSimple];
}

double base_latency(Family family, Protocol p) {
  return p == Protocol::Host ? 0.0 : kBaseLatencyUs[family][index(p)] * 1e-6;
}

// Channels. A channel is one CUDA block driving one ring (tree); NCCL opens enough of them to
// fill the links (at most 32) and, for a small message, only as many as get a minimum share of
// it each (threads per block × bytes per thread: 512 × 64 B for Simple, 640 × 8 B for LL128,
// 512 × 8 B per rank of a ring for LL). One channel of Simple moves at most ~40 GB/s (the
// fastest per-channel speed of NCCL's NVLink ring search), LL128 ~18 GB/s (NCCL's LL128 cap).
constexpr int kMaxChannels = 32;
double channel_bandwidth(Protocol p) { return p == Protocol::LL128 ? 18e9 : 40e9; }
double channel_min_bytes(Protocol p, Family family, int ranks) {
  switch (p) {
    case Protocol::LL:
      return 512.0 * 8 * (family == kRing ? ranks : 1);
    case Protocol::LL128:
      return 640.0 * 8;
    default:
      return 512.0 * 64;
  }
}

// What crosses between nodes with `channels` channels: each channel's ring (tree) leaves a
// node through one NIC, so the channels spread over at most `rails` NICs.
double inter_bandwidth(const CollectiveShape& s, int channels) {
  return s.nic_bandwidth * std::min(s.rails, channels);
}
double links_bandwidth(const CollectiveShape& s, int channels) {
  double bw = s.intra.bandwidth;  // infinite when no two participants share a node
  if (s.nodes > 1) bw = std::min(bw, inter_bandwidth(s, channels));
  return bw;
}

int max_channels(const CollectiveShape& s) {
  const double fill = std::ceil(links_bandwidth(s, s.rails) / channel_bandwidth(Protocol::Simple));
  const double c = std::max({2.0, static_cast<double>(s.rails), std::isfinite(fill) ? fill : 2.0});
  return static_cast<int>(std::min<double>(kMaxChannels, c));
}

int channels(const CollectiveShape& s, Protocol p, Family family, double bytes) {
  if (p == Protocol::Host) return 1;
  const double fit = std::floor(bytes / channel_min_bytes(p, family, s.ranks));
  return static_cast<int>(std::clamp<double>(fit, 1, max_channels(s)));
}

LinkClass intra_class(const CollectiveShape& s) { return s.nvlink ? kNvlinkClass : kPciClass; }

// The bytes the busiest link of a ring carries per byte of buffer are nccl-tests' bus factor.
double ring_traffic(CollectiveKind kind, int n) { return bus_bandwidth_factor(kind, n); }

// A ring's steps, those crossing nodes priced at the NICs' α (both ends), the others at the
// intra link's (NCCL: (steps − inter steps) × intra + inter steps × net).
double ring_latency(CollectiveKind kind, const CollectiveShape& s, Protocol p) {
  const int n = s.ranks;
  const bool twice = kind == CollectiveKind::AllReduce;
  const int steps = twice ? 2 * (n - 1) : n - 1;
  if (p == Protocol::Host) return steps * s.all.latency;
  const int inter = s.nodes > 1 ? (twice ? 2 : 1) * (s.nodes - 1) : 0;
  // With one GPU per node nothing hides the network's latency: NCCL then prices each
  // inter-node step as the tree's.
  const Family net = s.per_node == 1 ? kTree : kRing;
  return base_latency(kRing, p) +
         (steps - inter) * step_latency(s.intra.latency, intra_class(s), kRing, p) +
         inter * step_latency(2 * s.nic_latency, kNetClass, net, p);
}

// A ring's protocol efficiency (NCCL: LL moves 8 bytes of data per 16, LL128 120 per 128,
// 70 % where a GPU sends and receives through the same NIC, one GPU per node).
double ring_efficiency(Protocol p, const CollectiveShape& s) {
  if (p == Protocol::LL128) return s.per_node == 1 ? 0.7 : 0.92;
  return p == Protocol::LL ? 0.5 : 1.0;
}

struct Cost {
  double latency = 0;
  double link_bytes = 0;
  double link_bandwidth = 0;
};

double capped(double bandwidth, Protocol p, int c) {
  return p == Protocol::Host ? bandwidth : std::min(bandwidth, c * channel_bandwidth(p));
}

Cost ring_cost(CollectiveKind kind, const CollectiveShape& s, Protocol p, int c, double bytes) {
  const double bw = p == Protocol::Host ? s.all.bandwidth : links_bandwidth(s, c);
  return {ring_latency(kind, s, p), ring_traffic(kind, s.ranks) * bytes,
          capped(bw * ring_efficiency(p, s), p, c)};
}

// Double binary tree across nodes, a chain inside each: every link carries the buffer up and
// down (NCCL converts its bus bandwidth to algorithm bandwidth by ½), depth log2(nodes).
Cost tree_cost(CollectiveKind, const CollectiveShape& s, Protocol p, int c, double bytes) {
  if (p == Protocol::Host)
    return {2 * std::ceil(std::log2(static_cast<double>(s.ranks))) * s.all.latency, 2 * bytes,
            s.all.bandwidth};
  const double proto = p == Protocol::LL      ? 1.0 / 3.8
                       : p == Protocol::LL128 ? (s.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0)
                                              : 1.0;
  const double depth = std::ceil(std::log2(static_cast<double>(s.nodes)));
  const double latency =
      base_latency(kTree, p) +
      2 * ((s.per_node - 1) * step_latency(s.intra.latency, intra_class(s), kTree, p) +
           depth * step_latency(2 * s.nic_latency, kNetClass, kTree, p));
  return {latency, 2 * bytes, capped(links_bandwidth(s, c) * 0.92 * proto, p, c)};
}

// PAT (NCCL 2.23+, one GPU per node): logarithmic latency plus a linear part, 75 % of the
// ring's bandwidth; each rank still receives (n−1)/n of the buffer through its NIC.
Cost pat_cost(CollectiveKind, const CollectiveShape& s, Protocol p, int c, double bytes) {
  const double latency = base_latency(kPat, p) +
                         std::ceil(std::log2(static_cast<double>(s.ranks))) *
                             step_latency(2 * s.nic_latency, kNetClass, kTree, p) / 3.5 +
                         s.ranks * 2.8e-6;
  return {latency, ring_traffic(CollectiveKind::AllGather, s.ranks) * bytes,
          capped(inter_bandwidth(s, c) * 0.75, p, c)};
}

// NVLS all-reduce inside one node: the NVSwitch reduces (multimem loads) and multicasts, so a
// GPU's link carries about (n−1)/n of the buffer, not a ring's 2(n−1)/n; one channel of the
// pipeline is lost to the other (NCCL: efficiency × (channels − 1) / channels).
Cost nvls_cost(CollectiveKind, const CollectiveShape& s, Protocol p, int c, double bytes) {
  c = std::max(c, 2);
  return {step_latency(s.intra.latency, kNvlinkClass, kNvls, p),
          ring_traffic(CollectiveKind::AllGather, s.ranks) * bytes,
          s.intra.bandwidth * s.nvls_efficiency * (c - 1) / c};
}

// CollNet (chain): each node reduces along a chain of its GPUs, the fabric's switches reduce
// across nodes (SHARP): a NIC carries the buffer once each way, at 90 % (NCCL's factor).
Cost collnet_cost(CollectiveKind, const CollectiveShape& s, Protocol p, int c, double bytes) {
  const double latency =
      2 * (s.per_node - 1) * step_latency(s.intra.latency, intra_class(s), kCollNet, p) +
      step_latency(2 * s.nic_latency, kNetClass, kCollNet, p);
  const double bw = std::min(s.intra.bandwidth, inter_bandwidth(s, c) * 0.9);
  return {latency, bytes, bw};
}

bool any_kind(CollectiveKind, const CollectiveShape& s) { return s.ranks > 1; }
bool tree_allowed(CollectiveKind kind, const CollectiveShape& s) {
  return kind == CollectiveKind::AllReduce && s.ranks > 2;
}
bool pat_allowed(CollectiveKind kind, const CollectiveShape& s) {
  return !s.host && s.ranks > 1 && s.nodes == s.ranks &&
         (kind == CollectiveKind::AllGather || kind == CollectiveKind::ReduceScatter);
}
bool nvls_allowed(CollectiveKind kind, const CollectiveShape& s) {
  return !s.host && kind == CollectiveKind::AllReduce && s.nvls && s.nodes == 1 && s.ranks > 1;
}
bool collnet_allowed(CollectiveKind kind, const CollectiveShape& s) {
  return !s.host && kind == CollectiveKind::AllReduce && s.sharp && s.nodes > 1;
}

// The algorithms, one row each (adding one is a row): which collectives and hardware it runs
// on, its protocols, its cost. The order breaks ties (the ring first, as NCCL's table).
struct Row {
  const char* name;
  Family family;
  bool (*allowed)(CollectiveKind, const CollectiveShape&);
  std::array<bool, 3> protocols;  // LL, LL128, Simple
  Cost (*cost)(CollectiveKind, const CollectiveShape&, Protocol, int, double);
};
constexpr Row kRows[] = {
    {"ring", kRing, any_kind, {true, true, true}, ring_cost},
    {"tree", kTree, tree_allowed, {true, true, true}, tree_cost},
    {"pat", kPat, pat_allowed, {false, false, true}, pat_cost},
    {"nvls", kNvls, nvls_allowed, {false, false, true}, nvls_cost},
    {"collnet", kCollNet, collnet_allowed, {false, false, true}, collnet_cost},
};

// The protocols a row may use here: the host's MPI for CPU ranks (ring and tree), NCCL's
// three otherwise, LL128 only where NCCL enables it by default.
std::vector<Protocol> protocols(const Row& row, const CollectiveShape& s) {
  if (s.host) {
    if (row.family == kRing || row.family == kTree) return {Protocol::Host};
    return {};
  }
  std::vector<Protocol> out;
  if (row.protocols[kLL]) out.push_back(Protocol::LL);
  if (row.protocols[kLL128] && s.ll128) out.push_back(Protocol::LL128);
  if (row.protocols[kSimple]) out.push_back(Protocol::Simple);
  return out;
}

}  // namespace

CollectiveShape collective_shape(const Topology& topo, const Cluster& cluster,
                                 std::span<const int> ranks) {
  CollectiveShape s;
  s.ranks = static_cast<int>(ranks.size());
  s.nic_bandwidth = kInf;
  s.rails = std::numeric_limits<int>::max();
  s.nvlink = s.ll128 = s.nvls = s.sharp = true;
  s.nvls_efficiency = 1;
  // A ring of 100k members crosses a few distinct links and devices many times over. The
  // members come node by node (sorted, node-major), so the ring is walked a node's run of
  // members at a time: the hops inside a node are one value unless its link is PCIe (then each
  // GPU's slot bounds it), and adding a hop the ring's links already hold changes nothing, so a
  // node's intra hop is worked out and added once; a device's flags follow from its kind and
  // architecture, so they are worked out once per run of alike members. The hops are added in
  // the ring's order (the bottleneck's kind is the first slowest hop's).
  const std::size_t n = ranks.size();
  // A device's flags follow from its kind and architecture, which ranks of one slot kind
  // (RankDevice::slot_kind: slots equal in every field) share: they are worked out once per run
  // of one slot kind. Comparing the two strings per member instead was most of this walk at
  // 100k members (each node holds its own copy of its slots, so no two members share a spec).
  int flags_kind = -1;
  bool cpu = false, ll128 = true;
  double nvls = 0;
  auto device_flags = [&](const RankDevice& d) {
    if (d.slot_kind != flags_kind) {
      const DeviceSpec& spec = d.slot->spec;
      const std::string& arch = spec.architecture;
      cpu = spec.kind == "cpu";
      ll128 = arch == "volta" || arch == "ampere" || arch == "hopper";
      nvls = arch == "hopper" ? 0.85 : arch == "blackwell" ? 0.74 : 0.0;
      flags_kind = d.slot_kind;
    }
    s.host |= cpu;
    s.ll128 &= ll128;
    s.nvls_efficiency = std::min(s.nvls_efficiency, nvls);
  };
  for (std::size_t i = 0; i < n;) {
    const RankDevice& first = topo.rank(ranks[i]);
    const int here = first.node;
    device_flags(first);
    std::size_t j = i + 1;  // the run is members [i, j)
    for (; j < n; ++j) {
      const RankDevice& d = topo.rank(ranks[j]);
      if (d.node != here) break;
      device_flags(d);
    }
    const Node& node = cluster.nodes[static_cast<std::size_t>(here)];
    const bool per_device = node.intra_link.kind == "pcie";
    // The run's own hops (member to member inside the node), then the hop from its last
    // member to the ring's next one: another node's, or the run's first when the whole ring
    // is on this node.
    const bool wraps_inside = j == n && i == 0 && n > 1;
    const std::size_t intra_hops = (j - i - 1) + (wraps_inside ? 1 : 0);
    for (std::size_t h = 0; h < intra_hops; ++h) {
      const int a = ranks[i + h];
      const int b = ranks[i + h + 1 < j ? i + h + 1 : i];
      const Hop hop = topo.between(a, b);
      s.all.add(hop);
      s.intra.add(hop);
      if (!per_device) break;  // every other hop inside the node is this one
    }
    if (!wraps_inside) s.all.add(topo.between(ranks[j - 1], ranks[j % n]));
    s.per_node = std::max(s.per_node, static_cast<int>(j - i));
    ++s.nodes;
    const int rails = std::max(1, node.nic_count);
    const Hop nic = topo.nic(here);
    s.rails = std::min(s.rails, rails);
    s.nic_bandwidth = std::min(s.nic_bandwidth, nic.bandwidth / rails);
    s.nic_latency = std::max(s.nic_latency, nic.latency);
    s.nvlink &= node.intra_link.kind == "nvlink";
    s.nvls &= node.nvls;
    s.sharp &= node.sharp;
    i = j;
  }
  s.ll128 &= s.nvlink;
  s.nvls &= s.nvls_efficiency > 0 && s.per_node > 1;
  return s;
}

Choice choose(CollectiveKind kind, const CollectiveShape& shape, double bytes) {
  Choice best;
  best.seconds = kInf;
  for (const Row& row : kRows) {
    if (!row.allowed(kind, shape)) continue;
    for (Protocol p : protocols(row, shape)) {
      const int c = channels(shape, p, row.family, bytes);
      const Cost cost = row.cost(kind, shape, p, c, bytes);
      const double t = cost.latency + cost.link_bytes / cost.link_bandwidth;
      if (t < best.seconds) best = {t, row.name, p, c, cost.link_bytes, cost.link_bandwidth};
    }
  }
  return best;
}

std::vector<double> ring_hop_bandwidths(const Topology& topo, std::span<const int> ranks,
                                        bool nic_share) {
  const std::size_t n = ranks.size();
  std::vector<double> out(n);
  int known_node = -1;  // the node whose one intra hop `known` is (-1: none)
  double known = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int prev = ranks[(i + n - 1) % n];
    const int node = topo.rank(prev).node;
    if (node != topo.rank(ranks[i]).node) {
      out[i] = nic_share ? -1.0 : topo.between(prev, ranks[i]).bandwidth;
    } else if (node == known_node) {
      out[i] = known;
    } else {
      out[i] = topo.between(prev, ranks[i]).bandwidth;
      known_node = topo.per_device_intra(node) ? -1 : node;
      known = out[i];
    }
  }
  return out;
}

Choice choose_grouped(const Topology& topo, const CollectiveShape& shape,
                      std::span<const int> ranks, std::span<const double> shard, double total) {
  const std::size_t n = ranks.size();
  Choice best;
  best.seconds = kInf;
  // A hop between nodes runs at the NIC's share of the channels under every NCCL protocol; the
  // host's MPI (CPU ranks, the only protocol then: `protocols`) runs every hop at its link.
  const std::vector<double> hop = ring_hop_bandwidths(topo, ranks, !shape.host);
  for (Protocol p : protocols(kRows[0], shape)) {
    const int c = channels(shape, p, kRing, total);
    double worst = 0, worst_bytes = 0, worst_bw = kInf;
    for (std::size_t i = 0; i < n; ++i) {
      double bw = hop[i] < 0 ? inter_bandwidth(shape, c) : hop[i];
      bw = capped(bw * (p == Protocol::Host ? 1.0 : ring_efficiency(p, shape)), p, c);
      const double bytes = total - shard[i];
      if (bytes / bw > worst) {
        worst = bytes / bw;
        worst_bytes = bytes;
        worst_bw = bw;
      }
    }
    const double t = ring_latency(CollectiveKind::AllGather, shape, p) + worst;
    if (t < best.seconds) best = {t, "grouped", p, c, worst_bytes, worst_bw};
  }
  return best;
}

}  // namespace cephalo::costmodels::detail

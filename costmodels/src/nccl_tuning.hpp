#pragma once
// How NCCL runs a collective: its algorithms as one table of rows (ring, tree, PAT, NVLS,
// CollNet), its protocols (LL, LL128, Simple) and its channel count by message size, picked as
// NCCL's tuner picks them: the lowest predicted time among the rows the hardware allows. The
// one place that decides how a collective runs: the alpha-beta model prices even, padded and
// grouped collectives through it, and the simulator, the planner and `predict collective` all
// price through that model. Private to costmodels/src; the rules are in costmodels/README.md
// ("Collectives as NCCL runs them").
#include <span>
#include <string>
#include <vector>

#include "comm_topology.hpp"

namespace cephalo::costmodels::detail {

// Host: the CPU backend's MPI collectives (no NCCL protocol; the link's α and bandwidth as
// the sweep fit them).
enum class Protocol { LL, LL128, Simple, Host };
std::string to_string(Protocol protocol);

// The participants as NCCL's tuner sees them (ranks sorted, node-major).
struct CollectiveShape {
  int ranks = 0;
  int nodes = 0;
  int per_node = 0;          // most participants on one node
  bool host = false;         // CPU ranks: the backend's MPI runs it
  RingLinks all;             // every ring hop (the host model's bottleneck and slowest α)
  RingLinks intra;           // the intra-node hops only (none when every node holds one rank)
  double nic_bandwidth = 0;  // one NIC of the slowest node (corrected), bytes/s
  double nic_latency = 0;    // one NIC's α (the slowest)
  int rails = 1;             // fewest NICs of a participating node
  bool nvlink = false;       // every participating node's intra link is NVLink
  bool ll128 = false;        // NCCL enables LL128 by default here
  bool nvls = false;         // NVLink SHARP on every node, Hopper or newer
  double nvls_efficiency = 0;
  bool sharp = false;  // SHARP in-network reduction on every node's fabric (CollNet)
};

CollectiveShape collective_shape(const Topology& topo, const Cluster& cluster,
                                 std::span<const int> ranks);

struct Choice {
  double seconds = 0;  // without the per-call launch overhead
  std::string algorithm;
  Protocol protocol = Protocol::Simple;
  int channels = 1;
  // The busiest link of the algorithm: the bytes it carries and what it can carry (after the
  // protocol's and the algorithm's efficiency). seconds >= link_bytes / link_bandwidth.
  double link_bytes = 0;
  double link_bandwidth = 0;
};

// NCCL's choice for an even collective of `bytes` in all.
Choice choose(CollectiveKind kind, const CollectiveShape& shape, double bytes);

// The bandwidth of the hop into each member of the ring `ranks` (from the member before it in
// ring order), as Topology::between prices it; with `nic_share`, a hop between nodes is -1
// instead (every NCCL protocol runs it at the NIC's share of its channels, which the caller
// prices). A node's hops are one value unless its link is PCIe, so they are read once per run
// of the node's members (at 100k members, one lookup of the node's link and its calibration
// per member and protocol was most of the grouped variant's price).
std::vector<double> ring_hop_bandwidths(const Topology& topo, std::span<const int> ranks,
                                        bool nic_share);

// The grouped variant of an uneven all-gather (reduce-scatter): one ring broadcast (reduce) per
// owner, issued as one group, all running at once on the ring's links: the link into the j-th
// member (ring order) carries every shard but s_j. The protocol and channels are chosen as for
// a ring of `total` bytes.
Choice choose_grouped(const Topology& topo, const CollectiveShape& shape,
                      std::span<const int> ranks, std::span<const double> shard, double total);

}  // namespace cephalo::costmodels::detail

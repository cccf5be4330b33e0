#pragma once
// The links a collective crosses, as the alpha-beta model sees them: shared by the pricing
// (alpha_beta_comm.cpp) and the fit to measured sweeps (comm_calibration.cpp); private to
// costmodels/src. Inline because the pricing calls these per hop on every collective.
#include <algorithm>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alpha_beta_comm.hpp"

namespace cephalo::costmodels::detail {

struct Hop {
  double bandwidth = 0;  // corrected bytes/s
  double latency = 0;    // corrected seconds
  // The link's kind, viewing the cluster's own string: a hop is priced millions of times on a
  // large cluster, and copying the kind was most of its cost.
  std::string_view kind;
};

// A ring's links as the model sees them: the bottleneck bandwidth and the slowest α.
struct RingLinks {
  double bandwidth = std::numeric_limits<double>::infinity();
  double latency = 0;
  std::string bottleneck_kind;
  void add(const Hop& hop) {
    if (hop.bandwidth < bandwidth) {
      bandwidth = hop.bandwidth;
      bottleneck_kind = hop.kind;
    }
    latency = std::max(latency, hop.latency);
  }
};

class Topology {
 public:
  // `collective`: the kind priced, for the calibration's per-collective host fits (none: the
  // link kind's fit alone).
  Topology(const Cluster& cluster, const CommCalibration& cal, bool under_compute = false,
           std::optional<CollectiveKind> collective = std::nullopt)
      : cal_(cal),
        under_compute_(under_compute),
        has_collective_(collective.has_value()),
        collective_(collective.value_or(CollectiveKind{})),
        ranks_(&cluster.ranks()),
        nodes_(&cluster.nodes.vector()) {}
  int size() const { return static_cast<int>(ranks_->size()); }
  const RankDevice& rank(int r) const { return ranks_->at(static_cast<std::size_t>(r)); }

  Hop intra(int a, int b) const {
    const Node& node = (*nodes_)[static_cast<std::size_t>(rank(a).node)];
    LinkCorrection c = correction(node.intra_link.kind);
    double bw = node.intra_link.bandwidth;
    if (per_device_intra(rank(a).node))  // traffic leaves each GPU through its own slot
      bw = std::min({bw, rank(a).slot->spec.pcie_bandwidth(), rank(b).slot->spec.pcie_bandwidth()});
    return {bw * c.bandwidth_efficiency, c.latency_s >= 0 ? c.latency_s : node.intra_link.latency,
            node.intra_link.kind};
  }
  Hop nic(int node_index, int sharing = 1) const {
    const Node& node = (*nodes_)[static_cast<std::size_t>(node_index)];
    LinkCorrection c = correction(node.nic.kind);
    return {node.nic.bandwidth * c.bandwidth_efficiency / std::max(1, sharing),
            c.latency_s >= 0 ? c.latency_s : node.nic.latency, node.nic.kind};
  }
  // Whether a hop inside node `node_index` is bound by each GPU's own slot (PCIe), so that
  // intra() differs between its members; otherwise every hop inside the node is one value.
  bool per_device_intra(int node_index) const {
    return (*nodes_)[static_cast<std::size_t>(node_index)].intra_link.kind == "pcie";
  }
  Hop between(int a, int b) const {
    if (rank(a).node == rank(b).node) return intra(a, b);
    Hop x = nic(rank(a).node), y = nic(rank(b).node);
    // Both NICs are crossed; the switch adds nothing in this model.
    return {std::min(x.bandwidth, y.bandwidth), x.latency + y.latency,
            x.bandwidth <= y.bandwidth ? x.kind : y.kind};
  }

 private:
  // The calibration's correction of a link kind, looked up once per kind and call: a ring over
  // 100k ranks crosses each of the cluster's few kinds 100k times.
  LinkCorrection correction(const std::string& kind) const {
    for (const auto& [k, c] : seen_)
      if (k == kind) return c;
    LinkCorrection c = has_collective_ ? cal_.correction(kind, under_compute_, collective_)
                                       : cal_.correction(kind, under_compute_);
    seen_.emplace_back(kind, c);
    return c;
  }

  const CommCalibration& cal_;
  mutable std::vector<std::pair<std::string, LinkCorrection>> seen_;
  bool under_compute_ = false;
  // A flag and a value rather than std::optional: g++ 12 reports the optional's value "maybe
  // uninitialized" where this is inlined into calibrate_comm (a false positive under -Werror).
  bool has_collective_ = false;
  CollectiveKind collective_{};
  // The cluster's own rank table (built once per cluster): the model builds a Topology per
  // collective, so copying every rank here made each call linear in the cluster.
  const std::vector<RankDevice>* ranks_ = nullptr;
  const std::vector<Node>* nodes_ = nullptr;
};

inline RingLinks ring_links(const Topology& topo, std::span<const int> ranks) {
  RingLinks links;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    links.add(topo.between(ranks[i], ranks[(i + 1) % ranks.size()]));
  return links;
}

}  // namespace cephalo::costmodels::detail

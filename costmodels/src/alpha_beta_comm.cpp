#include "cephalo/costmodels/alpha_beta_comm.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::costmodels {

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllGather:
      return "all-gather";
    case CollectiveKind::ReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::AllReduce:
      return "all-reduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
  }
  return "?";
}

CollectiveKind parse_collective_kind(const std::string& text) {
  std::string t = text;
  std::replace(t.begin(), t.end(), '_', '-');
  if (t == "all-gather" || t == "allgather") return CollectiveKind::AllGather;
  if (t == "reduce-scatter" || t == "reducescatter") return CollectiveKind::ReduceScatter;
  if (t == "all-reduce" || t == "allreduce") return CollectiveKind::AllReduce;
  if (t == "broadcast" || t == "bcast") return CollectiveKind::Broadcast;
  throw NotFoundError("collective", text,
                      {"all-gather", "reduce-scatter", "all-reduce", "broadcast"});
}

double bus_bandwidth_factor(CollectiveKind kind, int n) {
  if (n <= 0) return 0;
  switch (kind) {
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
      return static_cast<double>(n - 1) / n;
    case CollectiveKind::AllReduce:
      return 2.0 * (n - 1) / n;
    case CollectiveKind::Broadcast:
      return 1.0;
  }
  return 1.0;
}

LinkCorrection CommCalibration::correction(const std::string& kind) const {
  auto it = links.find(kind);
  if (it != links.end()) return it->second;
  return {};
}

LinkCorrection CommCalibration::correction(const std::string& kind, bool under_compute) const {
  if (under_compute)
    if (auto it = links_under_compute.find(kind); it != links_under_compute.end())
      return it->second;
  return correction(kind);
}

CommCalibration AlphaBetaCommModel::default_calibration() {
  CommCalibration c;
  c.links["pcie"] = {0.8, -1};
  c.links["nvlink"] = {0.8, -1};
  c.links["shm"] = {0.8, -1};
  c.links["ethernet"] = {0.9, -1};
  c.links["infiniband"] = {0.9, -1};
  return c;
}

namespace {

struct Hop {
  double bandwidth = 0;  // corrected bytes/s
  double latency = 0;    // corrected seconds
  std::string kind;
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
  Topology(const Cluster& cluster, const CommCalibration& cal, bool under_compute = false)
      : cal_(cal), under_compute_(under_compute) {
    ranks_ = cluster.ranks();
    nodes_ = &cluster.nodes;
  }
  int size() const { return static_cast<int>(ranks_.size()); }
  const RankDevice& rank(int r) const { return ranks_.at(static_cast<std::size_t>(r)); }

  Hop intra(int a, int b) const {
    const Node& node = (*nodes_)[static_cast<std::size_t>(rank(a).node)];
    LinkCorrection c = cal_.correction(node.intra_link.kind, under_compute_);
    double bw = node.intra_link.bandwidth;
    if (node.intra_link.kind == "pcie")  // traffic leaves each GPU through its own slot
      bw = std::min({bw, rank(a).slot->spec.pcie_bandwidth(), rank(b).slot->spec.pcie_bandwidth()});
    return {bw * c.bandwidth_efficiency, c.latency_s >= 0 ? c.latency_s : node.intra_link.latency,
            node.intra_link.kind};
  }
  Hop nic(int node_index, int sharing = 1) const {
    const Node& node = (*nodes_)[static_cast<std::size_t>(node_index)];
    LinkCorrection c = cal_.correction(node.nic.kind, under_compute_);
    return {node.nic.bandwidth * c.bandwidth_efficiency / std::max(1, sharing),
            c.latency_s >= 0 ? c.latency_s : node.nic.latency, node.nic.kind};
  }
  Hop between(int a, int b) const {
    if (rank(a).node == rank(b).node) return intra(a, b);
    Hop x = nic(rank(a).node), y = nic(rank(b).node);
    // Both NICs are crossed; the switch adds nothing in this model.
    return {std::min(x.bandwidth, y.bandwidth), x.latency + y.latency,
            x.bandwidth <= y.bandwidth ? x.kind : y.kind};
  }

 private:
  const CommCalibration& cal_;
  bool under_compute_ = false;
  std::vector<RankDevice> ranks_;
  const std::vector<Node>* nodes_ = nullptr;
};

RingLinks ring_links(const Topology& topo, const std::vector<int>& ranks) {
  RingLinks links;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    links.add(topo.between(ranks[i], ranks[(i + 1) % ranks.size()]));
  return links;
}

double ring_seconds(CollectiveKind kind, int n, double bytes, const RingLinks& l) {
  if (n <= 1) return 0;
  double chunk = bytes / n;
  switch (kind) {
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
      return (n - 1) * (l.latency + chunk / l.bandwidth);
    case CollectiveKind::AllReduce:
      return 2.0 * (n - 1) * (l.latency + chunk / l.bandwidth);
    case CollectiveKind::Broadcast:
      return (n - 1) * l.latency + bytes / l.bandwidth;
  }
  return 0;
}

// The cross-group reduction of hybrid sharding (CollectiveRequest::pieces): every piece is an
// all-reduce over its owners (one rank per group), all pieces at once. Two algorithms, the
// faster taken: ring (each owner sends 2(k−1)/k of the piece to its successor, 2(k−1) steps)
// and, for k > 2, double binary tree (each owner sends about 2× the piece, 2⌈log2 k⌉ steps).
// The bandwidth term is the busiest link after summing every piece's traffic: a node's NIC
// carries the hops of all its GPUs' pieces that leave (or enter) the node; a hop inside a node
// loads the sending GPU's intra link. The latency term is the slowest hop's α per step.
std::pair<double, std::string> cross_group_seconds(const Topology& topo,
                                                   const std::vector<ReductionPiece>& pieces,
                                                   int num_nodes) {
  double best = std::numeric_limits<double>::infinity();
  std::string algorithm;
  for (const bool tree : {false, true}) {
    std::vector<double> nic_out(static_cast<std::size_t>(num_nodes), 0.0);
    std::vector<double> nic_in(nic_out.size(), 0.0);
    std::map<int, double> intra_out;  // by sending rank
    std::map<int, double> intra_bw;
    double latency = 0;
    int steps = 0;
    bool any_tree = false;
    for (const auto& p : pieces) {
      std::vector<int> owners = p.owners;
      std::sort(owners.begin(), owners.end());  // node-major ring, as for every ring here
      const int k = static_cast<int>(owners.size());
      if (k < 2 || p.bytes <= 0) continue;
      const bool use_tree = tree && k > 2;
      any_tree |= use_tree;
      const double per_hop =
          use_tree ? 2.0 * p.bytes : 2.0 * (k - 1) * p.bytes / static_cast<double>(k);
      steps = std::max(
          steps, use_tree ? 2 * static_cast<int>(std::ceil(std::log2(double(k)))) : 2 * (k - 1));
      for (int i = 0; i < k; ++i) {
        const int a = owners[static_cast<std::size_t>(i)];
        const int b = owners[static_cast<std::size_t>((i + 1) % k)];
        const Hop hop = topo.between(a, b);
        latency = std::max(latency, hop.latency);
        const int na = topo.rank(a).node, nb = topo.rank(b).node;
        if (na == nb) {
          intra_out[a] += per_hop;
          intra_bw[a] = hop.bandwidth;
        } else {
          nic_out[static_cast<std::size_t>(na)] += per_hop;
          nic_in[static_cast<std::size_t>(nb)] += per_hop;
        }
      }
    }
    if (tree && !any_tree) continue;
    double bandwidth_s = 0;
    for (int n = 0; n < num_nodes; ++n) {
      const double load =
          std::max(nic_out[static_cast<std::size_t>(n)], nic_in[static_cast<std::size_t>(n)]);
      if (load > 0) bandwidth_s = std::max(bandwidth_s, load / topo.nic(n).bandwidth);
    }
    for (const auto& [r, bytes] : intra_out)
      bandwidth_s = std::max(bandwidth_s, bytes / intra_bw[r]);
    const double t = steps * latency + bandwidth_s;
    if (t < best) {
      best = t;
      algorithm = tree ? "cross-group-tree" : "cross-group-ring";
    }
  }
  if (!std::isfinite(best)) return {0.0, "cross-group-empty"};
  return {best, algorithm};
}

}  // namespace

CollectiveEstimate AlphaBetaCommModel::collective(const Cluster& cluster,
                                                  const CollectiveRequest& request) const {
  Topology topo(cluster, calibration_, request.overlaps_compute);
  const int n = static_cast<int>(request.ranks.size());
  if (n == 0) throw ValidationError("", "ranks", "[]", "at least one participating rank");
  if (request.shard_bytes.size() != request.ranks.size())
    throw ValidationError("", "shard_bytes", std::to_string(request.shard_bytes.size()) + " values",
                          "one shard size per participating rank (" + std::to_string(n) + ")");
  // position[r]: where rank r is in request.ranks (-1: not in it); linear in the cluster, so
  // a collective over 100k ranks costs no more than its ring.
  std::vector<int> position(static_cast<std::size_t>(topo.size()), -1);
  for (std::size_t i = 0; i < request.ranks.size(); ++i) {
    const int r = request.ranks[i];
    if (r < 0 || r >= topo.size())
      throw ValidationError("", "ranks", std::to_string(r),
                            "a rank of the cluster (0.." + std::to_string(topo.size() - 1) + ")");
    if (position[static_cast<std::size_t>(r)] >= 0)
      throw ValidationError("", "ranks", std::to_string(r), "each rank at most once");
    position[static_cast<std::size_t>(r)] = static_cast<int>(i);
  }
  double total = 0, smallest = std::numeric_limits<double>::infinity(), largest = 0;
  for (double b : request.shard_bytes) {
    if (!(b >= 0) || !std::isfinite(b))
      throw ValidationError("", "shard_bytes", std::to_string(b), "a byte count >= 0");
    total += b;
    smallest = std::min(smallest, b);
    largest = std::max(largest, b);
  }
  // Ring order: node-major (the order NCCL's ring search finds on these topologies).
  std::vector<int> ranks = request.ranks;
  std::sort(ranks.begin(), ranks.end());

  CollectiveEstimate est;
  est.total_bytes = total;
  if (!request.pieces.empty()) {
    for (const auto& p : request.pieces)
      for (int r : p.owners)
        if (r < 0 || r >= topo.size() || position[static_cast<std::size_t>(r)] < 0)
          throw ValidationError("", "pieces[*].owners", std::to_string(r),
                                "a participating rank of the collective");
    auto [seconds, algorithm] =
        cross_group_seconds(topo, request.pieces, static_cast<int>(cluster.nodes.size()));
    est.seconds = seconds + calibration_.launch_overhead_s;
    est.algorithm = algorithm;
  } else if (n == 1 || total == 0) {
    est.seconds = n == 1 ? 0 : calibration_.launch_overhead_s;
    est.algorithm = n == 1 ? "local" : "empty";
  } else {
    RingLinks ring = ring_links(topo, ranks);
    const bool uneven = (largest - smallest) > 1e-9 * std::max(1.0, largest);
    const bool sharded_kind =
        request.kind == CollectiveKind::AllGather || request.kind == CollectiveKind::ReduceScatter;
    if (uneven && sharded_kind) {
      if (request.uneven == UnevenCollective::Padded) {
        est.seconds = ring_seconds(request.kind, n, largest * n, ring);
        est.algorithm = "padded-ring";
      } else {
        // n concurrent broadcasts (reduces) along the ring; the link into rank j carries every
        // shard but s_j, so the slowest receiver bounds the group.
        double worst = 0;
        for (std::size_t i = 0; i < ranks.size(); ++i) {
          int prev = ranks[(i + ranks.size() - 1) % ranks.size()];
          const int pos = position[static_cast<std::size_t>(ranks[i])];
          double into = total - request.shard_bytes[static_cast<std::size_t>(pos)];
          worst = std::max(worst, into / topo.between(prev, ranks[i]).bandwidth);
        }
        est.seconds = (n - 1) * ring.latency + worst + (n - 1) * 1e-6 /*per-op enqueue*/;
        est.algorithm =
            request.kind == CollectiveKind::AllGather ? "grouped-broadcast" : "grouped-reduce";
      }
    } else {
      est.seconds = ring_seconds(request.kind, n, total, ring);
      est.algorithm = "ring";
      if (request.kind == CollectiveKind::AllReduce && n > 2) {
        double depth = std::ceil(std::log2(static_cast<double>(n)));
        double tree = 2 * depth * ring.latency + 2 * total / ring.bandwidth;
        if (tree < est.seconds) {
          est.seconds = tree;
          est.algorithm = "tree";
        }
      }
      // Hierarchical: intra-node phase on the fast links, inter-node ring over the nodes with
      // the node's GPUs sharing its NIC.
      std::map<int, std::vector<int>> by_node;
      for (int r : ranks) by_node[topo.rank(r).node].push_back(r);
      const int nodes = static_cast<int>(by_node.size());
      std::size_t per_node = 0;
      for (auto& [node, members] : by_node) per_node = std::max(per_node, members.size());
      if (nodes > 1 && per_node > 1 && request.kind != CollectiveKind::Broadcast) {
        RingLinks intra_links;
        intra_links.bandwidth = std::numeric_limits<double>::infinity();
        for (auto& [node, members] : by_node)
          if (members.size() > 1) {
            RingLinks l = ring_links(topo, members);
            intra_links.add({l.bandwidth, l.latency, l.bottleneck_kind});
          }
        RingLinks inter;
        for (auto& [node, members] : by_node) inter.add(topo.nic(node));
        const int k = static_cast<int>(per_node);
        double t = 0;
        switch (request.kind) {
          case CollectiveKind::AllGather:
          case CollectiveKind::ReduceScatter:
            t = ring_seconds(request.kind, nodes, total, inter) +
                ring_seconds(request.kind, k, total, intra_links);
            break;
          case CollectiveKind::AllReduce:
            t = ring_seconds(CollectiveKind::ReduceScatter, k, total, intra_links) +
                ring_seconds(CollectiveKind::AllReduce, nodes, total, inter) +
                ring_seconds(CollectiveKind::AllGather, k, total, intra_links);
            break;
          case CollectiveKind::Broadcast:
            break;
        }
        if (t > 0 && t < est.seconds) {
          est.seconds = t;
          est.algorithm = "hierarchical-ring";
        }
      }
    }
    est.seconds += calibration_.launch_overhead_s;
  }
  est.algbw = est.seconds > 0 ? total / est.seconds : 0;
  est.busbw = est.algbw * bus_bandwidth_factor(request.kind, n);
  return est;
}

double AlphaBetaCommModel::copy_time(const Cluster& cluster, int rank, double bytes) const {
  // The rank's device by walking the nodes (not listing every rank: the planner asks per rank).
  const DeviceSpec* found = nullptr;
  int first = 0;
  for (const auto& node : cluster.nodes) {
    const int here = static_cast<int>(node.devices.size());
    if (!found && rank >= first && rank < first + here)
      found = &node.devices[static_cast<std::size_t>(rank - first)].spec;
    first += here;
  }
  if (!found)
    throw ValidationError("", "rank", std::to_string(rank),
                          "a rank of the cluster (0.." + std::to_string(first - 1) + ")");
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw ValidationError("", "bytes", std::to_string(bytes), "a byte count >= 0");
  const DeviceSpec& spec = *found;
  if (auto it = calibration_.copies.find(spec.name);
      it != calibration_.copies.end() && it->second.bandwidth > 0)
    return it->second.latency_s + bytes / it->second.bandwidth;
  if (spec.kind == "cpu") return bytes / spec.memory_bandwidth;  // host memory copy
  LinkCorrection c = calibration_.correction("pcie");
  double latency = c.latency_s >= 0 ? c.latency_s : 10e-6;  // cudaMemcpyAsync + DMA setup
  return latency + bytes / (spec.pcie_bandwidth() * c.bandwidth_efficiency);
}

std::vector<SweepPoint> load_collective_sweep(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  root.allow({"_comment", "cluster", "date", "tool", "device"});
  std::string format = root.string("format");
  if (format != "cephalo-collective-sweep")
    root.child("format").fail("\"cephalo-collective-sweep\"");
  root.integer("version", 1, 1);
  std::vector<SweepPoint> points;
  for (auto& r : root.child("results").elements()) {
    r.allow({"algbw_GBps", "busbw_GBps", "algorithm", "in_place"});
    SweepPoint p;
    p.under_compute = r.boolean_or("under_compute", false);
    p.kind = parse_collective_kind(r.string("collective"));
    for (auto& x : r.child("ranks").elements())
      p.ranks.push_back(static_cast<int>(x.as_integer(0, 1 << 20)));
    if (p.ranks.empty()) r.child("ranks").fail("a non-empty list of ranks");
    p.bytes = r.quantity("bytes", Quantity::Bytes);
    if (p.bytes <= 0) r.child("bytes").fail("a size > 0");
    double us = r.number("time_us");
    if (!(us > 0)) r.child("time_us").fail("a time > 0 in microseconds");
    p.seconds = us * 1e-6;
    r.finish();
    points.push_back(p);
  }
  if (points.empty()) root.child("results").fail("at least one measured point");
  root.finish();
  return points;
}

CommCalibration calibrate_comm(const Cluster& cluster, const std::vector<SweepPoint>& points) {
  // For each point the flat-ring model reads t − launch = steps·α + bytes_on_link / (η·B):
  // linear in (α, 1/η) once the bottleneck link kind and its nominal bandwidth are known.
  CommCalibration nominal;
  for (const char* k : {"pcie", "nvlink", "shm", "ethernet", "infiniband"})
    nominal.links[k] = {1.0, -1};
  nominal.launch_overhead_s = 0;
  Topology topo(cluster, nominal);
  // Per point: ring features (steps, bytes over the bottleneck / B) and, for all-reduce on more
  // than two ranks, tree features; which one NCCL ran is decided by the current fit (the model
  // takes the faster), so the fit alternates a few times.
  struct Row {
    std::array<double, 2> ring, tree;
    bool has_tree = false;
    double t = 0;
  };
  std::map<std::pair<bool, std::string>, std::vector<Row>> rows;  // (under compute, kind)
  for (const auto& p : points) {
    for (int r : p.ranks)
      if (r < 0 || r >= topo.size())
        throw ValidationError("", "ranks", std::to_string(r), "a rank of the scenario's cluster");
    std::vector<int> ranks = p.ranks;
    std::sort(ranks.begin(), ranks.end());
    const int n = static_cast<int>(ranks.size());
    if (n < 2) continue;
    RingLinks l = ring_links(topo, ranks);
    Row row;
    row.t = p.seconds;
    switch (p.kind) {
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatter:
        row.ring = {double(n - 1), (n - 1) * p.bytes / n / l.bandwidth};
        break;
      case CollectiveKind::AllReduce:
        row.ring = {2.0 * (n - 1), 2.0 * (n - 1) * p.bytes / n / l.bandwidth};
        if (n > 2) {
          row.has_tree = true;
          row.tree = {2 * std::ceil(std::log2(static_cast<double>(n))), 2 * p.bytes / l.bandwidth};
        }
        break;
      case CollectiveKind::Broadcast:
        row.ring = {double(n - 1), p.bytes / l.bandwidth};
        break;
    }
    rows[{p.under_compute, l.bottleneck_kind}].push_back(row);
  }
  CommCalibration out = AlphaBetaCommModel().calibration();
  out.launch_overhead_s = 0;  // absorbed into α by the fit
  const auto loaded = static_cast<std::size_t>(std::count_if(
      points.begin(), points.end(), [](const SweepPoint& p) { return p.under_compute; }));
  out.source = "fitted to " + std::to_string(points.size() - loaded) + " measured points";
  if (loaded > 0)
    out.source += " (+" + std::to_string(loaded) + " under compute load, fitted separately)";
  for (auto& [key, r] : rows) {
    const auto& [under_compute, kind] = key;
    if (r.size() < 2) continue;
    Eigen::Vector2d theta(10e-6, 1.0);  // α, 1/η: start from "ring everywhere"
    std::vector<bool> tree(r.size(), false);
    for (int iter = 0; iter < 6; ++iter) {
      Eigen::MatrixXd A(static_cast<Eigen::Index>(r.size()), 2);
      Eigen::VectorXd y(static_cast<Eigen::Index>(r.size()));
      for (std::size_t i = 0; i < r.size(); ++i) {
        const auto& f = tree[i] ? r[i].tree : r[i].ring;
        double w = 1.0 / r[i].t;  // relative errors: small and large sizes count alike
        A(static_cast<Eigen::Index>(i), 0) = f[0] * w;
        A(static_cast<Eigen::Index>(i), 1) = f[1] * w;
        y(static_cast<Eigen::Index>(i)) = 1.0;
      }
      theta = A.colPivHouseholderQr().solve(y);
      bool changed = false;
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (!r[i].has_tree) continue;
        double ring = theta(0) * r[i].ring[0] + theta(1) * r[i].ring[1];
        double tr = theta(0) * r[i].tree[0] + theta(1) * r[i].tree[1];
        bool use_tree = tr < ring;
        changed |= use_tree != tree[i];
        tree[i] = use_tree;
      }
      if (!changed) break;
    }
    LinkCorrection c;
    c.latency_s = std::max(0.0, theta(0));
    c.bandwidth_efficiency = theta(1) > 0 ? std::min(1.0, 1.0 / theta(1)) : 1.0;
    (under_compute ? out.links_under_compute : out.links)[kind] = c;
  }
  return out;
}

std::pair<std::string, CopyFit> fit_profile_copies(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  CopyFit fit;
  if (!root.is_object() || !root.has("copies") || !root.has("rows")) return {"", fit};
  JsonReader rows = root.child("rows");
  if (!rows.is_array() || rows.size() == 0) return {"", fit};
  std::string gpu_name = rows.element(0).child("gpu").as_string();
  auto gpu = GpuCatalog::builtin().find(gpu_name);
  if (!gpu) throw NotFoundError("GPU", gpu_name, GpuCatalog::builtin().names());
  std::vector<std::pair<double, double>> pts;  // (bytes, seconds)
  for (auto& c : root.child("copies").elements()) {
    c.child("direction").as_enum({"d2h", "h2d"});
    double bytes = c.quantity("bytes", Quantity::Bytes);
    double ms = c.number("ms");
    if (!(ms > 0)) c.child("ms").fail("a time > 0 ms");
    c.allow({"repeats", "stddev_ms"});
    c.finish();
    if (bytes > 0) pts.push_back({bytes, ms * 1e-3});
  }
  if (pts.size() < 2) return {gpu->name, fit};
  Eigen::MatrixXd A(static_cast<Eigen::Index>(pts.size()), 2);
  Eigen::VectorXd y(static_cast<Eigen::Index>(pts.size()));
  for (std::size_t i = 0; i < pts.size(); ++i) {
    double w = 1.0 / pts[i].second;
    A(static_cast<Eigen::Index>(i), 0) = w;
    A(static_cast<Eigen::Index>(i), 1) = pts[i].first * w;
    y(static_cast<Eigen::Index>(i)) = 1.0;
  }
  Eigen::Vector2d x = A.colPivHouseholderQr().solve(y);
  if (x(1) <= 0) return {gpu->name, fit};
  fit.latency_s = std::max(0.0, x(0));
  fit.bandwidth = 1.0 / x(1);
  fit.points = static_cast<int>(pts.size());
  return {gpu->name, fit};
}

}  // namespace cephalo::costmodels

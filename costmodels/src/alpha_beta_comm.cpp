#include "alpha_beta_comm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>

#include "cephalo/core/error.hpp"
#include "comm_topology.hpp"
#include "nccl_tuning.hpp"

namespace cephalo::costmodels {

using detail::Hop;
using detail::Topology;

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

LinkCorrection CommCalibration::correction(const std::string& kind, bool under_compute,
                                           CollectiveKind collective) const {
  const std::pair<std::string, CollectiveKind> key{kind, collective};
  if (under_compute)
    if (auto it = host_links_under_compute.find(key); it != host_links_under_compute.end())
      return it->second;
  if (auto it = host_links.find(key); it != host_links.end())
    if (!under_compute || !links_under_compute.count(kind)) return it->second;
  return correction(kind, under_compute);
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
  // Both algorithms cross the same hops (each piece's ring of owners) and differ only in the
  // bytes per hop and the step count, so the hops are walked once and loaded onto both: at 100k
  // owners a walk is most of the price. Each algorithm's sums run in the same order as a walk of
  // its own would (piece by piece, owner by owner), so the price is the same to the bit.
  struct Load {
    std::vector<double> nic_out, nic_in;
    std::map<int, double> intra_out;  // by sending rank
    int steps = 0;
    bool any = false;  // any piece runs this algorithm (the tree needs more than two owners)
  };
  std::array<Load, 2> load;  // ring, tree
  for (Load& l : load) {
    l.nic_out.assign(static_cast<std::size_t>(num_nodes), 0.0);
    l.nic_in.assign(l.nic_out.size(), 0.0);
  }
  load[0].any = true;
  std::map<int, double> intra_bw;
  // Each node's NIC (Topology::nic), looked up once.
  std::vector<Hop> nics(static_cast<std::size_t>(num_nodes));
  std::vector<char> nic_known(nics.size(), 0);
  auto nic_of = [&](int node) -> const Hop& {
    const auto i = static_cast<std::size_t>(node);
    if (!nic_known[i]) {
      nics[i] = topo.nic(node);
      nic_known[i] = 1;
    }
    return nics[i];
  };
  double latency = 0;
  std::vector<int> sorted;
  for (const auto& p : pieces) {
    // Node-major ring, as for every ring here; the pieces' owners mostly come in rank order.
    std::span<const int> owners = p.owners;
    if (!std::is_sorted(owners.begin(), owners.end())) {
      sorted.assign(owners.begin(), owners.end());
      std::sort(sorted.begin(), sorted.end());
      owners = sorted;
    }
    const int k = static_cast<int>(owners.size());
    if (k < 2 || p.bytes <= 0) continue;
    const double ring_hop = 2.0 * (k - 1) * p.bytes / static_cast<double>(k);
    const int ring_steps = 2 * (k - 1);
    const bool tree = k > 2;  // the tree pass runs a two-owner piece as a ring
    const double per_hop[2] = {ring_hop, tree ? 2.0 * p.bytes : ring_hop};
    load[0].steps = std::max(load[0].steps, ring_steps);
    load[1].steps = std::max(
        load[1].steps, tree ? 2 * static_cast<int>(std::ceil(std::log2(double(k)))) : ring_steps);
    load[1].any |= tree;
    for (int i = 0; i < k; ++i) {
      const int a = owners[static_cast<std::size_t>(i)];
      const int b = owners[static_cast<std::size_t>((i + 1) % k)];
      const int na = topo.rank(a).node, nb = topo.rank(b).node;
      if (na == nb) {
        const Hop hop = topo.between(a, b);
        latency = std::max(latency, hop.latency);
        for (int t = 0; t < 2; ++t) load[static_cast<std::size_t>(t)].intra_out[a] += per_hop[t];
        intra_bw[a] = hop.bandwidth;
      } else {
        // Topology::between's α of a hop between nodes (both NICs'), from each node's NIC
        // worked out once: a ring of 100k owners crosses each NIC twice.
        latency = std::max(latency, nic_of(na).latency + nic_of(nb).latency);
        for (int t = 0; t < 2; ++t) {
          load[static_cast<std::size_t>(t)].nic_out[static_cast<std::size_t>(na)] += per_hop[t];
          load[static_cast<std::size_t>(t)].nic_in[static_cast<std::size_t>(nb)] += per_hop[t];
        }
      }
    }
  }
  double best = std::numeric_limits<double>::infinity();
  std::string algorithm;
  for (int t = 0; t < 2; ++t) {
    const Load& l = load[static_cast<std::size_t>(t)];
    if (!l.any) continue;
    double bandwidth_s = 0;
    for (int n = 0; n < num_nodes; ++n) {
      const auto i = static_cast<std::size_t>(n);
      const double busiest = std::max(l.nic_out[i], l.nic_in[i]);
      if (busiest <= 0) continue;
      bandwidth_s = std::max(bandwidth_s, busiest / nic_of(n).bandwidth);
    }
    for (const auto& [r, bytes] : l.intra_out)
      bandwidth_s = std::max(bandwidth_s, bytes / intra_bw[r]);
    const double seconds = l.steps * latency + bandwidth_s;
    if (seconds < best) {
      best = seconds;
      algorithm = t == 1 ? "cross-group-tree" : "cross-group-ring";
    }
  }
  if (!std::isfinite(best)) return {0.0, "cross-group-empty"};
  return {best, algorithm};
}

// NCCL enqueues one broadcast (reduce) per owner in the group call.
constexpr double kGroupedEnqueueSeconds = 1e-6;

}  // namespace

CollectiveEstimate AlphaBetaCommModel::collective(const Cluster& cluster,
                                                  const CollectiveRequest& request) const {
  Topology topo(cluster, calibration_, request.overlaps_compute, request.kind);
  const int n = static_cast<int>(request.ranks.size());
  if (n == 0) throw ValidationError("", "ranks", "[]", "at least one participating rank");
  if (request.shard_bytes.size() != request.ranks.size())
    throw ValidationError("", "shard_bytes", std::to_string(request.shard_bytes.size()) + " values",
                          "one shard size per participating rank (" + std::to_string(n) + ")");
  // The members in ring order (node-major: the order NCCL's ring search finds on these
  // topologies), each with its shard. Callers mostly list a group in rank order: then the
  // request's own lists are the ring, read in place (at 100k members copying and checking
  // them was a third of a call). Otherwise the members are sorted, not marked in an array over
  // the cluster, which keeps a call as cheap as its ring on a 100k-rank cluster. Either way the
  // first bad member in request order is reported, as a single pass would.
  const std::vector<int>& asked = request.ranks;
  const std::size_t count = asked.size();
  bool ascending = true;
  for (std::size_t i = 1; i < count && ascending; ++i) ascending = asked[i] > asked[i - 1];
  std::vector<int> sorted_ranks;
  std::vector<double> sorted_shard;
  std::span<const int> ranks = asked;
  std::span<const double> shard = request.shard_bytes;  // in ring order
  if (ascending) {
    // No repeats; a bad member is below 0 (then the first) or past the cluster (then every
    // member after it too).
    std::size_t bad = count;
    if (asked.front() < 0)
      bad = 0;
    else if (asked.back() >= topo.size())
      bad = static_cast<std::size_t>(std::lower_bound(asked.begin(), asked.end(), topo.size()) -
                                     asked.begin());
    if (bad < count)
      throw ValidationError("", "ranks", std::to_string(asked[bad]),
                            "a rank of the cluster (0.." + std::to_string(topo.size() - 1) + ")");
  } else {
    std::vector<std::pair<int, int>> members;  // (rank, index in request.ranks)
    members.reserve(count);
    std::size_t bad = count;
    for (std::size_t i = 0; i < count; ++i) {
      const int r = asked[i];
      if (bad == count && (r < 0 || r >= topo.size())) bad = i;
      members.emplace_back(r, static_cast<int>(i));
    }
    std::sort(members.begin(), members.end());
    std::size_t repeated = count;  // the first index that repeats an earlier rank
    for (std::size_t i = 1; i < members.size(); ++i)
      if (members[i].first == members[i - 1].first)
        repeated = std::min(repeated, static_cast<std::size_t>(members[i].second));
    if (bad < repeated)
      throw ValidationError("", "ranks", std::to_string(asked[bad]),
                            "a rank of the cluster (0.." + std::to_string(topo.size() - 1) + ")");
    if (repeated < count)
      throw ValidationError("", "ranks", std::to_string(asked[repeated]), "each rank at most once");
    sorted_ranks.resize(count);
    sorted_shard.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      sorted_ranks[i] = members[i].first;
      sorted_shard[i] = request.shard_bytes[static_cast<std::size_t>(members[i].second)];
    }
    ranks = sorted_ranks;
    shard = sorted_shard;
  }
  double total = 0, smallest = std::numeric_limits<double>::infinity(), largest = 0;
  for (double b : request.shard_bytes) {
    if (!(b >= 0) || !std::isfinite(b))
      throw ValidationError("", "shard_bytes", std::to_string(b), "a byte count >= 0");
    total += b;
    smallest = std::min(smallest, b);
    largest = std::max(largest, b);
  }

  CollectiveEstimate est;
  est.total_bytes = total;
  if (!request.pieces.empty()) {
    // The members are sorted and distinct: when they are a whole range of ranks (a cross-group
    // reduction over every rank, the common case) membership is a range check, not a search
    // per owner.
    const bool whole_range =
        static_cast<std::size_t>(ranks.back() - ranks.front()) + 1 == ranks.size();
    for (const auto& p : request.pieces)
      for (int r : p.owners)
        if (whole_range ? (r < ranks.front() || r > ranks.back())
                        : !std::binary_search(ranks.begin(), ranks.end(), r))
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
    // How NCCL runs it (nccl_tuning.hpp): the one decision of algorithm, protocol and channels.
    const detail::CollectiveShape shape = detail::collective_shape(topo, cluster, ranks);
    const bool uneven = (largest - smallest) > 1e-9 * std::max(1.0, largest);
    const bool sharded_kind =
        request.kind == CollectiveKind::AllGather || request.kind == CollectiveKind::ReduceScatter;
    detail::Choice priced;
    if (uneven && sharded_kind) {
      // Both variants are priced by the same chooser; Auto takes the cheaper (the padded one on
      // a tie: FSDP's behaviour), and the estimate says which.
      detail::Choice padded;
      if (request.uneven != UnevenCollective::Grouped) {
        padded = detail::choose(request.kind, shape, largest * n);
        padded.algorithm = "padded-" + padded.algorithm;
      }
      detail::Choice grouped;
      if (request.uneven != UnevenCollective::Padded) {
        grouped = detail::choose_grouped(topo, shape, ranks, shard, total);
        grouped.seconds += static_cast<double>(n - 1) * kGroupedEnqueueSeconds;
        grouped.algorithm =
            request.kind == CollectiveKind::AllGather ? "grouped-broadcast" : "grouped-reduce";
      }
      const bool take_padded =
          request.uneven == UnevenCollective::Padded ||
          (request.uneven == UnevenCollective::Auto && padded.seconds <= grouped.seconds);
      priced = take_padded ? padded : grouped;
      est.variant = take_padded ? UnevenCollective::Padded : UnevenCollective::Grouped;
    } else {
      priced = detail::choose(request.kind, shape, total);
    }
    est.protocol = detail::to_string(priced.protocol);
    est.channels = priced.channels;
    est.link_bytes = priced.link_bytes;
    est.link_bandwidth = priced.link_bandwidth;
    est.seconds = priced.seconds + calibration_.launch_overhead_s;
    est.algorithm = priced.algorithm;
  }
  est.algbw = est.seconds > 0 ? total / est.seconds : 0;
  est.busbw = est.algbw * bus_bandwidth_factor(request.kind, n);
  return est;
}

UnevenCollective uneven_variant(const CommModel& model, const Cluster& cluster,
                                CollectiveRequest request) {
  request.uneven = UnevenCollective::Auto;
  request.pieces.clear();
  return model.collective(cluster, request).variant.value_or(UnevenCollective::Padded);
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

}  // namespace cephalo::costmodels

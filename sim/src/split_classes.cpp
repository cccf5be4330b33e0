// The rank classes of a split plan (sim/README.md, "class replay of split plans").
//
// A pipeline lane is replica j of every stage: the ranks (s, j, t) for every stage s and TP
// rank t. When every stage has as many replicas and lays a micro-batch's samples out over them
// alike, every pipeline transfer stays in its lane, and a lane's tensor-parallel groups and
// tied-embedding pairs are its own, so the only collectives between lanes are the
// data-parallel domains' (a domain's collective starts at its last member's arrival and is
// priced over its whole membership: every member sees it at the same instants). Lanes that
// share a node are one component (the node's NIC carries the flows of both). Two components
// replay alike when, lane by lane and rank by rank, their ranks are alike (device, plan row,
// static bytes, slices of every held unit, place in its node) and their nodes sit at the same
// offsets with the same links: the ranks of one then do at every instant what the other's do,
// and every link carries the same flows. One component per kind, the one on the lowest nodes,
// is replayed (its ranks are then the lowest of their classes).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "replay_internal.hpp"

namespace cephalo::sim::detail {

namespace {

std::int64_t bits(double x) { return std::bit_cast<std::int64_t>(x); }

int find_root(std::vector<int>& parent, int x) {
  while (parent[static_cast<std::size_t>(x)] != x) {
    parent[static_cast<std::size_t>(x)] =
        parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    x = parent[static_cast<std::size_t>(x)];
  }
  return x;
}

}  // namespace

std::optional<RankClasses> split_rank_classes(const traces::TrainingGraph& probe,
                                              const Scenario& scenario, const Plan& plan,
                                              std::string& why) {
  const int n = static_cast<int>(plan.ranks.size());
  const SplitTopology topo(plan.model_split, n);
  const int stages = topo.stages();
  const int lanes = topo.replicas(0);
  for (int s = 1; s < stages; ++s)
    if (topo.replicas(s) != lanes) {
      why = "stage " + std::to_string(s) + " has " + std::to_string(topo.replicas(s)) +
            " data-parallel replicas and stage 0 " + std::to_string(lanes) +
            ": its pipeline transfers cross replicas";
      return std::nullopt;
    }
  auto samples = [&](int s, int j) {
    return plan.ranks[static_cast<std::size_t>(topo.rank_at(s, j, 0))].share_per_micro_batch(
        plan.model_split.micro_batches);
  };
  for (int s = 1; s < stages; ++s)
    for (int j = 0; j < lanes; ++j)
      if (samples(s, j) != samples(0, j)) {
        why = "replica " + std::to_string(j) + " takes " + std::to_string(samples(s, j)) +
              " samples of each micro-batch on stage " + std::to_string(s) + " and " +
              std::to_string(samples(0, j)) + " on stage 0: its pipeline transfers cross replicas";
        return std::nullopt;
      }

  // Components: lanes joined by a shared node.
  const auto& devices = scenario.cluster.ranks();
  const auto& nodes = scenario.cluster.nodes;
  std::vector<int> parent(static_cast<std::size_t>(lanes));
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<int> node_lane(nodes.size(), -1);
  for (int s = 0; s < stages; ++s)
    for (int j = 0; j < lanes; ++j)
      for (int t = 0; t < topo.tensor_parallel(s); ++t) {
        int& at = node_lane[static_cast<std::size_t>(
            devices[static_cast<std::size_t>(topo.rank_at(s, j, t))].node)];
        if (at < 0) at = j;
        parent[static_cast<std::size_t>(find_root(parent, j))] = find_root(parent, at);
      }
  // Per component (by root): its lanes ascending and its lowest node.
  std::map<int, std::vector<int>> members;
  for (int j = 0; j < lanes; ++j) members[find_root(parent, j)].push_back(j);
  std::vector<std::pair<int, std::vector<int>>> components;  // (lowest node, lanes)
  for (auto& [root, list] : members) {
    int lowest = static_cast<int>(nodes.size());
    for (int j : list)
      for (int s = 0; s < stages; ++s)
        for (int t = 0; t < topo.tensor_parallel(s); ++t)
          lowest = std::min(lowest, devices[static_cast<std::size_t>(topo.rank_at(s, j, t))].node);
    components.emplace_back(lowest, std::move(list));
  }
  std::sort(components.begin(), components.end());

  // A component's kind: everything its replay reads, relative to its lowest node.
  std::map<std::string, std::int64_t> names;
  auto name_id = [&](const std::string& x) {
    return names.emplace(x, static_cast<std::int64_t>(names.size())).first->second;
  };
  const int units = probe.summary().num_units;
  std::map<std::vector<std::int64_t>, int> kinds;
  std::vector<int> kind_first;  // per kind: its first component
  RankClasses out;
  out.representative.assign(static_cast<std::size_t>(n), -1);
  std::vector<std::int64_t> key;
  std::vector<char> node_seen(nodes.size(), 0);
  for (std::size_t c = 0; c < components.size(); ++c) {
    const auto& [lowest, list] = components[c];
    key.clear();
    key.push_back(static_cast<std::int64_t>(list.size()));
    std::vector<int> comp_nodes;
    for (int j : list)
      for (int s = 0; s < stages; ++s)
        for (int t = 0; t < topo.tensor_parallel(s); ++t) {
          const int r = topo.rank_at(s, j, t);
          const RankDevice& d = devices[static_cast<std::size_t>(r)];
          const PlanRank& row = plan.ranks[static_cast<std::size_t>(r)];
          if (!node_seen[static_cast<std::size_t>(d.node)]) {
            node_seen[static_cast<std::size_t>(d.node)] = 1;
            comp_nodes.push_back(d.node);
          }
          key.insert(key.end(), {d.node - lowest, d.local_index, name_id(d.slot->spec.name),
                                 bits(d.slot->slowdown), row.batch, row.micro_batch,
                                 row.micro_batches, bits(probe.static_bytes(r))});
          for (int u = 0; u < units; ++u)
            if (probe.holds(r, u)) key.push_back(probe.slice(u, r).count);
        }
    std::sort(comp_nodes.begin(), comp_nodes.end());
    for (int node : comp_nodes) {
      const Node& x = nodes[static_cast<std::size_t>(node)];
      key.insert(key.end(), {node - lowest, static_cast<std::int64_t>(x.devices.size()),
                             name_id(x.intra_link.kind), bits(x.intra_link.bandwidth),
                             bits(x.intra_link.latency), name_id(x.nic.kind), bits(x.nic.bandwidth),
                             bits(x.nic.latency), x.nic_count, x.nvls ? 1 : 0, x.sharp ? 1 : 0});
    }
    auto [it, fresh] = kinds.emplace(key, static_cast<int>(kind_first.size()));
    if (fresh) kind_first.push_back(static_cast<int>(c));
    const auto& rep_lanes = components[static_cast<std::size_t>(kind_first[it->second])].second;
    for (std::size_t i = 0; i < list.size(); ++i)
      for (int s = 0; s < stages; ++s)
        for (int t = 0; t < topo.tensor_parallel(s); ++t)
          out.representative[static_cast<std::size_t>(topo.rank_at(s, list[i], t))] =
              topo.rank_at(s, rep_lanes[i], t);
  }
  for (int r = 0; r < n; ++r)
    if (out.representative[static_cast<std::size_t>(r)] == r) out.representatives.push_back(r);
  return out;
}

}  // namespace cephalo::sim::detail

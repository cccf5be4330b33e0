// A stage's data-parallel collectives as its graph runs them (over the DP group, in every
// sharding group at once, hybrid's reduction across its groups) and the chains of them that
// share NICs: the parts of SplitEstimator's estimate (split_estimate.cpp) that price the DP tail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>

#include "cephalo/sim/class_replay.hpp"
#include "split_estimator_impl.hpp"

namespace cephalo::planner {

using split_detail::CollectiveKind;
using split_detail::CollectiveRequest;

std::vector<double> split_detail::shared_nic_ends(const std::vector<NicChain>& chains,
                                                  std::vector<int>& users) {
  const std::size_t n = chains.size();
  std::vector<double> end(n);
  for (std::size_t i = 0; i < n; ++i) end[i] = chains[i].release + chains[i].work;
  bool shared = false;
  for (const auto& c : chains)
    for (int node : *c.nodes) shared |= ++users[static_cast<std::size_t>(node)] > 1;
  for (const auto& c : chains)
    for (int node : *c.nodes) users[static_cast<std::size_t>(node)] = 0;
  if (!shared) return end;
  std::vector<double> left(n);
  std::vector<char> state(n, 0);  // 0 not released, 1 running, 2 done
  for (std::size_t i = 0; i < n; ++i) left[i] = chains[i].work;
  double t = std::numeric_limits<double>::infinity();
  for (const auto& c : chains) t = std::min(t, c.release);
  std::vector<double> rate(n, 0.0);
  for (std::size_t done = 0; done < n;) {
    for (std::size_t i = 0; i < n; ++i)
      if (state[i] == 0 && chains[i].release <= t) {
        state[i] = 1;
        for (int node : *chains[i].nodes) ++users[static_cast<std::size_t>(node)];
      }
    double next = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      if (state[i] == 0) next = std::min(next, chains[i].release);
      if (state[i] != 1) continue;
      int most = 1;
      for (int node : *chains[i].nodes)
        most = std::max(most, users[static_cast<std::size_t>(node)]);
      rate[i] = 1.0 / most;
      next = std::min(next, t + left[i] / rate[i]);
    }
    const double dt = next - t;
    t = next;
    for (std::size_t i = 0; i < n; ++i) {
      if (state[i] != 1) continue;
      left[i] -= dt * rate[i];
      if (left[i] <= 1e-12 * std::max(1.0, chains[i].work)) {
        state[i] = 2;
        end[i] = t;
        ++done;
        for (int node : *chains[i].nodes) --users[static_cast<std::size_t>(node)];
      }
    }
  }
  return end;
}

std::vector<std::size_t> SplitEstimator::Impl::group_kinds(const StageRanks& sr,
                                                           const split_detail::Replicas& rep) {
  if (node_link.empty()) node_link = sim::node_link_classes(scenario.cluster);
  std::vector<std::size_t> out;
  std::map<std::vector<std::int64_t>, std::size_t> seen;
  std::vector<std::int64_t> key, last;
  for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const auto& g = rep.groups[gi];
    key.clear();
    key.push_back(static_cast<std::int64_t>(g.size()));
    bool ascending = true;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::size_t j = g[i];
      const int lead = sr.group[j];
      if (i > 0 && lead <= sr.group[g[i - 1]]) ascending = false;
      std::uint64_t share = 0;
      std::memcpy(&share, &rep.share[j], sizeof share);
      key.push_back(rank_type[static_cast<std::size_t>(lead)]);
      key.push_back(rep.node[j] - rep.node[g.front()]);
      key.push_back(node_link[static_cast<std::size_t>(rep.node[j])]);
      key.push_back(static_cast<std::int64_t>(share));
    }
    if (!ascending) {  // the comm model sorts its members: this group's order is its own
      out.push_back(gi);
      last.clear();
      continue;
    }
    // Groups come in runs of alike ones: most are their predecessor's kind.
    if (key == last) continue;
    if (seen.emplace(key, gi).second) out.push_back(gi);
    std::swap(key, last);
  }
  return out;
}

double SplitEstimator::Impl::dp_collective(StageRanks& sr, const split_detail::Replicas& rep,
                                           std::span<const std::size_t> kinds,
                                           ShardingKind sharding, CollectiveKind kind,
                                           double elements, double element_bytes, double sharing,
                                           double variant_elements) {
  const double bytes = elements * element_bytes * sharing;
  if (sharding == ShardingKind::None || (rep.groups.size() == 1 && rep.even_shares))
    return stage_collective(sr, 1, kind, bytes);
  const double gather_bytes = (variant_elements < 0 ? elements : variant_elements) *
                              bytes_per_element(scenario.job.precision.compute);
  double slowest = 0;
  for (std::size_t gi : kinds) {
    const auto& g = rep.groups[gi];
    if (g.size() < 2) continue;  // a group of one holds the whole unit: nothing moves
    double sum = 0;
    for (std::size_t j : g) sum += rep.share[j];
    CollectiveRequest r;
    r.kind = kind;
    r.training_state = true;  // the stage's gradients and parameters
    bool even = true;
    for (std::size_t j : g) {
      const double x = sum > 0 ? rep.share[j] / sum : 0;
      r.ranks.push_back(sr.group[j]);
      r.shard_bytes.push_back(bytes * x);
      even = even && std::fabs(x - 1.0 / static_cast<double>(g.size())) <= 1e-12;
    }
    if (!even) {
      // traces' UnevenVariants: one variant per unit and group, whatever the direction,
      // chosen by the comm model on the unit's all-gather of these shards.
      RequestKey key{CollectiveKind::AllGather, {}, r.ranks};
      for (double b : r.shard_bytes) key.shard_bytes.push_back(b / bytes * gather_bytes);
      auto it = variants.find(key);
      if (it == variants.end()) {
        CollectiveRequest gather;
        gather.kind = CollectiveKind::AllGather;
        gather.ranks = key.ranks;
        gather.shard_bytes = key.shard_bytes;
        const UnevenCollective v =
            costmodels::uneven_variant(*models.comm, scenario.cluster, gather);
        it = variants.emplace(std::move(key), v).first;
      }
      r.uneven = it->second;
    }
    slowest = std::max(slowest, collective(r));
  }
  return slowest;
}

double SplitEstimator::Impl::cross_reduction(const StageRanks& sr,
                                             const split_detail::Replicas& rep, double elements,
                                             double element_bytes, double sharing) {
  if (rep.groups.size() < 2) return 0;
  const double bytes = elements * element_bytes * sharing;
  // Each group cuts the unit at its members' cumulative shares; a piece is an interval between
  // consecutive cuts of all groups, owned in each group by the member whose slice holds it.
  std::vector<std::vector<double>> ends(rep.groups.size());
  std::vector<double> cuts{0.0, 1.0};
  CollectiveRequest r;
  r.kind = CollectiveKind::AllReduce;
  r.training_state = true;
  for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const auto& g = rep.groups[gi];
    double sum = 0;
    for (std::size_t j : g) sum += rep.share[j];
    double at = 0;
    for (std::size_t j : g) {
      const double x = sum > 0 ? rep.share[j] / sum : 1.0 / static_cast<double>(g.size());
      at += x;
      ends[gi].push_back(at);
      r.ranks.push_back(sr.group[j]);
      r.shard_bytes.push_back(bytes * x);
    }
    // A group cut as its predecessor adds the same cuts, whose pieces would be empty (skipped
    // below): alike groups come in runs, so the cuts stay a few, not one per replica.
    if (gi == 0 || ends[gi] != ends[gi - 1])
      for (double end : ends[gi]) cuts.push_back(std::min(end, 1.0));
  }
  std::sort(cuts.begin(), cuts.end());
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const double a = cuts[k], b = cuts[k + 1];
    if (b - a <= 1e-12) continue;
    costmodels::ReductionPiece piece;
    piece.bytes = (b - a) * bytes;
    const double mid = (a + b) / 2;
    for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
      const auto& e = ends[gi];
      const std::size_t at = std::min<std::size_t>(
          static_cast<std::size_t>(std::upper_bound(e.begin(), e.end(), mid) - e.begin()),
          e.size() - 1);
      piece.owners.push_back(sr.group[rep.groups[gi][at]]);
    }
    r.pieces.push_back(std::move(piece));
  }
  return collective(r);
}

}  // namespace cephalo::planner

// The 3D split search's transfer floor (split_search_impl.hpp): what the estimate's pipeline
// transfers cost at least, so that a family's floor holds 1F1B's round trips through every
// stage and back (split_search_bound.hpp, round_trip_floor).
#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>
#include <vector>

#include "cephalo/core/dtype.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "split_estimator_impl.hpp"
#include "split_search_impl.hpp"

namespace cephalo::planner::split_detail {

// The estimate prices each boundary's transfer on its own (split_estimate.cpp, "P2P"): a
// boundary between two nodes moves, per direction, the activations of every rank of the sending
// stage on its first node (each rank its samples over T at least, with scatter / gather), and
// the pipeline may hold it longer while a NIC it needs carries another boundary. So a boundary
// whose stages' first ranks sit on different nodes takes at least a point-to-point transfer,
// between those ranks, of those bytes; one on a node, at least nothing. Replicas balanced by
// speed hold at least one sample each (boundary_floor).
namespace {

int ranks_on_first_node(const Scenario& scenario, std::span<const int> from) {
  const auto& ranks = scenario.cluster.ranks();
  const int node = ranks[static_cast<std::size_t>(from.front())].node;
  return static_cast<int>(std::count_if(from.begin(), from.end(), [&](int r) {
    return ranks[static_cast<std::size_t>(r)].node == node;
  }));
}

double boundary_bytes_of(const Job& job, int on_node, int T, long long samples) {
  return static_cast<double>(samples) *
         costmodels::effective_sequence(job.model, job.sequence_length) * job.model.hidden *
         bytes_per_element(job.precision.compute) * static_cast<double>(on_node) / T;
}

}  // namespace

double boundary_bytes_floor(const Scenario& scenario, std::span<const int> from, int T,
                            long long samples) {
  return boundary_bytes_of(scenario.job, ranks_on_first_node(scenario, from), T, samples);
}

double boundary_transfer_floor(const Scenario& scenario, const costmodels::CostModels& models,
                               std::span<const int> from, int T, long long samples, int to) {
  const auto& ranks = scenario.cluster.ranks();
  const int src = from.front();
  if (ranks[static_cast<std::size_t>(src)].node == ranks[static_cast<std::size_t>(to)].node)
    return 0;
  const double bytes = boundary_bytes_floor(scenario, from, T, samples);
  return models.comm->collective(scenario.cluster, p2p_request(src, to, bytes)).seconds;
}

double layout_transfer_floor(const Scenario& scenario, const costmodels::CostModels& models,
                             std::span<const std::vector<int>> stages, std::span<const int> tp,
                             std::span<const long long> samples, int virtual_stages) {
  // One pass through the virtual pipeline crosses p·V − 1 boundaries, crossing k being stage
  // k mod p's to the next (the last stage's to the first under interleaving).
  const std::size_t p = stages.size();
  std::vector<double> own(p, 0.0);
  for (std::size_t a = 0; a < p; ++a)
    own[a] = boundary_transfer_floor(scenario, models, stages[a], tp[a], samples[a],
                                     stages[(a + 1) % p].front());
  double sum = 0;
  for (std::size_t k = 0; k + 1 < p * static_cast<std::size_t>(virtual_stages); ++k)
    sum += own[k % p];
  return sum;
}

double Search::transfer_floor(int src, int dst, double bytes) {
  unsigned long long bits = 0;
  static_assert(sizeof(bits) == sizeof(bytes));
  std::memcpy(&bits, &bytes, sizeof(bits));
  const std::pair<unsigned long long, unsigned long long> key{
      (static_cast<unsigned long long>(src) << 32) ^ static_cast<unsigned long long>(dst), bits};
  auto it = transfer_floors_.find(key);
  if (it == transfer_floors_.end())
    it = transfer_floors_
             .emplace(
                 key,
                 models_.comm->collective(scenario_.cluster, p2p_request(src, dst, bytes)).seconds)
             .first;
  return it->second;
}

double Search::boundary_bytes(const StageShape& from, int m) {
  const long long b =
      from.by_speed ? 1 : scenario_.job.global_batch / (static_cast<long long>(m) * from.replicas);
  if (from.first_node_ranks < 0) from.first_node_ranks = ranks_on_first_node(scenario_, from.ranks);
  return boundary_bytes_of(scenario_.job, from.first_node_ranks, from.tensor_parallel, b);
}

void Search::boundary_floors(const std::vector<StageShape>& shapes, int m,
                             std::vector<double>& own) {
  const auto& ranks = scenario_.cluster.ranks();
  const std::size_t p = shapes.size();
  own.assign(p, 0.0);
  for (std::size_t a = 0; a < p; ++a) {
    const int src = shapes[a].ranks.front(), dst = shapes[(a + 1) % p].ranks.front();
    if (ranks[static_cast<std::size_t>(src)].node == ranks[static_cast<std::size_t>(dst)].node)
      continue;
    own[a] = transfer_floor(src, dst, boundary_bytes(shapes[a], m));
  }
}

double Search::layout_transfer_floor(const std::vector<StageShape>& shapes, int m,
                                     int virtual_stages) {
  // One pass through the virtual pipeline crosses p·V − 1 boundaries, crossing k being stage
  // k mod p's to the next (the last stage's to the first under interleaving).
  boundary_floors(shapes, m, own_);
  const std::size_t p = shapes.size();
  double sum = 0;
  for (std::size_t k = 0; k + 1 < p * static_cast<std::size_t>(virtual_stages); ++k)
    sum += own_[k % p];
  return sum;
}

double Search::family_transfer_floor(const TypeFamily& f,
                                     const std::vector<std::vector<StageShape>>& stages, int m) {
  // Whatever the order of the types' blocks, a type's stages follow one another in it, and some
  // boundary that is not the last stage's to the first joins two types (a cycle through two or
  // more types changes type at least twice): one pass of a one-chunk pipeline crosses each of a
  // type's own boundaries and at least one such joint, each at least its own transfer.
  // A type's stages are fixed by its T and stage count, so its own boundaries' sum and each
  // pair of types' least joint are remembered by those (a large cluster's families share
  // them: 40 stages are 1,600 pairs per micro-batch count otherwise).
  const auto& ranks = scenario_.cluster.ranks();
  const auto node_of = [&](const StageShape& s) {
    return ranks[static_cast<std::size_t>(s.ranks.front())].node;
  };
  const auto type_key = [&](std::size_t t) {
    return (static_cast<unsigned long long>(t) << 24) ^
           (static_cast<unsigned long long>(f.tp[t]) << 16) ^
           static_cast<unsigned long long>(f.k[t]);
  };
  const auto m_key = static_cast<unsigned long long>(m);
  double own = 0;
  for (std::size_t t = 0; t < stages.size(); ++t) {
    const std::pair<unsigned long long, unsigned long long> key{type_key(t), m_key << 1};
    auto it = family_transfers_.find(key);
    if (it == family_transfers_.end()) {
      const auto& type = stages[t];
      double sum = 0;
      for (std::size_t i = 0; i + 1 < type.size(); ++i) {
        if (node_of(type[i]) == node_of(type[i + 1])) continue;
        sum += transfer_floor(type[i].ranks.front(), type[i + 1].ranks.front(),
                              boundary_bytes(type[i], m));
      }
      it = family_transfers_.emplace(key, sum).first;
    }
    own += it->second;
  }
  double least = std::numeric_limits<double>::infinity();
  for (std::size_t t1 = 0; t1 < stages.size(); ++t1)
    for (std::size_t t2 = 0; t2 < stages.size(); ++t2) {
      if (t1 == t2) continue;
      const std::pair<unsigned long long, unsigned long long> key{
          (type_key(t1) << 32) ^ type_key(t2), (m_key << 1) | 1};
      auto it = family_transfers_.find(key);
      if (it == family_transfers_.end()) {
        double pair = std::numeric_limits<double>::infinity();
        for (const StageShape& a : stages[t1]) {
          const double bytes = boundary_bytes(a, m);
          for (const StageShape& c : stages[t2])
            pair = std::min(pair, node_of(a) == node_of(c)
                                      ? 0.0
                                      : transfer_floor(a.ranks.front(), c.ranks.front(), bytes));
        }
        it = family_transfers_.emplace(key, pair).first;
      }
      least = std::min(least, it->second);
    }
  return own + (std::isfinite(least) ? least : 0.0);
}

int Search::trips(int p, int m, const pipeline::PipelineSchedule& schedule) {
  const auto key = std::make_tuple(p, m, static_cast<int>(schedule.kind), schedule.virtual_stages);
  auto it = trips_.find(key);
  if (it == trips_.end())
    it = trips_.emplace(key, round_trips(pipeline::stage_order(0, p, m, schedule))).first;
  return it->second;
}

}  // namespace cephalo::planner::split_detail

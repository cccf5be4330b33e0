// The 3D split search's transfer floor (split_search_impl.hpp): what the estimate's pipeline
// transfers cost at least, so that a family's floor holds 1F1B's round trips through every
// stage and back (split_search_bound.hpp, round_trip_floor).
#include <algorithm>
#include <limits>
#include <span>
#include <tuple>
#include <vector>

#include "cephalo/core/dtype.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "split_estimator_impl.hpp"
#include "split_search_impl.hpp"

namespace cephalo::planner::split_detail {

// The estimate prices every transfer between stages at its slowest boundary's time; a boundary
// between two nodes moves, per direction, the activations of every rank of the sending stage
// on its first node (each rank its samples over T at least, with scatter / gather), in both
// directions at once, and its nodes' NICs carry at least that (split_estimate.cpp, "P2P"). So
// a boundary whose stages' first ranks sit on different nodes takes at least a point-to-point
// transfer of those bytes between those ranks; one on a node, at least nothing. Replicas
// balanced by speed hold at least one sample each (boundary_floor).
double boundary_transfer_floor(const Scenario& scenario, const costmodels::CostModels& models,
                               std::span<const int> from, int T, long long samples, int to) {
  const auto& ranks = scenario.cluster.ranks();
  const int src = from.front();
  const int node = ranks[static_cast<std::size_t>(src)].node;
  if (node == ranks[static_cast<std::size_t>(to)].node) return 0;
  const Job& job = scenario.job;
  const auto on_node = std::count_if(from.begin(), from.end(), [&](int r) {
    return ranks[static_cast<std::size_t>(r)].node == node;
  });
  const double bytes = kP2pDirections * static_cast<double>(samples) *
                       costmodels::effective_sequence(job.model, job.sequence_length) *
                       job.model.hidden * bytes_per_element(job.precision.compute) *
                       static_cast<double>(on_node) / T;
  return models.comm->collective(scenario.cluster, p2p_request(src, to, bytes)).seconds;
}

double Search::boundary_floor(const StageShape& from, const StageShape& to, int m) {
  const long long b =
      from.by_speed ? 1 : scenario_.job.global_batch / (static_cast<long long>(m) * from.replicas);
  const auto key = std::make_tuple(from.ranks.front(), static_cast<int>(from.ranks.size()),
                                   from.tensor_parallel, b, to.ranks.front());
  auto it = transfer_floors_.find(key);
  if (it == transfer_floors_.end())
    it = transfer_floors_
             .emplace(key, boundary_transfer_floor(scenario_, models_, from.ranks,
                                                   from.tensor_parallel, b, to.ranks.front()))
             .first;
  return it->second;
}

double Search::layout_transfer_floor(const std::vector<StageShape>& shapes, int m, bool wraps) {
  const std::size_t p = shapes.size();
  double most = 0;
  // Boundaries s -> s + 1, and with interleaving the last stage's back to the first.
  for (std::size_t a = 0; a + (wraps ? 0 : 1) < p; ++a)
    most = std::max(most, boundary_floor(shapes[a], shapes[(a + 1) % p], m));
  return most;
}

double Search::family_transfer_floor(const std::vector<std::vector<StageShape>>& stages, int m) {
  // Whatever the order of the types' blocks, a type's stages follow one another in it, and
  // some boundary joins two types: the largest of a type's own boundaries, and the least over
  // every stage pair of two types.
  double own = 0;
  for (const auto& type : stages)
    for (std::size_t i = 0; i + 1 < type.size(); ++i)
      own = std::max(own, boundary_floor(type[i], type[i + 1], m));
  double least = std::numeric_limits<double>::infinity();
  for (std::size_t t1 = 0; t1 < stages.size(); ++t1)
    for (std::size_t t2 = 0; t2 < stages.size(); ++t2) {
      if (t1 == t2) continue;
      for (const StageShape& a : stages[t1])
        for (const StageShape& c : stages[t2]) least = std::min(least, boundary_floor(a, c, m));
    }
  return std::max(own, std::isfinite(least) ? least : 0.0);
}

int Search::trips(int p, int m, const pipeline::PipelineSchedule& schedule) {
  const auto key = std::make_tuple(p, m, static_cast<int>(schedule.kind), schedule.virtual_stages);
  auto it = trips_.find(key);
  if (it == trips_.end())
    it = trips_.emplace(key, round_trips(pipeline::stage_order(0, p, m, schedule))).first;
  return it->second;
}

}  // namespace cephalo::planner::split_detail

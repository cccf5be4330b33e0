#include "fixed_models.hpp"

namespace cephalo::sim {

costmodels::ComputeEstimate FixedComputeModel::unit_time(const DeviceSpec&, const Job&, int,
                                                         costmodels::ComputePhase phase,
                                                         int micro_batch) const {
  double t = forward_s;
  if (phase == costmodels::ComputePhase::Backward) t = backward_s;
  if (phase == costmodels::ComputePhase::Recompute) t = recompute_s < 0 ? forward_s : recompute_s;
  if (per_sample) t *= micro_batch;
  return {t, false, "fixed"};
}

costmodels::ComputeEstimate FixedComputeModel::optimizer_time(const DeviceSpec&, const Job&,
                                                              double) const {
  return {optimizer_s, false, "fixed"};
}

costmodels::CollectiveEstimate FixedCommModel::collective(
    const Cluster&, const costmodels::CollectiveRequest& request) const {
  costmodels::CollectiveEstimate e;
  switch (request.kind) {
    case costmodels::CollectiveKind::AllGather:
      e.seconds = all_gather_s;
      break;
    case costmodels::CollectiveKind::ReduceScatter:
      e.seconds = reduce_scatter_s;
      break;
    case costmodels::CollectiveKind::Broadcast:
      e.seconds = broadcast_s;
      break;
    default:
      e.seconds = all_reduce_s;
      break;
  }
  for (double b : request.shard_bytes) e.total_bytes += b;
  e.algorithm = "fixed";
  return e;
}

double FixedCommModel::copy_time(const Cluster&, int, double) const { return copy_s; }

}  // namespace cephalo::sim

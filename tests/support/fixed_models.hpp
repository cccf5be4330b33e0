#pragma once
// Cost models with fixed durations, for hand-computed tests and scale benchmarks: every op of a
// kind takes the same time whatever the device, unit or size (optionally proportional to the
// micro-batch size), so expected iteration times can be worked out on paper.
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/compute_model.hpp"

namespace cephalo::sim {

class FixedComputeModel final : public costmodels::ComputeModel {
 public:
  double forward_s = 1e-3;
  double backward_s = 2e-3;
  double recompute_s = -1;  // < 0: same as forward
  double optimizer_s = 0.5e-3;
  bool per_sample = false;  // multiply by the micro-batch size

  costmodels::ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit,
                                        costmodels::ComputePhase phase,
                                        int micro_batch) const override;
  costmodels::ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                             double shard_parameters) const override;
  std::string name() const override { return "fixed"; }
};

class FixedCommModel final : public costmodels::CommModel {
 public:
  double all_gather_s = 1e-3;
  double reduce_scatter_s = 1e-3;
  double all_reduce_s = 2e-3;
  double broadcast_s = 1e-3;  // a pipeline transfer (a two-rank broadcast)
  double copy_s = 0.5e-3;

  costmodels::CollectiveEstimate collective(
      const Cluster& cluster, const costmodels::CollectiveRequest& request) const override;
  double copy_time(const Cluster& cluster, int rank, double bytes) const override;
};

}  // namespace cephalo::sim

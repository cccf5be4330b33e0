#include "cephalo/costmodels/tensor_parallel.hpp"

#include <cstring>
#include <vector>

#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

bool replicated_op(const char* name) {
  for (const char* r : {"norm1", "norm2", "residual1", "residual2"})
    if (std::strcmp(name, r) == 0) return true;
  return false;
}

double features_time(const OpFeatures& x, const OpFeatures& theta) {
  double t = 0;
  for (std::size_t i = 0; i < x.size(); ++i) t += x[i] * theta[i];
  return t;
}

}  // namespace

ReplicatedShare layer_replicated_share(const DeviceSpec& device, const Job& job, int micro_batch) {
  const auto ops = unit_ops(job.model, 1, job.sequence_length, micro_batch, job.precision.compute,
                            job.implementation);
  std::vector<OpCost> replicated;
  for (const auto& op : ops)
    if (replicated_op(op.name)) replicated.push_back(op);
  const auto all = ops_features(device, ops, job.precision.compute);
  const auto rep = ops_features(device, replicated, job.precision.compute);
  const auto theta = Efficiency{}.coefficients();
  const double f_all = features_time(all.forward, theta);
  const double b_all = features_time(all.backward, theta);
  return {f_all > 0 ? features_time(rep.forward, theta) / f_all : 0,
          b_all > 0 ? features_time(rep.backward, theta) / b_all : 0};
}

double tensor_parallel_factor(const ModelSpec& model, int unit, ComputePhase phase,
                              int tensor_parallel, bool sequence_parallel,
                              const ReplicatedShare& share) {
  if (tensor_parallel <= 1) return 1.0;
  const double t = tensor_parallel;
  switch (unit_kind(model, unit)) {
    case UnitKind::Embedding:
      return 1.0;
    case UnitKind::Head:
      return 1.0 / t;
    case UnitKind::Layer: {
      double r = phase == ComputePhase::Backward ? share.backward : share.forward;
      if (sequence_parallel) r = 0;
      return r + (1.0 - r) / t;
    }
  }
  return 1.0;
}

double tensor_parallel_activation_factor(const ModelSpec& model, int unit, int seq,
                                         int tensor_parallel, bool sequence_parallel) {
  if (tensor_parallel <= 1) return 1.0;
  const double t = tensor_parallel;
  switch (unit_kind(model, unit)) {
    case UnitKind::Embedding:
      return sequence_parallel ? 1.0 / t : 1.0;
    case UnitKind::Head:
      return 1.0 / t;
    case UnitKind::Layer: {
      if (sequence_parallel) return 1.0 / t;
      const double attention = 5.0 * model.heads * effective_sequence(model, seq) / model.hidden;
      return (10.0 + 24.0 / t + attention / t) / (34.0 + attention);
    }
  }
  return 1.0;
}

}  // namespace cephalo::costmodels

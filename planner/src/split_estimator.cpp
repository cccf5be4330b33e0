// SplitEstimator's face (split_estimate.hpp): the estimator that remembers across splits, the
// one-off estimate_split, and the backward's work ratio the estimate prices a calibrated
// backward by. The estimate itself: split_estimate.cpp.
#include "cephalo/planner/split_estimate.hpp"

#include "split_estimator_impl.hpp"

namespace cephalo::planner {
namespace {

double features_time(const costmodels::OpFeatures& x, const costmodels::OpFeatures& theta) {
  double t = 0;
  for (std::size_t i = 0; i < x.size(); ++i) t += x[i] * theta[i];
  return t;
}

}  // namespace

double backward_work_ratio(const DeviceSpec& spec, const Job& job, int unit, int micro_batch) {
  const auto ops = costmodels::unit_ops(job.model, unit, job.sequence_length, micro_batch,
                                        job.precision.compute, job.implementation);
  const auto x = costmodels::ops_features(spec, ops, job.precision.compute);
  const auto theta = costmodels::Efficiency{}.coefficients();
  const double f = features_time(x.forward, theta);
  return f > 0 ? features_time(x.backward, theta) / f : 0;
}

// What SplitEstimator remembers between splits: every value here is the result of a call the
// estimate makes, keyed by all of that call's arguments that can change between splits of one
// scenario, so a remembered value is the value the call returns.
SplitEstimator::SplitEstimator(const Scenario& scenario, const costmodels::CostModels& models)
    : impl_(std::make_unique<Impl>(scenario, models)) {}
SplitEstimator::~SplitEstimator() = default;

SplitEstimate SplitEstimator::estimate(const ModelSplit& split, const SplitOptions& options,
                                       const EstimateLimits& limits) {
  return impl_->estimate(split, options, limits);
}

double SplitEstimator::layer_step_floor(const std::vector<int>& tp_group, int b,
                                        const SplitOptions& options) {
  return impl_->layer_step_floor(tp_group, b, options);
}

double SplitEstimator::tail_floor_per_parameter(const std::vector<int>& dp_group,
                                                const SplitOptions& options) {
  return impl_->tail_floor_per_parameter(dp_group, options);
}

SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options, const costmodels::CostModels& models) {
  return SplitEstimator(scenario, models).estimate(split, options);
}

SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options) {
  return estimate_split(scenario, split, options, costmodels::make_cost_models(scenario));
}

void require_fit(const SplitEstimate& estimate) {
  if (!estimate.fits) throw InfeasibleError(estimate.refusal);
}

}  // namespace cephalo::planner

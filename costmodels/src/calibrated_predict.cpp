// Prediction with the fitted calibrated compute model: θ and factors looked up per device,
// dtype and stack; a unit's time from its op features.
#include <cmath>

#include "calibration_util.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "fit_cache.hpp"

namespace cephalo::costmodels {
using detail::at_fraction;
using detail::dtype_class;
using detail::median;
using detail::predict_s;

int pipeline_class(const DeviceSpec& device, Dtype dtype) {
  return dtype_class(dtype) && effective_peak(device, dtype) > device.peak_fp32 ? 1 : 0;
}

std::string CalibratedComputeModel::family_key(const std::string& family, int factor_class) const {
  return family_per_dtype_ ? family + (factor_class ? "/16" : "/32") : family;
}

int CalibratedComputeModel::factor_class(const DeviceSpec& device, Dtype dtype) const {
  return factors_per_pipeline_ ? pipeline_class(device, dtype) : (dtype_class(dtype) ? 1 : 0);
}

double CalibratedComputeModel::sustained_fraction(const DeviceSpec& device, Dtype dtype) const {
  const int c = pipeline_class(device, dtype);
  // Integer instructions on lanes shared with FP32 (CUDA-core pipeline only; tensor-core
  // GEMMs issue few FP32-lane instructions).
  const double issue =
      c == 0 && int32_share_ > 0 ? 1 / (1 + int32_share_ * int32_shared_lane_fraction(device)) : 1;
  double k = watts_per_flops_[static_cast<std::size_t>(c)];
  if (!(k > 0) || !(device.tdp_watts > 0)) return issue;
  const double r = device.tdp_watts / (k * effective_peak(device, dtype));
  if (r >= 1) return issue;
  return issue * (power_exponent_ == 1.0 / 3.0 ? std::cbrt(r) : std::pow(r, power_exponent_));
}

std::shared_ptr<const CalibratedComputeModel> CalibratedComputeModel::builtin() {
  static const std::shared_ptr<const CalibratedComputeModel> m = [] {
    const ProfileTables& tables = ProfileTables::builtin();
    if (auto cached = fit_cache::cached_model(tables)) return cached;
    auto fitted = fit(tables);
    fit_cache::store(tables, *fitted);
    return fitted;
  }();
  return m;
}

const Theta& CalibratedComputeModel::theta(const DeviceSpec& device, Dtype dtype, bool* own) const {
  const int c = pipeline_class(device, dtype);
  auto it = per_gpu_.find({device.name, c});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end()) return it->second;
  if (auto g = per_generation_.find({device.architecture, c}); g != per_generation_.end())
    return g->second;
  return pooled_.at(c);
}

std::array<double, 2> CalibratedComputeModel::family_factor(const std::string& family,
                                                            Dtype dtype) const {
  auto it = family_by_name_.find(family);
  return it == family_by_name_.end() ? std::array<double, 2>{1, 1}
                                     : it->second.f[static_cast<std::size_t>(dtype_class(dtype))];
}

std::array<double, 2> CalibratedComputeModel::factor(const DeviceSpec& device, Dtype dtype,
                                                     const std::string& family,
                                                     const std::string& model_name) const {
  const auto dc = static_cast<std::size_t>(factor_class(device, dtype));
  std::array<double, 2> f{1, 1};
  if (auto it = family_by_name_.find(family); it != family_by_name_.end()) f = it->second.f[dc];
  auto times = [&](const std::array<double, 2>& g) {
    f[0] *= g[0];
    f[1] *= g[1];
  };
  if (auto m = model_by_name_.find(model_name); m != model_by_name_.end()) times(m->second.f[dc]);
  if (auto g = local_by_name_.find(device.name); g != local_by_name_.end())
    if (auto l = g->second.find(family); l != g->second.end()) times(l->second.f[dc]);
  return f;
}

double CalibratedComputeModel::predict_seconds(const DeviceSpec& device, const std::string& stack,
                                               const std::string& model_name, Dtype dtype,
                                               const PhaseFeatures& x_peak, bool backward,
                                               bool* own, double memory_coefficient) const {
  const int c = pipeline_class(device, dtype);
  const PhaseFeatures x = at_fraction(x_peak, sustained_fraction(device, dtype));
  const auto f = factor(device, dtype, stack, model_name);
  auto eval = [&](const Theta& t) {
    OpFeatures theta = backward ? t.backward : t.forward;
    if (memory_coefficient > 0) theta[kMemoryBoundFeature] = memory_coefficient;
    return backward ? f[1] * predict_s(theta, x.backward) : f[0] * predict_s(theta, x.forward);
  };
  auto it = per_gpu_.find({device.name, c});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end()) return eval(it->second);
  if (auto g = per_generation_.find({device.architecture, c}); g != per_generation_.end())
    return eval(g->second);
  if (!median_of_gpus_) return eval(pooled_.at(c));
  // An unprofiled GPU: every profiled GPU's θ applied to this GPU's features; the median is
  // robust to GPUs that run far from their datasheet.
  std::vector<double> v;
  for (const auto& [key, t] : per_gpu_)
    if (key.second == c) v.push_back(eval(t));
  return v.empty() ? eval(pooled_.at(c)) : median(v);
}

double CalibratedComputeModel::layer_ms(const DeviceSpec& device, const ModelSpec& model, int seq,
                                        Dtype dtype, int micro_batch, bool backward,
                                        const Implementation& impl) const {
  PhaseFeatures x = unit_features(device, model, 1, seq, micro_batch, dtype, impl, waves_);
  return 1e3 * predict_seconds(device, model.family, model.name, dtype, x, backward);
}

double CalibratedComputeModel::ops_seconds(const DeviceSpec& device, Dtype dtype,
                                           const std::vector<OpCost>& ops, bool backward) const {
  return predict_seconds(device, kReferenceStack, "", dtype,
                         ops_features(device, ops, dtype, waves_), backward);
}

PhaseFeatures CalibratedComputeModel::job_features(const DeviceSpec& device, const Job& job,
                                                   const std::vector<OpCost>& ops) const {
  const Dtype dtype = job.precision.compute;
  return ops_features(device, ops, dtype, waves_,
                      stack_attention_weight(job.implementation, pipeline_class(device, dtype)));
}

double CalibratedComputeModel::job_seconds(const DeviceSpec& device, const Job& job, int unit,
                                           ComputePhase phase, const PhaseFeatures& x,
                                           bool* own) const {
  const Dtype dtype = job.precision.compute;
  const auto [stack, model_name] = job_stack(job);
  // A compiled stack's pointwise and reduction chains are Inductor's generated kernels, one per
  // chain between two GEMMs, each reading its inputs and writing its outputs once: priced at
  // the roofline's memory-bound efficiency. θ's memory-bound coefficient was fitted on eager
  // layers, whose chains launch several kernels per op of the list (upcasts, the norm's
  // reduction and scaling, the rotary positions), and stays theirs. `compiled` says the
  // transformer layers are compiled (torchtitan compiles each block); the embedding and the
  // head keep θ's.
  const bool generated =
      job.implementation.compiled && unit_kind(job.model, unit) == UnitKind::Layer;
  const double memory_coefficient = generated ? 1 / Efficiency{}.memory : 0;
  return predict_seconds(device, stack, model_name, dtype, x, phase == ComputePhase::Backward, own,
                         memory_coefficient) *
         stack_factor(job.implementation, pipeline_class(device, dtype));
}

ComputeEstimate CalibratedComputeModel::unit_time(const DeviceSpec& device, const Job& job,
                                                  int unit, ComputePhase phase,
                                                  int micro_batch) const {
  check_micro_batch(micro_batch);
  const auto ops = unit_ops(job.model, unit, job.sequence_length, micro_batch,
                            job.precision.compute, job.implementation);
  bool own = false;
  const double s = job_seconds(device, job, unit, phase, job_features(device, job, ops), &own);
  return {s, false, own ? "calibrated" : "calibrated (from specs)"};
}

std::vector<double> CalibratedComputeModel::unit_op_seconds(const DeviceSpec& device,
                                                            const Job& job, int unit,
                                                            ComputePhase phase,
                                                            int micro_batch) const {
  check_micro_batch(micro_batch);
  const auto ops = unit_ops(job.model, unit, job.sequence_length, micro_batch,
                            job.precision.compute, job.implementation);
  std::vector<double> out;
  out.reserve(ops.size());
  for (const OpCost& op : ops)
    out.push_back(job_seconds(device, job, unit, phase, job_features(device, job, {op})));
  return out;
}

ComputeEstimate CalibratedComputeModel::optimizer_time(const DeviceSpec& device, const Job& job,
                                                       double shard_parameters) const {
  return {adamw_seconds(device, job, shard_parameters), false, "calibrated"};
}
}  // namespace cephalo::costmodels

#include "profile_compute.hpp"

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

ProfileComputeModel::ProfileComputeModel(std::shared_ptr<const ProfileTables> tables,
                                         std::shared_ptr<const ComputeModel> fallback, bool strict)
    : tables_(std::move(tables)), fallback_(std::move(fallback)), strict_(strict) {}

namespace {

double pick_ms(const LayerTime& t, ComputePhase phase) {
  switch (phase) {
    case ComputePhase::Forward:
      return t.forward_ms;
    case ComputePhase::Backward:
      return t.backward_ms;
    case ComputePhase::Recompute:
      return t.recompute_ms;
  }
  return t.forward_ms;
}

}  // namespace

ComputeEstimate ProfileComputeModel::unit_time(const DeviceSpec& device, const Job& job, int unit,
                                               ComputePhase phase, int micro_batch) const {
  check_micro_batch(micro_batch);
  const Dtype dtype = job.precision.compute;
  const int seq = job.sequence_length;
  const UnitKind kind = unit_kind(job.model, unit);
  if (kind == UnitKind::Layer) {
    std::string note;
    if (const LayerProfile* row =
            tables_->find_for(job.model.name, device.name, seq, dtype, &note)) {
      LayerTime t = ProfileTables::evaluate(*row, micro_batch);
      std::string source = "profile";
      if (!note.empty()) source += " (" + note + ")";
      return {pick_ms(t, phase) * 1e-3, t.extrapolated, source};
    }
    if (strict_)
      throw InfeasibleError("no profile for model " + job.model.name + " on GPU " + device.name +
                            " at sequence " + std::to_string(seq) + " in " + to_string(dtype) +
                            "; use --source calibrated (fitted to the profiles that exist) or "
                            "roofline");
    return fallback_->unit_time(device, job, unit, phase, micro_batch);
  }
  const char* unit_name = kind == UnitKind::Embedding ? "embedding" : "head";
  if (const UnitProfile* u =
          tables_->find_unit(job.model.name, device.name, seq, dtype, unit_name)) {
    LayerTime t = ProfileTables::evaluate(u->points, micro_batch);
    // A profiled head's backward is the fused forward + loss + backward the executor runs as
    // the head's backward op (the logits are never kept), so its recompute is already in it.
    if (kind == UnitKind::Head && phase == ComputePhase::Recompute)
      return {0.0, t.extrapolated, "profile (in the head's fused backward)"};
    return {pick_ms(t, phase) * 1e-3, t.extrapolated, "profile"};
  }
  ComputeEstimate e = fallback_->unit_time(device, job, unit, phase, micro_batch);
  e.source += std::string(" (") + unit_name + " not profiled)";
  return e;
}

ComputeEstimate ProfileComputeModel::optimizer_time(const DeviceSpec& device, const Job& job,
                                                    double shard_parameters) const {
  if (const OptimizerProfile* o = tables_->find_optimizer(device.name)) {
    // Proportional fit through the measured (parameters, ms) points: AdamW is a streaming pass.
    double num = 0, den = 0, largest = 0;
    for (const auto& [n, ms] : o->points) {
      num += n * ms;
      den += n * n;
      largest = std::max(largest, n);
    }
    if (den > 0)
      return {shard_parameters * num / den * 1e-3, shard_parameters > largest, "profile"};
  }
  return fallback_->optimizer_time(device, job, shard_parameters);
}

}  // namespace cephalo::costmodels

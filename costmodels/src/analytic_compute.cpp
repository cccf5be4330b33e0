#include "cephalo/costmodels/analytic_compute.hpp"

#include <algorithm>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

double effective_peak(const DeviceSpec& device, Dtype dtype) {
  // Pascal (no tensor cores: fp16 at most twice fp32, no bf16): PyTorch's fp16 GEMMs accumulate
  // in fp32 (cublasGemmEx with CUBLAS_COMPUTE_32F), which runs on the fp32 pipeline. The
  // published P100 profiles show it: fp16 rows are as fast as fp32 ones.
  const bool pascal =
      device.peak_bf16 == 0 && device.peak_tf32 == 0 && device.peak_fp16 <= 2.5 * device.peak_fp32;
  if (pascal && (dtype == Dtype::FP16 || dtype == Dtype::BF16)) return device.peak_fp32;
  return std::max(device.peak_flops(dtype), device.peak_fp32);
}

void check_micro_batch(int micro_batch) {
  if (micro_batch <= 0)
    throw ValidationError("", "micro_batch", std::to_string(micro_batch),
                          "a micro-batch size >= 1");
}

PhaseFeatures unit_features(const DeviceSpec& device, const ModelSpec& model, int unit, int seq,
                            int micro_batch, Dtype dtype, const Implementation& impl, bool waves,
                            double flash_weight) {
  const double peak = effective_peak(device, dtype);
  const double bw = device.memory_bandwidth;
  PhaseFeatures f;
  for (const OpCost& op : unit_ops(model, unit, seq, micro_batch, dtype, impl)) {
    switch (op.op_class) {
      case OpClass::Gemm:
      case OpClass::FusedAttention: {
        const double w = (waves ? wave_efficiency(op.tiles, device.sm_count) : 1.0) /
                         (op.op_class == OpClass::FusedAttention ? flash_weight : 1.0);
        f.forward[0] += op.forward_flops / (peak * w);
        f.backward[0] += op.backward_flops / (peak * w);
        f.forward[3] += op.forward_bytes / bw;
        f.backward[3] += op.backward_bytes / bw;
        break;
      }
      case OpClass::Attention:
        f.forward[1] += op.forward_flops / peak;
        f.backward[1] += op.backward_flops / peak;
        f.forward[3] += op.forward_bytes / bw;
        f.backward[3] += op.backward_bytes / bw;
        break;
      case OpClass::Memory:
        f.forward[2] += op.forward_bytes / bw;
        f.backward[2] += op.backward_bytes / bw;
        break;
    }
    f.forward[4] += op.forward_kernels * 1e-6;
    f.backward[4] += op.backward_kernels * 1e-6;
  }
  return f;
}

OpFeatures Efficiency::coefficients() const {
  return {1.0 / gemm, 1.0 / attention, 1.0 / memory, 0.0, kernel_overhead_us};
}

Efficiency Efficiency::from_coefficients(const OpFeatures& t) {
  auto inv = [](double x) { return x > 0 ? 1.0 / x : 1e9; };
  return {inv(t[0]), inv(t[1]), inv(t[2]), t[4]};
}

ComputeEstimate RooflineComputeModel::unit_time(const DeviceSpec& device, const Job& job, int unit,
                                                ComputePhase phase, int micro_batch) const {
  check_micro_batch(micro_batch);
  const Dtype dtype = job.precision.compute;
  const double peak = effective_peak(device, dtype);
  const double bw = device.memory_bandwidth;
  const bool fwd = phase != ComputePhase::Backward;
  const Efficiency& eff = fwd ? forward_ : backward_;
  double seconds = 0;
  for (const OpCost& op :
       unit_ops(job.model, unit, job.sequence_length, micro_batch, dtype, job.implementation)) {
    double flops = fwd ? op.forward_flops : op.backward_flops;
    double bytes = fwd ? op.forward_bytes : op.backward_bytes;
    double eta = (op.op_class == OpClass::Gemm || op.op_class == OpClass::FusedAttention) ? eff.gemm
                 : op.op_class == OpClass::Attention ? eff.attention
                                                     : 1.0;
    double t_compute = op.op_class == OpClass::Memory ? 0 : flops / (eta * peak);
    double t_memory = bytes / (eff.memory * bw);
    int kernels = fwd ? op.forward_kernels : op.backward_kernels;
    seconds += std::max(t_compute, t_memory) + kernels * eff.kernel_overhead_us * 1e-6;
  }
  return {seconds, false, "roofline"};
}

double adamw_seconds(const DeviceSpec& device, const Job& job, double shard_parameters) {
  if (!(shard_parameters >= 0))
    throw ValidationError("", "shard_parameters", std::to_string(shard_parameters),
                          "a parameter count >= 0");
  const auto& p = job.precision;
  double bytes = shard_parameters * optimizer_bytes_per_parameter(p.params, p.reduce, p.compute);
  // A handful of multi-tensor kernels per step, each with launch overhead.
  return bytes / (0.7 * device.memory_bandwidth) + 20e-6;
}

ComputeEstimate RooflineComputeModel::optimizer_time(const DeviceSpec& device, const Job& job,
                                                     double shard_parameters) const {
  return {adamw_seconds(device, job, shard_parameters), false, "roofline"};
}

}  // namespace cephalo::costmodels

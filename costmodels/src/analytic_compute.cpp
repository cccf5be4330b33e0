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

double special_function_rate(const DeviceSpec& device) {
  // 16 results per SM per clock for exp2 / rcp / rsqrt on compute capability 6.0 and 7.0-10.0
  // (CUDA C++ Programming Guide, "Arithmetic Instructions"; 32 on 6.1 parts, where flash
  // attention does not run). A spec without SM count or clock has none.
  if (device.sm_count <= 0 || !(device.boost_clock_hz > 0)) return 0;
  return 16.0 * device.sm_count * device.boost_clock_hz;
}

double legacy_mma_fraction(const DeviceSpec& device) {
  // Hopper's datasheet tensor peak needs its warpgroup instructions (wgmma); the warp-level
  // mma.sync that Ampere-era kernels (FlashAttention-2, Triton of 2023) issue reaches about 2/3
  // of it (Shah et al., FlashAttention-3, 2024, §1). On earlier generations mma.sync is the
  // native instruction. Blackwell's ratio is not published: treated as native.
  return device.architecture == "hopper" ? 2.0 / 3.0 : 1.0;
}

double mma_fraction(const DeviceSpec& device, const OpCost& op) {
  return op.legacy_mma ? legacy_mma_fraction(device) : 1.0;
}

double int32_shared_lane_fraction(const DeviceSpec& device) {
  // Whitepapers: Pascal GP100 / GP102 (integer ops run on the CUDA cores); Volta V100 (separate
  // FP32 and INT32 cores); Turing TU102; Ampere GA100 (64 FP32 + 64 INT32 per SM) and GA102
  // ("one datapath of 16 FP32 units, the other 16 FP32 or 16 INT32" per SM partition); Ada
  // AD102 (as GA102); Hopper GH100 (128 FP32 + 64 INT32 per SM). Blackwell is not classified
  // (treated as dedicated). GA100 and GA102 are both "ampere": 64 vs 128 FP32 lanes per SM.
  if (device.architecture == "pascal") return 1;
  if (device.architecture != "ampere" && device.architecture != "ada") return 0;
  if (device.sm_count <= 0 || !(device.boost_clock_hz > 0)) return 0;
  const double flops_per_sm_clock = device.peak_fp32 / (device.sm_count * device.boost_clock_hz);
  return flops_per_sm_clock > 192 ? 0.5 : 0;  // 2 FLOPs per lane: 128 (GA100) or 256 lanes
}

void check_micro_batch(int micro_batch) {
  if (micro_batch <= 0)
    throw ValidationError("", "micro_batch", std::to_string(micro_batch),
                          "a micro-batch size >= 1");
}

PhaseFeatures unit_features(const DeviceSpec& device, const ModelSpec& model, int unit, int seq,
                            int micro_batch, Dtype dtype, const Implementation& impl, bool waves,
                            double flash_weight) {
  return ops_features(device, unit_ops(model, unit, seq, micro_batch, dtype, impl), dtype, waves,
                      flash_weight);
}

PhaseFeatures ops_features(const DeviceSpec& device, const std::vector<OpCost>& ops, Dtype dtype,
                           bool waves, double flash_weight) {
  const double peak = effective_peak(device, dtype);
  const double bw = device.memory_bandwidth;
  const double sfu = special_function_rate(device);
  PhaseFeatures f;
  for (const OpCost& op : ops) {
    // The column the op's FLOP time goes to (none for memory-bound ops) and its rate. Flash
    // attention is one kernel whose matmuls run at the rate its instructions reach and whose
    // softmax exponentials run on the special-function units in series with them
    // (FlashAttention-2 does not overlap the two; FlashAttention-3's authors measure the
    // exponentials at up to half the matmul time on H100), all in the GEMM column.
    std::size_t column = kMemoryBoundFeature;
    double rate = peak, scale = 1;
    const double waves_eff = waves ? wave_efficiency(op.tiles, device.sm_count) : 1.0;
    switch (op.op_class) {
      case OpClass::Gemm:
        column = 0;
        rate *= waves_eff;
        break;
      case OpClass::FusedAttention:
        column = 0;
        rate *= waves_eff * mma_fraction(device, op);
        scale = flash_weight;
        break;
      case OpClass::Attention:
        column = 1;
        break;
      case OpClass::Memory:
        break;
    }
    if (column == kMemoryBoundFeature) {
      f.forward[kMemoryBoundFeature] += op.forward_bytes / bw;
      f.backward[kMemoryBoundFeature] += op.backward_bytes / bw;
    } else {
      auto seconds = [&](double flops, double exps) {
        return scale * (flops / rate + (sfu > 0 ? exps / sfu : 0));
      };
      f.forward[column] += seconds(op.forward_flops, op.forward_exps);
      f.backward[column] += seconds(op.backward_flops, op.backward_exps);
      f.forward[3] += op.forward_bytes / bw;
      f.backward[3] += op.backward_bytes / bw;
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
  const double sfu = special_function_rate(device);
  double seconds = 0;
  for (const OpCost& op :
       unit_ops(job.model, unit, job.sequence_length, micro_batch, dtype, job.implementation)) {
    double flops = fwd ? op.forward_flops : op.backward_flops;
    double bytes = fwd ? op.forward_bytes : op.backward_bytes;
    double eta = (op.op_class == OpClass::Gemm || op.op_class == OpClass::FusedAttention) ? eff.gemm
                 : op.op_class == OpClass::Attention ? eff.attention
                                                     : 1.0;
    const bool flash = op.op_class == OpClass::FusedAttention;
    double t_compute =
        op.op_class == OpClass::Memory ? 0 : flops / (eta * peak * mma_fraction(device, op));
    if (flash && sfu > 0) t_compute += (fwd ? op.forward_exps : op.backward_exps) / sfu;
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

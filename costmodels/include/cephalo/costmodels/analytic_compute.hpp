#pragma once
// Compute time from op counts: the roofline model (datasheet peaks, default efficiencies) and
// the same op breakdown with efficiencies fitted to profiles (the calibrated model reuses it).
#include <array>
#include <vector>

#include "cephalo/costmodels/compute_model.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

// The peak a framework reaches for a compute dtype. fp16 GEMMs run with fp32 accumulation in
// cuBLAS/PyTorch autocast, so on GPUs without tensor cores (Pascal: P40 at 1/64 fp16 rate, P100
// at 2x) the usable peak is the fp32 peak; elsewhere it is never below the fp32 peak.
double effective_peak(const DeviceSpec& device, Dtype dtype);

// Exponentials per second on the special-function units (0 without SM count and clock).
double special_function_rate(const DeviceSpec& device);
// Fraction of the tensor-core peak reached by the warp-level mma.sync instructions that
// FlashAttention-2-class kernels issue (2/3 on Hopper, 1 where mma.sync is native).
double legacy_mma_fraction(const DeviceSpec& device);
// The fraction of the peak one op's matmuls reach by the instructions it issues:
// legacy_mma_fraction for an op that issues mma.sync (OpCost::legacy_mma), 1 otherwise. The
// one rule the roofline and the calibrated features price flash attention with.
double mma_fraction(const DeviceSpec& device, const OpCost& op);
// Fraction of the FP32 lanes counted in the datasheet's fp32 peak that also execute the
// kernel's INT32 instructions (address and loop arithmetic): 1 on Pascal (no separate INT32
// units), 0.5 on GA10x / AD10x (128 FP32 lanes per SM, 64 of them on a datapath shared with
// INT32), 0 on Volta, Turing, GA100 and Hopper (dedicated INT32 units). From `architecture`
// and the fp32 lanes per SM that peak_fp32 / (sm_count · boost clock) implies.
double int32_shared_lane_fraction(const DeviceSpec& device);

// Per-phase features of one unit, each in seconds at 100% of the datasheet rate:
//   [0] GEMM FLOPs / peak, [1] attention FLOPs / peak, [2] Memory-class bytes / bandwidth,
//   [3] GEMM and attention operand bytes / bandwidth (what makes GEMMs slow on GPUs with
//   little bandwidth per FLOP), [4] kernel launches × 1 µs.
// A linear model time = Σ θ_k·x_k with θ = (1/η_gemm, 1/η_attention, 1/η_memory,
// GEMM-traffic weight, overhead in µs per kernel) is what the calibrated model fits.
constexpr std::size_t kNumFeatures = 5;
constexpr std::size_t kMemoryBoundFeature = 2;
using OpFeatures = std::array<double, kNumFeatures>;
struct PhaseFeatures {
  OpFeatures forward{};
  OpFeatures backward{};
};
// Flash attention's time counts in the GEMM column (tensor-core matmuls tiled in on-chip
// memory run at GEMM-like rates: FlashAttention-2 reaches 50-73 % of the A100's peak, cuBLAS
// GEMMs of these sizes 70-85 %): its FLOPs at legacy_mma_fraction of the peak plus its
// exponentials at special_function_rate; its q/k/v/o traffic in the operand-bytes column.
// With `waves`, each GEMM's FLOPs are divided by its wave efficiency over the device's SMs
// (wave_efficiency; no effect on a spec without sm_count). `flash_weight` multiplies flash
// attention's FLOPs in the GEMM column: the attention kernel of a software stack runs at its own
// fraction of the GEMMs' rate (CalibratedComputeModel::stack_attention_weight).
PhaseFeatures unit_features(const DeviceSpec& device, const ModelSpec& model, int unit, int seq,
                            int micro_batch, Dtype dtype, const Implementation& impl = {},
                            bool waves = true, double flash_weight = 1.0);
// The same features of any op list (unit_features is this of unit_ops).
PhaseFeatures ops_features(const DeviceSpec& device, const std::vector<OpCost>& ops, Dtype dtype,
                           bool waves = true, double flash_weight = 1.0);

// Efficiencies of one (device, dtype, phase); the coefficients θ above.
struct Efficiency {
  double gemm = 0.6;              // fraction of peak reached by weight GEMMs at large sizes
  double attention = 0.35;        // batched s×s matmuls (smaller, less efficient)
  double memory = 0.7;            // fraction of memory bandwidth reached by elementwise kernels
  double kernel_overhead_us = 6;  // launch + tail per kernel (the size-dependent part)
  OpFeatures coefficients() const;
  static Efficiency from_coefficients(const OpFeatures& theta);
};

// Roofline: each op takes max(FLOPs / (η·peak), bytes / (η_mem·bandwidth)) plus a fixed
// per-kernel overhead, so small ops are latency-bound and the efficiency rises with size.
class RooflineComputeModel : public ComputeModel {
 public:
  RooflineComputeModel() = default;
  RooflineComputeModel(Efficiency forward, Efficiency backward)
      : forward_(forward), backward_(backward) {}
  ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit, ComputePhase phase,
                            int micro_batch) const override;
  ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                 double shard_parameters) const override;
  std::string name() const override { return "roofline"; }

 private:
  Efficiency forward_{};
  Efficiency backward_{0.55, 0.3, 0.6, 6};
};

// Optimizer step time, shared by every model: AdamW is bandwidth-bound (fused multi-tensor
// kernel at ~70% of datasheet bandwidth).
double adamw_seconds(const DeviceSpec& device, const Job& job, double shard_parameters);

// Micro-batch validation shared by the compute models.
void check_micro_batch(int micro_batch);

}  // namespace cephalo::costmodels

#pragma once
// The NeuSight kernel set (scenarios/calibration/neusight-kernels/: measured fp32 latencies of
// nn.Linear, batched matmul, LayerNorm, softmax, GELU, add and mul over many shapes on
// A100-PCIe-40GB, V100-PCIe-32GB, T4, P100-PCIe-16GB and P4; PyTorch 2.1, eager, no TF32):
// each kernel priced from its own FLOPs and bytes as the op-level model prices a layer's ops,
//     t = θ_c · FLOPs / (peak · wave efficiency) + θ_m · bytes / bandwidth + θ_l · 1 µs,
// with θ per op class (GEMM, memory-bound) fitted by Eigen least squares on relative errors,
// validated in-sample, leave-one-GPU-out and leave-one-generation-out.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace cephalo::costmodels {

struct KernelDevice {
  std::string name, architecture;
  int sm_count = 0;
  double bandwidth = 0;  // bytes/s
  double peak_fp32 = 0;  // FLOP/s
};
struct KernelRow {
  std::string op, gpu;                // op: linear, bmm, ln, softmax, gelu, add, mul
  double b = 0, m = 0, n = 0, k = 0;  // GEMMs: B, M, N, K; others: B, H in b, m
  double ms = 0;
};
struct KernelSet {
  std::vector<KernelDevice> devices;
  std::vector<KernelRow> rows;
  const KernelDevice& device(const std::string& name) const;
};
// kernels.csv + devices.csv of `dir`; every row's GPU must be in devices.csv (else a
// ValidationError naming the file, line and value).
KernelSet load_kernel_set(const std::filesystem::path& dir);

struct KernelReport {
  // MAPE % per op, per protocol ("in-sample", "leave-one-GPU-out", "leave-one-generation-out").
  std::map<std::string, std::map<std::string, double>> mape;
  std::map<std::string, std::map<std::string, double>> mape_by_gpu;  // protocol → GPU → MAPE %
  std::map<std::string, int> rows;                                   // per op
};
KernelReport validate_kernels(const KernelSet& set, bool waves);

// The same kernels priced by the *layer* model as it prices an eager, unfused layer's ops
// (CalibratedComputeModel::ops_seconds: fitted on the Cephalo profiles only, never on these
// kernels), fp32, each kernel one op of its own: linear a GEMM, bmm an attention matmul (what
// an eager layer's batched matmuls are), the rest memory-bound passes. Each NeuSight GPU is
// priced as the catalog GPU with the same chip, SM count, clock, bandwidth and fp32 peak
// (A100-PCIE-40GB as A100-40GB, V100-PCIE-32GB as V100-PCIe-16GB); one without a catalog
// entry (P4) is skipped and listed.
struct LayerModelKernelReport {
  std::map<std::string, double> mape_by_op;                             // %
  std::map<std::string, double> median_signed_by_op;                    // % (+: predicted too slow)
  std::map<std::string, std::map<std::string, double>> mape_by_gpu_op;  // GPU → op → %
  std::map<std::string, double> mape_by_gpu;                            // over the GPU's rows
  std::map<std::string, std::string> catalog_gpu;  // NeuSight name → catalog name
  std::vector<std::string> skipped_gpus;
  double mape = 0;  // over every priced row
  int rows = 0;
};
class CalibratedComputeModel;
LayerModelKernelReport price_kernels_with_layer_model(const KernelSet& set,
                                                      const CalibratedComputeModel& model);

}  // namespace cephalo::costmodels

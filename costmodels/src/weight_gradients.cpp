#include "cephalo/costmodels/weight_gradients.hpp"

#include <algorithm>

#include "cephalo/costmodels/analytic_compute.hpp"

namespace cephalo::costmodels {

WeightGradientTraffic weight_gradient_traffic(WeightGradients path, Dtype compute) {
  const double e = bytes_per_element(compute);
  const bool cast = compute != Dtype::FP32;
  switch (path) {
    case WeightGradients::Autocast:
      return {(cast ? e + 4 : 0) + 12, cast ? 2 : 1};
    case WeightGradients::MainGrad:
      return {e + 8, 1};
    case WeightGradients::MainGradComputeDtype:
      return {3 * e, 1};
    case WeightGradients::FusedMainGrad:
      return {8 - e, 0};
  }
  return {};
}

double weight_gradient_seconds(const DeviceSpec& device, const std::vector<OpCost>& ops,
                               WeightGradients path, Dtype compute) {
  double weights = 0;
  int tensors = 0;
  for (const OpCost& op : ops)
    if (op.weights > 0) {
      weights += op.weights;
      ++tensors;
    }
  if (tensors == 0) return 0;
  const WeightGradientTraffic t = weight_gradient_traffic(path, compute);
  const Efficiency fixed;
  return t.bytes * weights / (fixed.memory * device.memory_bandwidth) +
         t.kernels * tensors * fixed.kernel_overhead_us * 1e-6;
}

double backward_roofline_floor_s(const DeviceSpec& device, const std::vector<OpCost>& ops,
                                 Dtype compute) {
  const double peak = effective_peak(device, compute);
  double s = 0;
  for (const OpCost& op : ops) {
    const double flops = op.op_class == OpClass::Memory ? 0 : op.backward_flops / peak;
    s += std::max(flops, op.backward_bytes / device.memory_bandwidth);
  }
  return s;
}

double job_backward_seconds(const DeviceSpec& device, const Job& job, int unit, int micro_batch,
                            double profiled_s) {
  const WeightGradients own = job.implementation.weight_gradients;
  if (own == WeightGradients::Autocast) return profiled_s;
  const Dtype dtype = job.precision.compute;
  const auto ops =
      unit_ops(job.model, unit, job.sequence_length, micro_batch, dtype, job.implementation);
  const double profiled_path =
      weight_gradient_seconds(device, ops, WeightGradients::Autocast, dtype);
  if (profiled_path == 0) return profiled_s;  // no weight GEMM in the unit
  const double rest =
      std::max(profiled_s - profiled_path, backward_roofline_floor_s(device, ops, dtype));
  return rest + weight_gradient_seconds(device, ops, own, dtype);
}

}  // namespace cephalo::costmodels

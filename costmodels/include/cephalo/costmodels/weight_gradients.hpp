#pragma once
// A stack's weight-gradient path (Implementation::weight_gradients): the kernels it launches per
// weight in every backward call, outside the GEMMs, and what the job's path changes in a unit's
// backward time. The one place that decides which path a job runs and what it costs; the cost
// models' factory applies it to every GPU compute model built from the profiles (make_cost_models),
// so the FSDP builder, the split estimator and the replay all read the same backward.
//
// Bytes per weight, from each path's documented kernels (e = bytes of the compute dtype):
//   autocast                 ToCopyBackward casts the gradient to fp32 (e read, 4 written),
//                            AccumulateGrad adds it into the fp32 .grad (8 read, 4 written):
//                            e + 16, 2 kernels per weight tensor (fp32 compute: the add only,
//                            12 bytes, 1 kernel). What the profiles in ../shared/data ran
//                            (PyTorch eager, torch.autocast, fp32 module weights).
//   main_grad                main_grad.add_(grad) into fp32 (Megatron's DDP hook): e + 8, 1.
//   main_grad_compute_dtype  the same add into a main_grad of the compute dtype (Megatron-LM fp16
//                            without --accumulate-allreduce-grads-in-fp32): 3e, 1.
//   fused_main_grad          gradient_accumulation_fusion: the weight-gradient GEMM accumulates
//                            into the fp32 main_grad (beta = 1), reading and writing 4-byte
//                            outputs instead of writing e-byte ones: 8 − e more, no kernel.
// The forward pays nothing per weight: Megatron holds the weights in the compute dtype, and
// autocast's cast cache keeps one cast per weight and autocast region.
#include <vector>

#include "cephalo/core/scenario.hpp"
#include "cephalo/core/specs.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

struct WeightGradientTraffic {
  double bytes = 0;  // per weight, in each backward call
  int kernels = 0;   // per weight tensor
};
WeightGradientTraffic weight_gradient_traffic(WeightGradients path, Dtype compute);

// Seconds one backward call of `ops` spends on `path`: the traffic over the ops' GEMM weights
// (OpCost::weights) at a fixed rate, the roofline's memory efficiency and per-kernel overhead
// (Efficiency{}), outside any fitted coefficient and any stack factor.
double weight_gradient_seconds(const DeviceSpec& device, const std::vector<OpCost>& ops,
                               WeightGradients path, Dtype compute);

// The least time the backward of `ops` can take: each op at its roofline, max(FLOPs at the
// dtype's effective peak, bytes at the datasheet bandwidth), no launch overhead.
double backward_roofline_floor_s(const DeviceSpec& device, const std::vector<OpCost>& ops,
                                 Dtype compute);

// A unit's backward for the job's own path, from `profiled_s`, a backward time that carries the
// profiles' autocast path (a fitted or measured time, with any stack factor applied): the
// profiles' path taken out, never below the unit's roofline floor, and the job's path added:
//   max(profiled_s − autocast, floor) + own.
// With the autocast path (the default) it returns `profiled_s` unchanged.
double job_backward_seconds(const DeviceSpec& device, const Job& job, int unit, int micro_batch,
                            double profiled_s);

}  // namespace cephalo::costmodels

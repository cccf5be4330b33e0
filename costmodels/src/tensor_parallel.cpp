#include "cephalo/costmodels/tensor_parallel.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

// Megatron's column / row split leaves the norms and the residual adds over the full b·s·h
// outside the parallel regions; sequence parallelism splits them along the sequence instead.
bool replicated_op(const char* name) {
  for (const char* r : {"norm1", "norm2", "residual1", "residual2"})
    if (std::strcmp(name, r) == 0) return true;
  return false;
}

bool attention_core_op(const char* name) {
  for (const char* r : {"scores", "softmax", "context", "flash_attention"})
    if (std::strcmp(name, r) == 0) return true;
  return false;
}

// The four linear GEMMs of a layer (model_math's op names), each alone.
bool qkv_op(const char* name) { return std::strcmp(name, "qkv") == 0; }
bool attention_out_op(const char* name) { return std::strcmp(name, "attn_proj") == 0; }
bool mlp_in_op(const char* name) {
  return std::strcmp(name, "mlp_up") == 0 || std::strcmp(name, "mlp_gate_up") == 0;
}
bool mlp_out_op(const char* name) { return std::strcmp(name, "mlp_down") == 0; }

double features_time(const OpFeatures& x, const OpFeatures& theta) {
  double t = 0;
  for (std::size_t i = 0; i < x.size(); ++i) t += x[i] * theta[i];
  return t;
}

bool output_layer_op(const char* name) { return std::strcmp(name, "lm_head") == 0; }

// The picked ops' share of `unit`'s forward and backward time.
LayerShare unit_share(const DeviceSpec& device, const Job& job, int unit, int micro_batch,
                      bool (*pick)(const char*)) {
  const auto ops = unit_ops(job.model, unit, job.sequence_length, micro_batch,
                            job.precision.compute, job.implementation);
  std::vector<OpCost> picked;
  for (const auto& op : ops)
    if (pick(op.name)) picked.push_back(op);
  const auto all = ops_features(device, ops, job.precision.compute);
  const auto part = ops_features(device, picked, job.precision.compute);
  const auto theta = Efficiency{}.coefficients();
  const double f_all = features_time(all.forward, theta);
  const double b_all = features_time(all.backward, theta);
  return {f_all > 0 ? features_time(part.forward, theta) / f_all : 0,
          b_all > 0 ? features_time(part.backward, theta) / b_all : 0};
}

LayerShare layer_share(const DeviceSpec& device, const Job& job, int micro_batch,
                       bool (*pick)(const char*)) {
  return unit_share(device, job, 1, micro_batch, pick);
}

}  // namespace

double output_weight_gradient_share(const DeviceSpec& device, const Job& job, int micro_batch) {
  // The output layer's backward is its two GEMMs of equal size, the input gradient and the
  // weight gradient: half of it.
  return 0.5 *
         unit_share(device, job, job.model.num_layers + 1, micro_batch, output_layer_op).backward;
}

double output_weight_gradient_flops(const Job& job, int micro_batch) {
  double flops = 0;
  for (const auto& op : unit_ops(job.model, job.model.num_layers + 1, job.sequence_length,
                                 micro_batch, job.precision.compute, job.implementation))
    if (output_layer_op(op.name)) flops += 0.5 * op.backward_flops;
  return flops;
}

LayerShare layer_replicated_share(const DeviceSpec& device, const Job& job, int micro_batch) {
  return layer_share(device, job, micro_batch, replicated_op);
}

LayerShare layer_attention_core_share(const DeviceSpec& device, const Job& job, int micro_batch) {
  return layer_share(device, job, micro_batch, attention_core_op);
}

LayerLinearShares layer_linear_shares(const DeviceSpec& device, const Job& job, int micro_batch) {
  return {layer_share(device, job, micro_batch, qkv_op),
          layer_share(device, job, micro_batch, attention_out_op),
          layer_share(device, job, micro_batch, mlp_in_op),
          layer_share(device, job, micro_batch, mlp_out_op)};
}

double ring_exchange_exposed(double comm, double gemm, int chunks) {
  const double n = std::max(1, chunks);
  return std::max(0.0, comm - gemm * (n - 1) / n);
}

double pipelined_exposed(double comm, double gemm, int chunks) {
  const double n = std::max(1, chunks);
  return comm / n + (n - 1) / n * std::max(0.0, comm - gemm);
}

double bulk_exposed(double comm, double gemm) { return std::max(0.0, comm - gemm); }

double tp_overlap_exposed_seconds(const LayerLinearShares& shares, ComputePhase phase,
                                  double layer_seconds, int tensor_parallel, double gather_s,
                                  double scatter_s) {
  const int T = std::max(1, tensor_parallel);
  const double rank = layer_seconds / T;  // a GEMM's share of the layer is split T ways
  if (phase == ComputePhase::Backward) {
    // dgrad and wgrad: each half of a linear's backward.
    const auto half = [&](const LayerShare& s) { return rank * s.backward / 2; };
    return ring_exchange_exposed(gather_s, half(shares.attention_out), T) +
           bulk_exposed(scatter_s, half(shares.qkv)) +
           ring_exchange_exposed(gather_s, half(shares.mlp_out), T) +
           bulk_exposed(scatter_s, half(shares.mlp_in));
  }
  const auto fwd = [&](const LayerShare& s) { return rank * s.forward; };
  return ring_exchange_exposed(gather_s, fwd(shares.qkv), T) +
         pipelined_exposed(scatter_s, fwd(shares.attention_out), kTpOverlapPipelineSplits) +
         ring_exchange_exposed(gather_s, fwd(shares.mlp_in), T) +
         pipelined_exposed(scatter_s, fwd(shares.mlp_out), kTpOverlapPipelineSplits);
}

double attention_core_forward_flops(const Job& job, int micro_batch) {
  double flops = 0;
  for (const auto& op : unit_ops(job.model, 1, job.sequence_length, micro_batch,
                                 job.precision.compute, job.implementation))
    if (attention_core_op(op.name)) flops += op.forward_flops;
  return flops;
}

double attention_core_recompute_factor(const LayerShare& core, int tensor_parallel) {
  return core.forward / std::max(1, tensor_parallel);
}

double tensor_parallel_factor(const ModelSpec& model, int unit, ComputePhase phase,
                              int tensor_parallel, bool sequence_parallel,
                              const LayerShare& share) {
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

double tensor_parallel_activation_factor(const ModelSpec& model, int unit, Dtype dtype,
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
      const LayerKeptBytes k = layer_kept_bytes_per_token(model, dtype);
      return (k.replicated + k.split / t) / (k.replicated + k.split);
    }
  }
  return 1.0;
}

}  // namespace cephalo::costmodels

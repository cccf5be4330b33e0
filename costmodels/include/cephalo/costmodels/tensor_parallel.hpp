#pragma once
// What one rank of a T-way tensor-parallel group computes of a unit, as a share of the whole
// unit's time (DESIGN §4, "Tensor parallelism"), the one rule the 3D estimate and the graph's
// replay both price with:
//   layer      the GEMMs, the attention and the MLP activation split T ways; the two norms and
//              the residual adds replicated over the full b·s·h (Megatron's column/row split
//              leaves them outside the parallel regions) unless sequence parallelism splits
//              them along the sequence: share r + (1 − r)/T, or 1/T with sequence parallelism,
//              r being the replicated ops' share of the layer's time by the roofline's default
//              efficiencies (layer_replicated_share);
//   embedding  the lookup replicated (each rank looks up every token in its vocabulary rows);
//   head       the logits and the cross-entropy split by vocabulary: 1/T.
#include "cephalo/core/scenario.hpp"
#include "cephalo/core/specs.hpp"
#include "cephalo/costmodels/compute_model.hpp"

namespace cephalo::costmodels {

// A share of a layer's forward and backward time, by the roofline's default efficiencies.
struct LayerShare {
  double forward = 0;
  double backward = 0;
};
// The ops tensor parallelism replicates (the norms and residual adds).
LayerShare layer_replicated_share(const DeviceSpec& device, const Job& job, int micro_batch);
// The attention core (scores, softmax and context, or flash attention's one kernel): what
// selective recompute reruns before the backward.
LayerShare layer_attention_core_share(const DeviceSpec& device, const Job& job, int micro_batch);
// The attention core's forward FLOPs in one layer for one micro-batch (the implementation's:
// flash attention's one kernel, or eager's scores, softmax and context): a selective
// Recompute op's FLOPs (a TP rank's 1/T of them).
double attention_core_forward_flops(const Job& job, int micro_batch);
// The factor a selective Recompute op's time (a TP rank's, of a layer) is of the layer's whole
// recompute (unit_time's Recompute phase): the core's share of the forward (`core` is
// layer_attention_core_share for this device and size), split by heads over the T ranks. The
// one rule the 3D estimate and the replay price it with.
double attention_core_recompute_factor(const LayerShare& core, int tensor_parallel);

// The factor a TP rank's compute time of `unit` in `phase` is of the whole unit's (1 for T = 1).
// The recompute is a forward. `share` is layer_replicated_share for this device and size.
double tensor_parallel_factor(const ModelSpec& model, int unit, ComputePhase phase,
                              int tensor_parallel, bool sequence_parallel, const LayerShare& share);

// The share of a unit's activation bytes (working set, kept activations, backward temporaries)
// one TP rank holds: a layer's (replicated + split / T) / (replicated + split) of
// layer_kept_bytes_per_token (the norms' outputs and statistics and the residual sum stay
// whole; whatever the attention kernel, since the s×s scores of eager attention are
// eager_attention_bytes, split by heads), 1/T with sequence parallelism; the head's logits 1/T
// (vocabulary-parallel); the embedding's output whole (1/T with sequence parallelism).
double tensor_parallel_activation_factor(const ModelSpec& model, int unit, Dtype dtype,
                                         int tensor_parallel, bool sequence_parallel);

}  // namespace cephalo::costmodels

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

// The output layer's weight-gradient GEMM's share of the head's backward (half of the logits
// GEMM's backward, by the roofline's default efficiencies, as the shares above): what a deferred
// output-layer weight gradient (Implementation::defer_embedding_wgrad_compute) takes out of a
// micro-batch's head backward and runs in the pipeline flush. The head splits by vocabulary, so
// a TP rank's share is the same. The one rule the 3D estimate and the replay price it with.
double output_weight_gradient_share(const DeviceSpec& device, const Job& job, int micro_batch);
// That GEMM's FLOPs for one micro-batch (half the logits GEMM's backward FLOPs), the whole head's.
double output_weight_gradient_flops(const Job& job, int micro_batch);

// The factor a TP rank's compute time of `unit` in `phase` is of the whole unit's (1 for T = 1).
// The recompute is a forward. `share` is layer_replicated_share for this device and size.
double tensor_parallel_factor(const ModelSpec& model, int unit, ComputePhase phase,
                              int tensor_parallel, bool sequence_parallel, const LayerShare& share);

// Transformer Engine's userbuffers TP communication overlap (Implementation::tp_comm_overlap;
// Megatron-Core / NeMo `tp_comm_overlap`, TE `initialize_ub`'s default methods): a layer's
// sequence-parallel collectives run in chunks under the linear GEMM next to them, not between
// the GEMMs. Per layer and micro-batch (the graph's 2 calls of an all-gather and a
// reduce-scatter per pass):
//   forward / recompute  call k's all-gather under its column-parallel GEMM (qkv, the MLP's
//                        first linear) as a ring exchange: the GEMM cut in T chunks, the first
//                        on the rank's own rows, each of the T − 1 peer-to-peer steps under
//                        one chunk (TE: copy engine, 1 SM); its reduce-scatter under the
//                        row-parallel GEMM (attention output, the MLP's second linear)
//                        pipelined in 4 splits (TE's default num_splits), the last split's
//                        reduce-scatter after the GEMM;
//   backward             call k's all-gather (of the output gradient) under the row-parallel
//                        GEMM's dgrad as a ring exchange; its reduce-scatter (of the input
//                        gradient) in bulk under the column-parallel GEMM's wgrad, which does
//                        not depend on it.
// The GEMMs' times are the layer's time in that pass times their share (the roofline's
// default efficiencies, as layer_replicated_share), over T; a backward GEMM's dgrad or wgrad is
// half its backward. Not priced: the SMs the pipelined and bulk kernels take from the GEMM
// (16 of an H100's 132 by TE's default), and the all-gather sequence parallelism redoes in
// the backward (not in the graph's calls either).
struct LayerLinearShares {
  LayerShare qkv, attention_out, mlp_in, mlp_out;
};
LayerLinearShares layer_linear_shares(const DeviceSpec& device, const Job& job, int micro_batch);

// What stays exposed of a collective of `comm` seconds overlapped with a GEMM of `gemm`
// seconds: ring exchange over `chunks` (T) GEMM chunks (max(0, comm − gemm·(T−1)/T));
// pipelined in `chunks` splits (comm/N + (N−1)/N · max(0, comm − gemm)); bulk, the whole
// collective beside the whole GEMM (max(0, comm − gemm)).
double ring_exchange_exposed(double comm, double gemm, int chunks);
double pipelined_exposed(double comm, double gemm, int chunks);
double bulk_exposed(double comm, double gemm);
inline constexpr int kTpOverlapPipelineSplits = 4;  // TE initialize_ub: num_splits for "pipeline"

// The exposed seconds of one layer pass's 2 TP calls under the overlap: `layer_seconds` the
// whole layer's time in `phase` (unit_time's, T = 1), `gather_s` / `scatter_s` one call's
// all-gather and reduce-scatter over the TP group. The one rule the 3D estimate and the replay
// price a TpGatherScatter op with when the job declares the overlap.
double tp_overlap_exposed_seconds(const LayerLinearShares& shares, ComputePhase phase,
                                  double layer_seconds, int tensor_parallel, double gather_s,
                                  double scatter_s);

// The share of a unit's activation bytes (working set, kept activations, backward temporaries)
// one TP rank holds: a layer's (replicated + split / T) / (replicated + split) of
// layer_kept_bytes_per_token (the norms' outputs and statistics and the residual sum stay
// whole; whatever the attention kernel, since the s×s scores of eager attention are
// eager_attention_bytes, split by heads), 1/T with sequence parallelism; the head's logits 1/T
// (vocabulary-parallel); the embedding's output whole (1/T with sequence parallelism).
double tensor_parallel_activation_factor(const ModelSpec& model, int unit, Dtype dtype,
                                         int tensor_parallel, bool sequence_parallel);

}  // namespace cephalo::costmodels

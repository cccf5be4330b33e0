#pragma once
// A first cost estimate of one training iteration under a three-dimensional model split
// (tensor x pipeline x data parallelism, core/model_split.hpp), from the existing compute and
// comm models and the one pipeline schedule (core/pipeline_schedule.hpp). It is an analytic
// estimate, not a simulation: no training graph is built and the simulator does not run.
//
//   SplitOptions options;
//   options.activation_checkpointing = {ActivationCheckpointing::Kind::Full};  // recompute
//   SplitEstimate e = estimate_split(scenario, split, options); // make_cost_models(scenario)
//   if (!e.fits) std::cerr << e.refusal;                        // stage, rank and bytes
//
// Uneven replicas (SplitOptions::replica_batches): a stage's replicas may be of several GPU
// types (each TP group of one) and carry unequal samples and state shares, given by a plan or
// balanced by speed (planner/README.md, "3D plans: stages that mix GPU types"); a stage's step
// time is then its slowest replica's, its memory its tightest replica's. Below, b_s is a
// replica's own samples and "the stage's GPU" that replica's. Sub-steps (DESIGN §4, "Ranks"):
// a replica may run its b_s samples of every micro-batch as k_s sub-steps of b_s / k_s (given
// by a plan, or under BySpeed chosen per replica: the fastest k whose memory fits); its compute
// and TP comm are then k_s times those of one sub-step, its working memory one sub-step's (the
// kept activations and the boundaries stay the whole share's), its transfers the whole share's,
// and its DP collectives, once per unit per iteration, start in its last sub-step.
// What is priced, per stage s (its GPU is the device of its first rank):
//   compute   per micro-batch of b_s = global_batch / (m · replicas_s) samples, each layer's
//             forward, backward and (with recompute) recompute forward from the compute model
//             (selective recompute: the attention core's share of that forward, split by T)
//             (from the calibrated model, the backward at the forward's rate: its forward times
//             backward_work_ratio, because the fitted backward carries a per-call cost of the
//             profiled engines, planner/README.md "3D plans: first estimate"),
//             divided across the stage's T tensor-parallel ranks as Megatron's column/row split
//             does: the GEMMs (q/k/v, attention output, both MLP linears), the attention
//             (scores, softmax, context: heads / T per rank) and the MLP activation are split;
//             the two layer norms and the residual adds are replicated unless sequence
//             parallelism splits them along the sequence. The replicated share of a layer's
//             time is the share the roofline's default efficiencies give those ops
//             (ops_features); the compute model's time is then t · (r + (1 − r) / T). The
//             embedding (first stage) is replicated; the head and loss (last stage) split by T.
//   TP comm   per layer and micro-batch: 2 all-reduces of b·s·h activations in the forward and
//             2 of their gradients in the backward, 2 more when the recompute forward reruns
//             the layer; with sequence parallelism each becomes a reduce-scatter plus an
//             all-gather of the same buffer (Narayanan et al., SC'21; Korthikanti et al.,
//             2022). Plus one all-reduce after the vocabulary-parallel embedding (forward) and
//             one of the head's input gradient (backward). Over the stage's first TP group on
//             the node's intra link, not overlapped with compute.
//   P2P       b·s·h activations forward and their gradient backward between adjacent (virtual)
//             stages, priced as a point-to-point transfer (a two-rank broadcast) on the link
//             between them; with scatter/gather (Megatron's default) each of the T ranks sends
//             1/T and the receivers all-gather it. Every rank of the sending stage on a node
//             sends at once, and a node's NIC carries every boundary crossing it in both
//             directions (1F1B's steady state): a transfer that leaves its node takes as long
//             as the busier of its two nodes' NICs moves all of that. The slowest boundary is the
//             `p2p` argument of pipeline::pipeline_makespan.
//   schedule  pipeline::pipeline_makespan over per-(virtual-)stage forward / backward times.
//   DP tail   after stage s's last backward: its gradient collectives over each data-parallel
//             group (all-reduce for `none`, reduce-scatter + all-gather for `optimizer`,
//             `full` and `hybrid`), the T groups of a stage sharing each node's NIC; for tied
//             embeddings one all-reduce of the word embedding's gradient between the first and
//             the last stage; then the optimizer step over the stage's shard. Overlap: none by
//             default (Megatron's local DDP reduces after the whole backward); LastBackward
//             hides the reduction under the last micro-batch's backward (torch DDP's buckets,
//             with no_sync over the earlier micro-batches).
//   memory    per replica, of its rank with the least capacity, at the replica's samples and
//             state share (the stage reports its tightest replica): costmodels::
//             split_rank_memory_terms, the terms predict_memory gives that rank of the plan
//             the split is written as (its training state by the stage's DP sharding; the
//             peak of its activations, gathered parameters and unsharded gradients over the
//             stage's order, op by op with the graph's per-op bytes, aware of flash / eager
//             attention, sequence parallelism and the checkpointing; the runtime's reserves).
//             A one-stage T = 1 fully sharded split is an FSDP plan: the FSDP terms.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"

namespace cephalo::planner {

enum class DpOverlap {
  // As the graph runs them (the replay's): each unit's reduction right after its last
  // backward, one at a time, under the rest of the stage's last backward; sharded parameters
  // gathered before each unit's first forward; the distributed optimizer's all-gather after
  // its step. The default: the estimate ranks the candidates the simulator replays.
  PerUnit,
  None,          // the DP collectives start after the stage's last backward
  LastBackward,  // they run under the last micro-batch's backward; only the rest is exposed
};

// How a stage's micro-batch and state are divided among its data-parallel replicas (DESIGN §4:
// replicas may carry unequal samples and shares), per rank of the cluster. `micro_batch[r]`:
// the samples rank r's replica runs of every micro-batch (the T ranks of a replica equal, a
// stage's replicas summing to global batch / m); `state_share[r]`: its share of its
// data-parallel sharding group (summing to 1 per group; unused under `none`); `sub_steps[r]`:
// in how many sub-steps of micro_batch[r] / sub_steps[r] samples the rank runs its share of
// every micro-batch (DESIGN §4, "Ranks": a dividing count; empty: one step each).
struct ReplicaAllocation {
  std::vector<int> micro_batch;
  std::vector<double> state_share;
  std::vector<int> sub_steps;
  bool empty() const { return micro_batch.empty(); }
  int sub_steps_of(std::size_t rank) const {
    return rank < sub_steps.size() ? std::max(1, sub_steps[rank]) : 1;
  }
};

// Writes an allocation into a plan of the split (even_split_plan's, `micro_batches` = m): each
// rank's share of every micro-batch as its sub-steps (micro_batch = share / k, micro_batches =
// m · k) and its state share. Nothing when the allocation is empty (even replicas).
void apply_allocation(Plan& plan, const ReplicaAllocation& allocation);

// Who divides a stage's micro-batch among its replicas.
enum class ReplicaBatches {
  Even,     // equal samples and shares (global batch / (m · replicas) must be whole)
  BySpeed,  // the estimate balances them (split_estimate.hpp, "uneven replicas")
  Given,    // SplitOptions::allocation, as a plan carries it
};

struct SplitOptions {
  // Which layers rerun their forward (full, every:K) or only their attention core (selective,
  // Korthikanti et al.'s, Megatron's --recompute-granularity selective: split by heads over the
  // T ranks) before their backward; none by default.
  ActivationCheckpointing activation_checkpointing{ActivationCheckpointing::Kind::None};
  ReplicaBatches replica_batches = ReplicaBatches::Even;
  ReplicaAllocation allocation;  // read under ReplicaBatches::Given
  // true: P2P sends 1/T per TP rank, then an intra-node all-gather (Megatron's scatter/gather,
  // `predict 3d`'s default); false: as the graph sends it (the replay's), every receiving TP rank
  // its own copy, 1/T of it under sequence parallelism. Off by default: the estimate ranks
  // the candidates the simulator replays.
  bool scatter_gather = false;
  DpOverlap dp_overlap = DpOverlap::PerUnit;
  // true: a layer's backward from the calibrated compute model is priced as its forward times
  // the op list's backward / forward work (backward_work_ratio) instead of the model's fitted
  // backward (see "backward" above): the analysis of why the 9 Megatron runs were over-
  // predicted (planner/README.md). Off by default: the simulator prices split plans (and FSDP
  // plans, which `--parallelism auto` compares them with) by the compute model's own backward,
  // and the estimate that ranks the search's candidates must price them the same way; a stack
  // the calibration does not fit is calibrated (cephalo calibrate stack, one compute factor),
  // which both read. Profiles' measured times are used as measured either way.
  bool backward_at_forward_rate = false;
  // The file the split was read from, named by the split's refusals (its JSON paths are the
  // file's); empty: the scenario's (a split the search made).
  std::string split_file;
  // Where the split is in that file (load_model_split's json_path): "model_split", or "" for a
  // bare split object, so that a refusal names a key the file has.
  std::string split_path = "model_split";
};

struct StageMemory {
  // costmodels::split_rank_memory_terms of the stage's rank `rank`: what predict_memory gives
  // that rank of the written plan.
  std::vector<costmodels::MemoryTerm> terms;
  double activations = 0;  // the "activations" term: what the rank holds at its peak
  double total = 0;
  double capacity = 0;  // usable device memory of `rank`
  int rank = 0;         // the tightest replica's rank with the least capacity (named on refusal)
};

struct StageEstimate {
  int stage = 0;
  std::string gpu;  // "A100-80GB", or its GPU types joined by '+' ("A100-80GB+L4")
  int tensor_parallel = 1;
  int replicas = 1;     // data-parallel replicas (ranks / T)
  int micro_batch = 0;  // samples per micro-batch per replica (the largest replica's)
  std::vector<int> replica_micro_batches;  // per replica, in replica order
  int layers = 0;
  double parameters_per_rank = 0;
  double replicated_forward = 0;   // r of the layer's forward time (not divided by T)
  double replicated_backward = 0;  // r of its backward
  // Per micro-batch through the whole stage (all chunks), seconds.
  double forward_compute = 0;
  double backward_compute = 0;  // backward + recompute forward
  // The TP collectives' exposed time: all of it, or under the job's TP communication overlap
  // (Implementation::tp_comm_overlap) what the layers' GEMMs do not hide.
  double tp_comm_forward = 0;
  double tp_comm_backward = 0;
  int tp_collectives_forward = 0;  // TP collective calls per micro-batch
  int tp_collectives_backward = 0;
  double tp_bytes_per_collective = 0;  // b·s·h in the compute dtype
  double last_backward_end = 0;        // from pipeline_makespan
  double busy = 0;
  double bubble = 0;
  double dp_comm = 0;
  double dp_exposed = 0;
  double optimizer_step = 0;
  double finish = 0;  // last_backward_end + dp_exposed + optimizer_step
  int peak_in_flight = 0;
  StageMemory memory;
};

struct SplitEstimate {
  double iteration_s = 0;
  double makespan_s = 0;  // the schedule's, from the first forward to the last backward
  double p2p_s = 0;       // per transfer, the slowest boundary's
  double bubble_fraction = 0;
  std::string split;     // describe(split, ranks)
  std::string schedule;  // pipeline::describe with the stage times
  std::vector<StageEstimate> stages;
  // Every rank's samples per micro-batch and state share as priced (even, balanced or given).
  ReplicaAllocation allocation;
  bool fits = true;
  std::string refusal;  // empty when it fits; else the first stage that does not
  // No stage can finish earlier: its steps back to back, then its DP tail and optimizer step.
  double lower_bound_s = 0;
  // False only from SplitEstimator::estimate under EstimateLimits that stopped it before the
  // schedule ran: then iteration_s, makespan_s, bubble_fraction and the stages' busy, bubble,
  // last_backward_end and finish are 0 (everything else is computed).
  bool complete = true;
};

// What a caller pricing many splits may skip (the search): the texts (`split`, `schedule`),
// the schedule of a split that does not fit, the schedule of a split whose lower_bound_s is
// above `stop_above` (beyond a 1e-9 margin for rounding, so a split the schedule would put at or
// below it is never stopped).
struct EstimateLimits {
  bool describe = true;
  bool schedule_unfit = true;
  double stop_above = std::numeric_limits<double>::infinity();
};

namespace split_detail {
struct EstimatorAccess;
}  // namespace split_detail

// Prices many splits of one scenario with one set of cost models (the search prices thousands)
// and remembers what does not depend on the split's layout: each unit's compute times and the
// replicated share per (GPU type, micro-batch), each collective's time per (kind, ranks,
// bytes), each stage's peak in flight per (stages, micro-batches, schedule). Every remembered
// value is the one the cost model or schedule call returns for those arguments, so estimate()
// with the default limits is estimate_split's answer exactly. Holds references to both.
class SplitEstimator {
 public:
  SplitEstimator(const Scenario& scenario, const costmodels::CostModels& models);
  ~SplitEstimator();
  SplitEstimator(const SplitEstimator&) = delete;
  SplitEstimator& operator=(const SplitEstimator&) = delete;
  SplitEstimate estimate(const ModelSplit& split, const SplitOptions& options,
                         const EstimateLimits& limits = {});
  // A floor on what estimate() prices for one micro-batch of `b` samples through one
  // transformer layer of a stage whose first tensor-parallel group is `tp_group` (T ranks of
  // one GPU type): forward + backward (+ the recompute `options`' checkpointing adds) at the
  // TP share, with the layer's TP collectives, the least over sequence parallelism off and on
  // and over the model's layers.
  // Every split whose stage has those ranks and samples spends at least this per layer per
  // micro-batch, so the search bounds whole families of splits with it.
  double layer_step_floor(const std::vector<int>& tp_group, int b, const SplitOptions& options);
  // A floor on the data-parallel tail estimate() prices after a stage's last backward per
  // parameter of one TP rank, for a stage of even replicas whose DP group 0 is `dp_group`: its
  // gradients reduced (and, sharded, its parameters gathered; the cheaper of the two ways) and
  // the optimizer's step over a 1 / replicas shard. Read at a size above any stage's, so it is
  // a floor wherever a collective's and the optimizer's time per byte does not grow with the
  // bytes (latency plus bytes over bandwidth, the least over algorithms). 0 with the DP tail
  // overlapped (DpOverlap::LastBackward) for the collectives.
  double tail_floor_per_parameter(const std::vector<int>& dp_group, const SplitOptions& options);

 private:
  // The planner's internal steps (split_estimator_impl.hpp) reach the remembered state.
  friend struct split_detail::EstimatorAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws ValidationError (naming "model_split") for a split check_model_split_for refuses, a
// global batch the micro-batches (and, for even replicas, a stage's replicas) do not divide, a
// tensor-parallel group whose ranks have different GPU types, or a given allocation whose
// replicas do not sum to the micro-batch (each at least one sample).
SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options, const costmodels::CostModels& models);
SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options);

// Throws InfeasibleError with estimate.refusal when the plan does not fit.
void require_fit(const SplitEstimate& estimate);

// Backward over forward work of one unit's op list (costmodels::unit_ops) at equal kernel
// efficiencies, the roofline's defaults: 2 for a GEMM (its dgrad and wgrad have the forward's
// shapes), the bytes ratio for memory-bound kernels; about 1.9-2.0 for a transformer layer.
double backward_work_ratio(const DeviceSpec& spec, const Job& job, int unit, int micro_batch);

Json to_json(const SplitEstimate& estimate);

}  // namespace cephalo::planner

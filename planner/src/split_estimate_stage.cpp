// One pass of a replica class through a stage's chunks, the floors the search reads of a
// stage, and the estimate's JSON: the parts of SplitEstimator's estimate (split_estimate.cpp)
// that price one stage's compute and TP communication.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "split_estimator_impl.hpp"

namespace cephalo::planner {
namespace {

Json memory_terms_json(const std::vector<costmodels::MemoryTerm>& terms) {
  Json j = Json::object();
  for (const auto& t : terms) j[t.name] = t.bytes;
  return j;
}

}  // namespace

using split_detail::CollectiveKind;
using split_detail::ComputePhase;

split_detail::StagePass SplitEstimator::Impl::stage_pass(const ModelSplit& split,
                                                         const PipelineStage& st, int s, int T,
                                                         StageRanks& sr, const DeviceSpec& spec,
                                                         double slowdown, int b,
                                                         const SplitOptions& options) {
  const Job& job = scenario.job;
  const ModelSpec& model = job.model;
  const int p = static_cast<int>(split.stages.empty() ? 1 : split.stages.size());
  const int V = split.schedule.virtual_stages;
  const int seq = costmodels::effective_sequence(model, job.sequence_length);
  const double e_c = bytes_per_element(job.precision.compute);
  const bool tied = model.tied_embeddings && model.vocab_size > 0;
  const double word_embedding = static_cast<double>(model.vocab_size) * model.hidden;
  StagePass out;
  DeviceTimes& dev = device(spec, b, options);
  const auto slowed = [slowdown](UnitTimes u) {
    u.forward *= slowdown;
    u.backward *= slowdown;
    u.recompute *= slowdown;
    return u;
  };
  const bool sp = split.sequence_parallel;
  out.replicated_forward = sp ? 0 : dev.replicated.forward;
  out.replicated_backward = sp ? 0 : dev.replicated.backward;
  // A TP rank's share of a layer's time, the simulator's rule (costmodels/tensor_parallel.hpp).
  const double split_f =
      costmodels::tensor_parallel_factor(model, 1, ComputePhase::Forward, T, sp, dev.replicated);
  const double split_b =
      costmodels::tensor_parallel_factor(model, 1, ComputePhase::Backward, T, sp, dev.replicated);

  // TP collectives, priced once per kind (every layer has the same b·s·h): a layer's reduction
  // (an all-reduce, or with sequence parallelism a reduce-scatter plus an all-gather), the
  // embedding's and the head's all-reduce of the activations (never sequence-split), and the
  // vocabulary-parallel cross-entropy's three all-reduces of one fp32 per token (max, sum of
  // exponentials, target logit) in the head's forward and again in its recompute. The calls
  // per op are the graph's (traces' SplitGraphBuilder::emit_tensor_parallel).
  const double act_bytes = static_cast<double>(b) * seq * model.hidden * e_c;
  out.tp_bytes = act_bytes;
  double reduce_s = 0, all_reduce_s = 0, loss_s = 0, gather_s = 0, scatter_s = 0;
  if (T > 1) {
    all_reduce_s = stage_collective(sr, 0, CollectiveKind::AllReduce, act_bytes);
    if (split.sequence_parallel) {
      scatter_s = stage_collective(sr, 0, CollectiveKind::ReduceScatter, act_bytes);
      gather_s = stage_collective(sr, 0, CollectiveKind::AllGather, act_bytes);
    }
    reduce_s = split.sequence_parallel ? scatter_s + gather_s : all_reduce_s;
    loss_s = stage_collective(sr, 0, CollectiveKind::AllReduce, static_cast<double>(b) * seq * 4);
  }
  const int per_reduce = split.sequence_parallel ? 2 : 1;  // collective calls per reduction
  constexpr int kLossReductions = 3;
  // Every unit's recompute as the graph runs it before the unit's backward
  // (schedule::has_recompute_op): a checkpointed layer's forward again at its TP share, under
  // selective recompute the attention core split by heads, the embedding's (empty) lookup
  // unless nothing is checkpointed, and the head's logits always (the fused head keeps none).
  const ActivationCheckpointing& ck = options.activation_checkpointing;
  const int units = costmodels::num_units(model);
  const auto recompute_of = [&](int unit, const UnitTimes& u) {
    if (schedule::recomputes_attention_core(ck, unit, units))
      return u.recompute * costmodels::attention_core_recompute_factor(dev.attention_core, T);
    if (schedule::recomputes(ck, unit, units))
      return u.recompute * costmodels::tensor_parallel_factor(model, unit, ComputePhase::Recompute,
                                                              T, sp, dev.replicated);
    return 0.0;
  };

  for (int c = 0; c < static_cast<int>(st.chunks.size()); ++c) {
    const LayerRange range = st.chunks[static_cast<std::size_t>(c)];
    const int k = c * p + s;
    double fc = 0, bc = 0, fcomm = 0, bcomm = 0;
    int f_calls = 0, b_calls = 0;
    std::vector<split_detail::UnitStep> steps;  // this chunk's units in forward order
    // The embedding first: its step is recorded below, before the layers.
    for (int l = range.begin; l < range.end; ++l) {
      const int unit = l + 1;
      const UnitTimes u = slowed(unit_times(dev, spec, unit, b, options));
      fc += u.forward * split_f;
      bc += u.backward * split_b + recompute_of(unit, u);
      // A recompute that reruns the whole layer reduces like its forward; the attention core
      // runs on the rank's own heads.
      const bool reruns = schedule::recomputes(ck, unit, units);
      const LayerTpComm tp = layer_tp_comm(dev, u, T, sp, reruns, reduce_s, gather_s, scatter_s);
      steps.push_back({u.forward * split_f + tp.forward,
                       u.backward * split_b + recompute_of(unit, u) + tp.backward,
                       costmodels::layer_parameters(model) / T});
      if (T > 1) {
        const int backward_reductions = reruns ? 4 : 2;
        fcomm += tp.forward;
        bcomm += tp.backward;
        f_calls += 2 * per_reduce;
        b_calls += backward_reductions * per_reduce;
      }
      out.params += costmodels::layer_parameters(model) / T;
      ++out.layers;
    }
    if (k == 0) {  // the embedding: replicated lookup, one all-reduce of its output
      const UnitTimes u = slowed(unit_times(dev, spec, 0, b, options));
      fc += u.forward;
      bc += u.backward + recompute_of(0, u);
      if (T > 1) {
        fcomm += all_reduce_s;
        f_calls += 1;
      }
      out.params += costmodels::embedding_parameters(model) / T;
      steps.insert(steps.begin(),
                   {u.forward + (T > 1 ? all_reduce_s : 0), u.backward + recompute_of(0, u),
                    costmodels::embedding_parameters(model) / T});
    }
    if (k == p * V - 1) {  // the head and loss: vocabulary-parallel, split by T
      const int head = model.num_layers + 1;
      const UnitTimes u = slowed(unit_times(dev, spec, head, b, options));
      fc += u.forward / T;
      bc += u.backward / T + recompute_of(head, u);
      if (T > 1) {
        fcomm += kLossReductions * loss_s;
        bcomm +=
            all_reduce_s + (schedule::recomputes(ck, head, units) ? kLossReductions * loss_s : 0);
        f_calls += kLossReductions;
        b_calls += 1 + (schedule::recomputes(ck, head, units) ? kLossReductions : 0);
      }
      out.params += costmodels::head_parameters(model) / T;
      // Megatron keeps a copy of the tied word embedding on the last stage for the head.
      if (tied && p > 1) out.params += word_embedding / T;
      const bool rc = schedule::recomputes(ck, head, units);
      steps.push_back(
          {u.forward / T + (T > 1 ? kLossReductions * loss_s : 0),
           u.backward / T + recompute_of(head, u) +
               (T > 1 ? all_reduce_s + (rc ? kLossReductions * loss_s : 0) : 0),
           costmodels::head_parameters(model) / T + (tied && p > 1 ? word_embedding / T : 0)});
      // The output layer's weight gradient, which a pipeline's deferral takes out of it.
      if (p > 1) steps.back().wgrad = u.backward / T * dev.output_wgrad;
      // As an FSDP plan's graph runs it (a one-stage T = 1 fully sharded split), a tied head's
      // phases gather and reduce the whole embedding unit with its own parameters
      // (phase_parameters); the uneven variant stays the one chosen on its own.
      steps.back().own_params = steps.back().params;
      if (split.is_default())
        steps.back().params +=
            costmodels::phase_parameters(model, head) - costmodels::unit_parameters(model, head);
    }
    out.units.insert(out.units.end(), steps.begin(), steps.end());
    out.chunk_ends.push_back(out.units.size());
    // Only the head's step has a weight gradient to defer (UnitStep::wgrad).
    out.chunks.push_back({fc + fcomm, bc + bcomm, 0, steps.empty() ? 0 : steps.back().wgrad});
    out.forward_compute += fc;
    out.backward_compute += bc;
    out.tp_comm_forward += fcomm;
    out.tp_comm_backward += bcomm;
    out.f_calls += f_calls;
    out.b_calls += b_calls;
  }
  return out;
}

// stage_pass's per-layer terms, each at its least: the TP shares and collectives with and
// without sequence parallelism, the layer whose forward + backward (+ the recompute the
// options' checkpointing adds) is cheapest. The embedding and the head only add.
double SplitEstimator::Impl::layer_step_floor(const std::vector<int>& tp_group, int b,
                                              const SplitOptions& options) {
  const Job& job = scenario.job;
  const ModelSpec& model = job.model;
  const int T = static_cast<int>(tp_group.size());
  const DeviceSpec& spec = rank_table[static_cast<std::size_t>(tp_group.front())].slot->spec;
  DeviceTimes& dev = device(spec, b, options);
  double compute = std::numeric_limits<double>::infinity();
  const ActivationCheckpointing& ck = options.activation_checkpointing;
  bool every_layer_recomputes = true;
  for (int unit = 1; unit <= model.num_layers; ++unit) {
    const UnitTimes& u = unit_times(dev, spec, unit, b, options);
    const bool recomputes = ck.checkpoints_layer(unit);
    every_layer_recomputes = every_layer_recomputes && recomputes;
    double least = std::numeric_limits<double>::infinity();
    for (bool sp : {false, true}) {
      if (sp && T == 1) continue;
      const double f = costmodels::tensor_parallel_factor(model, 1, ComputePhase::Forward, T, sp,
                                                          dev.replicated);
      const double g = costmodels::tensor_parallel_factor(model, 1, ComputePhase::Backward, T, sp,
                                                          dev.replicated);
      const double r =
          recomputes ? u.recompute * f
          : ck.recomputes_attention_core()
              ? u.recompute * costmodels::attention_core_recompute_factor(dev.attention_core, T)
              : 0;
      least = std::min(least, u.forward * f + u.backward * g + r);
    }
    compute = std::min(compute, least);
  }
  // Under the job's TP communication overlap a sequence-parallel layer's collectives may all
  // hide under its GEMMs: no floor of theirs.
  if (T == 1 || job.implementation.tp_comm_overlap) return compute;
  // Two reductions forward and at least two backward, each an all-reduce or (sequence
  // parallel) a reduce-scatter and an all-gather of the layer's activations.
  StageRanks& sr = ranks_of(tp_group, T);
  const double act_bytes = static_cast<double>(b) *
                           costmodels::effective_sequence(model, job.sequence_length) *
                           model.hidden * bytes_per_element(job.precision.compute);
  const double reduce = std::min(stage_collective(sr, 0, CollectiveKind::AllReduce, act_bytes),
                                 stage_collective(sr, 0, CollectiveKind::ReduceScatter, act_bytes) +
                                     stage_collective(sr, 0, CollectiveKind::AllGather, act_bytes));
  // Two more backward with every layer recomputed (its forward's again).
  return compute + (every_layer_recomputes ? 6 : 4) * reduce;
}

double SplitEstimator::Impl::tail_floor_per_parameter(const std::vector<int>& dp_group,
                                                      const SplitOptions& options) {
  const Job& job = scenario.job;
  const double R = static_cast<double>(dp_group.size());
  // Ten times the whole model's parameters: above any stage's share.
  const double Y =
      10 * (costmodels::layer_parameters(job.model) * job.model.num_layers +
            costmodels::embedding_parameters(job.model) + costmodels::head_parameters(job.model));
  const double e_c = bytes_per_element(job.precision.compute);
  const double e_r = bytes_per_element(job.precision.reduce);
  const auto time = [&](CollectiveKind kind, double bytes) {
    return models.comm
        ->collective(scenario.cluster, split_detail::even_request(kind, dp_group, bytes))
        .seconds;
  };
  double dp = 0;
  // Overlapped unit by unit (PerUnit) or under the last backward, the collectives may all be
  // hidden: no floor of theirs.
  if (options.dp_overlap == DpOverlap::None && dp_group.size() > 1)
    dp = std::min(
        time(CollectiveKind::AllReduce, Y * e_r),
        time(CollectiveKind::ReduceScatter, Y * e_r) + time(CollectiveKind::AllGather, Y * e_c));
  const DeviceSpec& spec = rank_table[static_cast<std::size_t>(dp_group.front())].slot->spec;
  const double step = models.compute->optimizer_time(spec, job, Y / R).seconds;
  return (dp + step) / Y;
}

Json to_json(const SplitEstimate& e) {
  Json stages = Json::array();
  for (const auto& s : e.stages) {
    stages.push_back({{"stage", s.stage},
                      {"gpu", s.gpu},
                      {"tensor_parallel", s.tensor_parallel},
                      {"replicas", s.replicas},
                      {"micro_batch", s.micro_batch},
                      {"replica_micro_batches", s.replica_micro_batches},
                      {"layers", s.layers},
                      {"parameters_per_rank", s.parameters_per_rank},
                      {"replicated_forward_share", s.replicated_forward},
                      {"replicated_backward_share", s.replicated_backward},
                      {"forward_compute_s", s.forward_compute},
                      {"backward_compute_s", s.backward_compute},
                      {"tp_comm_forward_s", s.tp_comm_forward},
                      {"tp_comm_backward_s", s.tp_comm_backward},
                      {"tp_collectives_forward", s.tp_collectives_forward},
                      {"tp_collectives_backward", s.tp_collectives_backward},
                      {"tp_bytes_per_collective", s.tp_bytes_per_collective},
                      {"last_backward_end_s", s.last_backward_end},
                      {"busy_s", s.busy},
                      {"bubble_s", s.bubble},
                      {"dp_comm_s", s.dp_comm},
                      {"dp_exposed_s", s.dp_exposed},
                      {"optimizer_s", s.optimizer_step},
                      {"finish_s", s.finish},
                      {"peak_in_flight", s.peak_in_flight},
                      {"memory",
                       {{"rank", s.memory.rank},
                        {"terms", memory_terms_json(s.memory.terms)},
                        {"activations", s.memory.activations},
                        {"total", s.memory.total},
                        {"capacity", s.memory.capacity}}}});
  }
  return {{"iteration_s", e.iteration_s},
          {"makespan_s", e.makespan_s},
          {"p2p_s", e.p2p_s},
          {"bubble_fraction", e.bubble_fraction},
          {"split", e.split},
          {"schedule", e.schedule},
          {"fits", e.fits},
          {"refusal", e.refusal},
          {"stages", stages}};
}

}  // namespace cephalo::planner

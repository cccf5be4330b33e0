// A stage's replicas (their GPU types, samples, shares and memory), one pass of a replica class
// through the stage's chunks, the stage's state and activations, and the estimate's JSON: the
// parts of SplitEstimator's estimate (split_estimate.cpp) that look at one stage.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "split_estimator_impl.hpp"

namespace cephalo::planner {
namespace {

Json memory_terms_json(const std::vector<costmodels::MemoryTerm>& terms) {
  Json j = Json::object();
  for (const auto& t : terms) j[t.name] = t.bytes;
  return j;
}

}  // namespace

std::vector<double> split_detail::shared_nic_ends(const std::vector<NicChain>& chains,
                                                  std::vector<int>& users) {
  const std::size_t n = chains.size();
  std::vector<double> end(n);
  for (std::size_t i = 0; i < n; ++i) end[i] = chains[i].release + chains[i].work;
  bool shared = false;
  for (const auto& c : chains)
    for (int node : *c.nodes) shared |= ++users[static_cast<std::size_t>(node)] > 1;
  for (const auto& c : chains)
    for (int node : *c.nodes) users[static_cast<std::size_t>(node)] = 0;
  if (!shared) return end;
  std::vector<double> left(n);
  std::vector<char> state(n, 0);  // 0 not released, 1 running, 2 done
  for (std::size_t i = 0; i < n; ++i) left[i] = chains[i].work;
  double t = std::numeric_limits<double>::infinity();
  for (const auto& c : chains) t = std::min(t, c.release);
  std::vector<double> rate(n, 0.0);
  for (std::size_t done = 0; done < n;) {
    for (std::size_t i = 0; i < n; ++i)
      if (state[i] == 0 && chains[i].release <= t) {
        state[i] = 1;
        for (int node : *chains[i].nodes) ++users[static_cast<std::size_t>(node)];
      }
    double next = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      if (state[i] == 0) next = std::min(next, chains[i].release);
      if (state[i] != 1) continue;
      int most = 1;
      for (int node : *chains[i].nodes)
        most = std::max(most, users[static_cast<std::size_t>(node)]);
      rate[i] = 1.0 / most;
      next = std::min(next, t + left[i] / rate[i]);
    }
    const double dt = next - t;
    t = next;
    for (std::size_t i = 0; i < n; ++i) {
      if (state[i] != 1) continue;
      left[i] -= dt * rate[i];
      if (left[i] <= 1e-12 * std::max(1.0, chains[i].work)) {
        state[i] = 2;
        end[i] = t;
        ++done;
        for (int node : *chains[i].nodes) --users[static_cast<std::size_t>(node)];
      }
    }
  }
  return end;
}

using split_detail::CollectiveKind;
using split_detail::ComputePhase;

void SplitEstimator::Impl::resolve_replicas(Replicas& rep, const ModelSplit& split,
                                            const PipelineStage& st, int s, int T,
                                            const SplitOptions& options, const std::string& file) {
  const Job& job = scenario.job;
  const auto& ranks = rank_table;
  const int m = split.micro_batches;
  const int R = static_cast<int>(st.ranks.size()) / T;
  const std::string where = "model_split.stages[" + std::to_string(s) + "]";
  rep.first_node = ranks[static_cast<std::size_t>(st.ranks.front())].node;
  // Per replica only integer work: GPU types by their index (rank_type), the stage's classes
  // found through a table by type.
  std::vector<int> class_of_type(types.size(), -1);
  rep.class_of.reserve(static_cast<std::size_t>(R));
  rep.capacity.reserve(static_cast<std::size_t>(R));
  rep.capacity_rank.reserve(static_cast<std::size_t>(R));
  rep.capacity_place.reserve(static_cast<std::size_t>(R));
  rep.node.reserve(static_cast<std::size_t>(R));
  for (int j = 0; j < R; ++j) {
    const int lead = st.ranks[static_cast<std::size_t>(j * T)];
    const int type = rank_type[static_cast<std::size_t>(lead)];
    double cap = std::numeric_limits<double>::infinity(), slowdown = 1.0;
    int cap_rank = lead, cap_place = 0;
    for (int t = 0; t < T; ++t) {
      const int r = st.ranks[static_cast<std::size_t>(j * T + t)];
      slowdown = std::max(slowdown, rank_slowdown[static_cast<std::size_t>(r)]);
      if (rank_type[static_cast<std::size_t>(r)] != type)
        throw ValidationError(file, where + ".ranks", std::to_string(r),
                              "the ranks of one tensor-parallel group of one GPU type (rank " +
                                  std::to_string(lead) + " is " +
                                  types[static_cast<std::size_t>(type)]->name + ")");
      const double c = rank_usable[static_cast<std::size_t>(r)];
      if (c < cap) {
        cap = c;
        cap_rank = r;
        cap_place = t;
      }
    }
    // A class is a (type, slowdown): real hardware through the table, an emulated slowdown
    // (test clusters of a few ranks) by a walk over the stage's classes.
    int emulated = -1;
    if (slowdown != 1.0)
      for (std::size_t c = 0; c < rep.classes.size() && emulated < 0; ++c)
        if (rep.class_type[c] == type && rep.class_slowdown[c] == slowdown)
          emulated = static_cast<int>(c);
    int& cls = slowdown == 1.0 ? class_of_type[static_cast<std::size_t>(type)] : emulated;
    if (cls < 0) {
      const DeviceSpec& spec = ranks[static_cast<std::size_t>(lead)].slot->spec;
      if (!rep.gpu_names.empty()) rep.gpu_names += "+";
      rep.gpu_names += spec.name;
      rep.classes.push_back(&spec);
      rep.class_type.push_back(type);
      rep.class_slowdown.push_back(slowdown);
      cls = static_cast<int>(rep.classes.size()) - 1;
    }
    rep.class_of.push_back(static_cast<std::size_t>(cls));
    rep.capacity.push_back(cap);
    rep.capacity_rank.push_back(cap_rank);
    rep.capacity_place.push_back(cap_place);
    rep.node.push_back(ranks[static_cast<std::size_t>(lead)].node);
  }
  // Sharding groups: the domain, or under hybrid its replicas on each node, by node (a stage's
  // replicas come node by node, so in one pass unless their nodes are out of order).
  if (split.sharding == ShardingKind::Hybrid) {
    const bool ascending = std::is_sorted(rep.node.begin(), rep.node.end());
    if (ascending) {
      for (std::size_t j = 0; j < rep.node.size(); ++j) {
        if (j == 0 || rep.node[j] != rep.node[j - 1]) rep.groups.emplace_back();
        rep.groups.back().push_back(j);
      }
    } else {
      std::map<int, std::vector<std::size_t>> by_node;
      for (std::size_t j = 0; j < rep.node.size(); ++j) by_node[rep.node[j]].push_back(j);
      for (auto& [n, g] : by_node) rep.groups.push_back(std::move(g));
    }
  } else {
    rep.groups.emplace_back();
    for (std::size_t j = 0; j < rep.node.size(); ++j) rep.groups.back().push_back(j);
  }
  rep.share.assign(rep.node.size(), 0.0);
  for (const auto& g : rep.groups)
    for (std::size_t j : g) rep.share[j] = 1.0 / static_cast<double>(g.size());

  const ReplicaBatches mode = options.replica_batches;
  if (mode == ReplicaBatches::Even) {
    const long long per_micro = static_cast<long long>(m) * R;
    if (job.global_batch % per_micro != 0) {
      std::ostringstream v, x;
      v << "global batch " << job.global_batch << " over " << m << " micro-batches x " << R
        << " replicas";
      x << "a global batch divisible by micro_batches x replicas (" << per_micro << ")";
      throw ValidationError(file, where, v.str(), x.str());
    }
    rep.total = static_cast<int>(job.global_batch / m);
    rep.size.assign(static_cast<std::size_t>(R), static_cast<int>(job.global_batch / per_micro));
    rep.sub.assign(static_cast<std::size_t>(R), 1);
  } else {
    if (job.global_batch % m != 0)
      throw ValidationError(
          file, "model_split.micro_batches", std::to_string(m),
          "a micro-batch count dividing the global batch " + std::to_string(job.global_batch));
    rep.total = static_cast<int>(job.global_batch / m);
    if (mode == ReplicaBatches::Given) {
      const ReplicaAllocation& a = options.allocation;
      if (a.micro_batch.size() != ranks.size() || a.state_share.size() != ranks.size())
        throw ValidationError(file, "ranks", std::to_string(a.micro_batch.size()) + " ranks",
                              std::to_string(ranks.size()) + " ranks, one per GPU");
      if (!a.sub_steps.empty() && a.sub_steps.size() != ranks.size())
        throw ValidationError(file, "ranks",
                              std::to_string(a.sub_steps.size()) + " sub-step counts",
                              std::to_string(ranks.size()) + ", one per GPU");
      long long sum = 0;
      for (int j = 0; j < R; ++j) {
        const int lead = st.ranks[static_cast<std::size_t>(j * T)];
        rep.size.push_back(a.micro_batch[static_cast<std::size_t>(lead)]);
        rep.sub.push_back(a.sub_steps_of(static_cast<std::size_t>(lead)));
        if (rep.size.back() % rep.sub.back() != 0)
          throw ValidationError(file, "ranks[" + std::to_string(lead) + "]",
                                std::to_string(rep.size.back()) + " samples per micro-batch in " +
                                    std::to_string(rep.sub.back()) + " sub-steps",
                                "a sub-step count dividing the rank's samples per micro-batch");
        rep.share[static_cast<std::size_t>(j)] = a.state_share[static_cast<std::size_t>(lead)];
        sum += rep.size.back();
      }
      // A plan's shares are of the domain; the memory reads them per sharding group.
      for (const auto& g : rep.groups) {
        double group_sum = 0;
        for (std::size_t j : g) group_sum += rep.share[j];
        for (std::size_t j : g) rep.share[j] = group_sum > 0 ? rep.share[j] / group_sum : 0;
      }
      if (sum != rep.total || rep.unplaced())
        throw ValidationError(file, where,
                              "replica micro-batches summing to " + std::to_string(sum),
                              "at least one sample per replica, summing to global batch / "
                              "micro_batches = " +
                                  std::to_string(rep.total));
    }
  }
  rep.uniform =
      rep.classes.size() == 1 &&
      std::adjacent_find(rep.size.begin(), rep.size.end(), std::not_equal_to<>()) == rep.size.end();
}

SplitEstimator::Impl::ReplicaMemory::ReplicaMemory(const Impl& impl, const ModelSplit& split, int T,
                                                   const std::vector<std::vector<int>>& units,
                                                   std::span<const pipeline::Step> order,
                                                   const SplitOptions& options,
                                                   const std::string& file)
    : impl_(impl),
      split_(split),
      T_(T),
      units_(units),
      order_(order),
      options_(options),
      file_(file) {}

const std::vector<costmodels::MemoryTerm>& SplitEstimator::Impl::ReplicaMemory::terms(
    const Replicas& rep, std::size_t j, int b, int sub, double share) {
  const Scenario& scenario = impl_.scenario;
  const Job& job = scenario.job;
  const int rank = rep.capacity_rank[j];
  const int type = rep.class_type[rep.class_of[j]];
  const bool fsdp = split_.is_default();
  const bool gpu_runtime = impl_.type_gpu_runtime[static_cast<std::size_t>(type)] != 0;
  const auto key = std::make_tuple(fsdp ? type : rep.capacity_place[j], gpu_runtime, b, sub, share);
  auto it = known_.find(key);
  if (it != known_.end()) return it->second;
  const auto& constants = costmodels::memory_constants();
  std::vector<costmodels::MemoryTerm> out;
  if (fsdp) {
    // One stage, T = 1, full sharding: the plan is an FSDP plan, its memory the FSDP terms.
    if (!fsdp_plan_) {
      fsdp_plan_ = even_split_plan(scenario, split_, file_);
      fsdp_plan_->activation_checkpointing = options_.activation_checkpointing;
    }
    Plan& plan = *fsdp_plan_;
    PlanRank& row = plan.ranks[static_cast<std::size_t>(rank)];
    const PlanRank even = row;
    // An FSDP plan's sub-steps are its micro-batches: m · sub of b / sub.
    row.micro_batch = b / sub;
    row.batch = b * row.micro_batches;
    row.micro_batches *= sub;
    row.state_share = share;
    out = costmodels::predict_memory(scenario, plan, rank, constants).terms;
    row = even;
  } else {
    const int p = static_cast<int>(split_.stages.empty() ? 1 : split_.stages.size());
    costmodels::SplitRankMemoryInputs in;
    in.chunks = units_;
    in.order = order_;
    in.tensor_parallel = T_;
    in.tp_rank = rep.capacity_place[j];
    in.sequence_parallel = split_.sequence_parallel;
    in.head_holds_word_embedding = job.model.tied_embeddings && p > 1;
    in.micro_batch = b / sub;
    in.sub_steps = sub;
    in.sharding = split_.sharding;
    in.state_share = share;
    in.activation_checkpointing = options_.activation_checkpointing;
    in.gpu_runtime = gpu_runtime;
    in.world_size = scenario.cluster.num_ranks();
    out = costmodels::split_rank_memory_terms(job, in, constants);
  }
  return known_.emplace(key, std::move(out)).first->second;
}

double SplitEstimator::Impl::ReplicaMemory::total(const Replicas& rep, std::size_t j, int b,
                                                  int sub, double share) {
  double sum = 0;
  for (const auto& t : terms(rep, j, b, sub, share)) sum += t.bytes;
  return sum;
}

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

std::vector<std::size_t> SplitEstimator::Impl::group_kinds(const StageRanks& sr,
                                                           const split_detail::Replicas& rep) {
  if (node_link.empty()) node_link = sim::node_link_classes(scenario.cluster);
  std::vector<std::size_t> out;
  std::map<std::vector<std::int64_t>, std::size_t> seen;
  std::vector<std::int64_t> key, last;
  for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const auto& g = rep.groups[gi];
    key.clear();
    key.push_back(static_cast<std::int64_t>(g.size()));
    bool ascending = true;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::size_t j = g[i];
      const int lead = sr.group[j];
      if (i > 0 && lead <= sr.group[g[i - 1]]) ascending = false;
      std::uint64_t share = 0;
      std::memcpy(&share, &rep.share[j], sizeof share);
      key.push_back(rank_type[static_cast<std::size_t>(lead)]);
      key.push_back(rep.node[j] - rep.node[g.front()]);
      key.push_back(node_link[static_cast<std::size_t>(rep.node[j])]);
      key.push_back(static_cast<std::int64_t>(share));
    }
    if (!ascending) {  // the comm model sorts its members: this group's order is its own
      out.push_back(gi);
      last.clear();
      continue;
    }
    // Groups come in runs of alike ones: most are their predecessor's kind.
    if (key == last) continue;
    if (seen.emplace(key, gi).second) out.push_back(gi);
    std::swap(key, last);
  }
  return out;
}

double SplitEstimator::Impl::dp_collective(StageRanks& sr, const split_detail::Replicas& rep,
                                           std::span<const std::size_t> kinds,
                                           ShardingKind sharding, CollectiveKind kind,
                                           double elements, double element_bytes, double sharing,
                                           double variant_elements) {
  const double bytes = elements * element_bytes * sharing;
  if (sharding == ShardingKind::None || (rep.groups.size() == 1 && rep.even_shares))
    return stage_collective(sr, 1, kind, bytes);
  const double gather_bytes = (variant_elements < 0 ? elements : variant_elements) *
                              bytes_per_element(scenario.job.precision.compute);
  double slowest = 0;
  for (std::size_t gi : kinds) {
    const auto& g = rep.groups[gi];
    if (g.size() < 2) continue;  // a group of one holds the whole unit: nothing moves
    double sum = 0;
    for (std::size_t j : g) sum += rep.share[j];
    CollectiveRequest r;
    r.kind = kind;
    r.training_state = true;  // the stage's gradients and parameters
    bool even = true;
    for (std::size_t j : g) {
      const double x = sum > 0 ? rep.share[j] / sum : 0;
      r.ranks.push_back(sr.group[j]);
      r.shard_bytes.push_back(bytes * x);
      even = even && std::fabs(x - 1.0 / static_cast<double>(g.size())) <= 1e-12;
    }
    if (!even) {
      // traces' UnevenVariants: one variant per unit and group, whatever the direction,
      // chosen by the comm model on the unit's all-gather of these shards.
      RequestKey key{CollectiveKind::AllGather, {}, r.ranks};
      for (double b : r.shard_bytes) key.shard_bytes.push_back(b / bytes * gather_bytes);
      auto it = variants.find(key);
      if (it == variants.end()) {
        CollectiveRequest gather;
        gather.kind = CollectiveKind::AllGather;
        gather.ranks = key.ranks;
        gather.shard_bytes = key.shard_bytes;
        const UnevenCollective v =
            costmodels::uneven_variant(*models.comm, scenario.cluster, gather);
        it = variants.emplace(std::move(key), v).first;
      }
      r.uneven = it->second;
    }
    slowest = std::max(slowest, collective(r));
  }
  return slowest;
}

double SplitEstimator::Impl::cross_reduction(const StageRanks& sr,
                                             const split_detail::Replicas& rep, double elements,
                                             double element_bytes, double sharing) {
  if (rep.groups.size() < 2) return 0;
  const double bytes = elements * element_bytes * sharing;
  // Each group cuts the unit at its members' cumulative shares; a piece is an interval between
  // consecutive cuts of all groups, owned in each group by the member whose slice holds it.
  std::vector<std::vector<double>> ends(rep.groups.size());
  std::vector<double> cuts{0.0, 1.0};
  CollectiveRequest r;
  r.kind = CollectiveKind::AllReduce;
  r.training_state = true;
  for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const auto& g = rep.groups[gi];
    double sum = 0;
    for (std::size_t j : g) sum += rep.share[j];
    double at = 0;
    for (std::size_t j : g) {
      const double x = sum > 0 ? rep.share[j] / sum : 1.0 / static_cast<double>(g.size());
      at += x;
      ends[gi].push_back(at);
      r.ranks.push_back(sr.group[j]);
      r.shard_bytes.push_back(bytes * x);
    }
    // A group cut as its predecessor adds the same cuts, whose pieces would be empty (skipped
    // below): alike groups come in runs, so the cuts stay a few, not one per replica.
    if (gi == 0 || ends[gi] != ends[gi - 1])
      for (double end : ends[gi]) cuts.push_back(std::min(end, 1.0));
  }
  std::sort(cuts.begin(), cuts.end());
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const double a = cuts[k], b = cuts[k + 1];
    if (b - a <= 1e-12) continue;
    costmodels::ReductionPiece piece;
    piece.bytes = (b - a) * bytes;
    const double mid = (a + b) / 2;
    for (std::size_t gi = 0; gi < rep.groups.size(); ++gi) {
      const auto& e = ends[gi];
      const std::size_t at = std::min<std::size_t>(
          static_cast<std::size_t>(std::upper_bound(e.begin(), e.end(), mid) - e.begin()),
          e.size() - 1);
      piece.owners.push_back(sr.group[rep.groups[gi][at]]);
    }
    r.pieces.push_back(std::move(piece));
  }
  return collective(r);
}

}  // namespace cephalo::planner

// Per-rank memory of a plan with a model split (DESIGN §4, "A split in the plan and the
// graph"), term by term: the memory model's terms (memory_model.hpp) read for the rank's
// pipeline stage, its tensor-parallel slice and its domain's sharding, with the activations of
// as many chunk passes as the schedule keeps in flight on the stage (pipeline::peak_in_flight,
// the one schedule module: 1F1B holds up to p − s micro-batches on stage s). The planner's
// estimate fills SplitRankMemoryInputs from a candidate split and calls the same terms.
#include <algorithm>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "memory_terms_tail.hpp"

namespace cephalo::costmodels {

std::vector<std::vector<int>> stage_units(const ModelSpec& model, const PipelineStage& stage,
                                          int stage_index, int stages) {
  const int V = static_cast<int>(stage.chunks.size());
  const int head = num_units(model) - 1;
  std::vector<std::vector<int>> chunks(static_cast<std::size_t>(V));
  for (int c = 0; c < V; ++c) {
    std::vector<int>& units = chunks[static_cast<std::size_t>(c)];
    const int k_virtual = c * stages + stage_index;
    if (k_virtual == 0) units.push_back(0);
    const LayerRange r = stage.chunks[static_cast<std::size_t>(c)];
    for (int l = r.begin; l < r.end; ++l) units.push_back(l + 1);
    if (k_virtual == stages * V - 1) units.push_back(head);
  }
  return chunks;
}

double attention_core_kept_bytes(const ModelSpec& model, int seq, int micro_batch) {
  // Of what a layer keeps (layer_kept_bytes_per_token), only the attention kernel's own saved
  // state is the core's: its log-sum-exps (one fp32 per head and token). Its inputs q, k, v
  // are the recompute's inputs and its output the projection's input, both kept.
  return static_cast<double>(effective_sequence(model, seq)) * micro_batch * model.heads * 4.0;
}

double split_boundary_bytes(const Job& job, int micro_batch, int tensor_parallel,
                            bool sequence_parallel) {
  return boundary_activation_bytes(job.model, job.sequence_length, micro_batch,
                                   job.precision.compute) /
         (sequence_parallel ? static_cast<double>(tensor_parallel) : 1.0);
}

OpBytes split_compute_op_bytes(const Job& job, const ActivationCheckpointing& ck, int unit,
                               ComputeStep step, int mb, int T, bool sp, bool gpu_runtime) {
  const ModelSpec& m = job.model;
  const int seq = job.sequence_length;
  const Dtype act = job.precision.compute;
  const int units = num_units(m);
  const double a = tensor_parallel_activation_factor(m, unit, act, T, sp);
  const double boundary = split_boundary_bytes(job, mb, T, sp);
  const double w = unit_working_bytes(m, unit, seq, mb, act, job.implementation) * a;
  const bool layer = unit >= 1 && unit < units - 1;
  const bool recompute = schedule::recomputes(ck, unit, units);
  const bool keeps = !recompute && layer;
  // Selective recompute: a layer keeps all but its attention core's saved state, reruns the core.
  const double core =
      layer && ck.recomputes_attention_core() ? attention_core_kept_bytes(m, seq, mb) / T : 0.0;
  OpBytes o;
  switch (step) {
    case ComputeStep::Forward:
      o.alloc = w + (unit < units - 1 ? boundary : 0.0);
      o.free = keeps ? core : w;
      break;
    case ComputeStep::Recompute:
      o.alloc = recompute ? w : core;
      break;
    case ComputeStep::Backward: {
      // Eager attention's s×s scores and their gradient (split by heads) on a GPU (a CPU
      // device computes one head's scores at a time outside its allocator).
      const double t =
          unit_backward_transient_bytes(m, unit, seq, mb, act) * a +
          (gpu_runtime ? eager_attention_bytes(m, unit, seq, mb, job.implementation) / T : 0.0);
      o.alloc = (unit > 0 ? boundary : 0.0) + t;
      o.free = (recompute || keeps ? w : 0.0) + t + (unit >= 1 ? boundary : 0.0) +
               (unit < units - 1 ? boundary : 0.0);
      break;
    }
  }
  return o;
}

namespace {

// The stage's order walked op by op: the peak of the bytes the rank holds beyond its training
// state, and what of them are gathered parameters and unsharded gradients at that moment.
struct Peak {
  double total = 0, params = 0, grads = 0;
};

Peak walk_order(const Job& job, const SplitRankMemoryInputs& in) {
  const ModelSpec& m = job.model;
  const int T = in.tensor_parallel;
  const bool sp = in.sequence_parallel;
  const int units = num_units(m);
  const int head = units - 1;
  const bool gathers = in.sharding == ShardingKind::Full || in.sharding == ShardingKind::Hybrid;
  const ActivationCheckpointing& ck = in.activation_checkpointing;
  // What crosses a stage boundary: the rank's whole share of a pipeline micro-batch.
  const int sub = std::max(in.sub_steps, 1);
  const double boundary = split_boundary_bytes(job, in.micro_batch * sub, T, sp);
  struct Unit {
    OpBytes fwd, rc, bwd;
    double param = 0, grad = 0;
    bool gathered = false, grad_held = false;
  };
  std::vector<Unit> state(static_cast<std::size_t>(units));
  // Layers differ only in whether they are checkpointed: each kind priced once.
  int priced[2] = {-1, -1};
  for (const auto& chunk : in.chunks)
    for (int u : chunk) {
      const auto i = static_cast<std::size_t>(u);
      const bool layer = u >= 1 && u < head;
      int& same = priced[schedule::recomputes(ck, u, units) ? 1 : 0];
      if (layer && same >= 0) {
        const auto j = static_cast<std::size_t>(same);
        state[i].fwd = state[j].fwd;
        state[i].rc = state[j].rc;
        state[i].bwd = state[j].bwd;
        state[i].param = state[j].param;
        state[i].grad = state[j].grad;
        continue;
      }
      if (layer) same = u;
      state[i].fwd = split_compute_op_bytes(job, ck, u, ComputeStep::Forward, in.micro_batch, T, sp,
                                            in.gpu_runtime);
      state[i].rc = split_compute_op_bytes(job, ck, u, ComputeStep::Recompute, in.micro_batch, T,
                                           sp, in.gpu_runtime);
      state[i].bwd = split_compute_op_bytes(job, ck, u, ComputeStep::Backward, in.micro_batch, T,
                                            sp, in.gpu_runtime);
      if (gathers) {
        const double n =
            unit_parameters(m, u, T, in.tp_rank, in.head_holds_word_embedding && u == head);
        state[i].param = n * bytes_per_element(job.precision.compute);
        state[i].grad = n * bytes_per_element(job.precision.reduce);
      }
    }
  Peak peak;
  double held = 0, params = 0, grads = 0;
  const auto alloc = [&](double bytes) {
    held += bytes;
    if (held > peak.total) peak = {held, params, grads};
  };
  // A step that gathers, first allocates a gradient or frees gathered parameters runs op by op;
  // the others repeat their chunk's pattern: its net change and highest point, computed once.
  struct Pattern {
    double net = 0, high = 0;
  };
  const std::size_t V = in.chunks.size();
  std::vector<Pattern> forward(V), backward(V);
  std::vector<int> forwards_done(V, 0), backwards_left(V, 0);
  for (std::size_t c = 0; c < V; ++c) {
    const auto& chunk = in.chunks[c];
    const auto up = [](Pattern& p, double bytes) {
      p.net += bytes;
      p.high = std::max(p.high, p.net);
    };
    Pattern& f = forward[c];
    if (chunk.front() != 0) up(f, boundary);
    for (int j = 0; j < sub; ++j)
      for (int u : chunk) {
        up(f, state[static_cast<std::size_t>(u)].fwd.alloc);
        f.net -= state[static_cast<std::size_t>(u)].fwd.free;
      }
    if (chunk.back() != head) f.net -= boundary;
    Pattern& g = backward[c];
    if (chunk.back() != head) up(g, boundary);
    for (int j = 0; j < sub; ++j)
      for (auto it = chunk.rbegin(); it != chunk.rend(); ++it) {
        const Unit& x = state[static_cast<std::size_t>(*it)];
        up(g, x.rc.alloc);
        up(g, x.bwd.alloc);
        g.net -= x.bwd.free;
      }
    if (chunk.front() != 0) g.net -= boundary;
  }
  for (const auto& step : in.order)
    if (step.pass == pipeline::Pass::Backward)
      ++backwards_left[static_cast<std::size_t>(step.chunk)];
  const auto repeat = [&](const Pattern& p) {
    if (held + p.high > peak.total) peak = {held + p.high, params, grads};
    held += p.net;
  };
  for (const auto& step : in.order) {
    const auto c = static_cast<std::size_t>(step.chunk);
    const auto& chunk = in.chunks[c];
    if (step.pass == pipeline::Pass::Forward) {
      if (!gathers || forwards_done[c]++ > 0) {
        repeat(forward[c]);
        continue;
      }
      // The chunk's input arrives from the previous stage (not the embedding's).
      if (chunk.front() != 0) alloc(boundary);
      for (int j = 0; j < sub; ++j)
        for (int u : chunk) {
          const auto i = static_cast<std::size_t>(u);
          if (!state[i].gathered && state[i].param > 0) {
            state[i].gathered = true;
            params += state[i].param;
            alloc(state[i].param);
          }
          alloc(state[i].fwd.alloc);
          held -= state[i].fwd.free;
        }
      // The chunk's output goes to the next stage (not the head's loss).
      if (chunk.back() != head) held -= boundary;
    } else {
      const bool last = --backwards_left[c] == 0;
      bool first = false;
      for (int u : chunk) first = first || !state[static_cast<std::size_t>(u)].grad_held;
      if (!gathers || (!first && !last)) {
        repeat(backward[c]);
        continue;
      }
      // The output's gradient arrives from the next stage (not for the head).
      if (chunk.back() != head) alloc(boundary);
      for (int j = 0; j < sub; ++j)
        for (auto it = chunk.rbegin(); it != chunk.rend(); ++it) {
          const auto i = static_cast<std::size_t>(*it);
          alloc(state[i].rc.alloc);
          if (!state[i].grad_held) {
            state[i].grad_held = true;
            grads += state[i].grad;
            held += state[i].grad;
          }
          alloc(state[i].bwd.alloc);
          held -= state[i].bwd.free;
          if (last && j + 1 == sub && state[i].gathered) {
            params -= state[i].param;
            held -= state[i].param;
          }
        }
      // The input's gradient goes to the previous stage (not the embedding's).
      if (chunk.front() != 0) held -= boundary;
    }
  }
  return peak;
}

}  // namespace

std::vector<MemoryTerm> split_rank_memory_terms(const Job& job, const SplitRankMemoryInputs& in,
                                                const MemoryConstants& k) {
  const ModelSpec& m = job.model;
  const Precision& p = job.precision;
  const int T = in.tensor_parallel;
  const int head = num_units(m) - 1;

  double held = 0;
  const double layer = unit_parameters(m, 1, T, in.tp_rank);
  for (const auto& chunk : in.chunks)
    for (int u : chunk)
      held += u >= 1 && u < head
                  ? layer
                  : unit_parameters(m, u, T, in.tp_rank, in.head_holds_word_embedding && u == head);
  const double share = in.sharding == ShardingKind::None ? 1.0 : in.state_share;
  const double compute_b = bytes_per_element(p.compute), reduce_b = bytes_per_element(p.reduce);
  const double params_b = bytes_per_element(p.params);
  const double cast = params_b != compute_b ? compute_b : 0.0;
  const double state = schedule::state_bytes_per_parameter(p);

  std::vector<MemoryTerm> t;
  switch (in.sharding) {
    case ShardingKind::Full:
    case ShardingKind::Hybrid:
      t.push_back({"training_state", share * held * state});
      break;
    case ShardingKind::None:
      t.push_back({"training_state", held * state + held * cast});
      break;
    case ShardingKind::Optimizer: {
      // The compute-dtype parameters and the gradient stay whole; the master copy (when the
      // parameters are kept in another dtype) and the moments are sharded.
      const double sharded = state - reduce_b - (cast > 0 ? 0.0 : params_b);
      t.push_back({"training_state", share * held * sharded + held * (compute_b + reduce_b)});
      break;
    }
  }
  // The collectives' transient shards are not counted: under a pipeline the reductions run
  // after the stage's last backward, when its activations are gone, and the gathers before its
  // first forwards have any.
  const Peak peak = walk_order(job, in);
  t.push_back({"gathered_params", k.unit_scale * peak.params});
  t.push_back({"unit_gradient", k.unit_scale * peak.grads});
  t.push_back({"activations", k.activation_scale * (peak.total - peak.params - peak.grads)});
  detail::append_runtime_terms(t, in.gpu_runtime, in.world_size, k);
  return t;
}

std::vector<MemoryTerm> split_memory_terms(const Scenario& scenario, const Plan& plan, int rank,
                                           const MemoryConstants& k) {
  const Job& job = scenario.job;
  const ModelSpec& m = job.model;
  const ModelSplit& split = plan.model_split;
  const int n = static_cast<int>(plan.ranks.size());
  const SplitTopology topo(split, n);
  const auto stages = resolved_stages(split, m.num_layers, n);
  const RankPlace place = topo.place(rank);
  const int s = place.stage;
  const int P = topo.stages();
  const PlanRank& row = plan.ranks[static_cast<std::size_t>(rank)];
  const auto& devices = scenario.cluster.ranks();

  SplitRankMemoryInputs in;
  in.chunks = stage_units(m, stages[static_cast<std::size_t>(s)], s, P);
  const auto order = pipeline::stage_order(s, P, split.micro_batches, split.schedule);
  in.order = order;
  in.tensor_parallel = place.tensor_parallel;
  in.tp_rank = place.tp_rank;
  in.sequence_parallel = split.sequence_parallel;
  in.head_holds_word_embedding = m.tied_embeddings && P > 1;
  in.micro_batch = row.micro_batch;
  in.sub_steps = row.sub_steps(split.micro_batches);
  in.sharding = split.sharding;
  // The rank's share of its domain's state; under hybrid sharding relative to the domain's
  // ranks on its node, the group that holds a full copy.
  in.state_share = row.state_share;
  if (split.sharding == ShardingKind::Hybrid) {
    double node_sum = 0;
    for (int r : topo.domain(s, place.tp_rank))
      if (devices[static_cast<std::size_t>(r)].node == devices[static_cast<std::size_t>(rank)].node)
        node_sum += plan.ranks[static_cast<std::size_t>(r)].state_share;
    in.state_share = node_sum > 0 ? in.state_share / node_sum : 0.0;
  }
  in.activation_checkpointing = plan.activation_checkpointing;
  in.gpu_runtime = runs_gpu_runtime(devices[static_cast<std::size_t>(rank)].slot->spec);
  in.world_size = n;
  return split_rank_memory_terms(job, in, k);
}

}  // namespace cephalo::costmodels

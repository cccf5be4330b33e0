// Per-rank memory of a plan with a model split (DESIGN §4, "A split in the plan and the
// graph"), term by term: the memory model's terms (memory_model.hpp) read for the rank's
// pipeline stage, its tensor-parallel slice and its domain's sharding, with the activations of
// as many chunk passes as the schedule keeps in flight on the stage (pipeline::peak_in_flight,
// the one schedule module: 1F1B holds up to p − s micro-batches on stage s).
#include <algorithm>
#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "memory_terms_tail.hpp"

namespace cephalo::costmodels {

std::vector<MemoryTerm> split_memory_terms(const Scenario& scenario, const Plan& plan, int rank,
                                           const MemoryConstants& k) {
  const Job& job = scenario.job;
  const ModelSpec& m = job.model;
  const Precision& p = job.precision;
  const ModelSplit& split = plan.model_split;
  const int n = static_cast<int>(plan.ranks.size());
  const SplitTopology topo(split, n);
  const auto stages = resolved_stages(split, m.num_layers, n);
  const RankPlace place = topo.place(rank);
  const int s = place.stage, T = place.tensor_parallel;
  const int P = topo.stages(), V = topo.virtual_stages();
  const int seq = job.sequence_length;
  const bool sp = split.sequence_parallel;
  const int head = num_units(m) - 1;
  const PlanRank& row = plan.ranks[static_cast<std::size_t>(rank)];
  const int mb = row.micro_batch;

  // The stage's units: its layers, the embedding with virtual stage 0, the head with the last.
  std::vector<int> units;
  for (int c = 0; c < V; ++c) {
    const int k_virtual = c * P + s;
    if (k_virtual == 0) units.push_back(0);
    const LayerRange r = stages[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
    for (int l = r.begin; l < r.end; ++l) units.push_back(l + 1);
    if (k_virtual == P * V - 1) units.push_back(head);
  }
  double held = 0;
  for (int u : units)
    held += unit_parameters(m, u, T, place.tp_rank, m.tied_embeddings && P > 1 && u == head);
  // The rank's share of its domain's state; under hybrid sharding relative to the domain's
  // ranks on its node, the group that holds a full copy.
  double share = row.state_share;
  const auto& devices = scenario.cluster.ranks();
  if (split.sharding == StageSharding::Hybrid) {
    double node_sum = 0;
    for (int r : topo.domain(s, place.tp_rank))
      if (devices[static_cast<std::size_t>(r)].node == devices[static_cast<std::size_t>(rank)].node)
        node_sum += plan.ranks[static_cast<std::size_t>(r)].state_share;
    share = node_sum > 0 ? share / node_sum : 0.0;
  }
  if (split.sharding == StageSharding::None) share = 1.0;
  const double compute_b = bytes_per_element(p.compute), reduce_b = bytes_per_element(p.reduce);
  const double params_b = bytes_per_element(p.params);
  const double cast = params_b != compute_b ? compute_b : 0.0;
  const double state = schedule::state_bytes_per_parameter(p);

  std::vector<MemoryTerm> t;
  const bool gathers =
      split.sharding == StageSharding::Full || split.sharding == StageSharding::Hybrid;
  switch (split.sharding) {
    case StageSharding::Full:
    case StageSharding::Hybrid:
      t.push_back({"training_state", share * held * state});
      break;
    case StageSharding::None:
      t.push_back({"training_state", held * state + held * cast});
      break;
    case StageSharding::Optimizer:
      t.push_back({"training_state", share * held * (8.0 + (cast > 0 ? params_b : 0.0)) +
                                         held * (compute_b + reduce_b)});
      break;
  }
  // Full / hybrid: every unit of the stage is gathered at its first forward and kept, with its
  // unsharded gradient, to its last backward (the whole iteration under a pipeline).
  t.push_back({"gathered_params", gathers ? k.unit_scale * held * compute_b : 0.0});
  t.push_back({"unit_gradient", gathers ? k.unit_scale * held * reduce_b : 0.0});
  // The collectives' transient shards are not counted: under a pipeline the reductions run
  // after the stage's last backward, when its activations are gone, and the gathers before its
  // first forwards have any.

  // Activations: the chunk passes the schedule keeps in flight, each holding its units' inputs
  // (checkpointed layers) or saved activations (the others), plus a received activation and
  // gradient.
  const int in_flight = pipeline::peak_in_flight(s, P, split.micro_batches, split.schedule);
  const double boundary =
      boundary_activation_bytes(m, seq, mb, p.compute) / (sp ? static_cast<double>(T) : 1.0);
  const ActivationCheckpointing& ck = plan.activation_checkpointing;
  double inputs = 0, kept = 0, working = 0;
  for (int u : units) {
    const double a = tensor_parallel_activation_factor(m, u, seq, T, sp);
    const bool layer = u >= 1 && u <= m.num_layers;
    // Every unit but the embedding keeps its input (the previous unit's output, or the
    // activation the stage received) until its backward; a layer that is not checkpointed its
    // forward's saved activations too.
    if (u >= 1) inputs += boundary;
    if (layer && !schedule::keeps_only_input(ck, u))
      kept += unit_working_bytes(m, u, seq, mb, p.compute) * a;
    const double extra = unit_working_bytes(m, u, seq, mb, p.compute) * a +
                         unit_backward_transient_bytes(m, u, seq, mb, p.compute) * a;
    working = std::max(working, extra);
  }
  // In flight counts chunk passes: a pass holds one chunk, 1/V of the stage's units.
  const double per_pass = 1.0 / V;
  t.push_back(
      {"activations", k.activation_scale * (in_flight * per_pass * inputs + 2.0 * boundary)});
  if (kept > 0) t.push_back({"kept_activations", k.activation_scale * in_flight * per_pass * kept});
  t.push_back({"working_set", k.working_scale * working});
  detail::append_runtime_terms(
      t, runs_gpu_runtime(devices[static_cast<std::size_t>(rank)].slot->spec), n, k);
  return t;
}

}  // namespace cephalo::costmodels

// GraphBuilder::build: the plan-wide setup of any plan read as a model split (units per virtual
// stage, unit sizes, the phases, the data-parallel domains with their layouts, static bytes and
// collectives, the pipeline transfers), then every built rank's program in its stage's order
// (graph_rank_program.cpp, graph_pipeline_program.cpp) emitted, then the indexes the replay and
// the executor walk; graph_builder.hpp says what the parts are.
#include "graph_builder.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::traces {

namespace {

// The split the builder reads: a split plan's own; an FSDP plan's is the default one stage,
// every layer on every rank in the plan's rank order (its sharding key numbers the ranks so,
// whatever order a one-stage `model_split` lists them in).
ModelSplit split_of(const Plan& plan) { return plan.has_split() ? plan.model_split : ModelSplit{}; }

}  // namespace

GraphBuilder::GraphBuilder(const Plan& plan, const Scenario& scenario,
                           const costmodels::CommModel* comm)
    : plan_(plan),
      scenario_(scenario),
      split_(split_of(plan)),
      phase_order_(!plan.has_split()),
      variants_(plan, scenario, comm),
      topo_(split_, static_cast<int>(plan.ranks.size())) {
  const int n = static_cast<int>(plan.ranks.size());
  units_ = costmodels::num_units(scenario.job.model);
  stages_ = resolved_stages(split_, scenario.job.model.num_layers, n);
  p_ = static_cast<int>(stages_.size());
  v_ = topo_.virtual_stages();
  m_ = split_.micro_batches;
  setup_units();
}

// ---- plan-wide setup ------------------------------------------------------------------------

// The units phase `unit`'s collectives move, in buffer order. In the phase order a tied head's
// phase brings the whole embedding unit first (costmodels::phase_parameters): the embedding's
// parameters were released after its own phase. A pipeline order keeps a unit gathered from
// its first forward to its last backward, and a tied head on another stage holds its own copy.
std::vector<int> GraphBuilder::phase_units(int unit) const {
  if (!phase_order_) return {unit};
  const ModelSpec& model = scenario_.job.model;
  const double extra =
      costmodels::phase_parameters(model, unit) - costmodels::unit_parameters(model, unit);
  std::vector<int> units;
  if (extra > 0) {
    if (extra != costmodels::unit_parameters(model, 0))
      throw std::logic_error("phase_parameters adds something other than the embedding unit");
    units.push_back(0);
  }
  units.push_back(unit);
  return units;
}

void GraphBuilder::setup_units() {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int k_last = p_ * v_ - 1;
  vstage_units_.assign(static_cast<std::size_t>(p_ * v_), {});
  std::vector<int> unit_vstage(static_cast<std::size_t>(units_), -1);
  for (int s = 0; s < p_; ++s)
    for (int c = 0; c < v_; ++c) {
      const int k = virtual_stage(s, c);
      const LayerRange r = stages_[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
      for (int l = r.begin; l < r.end; ++l) unit_vstage[static_cast<std::size_t>(l + 1)] = k;
    }
  unit_vstage.front() = 0;
  unit_vstage.back() = k_last;
  g_.unit_stage_.resize(static_cast<std::size_t>(units_));
  for (int u = 0; u < units_; ++u) {
    const int k = unit_vstage[static_cast<std::size_t>(u)];
    vstage_units_[static_cast<std::size_t>(k)].push_back(u);
    g_.unit_stage_[static_cast<std::size_t>(u)] = k % p_;
  }

  const double compute_bytes = bytes_per_element(job.precision.compute);
  const double reduce_bytes = bytes_per_element(job.precision.reduce);
  g_.unit_sizes_.resize(static_cast<std::size_t>(units_));
  for (int u = 0; u < units_; ++u) {
    const int s = g_.unit_stage_[static_cast<std::size_t>(u)];
    UnitSizes& us = g_.unit_sizes_[static_cast<std::size_t>(u)];
    // TP rank 0's slice; a domain's own numel is layout_of(rank).numel(u).
    us.parameters = costmodels::unit_parameters(model, u, topo_.tensor_parallel(s), 0,
                                                model.tied_embeddings && p_ > 1 && u == units_ - 1);
    us.numel = std::llround(us.parameters);
    // What a phase of the unit gathers and reduces (phase_units).
    const double moved = phase_order_ ? costmodels::phase_parameters(model, u) : us.parameters;
    us.gathered_bytes = moved * compute_bytes;
    us.gradient_bytes = moved * reduce_bytes;
  }
}

// The domain's sharding groups over its positions (and its shares, relative where groups are
// formed here). An FSDP plan's one domain is every rank in plan order: its `sharding` key (full,
// or hybrid with the groups it lists) as written. A split's stage domain: its
// `model_split.sharding` — full; none: a full replica per rank, each its own group; hybrid: the
// domain's ranks on one node shard among themselves, the plan's shares read relative to their
// node's.
Sharding GraphBuilder::domain_sharding(std::span<const int> ranks,
                                       std::vector<double>& shares) const {
  if (phase_order_) return plan_.sharding;
  const int size = static_cast<int>(ranks.size());
  Sharding sharding;
  if (split_.sharding == ShardingKind::None) {
    sharding.kind = ShardingKind::Hybrid;
    for (int i = 0; i < size; ++i) sharding.groups.push_back({i});
    std::fill(shares.begin(), shares.end(), 1.0);
  } else if (split_.sharding == ShardingKind::Hybrid) {
    const auto& devices = scenario_.cluster.ranks();
    std::map<int, std::vector<int>> by_node;
    for (int i = 0; i < size; ++i)
      by_node[devices[static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)])].node].push_back(
          i);
    sharding.kind = by_node.size() > 1 ? ShardingKind::Hybrid : ShardingKind::Full;
    if (sharding.hybrid()) {
      for (auto& [node, group] : by_node) {
        double sum = 0;
        for (int i : group) sum += shares[static_cast<std::size_t>(i)];
        if (!(sum > 0))
          throw ValidationError(
              plan_.scenario, "ranks[*].state_share",
              "0 over the ranks on node " + std::to_string(node),
              "a positive share for some rank of every node of a hybrid-sharded domain");
        for (int i : group) shares[static_cast<std::size_t>(i)] /= sum;
        sharding.groups.push_back(group);
      }
    }
  }
  return sharding;
}

// Domain (stage s, TP rank t)'s layout over its ranks `ranks` (topo_.domain(s, t)): each unit
// of the stage its TP slice t's parameters (rounded; a tied head on another stage than the
// embedding its own copy), 0 for the other stages' units; the ranks' shares and sharding as
// domain_sharding reads them. An FSDP plan's one domain: every unit whole, every rank in plan
// order, the plan's `sharding` (shard_layout_of below).
ShardLayout GraphBuilder::domain_layout(int s, int t, std::span<const int> ranks) const {
  const ModelSpec& model = scenario_.job.model;
  const bool head_copy = model.tied_embeddings && p_ > 1;
  const int T = topo_.tensor_parallel(s);
  std::vector<std::int64_t> numel(static_cast<std::size_t>(units_), 0);
  for (int u = 0; u < units_; ++u)
    if (g_.unit_stage_[static_cast<std::size_t>(u)] == s)
      numel[static_cast<std::size_t>(u)] =
          std::llround(costmodels::unit_parameters(model, u, T, t, head_copy && u == units_ - 1));
  std::vector<double> shares;
  shares.reserve(ranks.size());
  for (int r : ranks) shares.push_back(plan_.ranks[static_cast<std::size_t>(r)].state_share);
  const Sharding sharding = domain_sharding(ranks, shares);
  return ShardLayout(sharding, shares, numel);
}

ShardLayout GraphBuilder::domain_layout(int stage, int tp_rank) const {
  return domain_layout(stage, tp_rank, topo_.domain(stage, tp_rank));
}

// Per stage and TP rank t one data-parallel domain (the stage's replicas' t-th ranks): its
// layout of the stage's units (TP slice t) and every member's static bytes.
void GraphBuilder::setup_domains() {
  const Job& job = scenario_.job;
  const ShardingKind kind = split_.sharding;
  const int n = topo_.ranks();
  const double state = schedule::state_bytes_per_parameter(job.precision);
  const double compute_b = bytes_per_element(job.precision.compute);
  const double reduce_b = bytes_per_element(job.precision.reduce);
  const double params_b = bytes_per_element(job.precision.params);
  const bool cast = params_b != compute_b;
  g_.domain_of_.assign(static_cast<std::size_t>(n), -1);
  g_.domain_position_.assign(static_cast<std::size_t>(n), -1);
  g_.static_bytes_.assign(static_cast<std::size_t>(n), 0.0);
  for (int s = 0; s < p_; ++s) {
    const int T = topo_.tensor_parallel(s);
    for (int t = 0; t < T; ++t) {
      const int d = static_cast<int>(g_.domain_layouts_.size());
      std::vector<int> ranks = topo_.domain(s, t);
      const int size = static_cast<int>(ranks.size());
      if (phase_order_ && given_layout_) {
        g_.domain_layouts_.push_back(std::move(*given_layout_));
        given_layout_.reset();
      } else {
        g_.domain_layouts_.push_back(domain_layout(s, t, ranks));
      }
      const ShardLayout& layout = g_.domain_layouts_.back();
      std::int64_t held = 0;
      for (int u = 0; u < units_; ++u) held += layout.numel(u);
      for (int i = 0; i < size; ++i) {
        const int r = ranks[static_cast<std::size_t>(i)];
        g_.domain_of_[static_cast<std::size_t>(r)] = d;
        g_.domain_position_[static_cast<std::size_t>(r)] = i;
        const double owned = static_cast<double>(layout.owned_elements(i));
        double bytes = 0;
        switch (kind) {
          case ShardingKind::Full:
          case ShardingKind::Hybrid:
            // Master parameters, gradient shard and the two fp32 Adam moments of the owned
            // slices.
            bytes = owned * state;
            break;
          case ShardingKind::None:
            bytes = owned * state + (cast ? static_cast<double>(held) * compute_b : 0.0);
            break;
          case ShardingKind::Optimizer:
            // Master weights (when wider than the compute copy) and Adam's moments sharded;
            // the compute-dtype parameters and the gradient replicated.
            bytes = owned * (8.0 + (cast ? params_b : 0.0)) +
                    static_cast<double>(held) * (compute_b + reduce_b);
            break;
        }
        g_.static_bytes_[static_cast<std::size_t>(r)] = bytes;
      }
      g_.domain_ranks_.push_back(std::move(ranks));
    }
  }
}

// The phases every domain numbers alike, round-major: per round forward u (phase k·2U + u),
// then backward u (k·2U + 2U − 1 − u). The gradient buffer each backward phase accumulates into
// is its own, except under no_sync where every round's backward of a unit accumulates into the
// last round's (the only one that reduces, schedule::reduces_in_round).
void GraphBuilder::setup_phases() {
  if (phase_order_) {
    int most = 0;  // micro-batches of the rank with the most (ranks with samples)
    for (const auto& r : plan_.ranks) most = std::max(most, r.batch > 0 ? r.micro_batches : 0);
    rounds_ = schedule::rounds(plan_.accumulation, most);
  }
  const bool no_sync = plan_.accumulation == Accumulation::NoSync;
  const int per_round = 2 * units_;
  g_.gradient_phase_.assign(static_cast<std::size_t>(rounds_ * per_round), -1);
  for (int k = 0; k < rounds_; ++k)
    for (int u = 0; u < units_; ++u) {
      const int p = k * per_round + per_round - 1 - u;
      g_.gradient_phase_[static_cast<std::size_t>(p)] =
          no_sync ? (rounds_ - 1) * per_round + per_round - 1 - u : p;
    }
  if (phase_order_) setup_phase_gates();
}

// Every domain's collectives at once, in domain order (graph_ops.hpp's DomainCollectives): per
// phase its units' gathers (a unit's forward phase gathers it; in the phase order every phase
// gathers again, a pipeline order keeps it to its last backward) and, in a round that reduces,
// its backward's reductions (none: only across the replicas). A domain with no built rank has
// none, nor a sharding group with none (DomainCollectives).
void GraphBuilder::setup_domain_collectives() {
  const ShardingKind kind = split_.sharding;
  // Every sharding but none gathers: full and hybrid before a unit's forward, optimizer the
  // updated parameters after the step (the forward phase's gather, RankProgram::step_gathers).
  const bool gathers = kind != ShardingKind::None;
  const int per_round = 2 * units_;
  for (std::size_t d = 0; d < g_.domain_layouts_.size(); ++d) {
    const std::vector<int>& ranks = g_.domain_ranks_[d];
    if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return built(r); })) {
      domain_collectives_.emplace_back();
      continue;
    }
    const int stage = g_.places_[static_cast<std::size_t>(ranks.front())].stage;
    std::vector<DomainPhase> phases;
    phases.reserve(static_cast<std::size_t>(rounds_ * per_round));
    for (int k = 0; k < rounds_; ++k) {
      const bool reduces = schedule::reduces_in_round(plan_.accumulation, k, rounds_);
      for (int u = 0; u < units_; ++u) {
        const bool held = g_.unit_stage_[static_cast<std::size_t>(u)] == stage;
        phases.push_back(
            {phase_units(u), u, Pass::Forward, k * per_round + u, gathers && held, false});
      }
      for (int u = units_ - 1; u >= 0; --u) {
        const bool held = g_.unit_stage_[static_cast<std::size_t>(u)] == stage;
        const int p = k * per_round + per_round - 1 - u;
        if (held && reduces != (g_.gradient_phase_[static_cast<std::size_t>(p)] == p))
          throw std::logic_error("graph builder: a phase reduces a buffer it does not own");
        phases.push_back({phase_units(u), u, Pass::Backward, p, gathers && held && phase_order_,
                          held && reduces});
      }
    }
    domain_collectives_.emplace_back(g_, scenario_.job.precision, variants_,
                                     DomainRanks{g_.domain_layouts_[d], ranks}, built_, phases,
                                     kind != ShardingKind::None);
  }
}

// ---- the whole graph --------------------------------------------------------------------------

TrainingGraph GraphBuilder::build(std::span<const int> only) {
  const Job& job = scenario_.job;
  const int n = static_cast<int>(plan_.ranks.size());
  built_.assign(static_cast<std::size_t>(n), 0);
  for (int r : ranks_to_build(plan_, scenario_, only)) built_[static_cast<std::size_t>(r)] = 1;
  gpu_runtime_ = gpu_runtime_ranks(scenario_);

  g_.summary_ = plan_summary(plan_, scenario_, units_);
  GraphSummary& sum = g_.summary_;
  sum.split = !phase_order_;
  sum.pipeline_stages = p_;
  sum.virtual_stages = v_;
  sum.pipeline_micro_batches = phase_order_ ? 0 : m_;
  sum.sequence_parallel = split_.sequence_parallel;
  sum.stage_sharding = split_.sharding;

  g_.places_.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) g_.places_[static_cast<std::size_t>(r)] = topo_.place(r);
  g_.recomputes_ = recomputed_units(plan_, units_);
  if (!phase_order_) orders_ = pipeline::stage_orders(p_, m_, split_.schedule);
  setup_phases();
  setup_domains();
  setup_domain_collectives();
  setup_transfers();
  int groups = 0;
  for (int s = 0; s < p_; ++s) {
    tp_group_base_.push_back(groups);
    groups += topo_.replicas(s);
  }
  tp_ids_.assign(static_cast<std::size_t>(groups), {});
  tp_cursor_.assign(static_cast<std::size_t>(n), 0);

  // Every built rank's program in its stage's order, emitted by the one emitter.
  const ShardingKind kind = split_.sharding;
  const EmitContext context{job,
                            plan_.activation_checkpointing,
                            units_,
                            split_.sequence_parallel,
                            plan_.offload == Offload::Host,
                            plan_.prefetch ? 2 : 1,
                            casts_gather_send(job.precision),
                            kind == ShardingKind::Full || kind == ShardingKind::Hybrid,
                            gpu_runtime_,
                            this};
  RankEmitter emitter(context);
  RankProgram program;
  g_.rank_offsets_.push_back(0);
  for (int r = 0; r < n; ++r) {
    if (built(r)) {
      if (phase_order_)
        phase_program(r, program);
      else
        pipeline_program(r, program);
      const int d = g_.domain_of_[static_cast<std::size_t>(r)];
      emitter.emit(g_, domain_collectives_[static_cast<std::size_t>(d)],
                   g_.domain_layouts_[static_cast<std::size_t>(d)], program);
    }
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
  }
  for (const auto& m : g_.members_)
    if (m.op == kNoOp)
      throw std::logic_error("graph: a collective member without its op (rank " +
                             std::to_string(m.rank) + ")");
  g_.index_streams();
  return std::move(g_);
}

TrainingGraph build_training_graph(const Plan& plan, const Scenario& scenario,
                                   const costmodels::CommModel* comm) {
  return GraphBuilder(plan, scenario, comm).build();
}

ShardLayout shard_layout_of(const Plan& plan, const Scenario& scenario) {
  return GraphBuilder(plan, scenario).domain_layout(0, 0);
}

TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks,
                                            const costmodels::CommModel* comm) {
  if (ranks.empty()) throw std::logic_error("build_training_graph_of_ranks: no ranks");
  return GraphBuilder(plan, scenario, comm).build(ranks);
}

TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks, ShardLayout layout,
                                            const costmodels::CommModel* comm) {
  if (ranks.empty()) throw std::logic_error("build_training_graph_of_ranks: no ranks");
  if (plan.has_split())
    throw std::logic_error("build_training_graph_of_ranks: a split plan has a layout per domain");
  GraphBuilder builder(plan, scenario, comm);
  builder.use_layout(std::move(layout));
  return builder.build(ranks);
}

}  // namespace cephalo::traces

// SplitGraphBuilder::build: the plan-wide structure of a split (units per virtual stage, the
// data-parallel domains and their static bytes, the pipeline transfers), then every built
// rank's program (graph_split_rank.cpp); graph_split.hpp says what the parts are.
#include "graph_split.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/traces/summarize.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

SplitGraphBuilder::SplitGraphBuilder(const Plan& plan, const Scenario& scenario,
                                     const costmodels::CommModel* comm)
    : plan_(plan),
      scenario_(scenario),
      variants_(plan, scenario, comm),
      topo_(plan.model_split, static_cast<int>(plan.ranks.size())) {}

double SplitGraphBuilder::boundary_bytes(std::int64_t rows) const {
  const Job& job = scenario_.job;
  double b = static_cast<double>(rows) *
             costmodels::effective_sequence(job.model, job.sequence_length) * job.model.hidden *
             bytes_per_element(job.precision.compute);
  // Under sequence parallelism a stage boundary holds 1/T of the sequence per TP rank (the check
  // requires the same T on adjacent stages).
  if (plan_.model_split.sequence_parallel) b /= topo_.tensor_parallel(0);
  return b;
}

// ---- plan-wide structure --------------------------------------------------------------------

void SplitGraphBuilder::setup_units() {
  const int k_last = p_ * v_ - 1;
  vstage_units_.assign(static_cast<std::size_t>(p_ * v_), {});
  unit_vstage_.assign(static_cast<std::size_t>(units_), -1);
  for (int s = 0; s < p_; ++s)
    for (int c = 0; c < v_; ++c) {
      const int k = virtual_stage(s, c);
      const LayerRange r = stages_[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
      for (int l = r.begin; l < r.end; ++l) unit_vstage_[static_cast<std::size_t>(l + 1)] = k;
    }
  unit_vstage_.front() = 0;
  unit_vstage_.back() = k_last;
  for (int u = 0; u < units_; ++u)
    vstage_units_[static_cast<std::size_t>(unit_vstage_[static_cast<std::size_t>(u)])].push_back(u);
  g_.unit_stage_.resize(static_cast<std::size_t>(units_));
  for (int u = 0; u < units_; ++u)
    g_.unit_stage_[static_cast<std::size_t>(u)] = unit_vstage_[static_cast<std::size_t>(u)] % p_;
}

void SplitGraphBuilder::setup_domains() {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const ShardingKind kind = plan_.model_split.sharding;
  const int n = topo_.ranks();
  const bool head_copy = model.tied_embeddings && p_ > 1;
  const double state = schedule::state_bytes_per_parameter(job.precision);
  const double compute_b = bytes_per_element(job.precision.compute);
  const double reduce_b = bytes_per_element(job.precision.reduce);
  const double params_b = bytes_per_element(job.precision.params);
  const bool cast = params_b != compute_b;
  const auto& devices = scenario_.cluster.ranks();
  g_.domain_of_.assign(static_cast<std::size_t>(n), -1);
  g_.domain_position_.assign(static_cast<std::size_t>(n), -1);
  g_.static_bytes_.assign(static_cast<std::size_t>(n), 0.0);
  for (int s = 0; s < p_; ++s) {
    domain_base_.push_back(static_cast<int>(g_.domain_layouts_.size()));
    const int T = topo_.tensor_parallel(s);
    for (int t = 0; t < T; ++t) {
      const int d = static_cast<int>(g_.domain_layouts_.size());
      const std::vector<int> ranks = topo_.domain(s, t);
      const int size = static_cast<int>(ranks.size());
      std::vector<std::int64_t> numel(static_cast<std::size_t>(units_), 0);
      for (int u = 0; u < units_; ++u)
        if (g_.unit_stage_[static_cast<std::size_t>(u)] == s)
          numel[static_cast<std::size_t>(u)] = std::llround(
              costmodels::unit_parameters(model, u, T, t, head_copy && u == units_ - 1));
      std::vector<double> shares;
      for (int r : ranks) shares.push_back(plan_.ranks[static_cast<std::size_t>(r)].state_share);
      Sharding sharding;
      if (kind == ShardingKind::None) {
        // A full replica per rank: every rank its own group, owning all of every unit.
        sharding.kind = ShardingKind::Hybrid;
        for (int i = 0; i < size; ++i) sharding.groups.push_back({i});
        std::fill(shares.begin(), shares.end(), 1.0);
      } else if (kind == ShardingKind::Hybrid) {
        // The domain's ranks on one node shard among themselves; the plan's shares are read
        // relative to their node's.
        std::map<int, std::vector<int>> by_node;
        for (int i = 0; i < size; ++i)
          by_node[devices[static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)])].node]
              .push_back(i);
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
      g_.domain_layouts_.emplace_back(sharding, shares, numel);
      const ShardLayout& layout = g_.domain_layouts_.back();
      std::int64_t held = 0;
      for (auto x : numel) held += x;
      for (int i = 0; i < size; ++i) {
        const int r = ranks[static_cast<std::size_t>(i)];
        g_.domain_of_[static_cast<std::size_t>(r)] = d;
        g_.domain_position_[static_cast<std::size_t>(r)] = i;
        const double owned = static_cast<double>(layout.owned_elements(i));
        double bytes = 0;
        switch (kind) {
          case ShardingKind::Full:
          case ShardingKind::Hybrid:
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
      g_.domain_ranks_.push_back(ranks);
    }
  }
}

void SplitGraphBuilder::setup_transfers() {
  const int k_last = p_ * v_ - 1;
  forward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  backward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  // A micro-batch's samples laid out over a stage's replicas in order.
  auto offsets = [&](int s) {
    std::vector<std::int64_t> off{0};
    for (int j = 0; j < topo_.replicas(s); ++j)
      off.push_back(
          off.back() +
          plan_.ranks[static_cast<std::size_t>(topo_.rank_at(s, j, 0))].share_per_micro_batch(m_));
    return off;
  };
  for (int k = 0; k < k_last; ++k) {
    const int a = k % p_, b = (k + 1) % p_;
    const int ta = topo_.tensor_parallel(a), tb = topo_.tensor_parallel(b);
    const auto oa = offsets(a), ob = offsets(b);
    // The replicas of b whose samples overlap replica ja's, by a walk over both ascending
    // offset lists (every pair made 2,048 replicas a boundary 4 M steps).
    int lo = 0;
    const int rb = topo_.replicas(b);
    for (int ja = 0; ja < topo_.replicas(a); ++ja) {
      while (lo < rb && ob[static_cast<std::size_t>(lo) + 1] <= oa[static_cast<std::size_t>(ja)])
        ++lo;
      for (int jb = lo;
           jb < rb && ob[static_cast<std::size_t>(jb)] < oa[static_cast<std::size_t>(ja) + 1];
           ++jb) {
        const std::int64_t rows = std::min(oa[ja + 1], ob[jb + 1]) - std::max(oa[ja], ob[jb]);
        if (rows <= 0) continue;
        for (int t = 0; t < tb; ++t)
          forward_[static_cast<std::size_t>(k)].push_back(
              {topo_.rank_at(a, ja, t % ta), topo_.rank_at(b, jb, t), rows});
        for (int t = 0; t < ta; ++t)
          backward_[static_cast<std::size_t>(k)].push_back(
              {topo_.rank_at(b, jb, t % tb), topo_.rank_at(a, ja, t), rows});
      }
    }
  }
  auto index = [](const std::vector<Transfer>& list) {
    TransferIndex ix;
    for (std::uint32_t i = 0; i < list.size(); ++i) ix.by_from.push_back(i);
    ix.by_to = ix.by_from;
    std::stable_sort(ix.by_from.begin(), ix.by_from.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return list[x].from < list[y].from; });
    std::stable_sort(ix.by_to.begin(), ix.by_to.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return list[x].to < list[y].to; });
    return ix;
  };
  for (const auto& list : forward_) forward_index_.push_back(index(list));
  for (const auto& list : backward_) backward_index_.push_back(index(list));
}

std::vector<const SplitGraphBuilder::Transfer*> SplitGraphBuilder::transfers_of(int boundary,
                                                                                bool forward,
                                                                                int rank,
                                                                                bool sends) const {
  const auto& list = boundary_transfers(boundary, forward);
  const TransferIndex& ix =
      (forward ? forward_index_ : backward_index_)[static_cast<std::size_t>(boundary)];
  const auto& order = sends ? ix.by_from : ix.by_to;
  auto end_of = [&](std::uint32_t i) { return sends ? list[i].from : list[i].to; };
  auto it = std::lower_bound(order.begin(), order.end(), rank,
                             [&](std::uint32_t i, int r) { return end_of(i) < r; });
  std::vector<const Transfer*> out;
  for (; it != order.end() && end_of(*it) == rank; ++it) out.push_back(&list[*it]);
  return out;
}

// ---- the whole graph --------------------------------------------------------------------------

TrainingGraph SplitGraphBuilder::build(std::span<const int> only) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const ModelSplit& split = plan_.model_split;
  const int n = static_cast<int>(plan_.ranks.size());
  built_.assign(static_cast<std::size_t>(n), 0);
  for (int r : ranks_to_build(plan_, scenario_, only)) built_[static_cast<std::size_t>(r)] = 1;
  gpu_runtime_ = gpu_runtime_ranks(scenario_);
  units_ = costmodels::num_units(model);
  stages_ = resolved_stages(split, model.num_layers, n);
  p_ = static_cast<int>(stages_.size());
  v_ = topo_.virtual_stages();
  m_ = split.micro_batches;

  g_.summary_ = plan_summary(plan_, scenario_, units_);
  GraphSummary& sum = g_.summary_;
  sum.split = true;
  sum.pipeline_stages = p_;
  sum.virtual_stages = v_;
  sum.pipeline_micro_batches = m_;
  sum.sequence_parallel = split.sequence_parallel;
  sum.stage_sharding = split.sharding;

  g_.places_.resize(static_cast<std::size_t>(n));
  g_.all_ranks_.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    g_.places_[static_cast<std::size_t>(r)] = topo_.place(r);
    g_.all_ranks_[static_cast<std::size_t>(r)] = r;
  }
  g_.recomputes_ = recomputed_units(plan_, units_);
  setup_units();
  orders_ = pipeline::stage_orders(p_, m_, split.schedule);

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
    us.gathered_bytes = us.parameters * compute_bytes;
    us.gradient_bytes = us.parameters * reduce_bytes;
  }
  // Phases as one round of the FSDP graph numbers them: forward phase u, backward 2U − 1 − u.
  g_.gradient_phase_.assign(static_cast<std::size_t>(2 * units_), -1);
  for (int ph = units_; ph < 2 * units_; ++ph)
    g_.gradient_phase_[static_cast<std::size_t>(ph)] = ph;

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

  // Every built rank's program in its stage's pipeline order, emitted by the one emitter.
  const ShardingKind kind = split.sharding;
  const EmitContext context{job,
                            plan_.activation_checkpointing,
                            units_,
                            split.sequence_parallel,
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
      rank_program(r, program);
      const int d = g_.domain_of_[static_cast<std::size_t>(r)];
      emitter.emit(g_, domain_collectives_[static_cast<std::size_t>(d)],
                   g_.domain_layouts_[static_cast<std::size_t>(d)], program);
    }
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
  }
  for (const auto& m : g_.members_)
    if (m.op == kNoOp)
      throw std::logic_error("split graph: a collective member without its op (rank " +
                             std::to_string(m.rank) + ")");
  g_.index_streams();
  return std::move(g_);
}

}  // namespace cephalo::traces

// GraphBuilder::build: the plan-wide decisions (unit sizes, sharding, phases and their
// collectives), then every built rank's program (graph_rank_program.cpp), then the indexes the
// replay and the executor walk (collective members' ops, stream programs, successors).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/traces/summarize.hpp"
#include "graph_builder.hpp"
#include "graph_split.hpp"

#include "cephalo/core/schedule.hpp"

namespace cephalo::traces {

// Phases are common to all ranks, so collectives line up by construction.
void GraphBuilder::add_phases() {
  int most = 0;  // micro-batches of the rank with the most (ranks with samples)
  for (const auto& r : plan_.ranks) most = std::max(most, r.batch > 0 ? r.micro_batches : 0);
  rounds_ = schedule::rounds(plan_.accumulation, most);
  for (int k = 0; k < rounds_; ++k) {
    for (int u = 0; u < units_; ++u) phases_.push_back({u, Pass::Forward, k});
    for (int u = units_ - 1; u >= 0; --u) phases_.push_back({u, Pass::Backward, k});
  }
  // Under no_sync only the last round reduce-scatters (schedule::reduces_in_round); every
  // round's backward of a unit accumulates into that round's buffer (its phase index:
  // round-major, forward then backward).
  const bool no_sync = plan_.accumulation == Accumulation::NoSync;
  for (int p = 0; p < static_cast<int>(phases_.size()); ++p) {
    const Phase& ph = phases_[p];
    std::int32_t gp = -1;
    if (ph.pass == Pass::Backward)
      gp = no_sync ? (rounds_ - 1) * 2 * units_ + units_ + (units_ - 1 - ph.unit) : p;
    g_.gradient_phase_.push_back(gp);
    const bool reduces = ph.pass == Pass::Backward &&
                         schedule::reduces_in_round(plan_.accumulation, ph.round, rounds_);
    if (reduces != (gp == p))
      throw std::logic_error("graph builder: a phase reduces a buffer it does not own");
    for (int grp = 0; grp < groups_; ++grp) {
      ag_collective_.push_back(add_collective(p, true, grp));
      rs_collective_.push_back(reduces ? add_collective(p, false, grp) : -1);
    }
  }
  // Hybrid: each unit is reduced across groups once per step, after the last reduce-scatter
  // that touches its gradient (a tied embedding: the embedding's own phase, after the head's).
  finished_at_.assign(phases_.size(), {});
  if (g_.layout_.hybrid()) {
    std::vector<int> last(static_cast<std::size_t>(units_), -1);
    for (int p = 0; p < static_cast<int>(phases_.size()); ++p) {
      const std::int32_t rs = at(rs_collective_, p, 0);
      if (rs < 0) continue;
      for (const auto& seg : g_.segments(g_.collectives_[rs]))
        last[static_cast<std::size_t>(seg.unit)] = p;
    }
    cross_collective_.assign(static_cast<std::size_t>(units_), -1);
    for (int p = 0; p < static_cast<int>(phases_.size()); ++p)
      for (int u = 0; u < units_; ++u)
        if (last[static_cast<std::size_t>(u)] == p) {
          finished_at_[static_cast<std::size_t>(p)].push_back(u);
          cross_collective_[static_cast<std::size_t>(u)] = add_cross_reduction(p, u);
        }
  }
  // When each phase's gather is issued: the framework's prefetch rule over what each phase
  // gathers (a tied head brings the embedding).
  std::vector<schedule::GatherPhase> gathers;
  gathers.reserve(phases_.size());
  for (const Phase& ph : phases_)
    gathers.push_back(
        {costmodels::phase_parameters(scenario_.job.model, ph.unit), ph.pass == Pass::Backward});
  gather_gates_ = schedule::gather_gates(
      schedule::gather_rules(scenario_.job.implementation.framework, plan_.prefetch), gathers);
}

// The indexes over the finished op list: each collective member's op id (members in group
// order; the cross reduction's in rank order), the stream programs (counting sort by rank and
// stream; issue order is kept) and the reverse of waits_on.
void GraphBuilder::index_ops() {
  for (const Op& o : g_.ops_)
    if (o.collective >= 0) {
      const Collective& c = g_.collectives_[o.collective];
      const int slot = c.group < 0 ? member_index_[o.rank] : group_slot_[o.rank];
      g_.members_[c.members_begin + static_cast<std::uint32_t>(slot)].op = o.id;
    }

  g_.index_streams();
}

TrainingGraph GraphBuilder::build(std::span<const int> only) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int ranks = static_cast<int>(plan_.ranks.size());
  built_ = ranks_to_build(plan_, scenario_, only);
  units_ = costmodels::num_units(model);
  member_index_.assign(static_cast<std::size_t>(ranks), -1);
  for (std::size_t i = 0; i < built_.size(); ++i) member_index_[built_[i]] = static_cast<int>(i);
  gpu_runtime_ = gpu_runtime_ranks(scenario_);

  g_.summary_ = plan_summary(plan_, scenario_, units_);

  const double compute_bytes = bytes_per_element(job.precision.compute);
  const double reduce_bytes = bytes_per_element(job.precision.reduce);
  const double state_bytes = schedule::state_bytes_per_parameter(job.precision);
  g_.unit_sizes_.resize(units_);
  g_.recomputes_ = recomputed_units(plan_, units_);
  g_.layout_ = shard_layout_of(plan_, scenario_);
  for (int u = 0; u < units_; ++u) {
    UnitSizes& s = g_.unit_sizes_[u];
    s.parameters = costmodels::unit_parameters(model, u);
    s.numel = g_.layout_.numel(u);
  }
  groups_ = g_.layout_.num_groups();
  // A group collective's members are its group's built ranks, in group order.
  group_slot_.assign(static_cast<std::size_t>(ranks), -1);
  built_of_group_.assign(static_cast<std::size_t>(groups_), {});
  for (int grp = 0; grp < groups_; ++grp) {
    int slot = 0;
    for (int r : g_.layout_.group(grp))
      if (member_index_[r] >= 0) {
        group_slot_[r] = slot++;
        built_of_group_[static_cast<std::size_t>(grp)].push_back(r);
      }
  }
  for (int u = 0; u < units_; ++u) {
    UnitSizes& s = g_.unit_sizes_[u];
    // What a phase of the unit gathers and reduces: a tied head brings the embedding unit.
    const double phase = costmodels::phase_parameters(model, u);
    s.gathered_bytes = phase * compute_bytes;
    s.gradient_bytes = phase * reduce_bytes;
  }

  // The layout's position of a rank is the rank (the data-parallel collectives' domain).
  g_.all_ranks_.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) g_.all_ranks_[static_cast<std::size_t>(r)] = r;
  add_phases();

  g_.rank_offsets_.push_back(0);
  g_.static_bytes_.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    if (member_index_[r] >= 0) build_rank(r);
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
    // Master parameters, gradient shard and the two fp32 Adam moments of the owned slices.
    g_.static_bytes_[r] = static_cast<double>(owned_elements(r)) * state_bytes;
  }
  index_ops();
  return std::move(g_);
}

TrainingGraph build_training_graph(const Plan& plan, const Scenario& scenario,
                                   const costmodels::CommModel* comm) {
  if (plan.has_split()) return SplitGraphBuilder(plan, scenario, comm).build();
  return GraphBuilder(plan, scenario, comm).build();
}

TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks,
                                            const costmodels::CommModel* comm) {
  if (ranks.empty()) throw std::logic_error("build_training_graph_of_ranks: no ranks");
  if (plan.has_split()) return SplitGraphBuilder(plan, scenario, comm).build(ranks);
  return GraphBuilder(plan, scenario, comm).build(ranks);
}

}  // namespace cephalo::traces

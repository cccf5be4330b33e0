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

// The units phase `unit`'s collectives move, in buffer order: a head tied to the embedding
// brings the whole embedding unit first (costmodels::phase_parameters).
std::vector<int> GraphBuilder::phase_units(int unit) const {
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

// Phases are common to all ranks, so collectives line up by construction.
void GraphBuilder::add_phases() {
  int most = 0;  // micro-batches of the rank with the most (ranks with samples)
  for (const auto& r : plan_.ranks) most = std::max(most, r.batch > 0 ? r.micro_batches : 0);
  rounds_ = schedule::rounds(plan_.accumulation, most);
  std::vector<DomainPhase> domain;
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
    // Every phase gathers its units again (none is kept across phases).
    domain.push_back({phase_units(ph.unit), ph.unit, ph.pass, p, true, reduces});
  }
  // The one domain of every rank (its position the rank).
  dp_ = DomainCollectives(g_, scenario_.job.precision, variants_, {g_.layout_, g_.all_ranks_},
                          built_flags_, domain, {});
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

TrainingGraph GraphBuilder::build(std::span<const int> only) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int ranks = static_cast<int>(plan_.ranks.size());
  built_ = ranks_to_build(plan_, scenario_, only);
  units_ = costmodels::num_units(model);
  built_flags_.assign(static_cast<std::size_t>(ranks), 0);
  for (int r : built_) built_flags_[static_cast<std::size_t>(r)] = 1;
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

  // Every built rank's program in the phase order, emitted by the one emitter.
  const EmitContext context{job,
                            plan_.activation_checkpointing,
                            units_,
                            false,
                            plan_.offload == Offload::Host,
                            plan_.prefetch ? 2 : 1,
                            casts_gather_send(job.precision),
                            true,
                            gpu_runtime_,
                            nullptr};
  RankEmitter emitter(context);
  RankProgram program;
  g_.rank_offsets_.push_back(0);
  g_.static_bytes_.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    if (built_flags_[static_cast<std::size_t>(r)]) {
      rank_program(r, program);
      emitter.emit(g_, dp_, g_.layout_, program);
    }
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
    // Master parameters, gradient shard and the two fp32 Adam moments of the owned slices.
    g_.static_bytes_[r] = static_cast<double>(owned_elements(r)) * state_bytes;
  }
  g_.index_streams();
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

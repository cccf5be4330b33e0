// The phase order, an FSDP plan's one-stage order for one rank (GraphBuilder::phase_program).
// Phases of (unit, pass, round), common to all ranks; per phase the rank's micro-batches
// (layered: all, forward ascending, backward descending; standard / no_sync: the round's one, if
// the rank has it), the first waiting for the phase's gather, the last (or the gather itself
// when the rank computes nothing in the phase) releasing the gathered parameters and followed
// by the phase's reductions. The emitter (graph_emit.hpp) turns the items into ops.
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

// When each phase's gather is issued: the framework's prefetch rule over what each phase
// gathers (a tied head brings the embedding).
void GraphBuilder::setup_phase_gates() {
  const int per_round = 2 * units_;
  std::vector<schedule::GatherPhase> gathers;
  gathers.reserve(static_cast<std::size_t>(rounds_ * per_round));
  for (int p = 0; p < rounds_ * per_round; ++p) {
    const int at = p % per_round;
    const bool backward = at >= units_;
    const int unit = backward ? per_round - 1 - at : at;
    gathers.push_back({costmodels::phase_parameters(scenario_.job.model, unit), backward});
  }
  gather_gates_ = schedule::gather_gates(
      schedule::gather_rules(scenario_.job.implementation.framework, plan_.prefetch), gathers);
}

void GraphBuilder::phase_program(int r, RankProgram& prog) const {
  prog.clear();
  const PlanRank& pr = plan_.ranks[static_cast<std::size_t>(r)];
  const int d = g_.domain_of_[static_cast<std::size_t>(r)];
  const DomainCollectives& dp = domain_collectives_[static_cast<std::size_t>(d)];
  const int per_round = 2 * units_;
  const int num_phases = rounds_ * per_round;
  prog.rank = r;
  prog.position = g_.domain_position_[static_cast<std::size_t>(r)];
  prog.group = g_.domain_layouts_[static_cast<std::size_t>(d)].group_of(prog.position);
  std::vector<int> sizes;
  if (pr.batch > 0) sizes = pr.micro_batch_sizes();
  const int mbs = static_cast<int>(sizes.size());
  prog.micro_batches = mbs;
  prog.marks = num_phases;         // a phase's end gates the gathers after it
  prog.grad_buffers = num_phases;  // a backward phase's buffer (gradient_phase)
  // Every phase gathers its units again, once the compute of its gate phase is done
  // (schedule::gather_gates: the framework's prefetch).
  for (int p = 0; p < num_phases; ++p)
    prog.gathers.push_back({p, gather_gates_[static_cast<std::size_t>(p)]});

  for (int p = 0; p < num_phases; ++p) {
    const int round = p / per_round;
    const int at = p % per_round;
    const bool forward = at < units_;
    const int u = forward ? at : per_round - 1 - at;
    const std::size_t first = prog.items.size();
    auto item = [&] {
      ComputeItem it;
      it.unit = u;
      it.forward = forward;
      it.phase = p;
      return it;
    };
    auto run = [&](int m) {
      ComputeItem it = item();
      it.micro_batch = m;
      it.size = sizes[static_cast<std::size_t>(m)];
      it.waits_gather = prog.items.size() == first ? p : -1;
      if (!forward) {
        it.grad_buffer = g_.gradient_phase_[static_cast<std::size_t>(p)];
        it.grad_bytes = g_.unit_sizes_[static_cast<std::size_t>(u)].gradient_bytes;
      }
      prog.items.push_back(it);
    };
    if (plan_.accumulation == Accumulation::Layered) {
      for (int m = 0; m < mbs; ++m) run(forward ? m : mbs - 1 - m);
    } else if (round < mbs) {
      run(round);
    }
    if (prog.items.size() == first) {
      // No micro-batch here: the rank joins the phase's collectives with no compute.
      ComputeItem none = item();
      none.compute = false;
      none.waits_gather = p;
      prog.items.push_back(none);
    }
    ComputeItem& end = prog.items.back();
    end.frees_gathered = true;
    end.gathered_bytes = g_.unit_sizes_[static_cast<std::size_t>(u)].gathered_bytes;
    end.mark = p;
    // The phase's reduce-scatter (when it reduces: under no_sync only the last round) into the
    // buffer it owns, after the last backward into it (possibly an earlier round's); under
    // hybrid sharding the cross-group reductions of the units it finished, after it.
    if (forward || dp.reduce_scatter(p, prog.group) < 0) continue;
    end.reductions_begin = static_cast<std::uint32_t>(prog.reductions.size());
    prog.reductions.push_back({ReductionItem::Kind::ReduceScatter, p, u, p, p});
    for (int unit : dp.finished_at(p))
      prog.reductions.push_back({ReductionItem::Kind::CrossGroup, p, unit, -1, -1});
    end.reductions_count =
        static_cast<std::uint32_t>(prog.reductions.size()) - end.reductions_begin;
  }
}

}  // namespace cephalo::traces

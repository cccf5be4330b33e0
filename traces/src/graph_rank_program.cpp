// GraphBuilder::rank_program: the FSDP plan's order for one rank, its one-stage order. Phases of
// (unit, pass, round), common to all ranks; per phase the rank's micro-batches (layered: all,
// forward ascending, backward descending; standard / no_sync: the round's one, if the rank has
// it), the first waiting for the phase's gather, the last (or the gather itself when the rank
// computes nothing in the phase) releasing the gathered parameters and followed by the phase's
// reductions. The emitter (graph_emit.hpp) turns the items into ops.
#include "graph_builder.hpp"

namespace cephalo::traces {

void GraphBuilder::rank_program(int r, RankProgram& prog) const {
  prog.clear();
  const PlanRank& pr = plan_.ranks[static_cast<std::size_t>(r)];
  const int num_phases = static_cast<int>(phases_.size());
  prog.rank = r;
  prog.position = r;  // the one domain of every rank
  prog.group = g_.layout_.group_of(r);
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
    const Phase& ph = phases_[static_cast<std::size_t>(p)];
    const int u = ph.unit;
    const bool forward = ph.pass == Pass::Forward;
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
    } else if (ph.round < mbs) {
      run(ph.round);
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
    if (forward || dp_.reduce_scatter(p, prog.group) < 0) continue;
    end.reductions_begin = static_cast<std::uint32_t>(prog.reductions.size());
    prog.reductions.push_back({ReductionItem::Kind::ReduceScatter, p, u, p, p});
    for (int unit : dp_.finished_at(p))
      prog.reductions.push_back({ReductionItem::Kind::CrossGroup, p, unit, -1, -1});
    end.reductions_count =
        static_cast<std::uint32_t>(prog.reductions.size()) - end.reductions_begin;
  }
}

}  // namespace cephalo::traces

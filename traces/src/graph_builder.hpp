#pragma once
// The TrainingGraph builder of an FSDP plan, its phase order (private to traces/); what it
// makes as a split's builder does (ranks to build, summary, compute ops, the data-parallel
// domain's collectives and their variants, gather / reduce-scatter / optimizer memory) comes
// from graph_ops.hpp, and every rank's ops from the one emitter (graph_emit.hpp) that a split's
// pipeline order feeds too. Its jobs live in two files:
//  * graph_builder.cpp      — build(): sizes, sharding, phases (the units each moves) and the
//                             domain's collectives of every phase, then each rank's program
//                             emitted, then the stream programs once every rank's ops exist;
//  * graph_rank_program.cpp — one rank's program in the phase order (rank_program): its
//                             compute items, gathers and reductions.
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "graph_emit.hpp"
#include "graph_ops.hpp"

namespace cephalo::traces {

class GraphBuilder {
 public:
  // `comm` decides the variant of uneven collectives under `uneven_collective: auto`; null: the
  // scenario's own comm model, made when a collective first needs it.
  GraphBuilder(const Plan& plan, const Scenario& scenario,
               const costmodels::CommModel* comm = nullptr)
      : plan_(plan), scenario_(scenario), variants_(plan, scenario, comm) {}
  // Only the ranks in `only` (ascending) get ops and collective memberships; the sharding,
  // variants and static bytes are still those of the whole plan (sim/'s class replay).
  TrainingGraph build(std::span<const int> only = {});

 private:
  struct Phase {
    int unit;
    Pass pass;
    int round;  // standard accumulation: micro-batch round; layered: 0
  };

  // graph_builder.cpp
  void add_phases();
  std::vector<int> phase_units(int unit) const;

  // graph_rank_program.cpp: rank r's program in the phase order (the one-stage order), which
  // the emitter (graph_emit.hpp) turns into ops.
  void rank_program(int r, RankProgram& prog) const;

  // Elements rank r owns over all units (its sharded state).
  std::int64_t owned_elements(int r) const { return g_.layout_.owned_elements(r); }

  const Plan& plan_;
  const Scenario& scenario_;
  UnevenVariants variants_;
  TrainingGraph g_;
  std::vector<Phase> phases_;
  DomainCollectives dp_;           // the phases' gathers and reductions (graph_ops.hpp)
  std::vector<int> gather_gates_;  // per phase: schedule::gather_gates, the same on every rank
  int units_ = 0;
  int rounds_ = 1;
  std::vector<int> built_;         // ranks that get ops, ascending
  std::vector<char> built_flags_;  // per rank: whether it gets ops
  // Per rank: whether it runs on a GPU runtime (not a CPU device), read once from the cluster
  // (Cluster::ranks() lists every rank: per rank it would be quadratic).
  std::vector<char> gpu_runtime_;
};

}  // namespace cephalo::traces

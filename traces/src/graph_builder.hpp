#pragma once
// The TrainingGraph builder of an FSDP plan, its phase order (private to traces/); what it
// makes as a split's builder does (ranks to build, summary, data-parallel collectives and their
// variants, gather / reduce-scatter / optimizer memory) comes from graph_ops.hpp. Its jobs live
// in three files:
//  * graph_builder.cpp     — build(): sizes, sharding, phases, the collectives of every phase,
//                            then the indexes (collective members' ops, stream programs,
//                            successors) once every rank's ops exist;
//  * graph_collectives.cpp — which units and members a phase's collective moves (the collective
//                            itself: DataParallelCollectives, graph_ops.hpp);
//  * graph_rank_program.cpp — one rank's ops in issue order with their dependencies and the
//                            memory each allocates and frees (build_rank).
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
  struct RankState;  // graph_rank_program.cpp

  // graph_builder.cpp
  void add_phases();
  void index_ops();

  // graph_collectives.cpp
  std::int32_t add_collective(int phase, bool gather, int group);
  std::int32_t add_cross_reduction(int phase, int unit);

  // graph_rank_program.cpp
  OpId emit(Op op, std::initializer_list<OpId> deps);
  void build_rank(int r);
  void emit_gather(RankState& st, int p);
  void emit_forward(RankState& st, int p, int m);
  void emit_backward(RankState& st, int p, int m, bool recompute);
  void emit_reductions(RankState& st, int p);
  void emit_optimizer_step(RankState& st);

  // Units whose gradient phase p reduces for the last time in the step (hybrid: the units the
  // cross-group reduction after phase p's reduce-scatter covers).
  const std::vector<int>& units_finished_at(int phase) const {
    return finished_at_[static_cast<std::size_t>(phase)];
  }
  // Whether unit u's backward is preceded by a Recompute (schedule::recomputes).
  bool recomputes(int u) const;
  // Whether it reruns only its attention core (schedule::recomputes_attention_core).
  bool recomputes_attention_core(int u) const;
  // Compute op `kind` of phase p's unit for micro-batch m on the rank (graph_ops.hpp's
  // compute_op at one stage, T = 1).
  Op compute_op(const RankState& st, OpKind kind, int p, int m) const;
  // Elements rank r owns over all units (its sharded state).
  std::int64_t owned_elements(int r) const { return g_.layout_.owned_elements(r); }
  // Phase p's collective of `group` in a per phase × group table.
  std::int32_t at(const std::vector<std::int32_t>& per_phase, int p, int group) const {
    return per_phase[static_cast<std::size_t>(p) * static_cast<std::size_t>(groups_) +
                     static_cast<std::size_t>(group)];
  }

  const Plan& plan_;
  const Scenario& scenario_;
  UnevenVariants variants_;
  TrainingGraph g_;
  std::vector<Phase> phases_;
  std::vector<std::int32_t> ag_collective_, rs_collective_;  // per phase × group
  std::vector<std::int32_t> cross_collective_;               // per unit (-1: none)
  std::vector<std::vector<int>> finished_at_;                // per phase (hybrid only)
  std::vector<int> gather_gates_;  // per phase: schedule::gather_gates, the same on every rank
  int groups_ = 1;
  int units_ = 0;
  int rounds_ = 1;
  int current_rank_ = 0;
  std::vector<int> built_;         // ranks that get ops, ascending
  std::vector<int> member_index_;  // per rank: position among built_, -1 if not built
  std::vector<int> group_slot_;    // per rank: position among its group's built ranks
  // Per group: its built ranks in group order (a collective's members; walking the whole group
  // per collective made a one-rank graph of 100k ranks cost 30 M steps).
  std::vector<std::vector<int>> built_of_group_;
  // Per rank: whether it runs on a GPU runtime (not a CPU device), read once from the cluster
  // (Cluster::ranks() lists every rank: per rank it would be quadratic).
  std::vector<char> gpu_runtime_;
};

}  // namespace cephalo::traces

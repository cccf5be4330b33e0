#pragma once
// The TrainingGraph builder of every plan (private to traces/; DESIGN §4, "A split in the plan
// and the graph"). A plan is a model split: an FSDP plan is its one-stage, T = 1 case (every
// layer on every rank, in the plan's rank order, with its per-rank batches, micro-batch counts,
// shares, accumulation, offload and sharding groups), and goes through the same plan-wide
// setup as any split: units per virtual stage, unit sizes, the data-parallel domains (layouts,
// static bytes) and their collectives, the pipeline transfers. Each stage's ranks then run one
// *order* (the choice made once, `phase_order_`): the FSDP phase order for an FSDP plan, the
// stage's pipeline order otherwise; every rank's ops come from the one emitter (graph_emit.hpp)
// that both orders feed, and what any graph makes the same way from graph_ops.hpp. Its jobs
// live in four files:
//  * graph_builder.cpp          — build(): the plan-wide setup, then every built rank's program
//                                 emitted, then the indexes;
//  * graph_links.cpp            — the pipeline transfers, and the TP, transfer and tied
//                                 collectives the emitter asks for (StageLinks), each made by
//                                 its first built member;
//  * graph_rank_program.cpp     — one rank's program in the phase order (phase_program);
//  * graph_pipeline_program.cpp — one rank's program in its stage's pipeline order
//                                 (pipeline_program).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "graph_emit.hpp"
#include "graph_ops.hpp"

namespace cephalo::traces {

class GraphBuilder : private StageLinks {
 public:
  // `comm` decides the variant of uneven collectives under `uneven_collective: auto`; null: the
  // scenario's own comm model, made when a collective first needs it.
  GraphBuilder(const Plan& plan, const Scenario& scenario,
               const costmodels::CommModel* comm = nullptr);
  // Only the ranks in `only` (ascending) get ops and collective memberships; every domain's
  // sharding, the collectives' variants and sizes and the static bytes are still those of the
  // whole plan (sim/'s class replay).
  TrainingGraph build(std::span<const int> only = {});
  // An FSDP plan's one layout, built by the caller (shard_layout_of of the same plan and
  // scenario): build() takes it instead of cutting the state again.
  void use_layout(ShardLayout layout) { given_layout_ = std::move(layout); }
  // The layout build() gives data-parallel domain (stage, tp_rank): the one cut of a domain's
  // state (an FSDP plan's one domain is (0, 0): shard_layout_of).
  ShardLayout domain_layout(int stage, int tp_rank) const;

 private:
  // One pipeline transfer between two ranks for one micro-batch and boundary.
  struct Transfer {
    int from = 0;
    int to = 0;
    std::int64_t rows = 0;  // samples
  };

  // graph_builder.cpp: the plan-wide setup.
  void setup_units();
  void setup_phases();
  void setup_domains();
  void setup_domain_collectives();
  std::vector<int> phase_units(int unit) const;
  ShardLayout domain_layout(int stage, int tp_rank, std::span<const int> ranks) const;
  Sharding domain_sharding(std::span<const int> ranks, std::vector<double>& shares) const;

  // graph_rank_program.cpp: the phase order (an FSDP plan's one stage): when each phase's
  // gather is issued (the same on every rank), and rank r's program.
  void setup_phase_gates();
  void phase_program(int r, RankProgram& prog) const;
  // graph_pipeline_program.cpp: rank r's program in its stage's pipeline order.
  void pipeline_program(int r, RankProgram& prog) const;

  // graph_links.cpp: the pipeline transfers, and the StageLinks the emitter asks for, each
  // collective created by its first member and found by the others.
  void setup_transfers();
  std::vector<StageLinks::Transfer> transfers(int rank, int boundary, bool forward, int micro_batch,
                                              bool sends) override;
  double boundary_bytes(std::int64_t rows) const override;
  std::int32_t tensor_parallel(int rank, OpKind kind, OpKind issued_by, int unit, Pass pass,
                               int calls, double element_bytes, double elements) override;
  std::int32_t tied(int rank) override;
  std::int32_t transfer_collective(const Transfer& t, bool forward, int micro_batch, int boundary,
                                   double bytes);
  // Transfers into virtual stage k + 1 from k (forward) for one micro-batch: per rank, those a
  // built rank sends or receives (setup_transfers).
  const std::vector<Transfer>& boundary_transfers(int boundary, bool forward) const {
    return forward ? forward_[static_cast<std::size_t>(boundary)]
                   : backward_[static_cast<std::size_t>(boundary)];
  }
  // The transfers of `boundary` in direction `forward` that `rank` sends (or receives), in the
  // order of boundary_transfers() (an index: a scan of the boundary's list per rank and
  // micro-batch made a 16k-rank graph quadratic).
  std::vector<const Transfer*> transfers_of(int boundary, bool forward, int rank, bool sends) const;

  bool built(int rank) const { return built_[static_cast<std::size_t>(rank)] != 0; }
  int virtual_stage(int stage, int chunk) const { return chunk * p_ + stage; }

  const Plan& plan_;
  const Scenario& scenario_;
  // The split the builder reads: the plan's, or for an FSDP plan the default one stage (every
  // layer on every rank, in the plan's rank order).
  ModelSplit split_;
  // The one choice of order: an FSDP plan (its split the default one stage) runs the phase
  // order its accumulation, micro-batch counts and prefetch define; any other split each
  // stage's pipeline order (pipeline::stage_order). Everything the two orders need differently
  // in the setup (rounds, what a phase moves, whether a backward gathers again) follows from it.
  bool phase_order_ = true;
  UnevenVariants variants_;
  std::optional<ShardLayout> given_layout_;  // use_layout
  TrainingGraph g_;
  SplitTopology topo_;
  std::vector<PipelineStage> stages_;  // resolved, with the real layer ranges
  int p_ = 1, v_ = 1, m_ = 1, units_ = 0;
  // Rounds of phases (forward every unit, backward every unit): the phase order's accumulation
  // rounds (schedule::rounds); a pipeline order runs its micro-batches in one.
  int rounds_ = 1;
  std::vector<std::vector<int>> vstage_units_;       // per virtual stage: its units, ascending
  std::vector<std::vector<pipeline::Step>> orders_;  // per stage (pipeline order)
  std::vector<int> gather_gates_;  // phase order: per phase, schedule::gather_gates
  // Per domain its collectives (graph_ops.hpp), phases numbered round-major: forward u is
  // k·2U + u, backward u is k·2U + 2U − 1 − u.
  std::vector<DomainCollectives> domain_collectives_;
  // Per virtual-stage boundary k (k → k + 1): the forward and backward transfers.
  std::vector<std::vector<Transfer>> forward_, backward_;
  // Per boundary: indexes into its transfers sorted (stably) by sender and by receiver.
  struct TransferIndex {
    std::vector<std::uint32_t> by_from, by_to;
  };
  std::vector<TransferIndex> forward_index_, backward_index_;
  std::vector<char> built_;        // per rank: whether it gets ops and collective memberships
  std::vector<char> gpu_runtime_;  // per rank: gpu_runtime_ranks
  // Collective lookup: per TP group (stage, replica), its collectives in program order (every
  // member emits the same sequence); other collectives by key.
  std::vector<std::vector<std::int32_t>> tp_ids_;
  std::vector<int> tp_group_base_;      // per stage: index of its replica 0's TP group
  std::vector<std::size_t> tp_cursor_;  // per rank: its TP collectives emitted so far
  std::map<std::array<std::int64_t, 5>, std::int32_t> keyed_;
};

}  // namespace cephalo::traces

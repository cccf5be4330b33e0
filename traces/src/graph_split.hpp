#pragma once
// The TrainingGraph of a plan with a model split (private to traces/; DESIGN §4, "A split in the
// plan and the graph"): each rank walks its pipeline stage's order (core/pipeline_schedule.hpp)
// over the units of its chunks, with tensor-parallel collectives after its compute ops, pipeline
// transfers (Send / Recv) between virtual stages, and its data-parallel domain's collectives.
// A plan without a split never gets here (its one-stage split is the FSDP builder's plan,
// tests/sim/one_stage_split_test.cpp); what both builders make the same way comes from
// graph_ops.hpp, and every rank's ops from the one emitter (graph_emit.hpp), which this
// builder's pipeline order feeds. Its jobs live in three files:
//  * graph_split.cpp             — build(): units per virtual stage, the data-parallel domains
//                                  (layouts, static bytes), the pipeline transfers, then every
//                                  built rank's program emitted, and the indexes;
//  * graph_split_collectives.cpp — every domain's collectives at once (DomainCollectives);
//                                  the TP, transfer and tied ones (StageLinks), each made by
//                                  its first built member;
//  * graph_split_rank.cpp        — one rank's program in its stage's pipeline order (compute
//                                  items for the emitter).
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "graph_emit.hpp"
#include "graph_ops.hpp"

namespace cephalo::traces {

class SplitGraphBuilder : private StageLinks {
 public:
  SplitGraphBuilder(const Plan& plan, const Scenario& scenario,
                    const costmodels::CommModel* comm = nullptr);
  // Only the ranks in `only` (ascending) get ops and collective memberships; the domains'
  // sharding, the collectives' variants and sizes and the static bytes are still those of the
  // whole plan (sim/'s class replay of split plans, as GraphBuilder::build's `only`).
  TrainingGraph build(std::span<const int> only = {});

 private:
  // One pipeline transfer between two ranks for one micro-batch and boundary.
  struct Transfer {
    int from = 0;
    int to = 0;
    std::int64_t rows = 0;  // samples
  };

  void setup_units();
  void setup_domains();
  void setup_transfers();
  // graph_split_rank.cpp: rank r's program in its stage's pipeline order, which the emitter
  // (graph_emit.hpp) turns into ops.
  void rank_program(int r, RankProgram& prog) const;

  // StageLinks (graph_split_collectives.cpp): the collectives the emitter asks for, each
  // created by its first member and found by the others.
  std::vector<StageLinks::Transfer> transfers(int rank, int boundary, bool forward, int micro_batch,
                                              bool sends) override;
  double boundary_bytes(std::int64_t rows) const override;
  std::int32_t tensor_parallel(int rank, OpKind kind, OpKind issued_by, int unit, Pass pass,
                               int calls, double element_bytes, double elements) override;
  std::int32_t tied(int rank) override;
  std::int32_t transfer_collective(const Transfer& t, bool forward, int micro_batch, int boundary,
                                   double bytes);
  void setup_domain_collectives();

  // Transfers into virtual stage k + 1 from k (forward) for one micro-batch: per rank.
  const std::vector<Transfer>& boundary_transfers(int boundary, bool forward) const {
    return forward ? forward_[static_cast<std::size_t>(boundary)]
                   : backward_[static_cast<std::size_t>(boundary)];
  }
  // The transfers of `boundary` in direction `forward` that `rank` sends (or receives), in the
  // order of boundary_transfers() (an index: a scan of the boundary's list per rank and micro-batch
  // made a 16k-rank graph quadratic).
  std::vector<const Transfer*> transfers_of(int boundary, bool forward, int rank, bool sends) const;
  bool built(int rank) const { return built_[static_cast<std::size_t>(rank)] != 0; }
  int virtual_stage(int stage, int chunk) const { return chunk * p_ + stage; }

  const Plan& plan_;
  const Scenario& scenario_;
  UnevenVariants variants_;
  TrainingGraph g_;
  SplitTopology topo_;
  std::vector<PipelineStage> stages_;  // resolved, with the real layer ranges
  int p_ = 1, v_ = 1, m_ = 1, units_ = 0;
  std::vector<std::vector<int>> vstage_units_;       // per virtual stage: its units, ascending
  std::vector<int> unit_vstage_;                     // per unit
  std::vector<std::vector<pipeline::Step>> orders_;  // per stage
  // Data-parallel domains: per stage the first domain's index (domain = base + TP rank).
  std::vector<int> domain_base_;
  // Per domain its collectives (graph_ops.hpp), phases numbered as one FSDP round: forward u
  // gathers, backward 2U − 1 − u reduces.
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

#pragma once
// The TrainingGraph of a plan with a model split (private to traces/; DESIGN §4, "A split in the
// plan and the graph"): each rank walks its pipeline stage's order (core/pipeline_schedule.hpp)
// over the units of its chunks, with tensor-parallel collectives after its compute ops, pipeline
// transfers (Send / Recv) between virtual stages, and its data-parallel domain's collectives.
// The FSDP builder (graph_builder.hpp) is untouched by it: a plan without a split never gets
// here.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

class SplitGraphBuilder {
 public:
  SplitGraphBuilder(const Plan& plan, const Scenario& scenario,
                    const costmodels::CommModel* comm = nullptr);
  TrainingGraph build();

 private:
  struct RankState;  // one rank's program while it is emitted
  // One pipeline transfer between two ranks for one micro-batch and boundary.
  struct Transfer {
    int from = 0;
    int to = 0;
    std::int64_t rows = 0;  // samples
  };

  void setup_units();
  void setup_domains();
  void setup_transfers();
  void build_rank(int r);
  OpId emit(Op op, std::initializer_list<OpId> deps);
  OpId emit(Op op, std::span<const OpId> deps);

  // Collectives, created by their first member and found by the others.
  std::int32_t tp_collective(RankState& st, OpKind kind, int unit, Pass pass, int calls,
                             double element_bytes, double elements);
  std::int32_t transfer_collective(const Transfer& t, bool forward, int micro_batch, int boundary,
                                   double bytes);
  std::int32_t domain_collective(int domain, int group, int unit, OpKind kind);
  std::int32_t tied_collective(int position, int tp_rank);
  // An uneven gather's variant: the plan's, or under auto the comm model's cheaper.
  CollectiveVariant choose_uneven_variant(const std::vector<int>& ranks,
                                          const std::vector<double>& shard_bytes);
  void set_member_op(std::int32_t collective, int rank, OpId op);
  Op domain_op(const RankState& st, std::int32_t collective, Pass pass) const;

  void emit_gather(RankState& st, int unit);
  void emit_recvs(RankState& st, int boundary, bool forward, int unit, int micro_batch);
  void emit_sends(RankState& st, int boundary, bool forward, int unit, int micro_batch,
                  OpId producer);
  void emit_forward_step(RankState& st, int micro_batch, int chunk);
  void emit_backward_step(RankState& st, int micro_batch, int chunk);
  void emit_compute(RankState& st, OpKind kind, int unit, int micro_batch, Pass pass);
  void emit_tensor_parallel(RankState& st, OpKind kind, int unit, int micro_batch, Pass pass,
                            int phase);
  void emit_reductions(RankState& st, int unit);
  void emit_optimizer(RankState& st);

  // Transfers into virtual stage k + 1 from k (forward) for one micro-batch: per rank.
  const std::vector<Transfer>& transfers(int boundary, bool forward) const {
    return forward ? forward_[static_cast<std::size_t>(boundary)]
                   : backward_[static_cast<std::size_t>(boundary)];
  }
  double boundary_bytes(std::int64_t rows) const;
  int virtual_stage(int stage, int chunk) const { return chunk * p_ + stage; }

  const Plan& plan_;
  const Scenario& scenario_;
  const costmodels::CommModel* comm_ = nullptr;
  std::shared_ptr<const costmodels::CommModel> owned_comm_;
  TrainingGraph g_;
  SplitTopology topo_;
  std::vector<PipelineStage> stages_;  // resolved, with the real layer ranges
  int p_ = 1, v_ = 1, m_ = 1, units_ = 0;
  int current_rank_ = 0;
  std::vector<std::vector<int>> vstage_units_;       // per virtual stage: its units, ascending
  std::vector<int> unit_vstage_;                     // per unit
  std::vector<std::vector<pipeline::Step>> orders_;  // per stage
  // Data-parallel domains: per stage the first domain's index (domain = base + TP rank).
  std::vector<int> domain_base_;
  // Per virtual-stage boundary k (k → k + 1): the forward and backward transfers.
  std::vector<std::vector<Transfer>> forward_, backward_;
  // Collective lookup: per TP group (stage, replica), its collectives in program order (every
  // member emits the same sequence); other collectives by key.
  std::vector<std::vector<std::int32_t>> tp_ids_;
  std::vector<int> tp_group_base_;      // per stage: index of its replica 0's TP group
  std::vector<std::size_t> tp_cursor_;  // per rank: its TP collectives emitted so far
  std::map<std::array<std::int64_t, 5>, std::int32_t> keyed_;
};

}  // namespace cephalo::traces

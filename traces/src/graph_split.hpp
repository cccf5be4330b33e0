#pragma once
// The TrainingGraph of a plan with a model split (private to traces/; DESIGN §4, "A split in the
// plan and the graph"): each rank walks its pipeline stage's order (core/pipeline_schedule.hpp)
// over the units of its chunks, with tensor-parallel collectives after its compute ops, pipeline
// transfers (Send / Recv) between virtual stages, and its data-parallel domain's collectives.
// A plan without a split never gets here (its one-stage split is the FSDP builder's plan,
// tests/sim/one_stage_split_test.cpp); what both builders make the same way comes from
// graph_ops.hpp. Its jobs live in three files:
//  * graph_split.cpp             — build(): units per virtual stage, the data-parallel domains
//                                  (layouts, static bytes), the pipeline transfers, then every
//                                  built rank's program and the indexes;
//  * graph_split_collectives.cpp — every domain's collectives at once (DomainCollectives);
//                                  the TP, transfer and tied ones, each made by its first
//                                  built member;
//  * graph_split_rank.cpp        — one rank's program in its stage's pipeline order.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "graph_ops.hpp"

namespace cephalo::traces {

class SplitGraphBuilder {
 public:
  SplitGraphBuilder(const Plan& plan, const Scenario& scenario,
                    const costmodels::CommModel* comm = nullptr);
  // Only the ranks in `only` (ascending) get ops and collective memberships; the domains'
  // sharding, the collectives' variants and sizes and the static bytes are still those of the
  // whole plan (sim/'s class replay of split plans, as GraphBuilder::build's `only`).
  TrainingGraph build(std::span<const int> only = {});

 private:
  // What one rank's program needs while it is emitted.
  struct RankState {
    int rank = 0;
    RankPlace place;
    int stage = 0;
    int domain = 0;
    int position = 0;        // in the domain's layout
    int size = 0;            // samples of every micro-batch this rank runs
    bool gathers = false;    // full / hybrid: each unit gathered once, kept to its last backward
    bool cast_send = false;  // the gather sends a cast copy of the shard
    // Per unit: its gather, whether its first forward has run, its backwards still to come, and
    // whether its unsharded gradient is allocated.
    std::vector<OpId> gather;
    std::vector<int> backwards_left;
    std::vector<bool> grad_held;
    std::vector<int> first_use;        // units in the order of their first forward
    std::vector<int> first_use_index;  // per unit: its index in first_use (-1: not used)
    std::vector<int> gather_gates;     // per first_use index: schedule::gather_gates
    int next_gather = 0;               // index into first_use of the next gather to issue
    std::vector<char> used;            // per unit: first forward emitted
    std::vector<OpId> first_forward;   // per unit: its first forward op (a later gather's gate)
    std::vector<OpId> last_backward;   // per unit: its latest backward op
    std::vector<int> backwards_left_in_chunk;  // per chunk: backward steps still to come
    std::vector<OpId> pending;                 // receives the next compute op waits on
    OpId last_compute = kNoOp;      // the last op on the compute stream (a TP op after its compute)
    OpId last_forward = kNoOp;      // the last Forward op
    OpId last_backward_op = kNoOp;  // the last Backward op
    OpId last_reduction = kNoOp;
  };
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
  std::int32_t tp_collective(RankState& st, OpKind kind, OpKind issued_by, int unit, Pass pass,
                             int calls, double element_bytes, double elements);
  std::int32_t transfer_collective(const Transfer& t, bool forward, int micro_batch, int boundary,
                                   double bytes);
  std::int32_t tied_collective(int position, int tp_rank);
  void set_member_op(std::int32_t collective, int rank, OpId op);
  void setup_domain_collectives();
  // A data-parallel op of the rank's domain: emitted, and recorded as its member op.
  OpId emit_domain(const RankState& st, Op op, std::initializer_list<OpId> deps);
  const DomainCollectives& domains(const RankState& st) const {
    return domain_collectives_[static_cast<std::size_t>(st.domain)];
  }

  void emit_next_gather(RankState& st);
  void emit_gathers_after(RankState& st, int done);
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
  // The transfers of `boundary` in direction `forward` that `rank` sends (or receives), in the
  // order of transfers() (an index: a scan of the boundary's list per rank and micro-batch
  // made a 16k-rank graph quadratic).
  std::vector<const Transfer*> transfers_of(int boundary, bool forward, int rank, bool sends) const;
  bool built(int rank) const { return built_[static_cast<std::size_t>(rank)] != 0; }
  double boundary_bytes(std::int64_t rows) const;
  int virtual_stage(int stage, int chunk) const { return chunk * p_ + stage; }

  const Plan& plan_;
  const Scenario& scenario_;
  UnevenVariants variants_;
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

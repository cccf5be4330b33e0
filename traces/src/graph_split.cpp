// SplitGraphBuilder: the training graph of a plan with a model split, as DESIGN §4 ("A split in
// the plan and the graph") states it; graph_split.hpp says what the parts are.
#include "graph_split.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/traces/summarize.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

// What one rank's program needs while it is emitted.
struct SplitGraphBuilder::RankState {
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
  std::vector<int> first_use;       // units in the order of their first forward
  int next_gather = 0;              // index into first_use of the next gather to issue
  std::vector<char> used;           // per unit: first forward emitted
  std::vector<OpId> first_forward;  // per unit: its first forward op (a later gather's gate)
  std::vector<OpId> last_backward;  // per unit: its latest backward op
  std::vector<int> backwards_left_in_chunk;  // per chunk: backward steps still to come
  std::vector<OpId> pending;                 // receives the next compute op waits on
  OpId last_compute = kNoOp;      // the last op on the compute stream (a TP op after its compute)
  OpId last_forward = kNoOp;      // the last Forward op
  OpId last_backward_op = kNoOp;  // the last Backward op
  OpId last_reduction = kNoOp;
};

SplitGraphBuilder::SplitGraphBuilder(const Plan& plan, const Scenario& scenario,
                                     const costmodels::CommModel* comm)
    : plan_(plan),
      scenario_(scenario),
      comm_(comm),
      topo_(plan.model_split, static_cast<int>(plan.ranks.size())) {}

double SplitGraphBuilder::boundary_bytes(std::int64_t rows) const {
  const Job& job = scenario_.job;
  double b = static_cast<double>(rows) *
             costmodels::effective_sequence(job.model, job.sequence_length) * job.model.hidden *
             bytes_per_element(job.precision.compute);
  // Under sequence parallelism a stage boundary holds 1/T of the sequence per TP rank (the check
  // requires the same T on adjacent stages).
  if (plan_.model_split.sequence_parallel) b /= topo_.tensor_parallel(0);
  return b;
}

OpId SplitGraphBuilder::emit(Op op, std::span<const OpId> deps) {
  const OpId id = g_.append_op(op, current_rank_, deps);
  if (op.collective >= 0) set_member_op(op.collective, current_rank_, id);
  return id;
}

OpId SplitGraphBuilder::emit(Op op, std::initializer_list<OpId> deps) {
  return emit(op, std::span<const OpId>(deps.begin(), deps.size()));
}

void SplitGraphBuilder::set_member_op(std::int32_t c, int rank, OpId op) {
  const Collective& col = g_.collectives_[static_cast<std::size_t>(c)];
  for (std::uint32_t i = 0; i < col.members_count; ++i) {
    CollectiveMember& m = g_.members_[col.members_begin + i];
    if (m.rank == rank && m.op == kNoOp) {
      m.op = op;
      return;
    }
  }
  throw std::logic_error("split graph: rank " + std::to_string(rank) + " is not a member of " +
                         to_string(col.kind) + " collective " + std::to_string(c));
}

// ---- plan-wide structure --------------------------------------------------------------------

void SplitGraphBuilder::setup_units() {
  const int k_last = p_ * v_ - 1;
  vstage_units_.assign(static_cast<std::size_t>(p_ * v_), {});
  unit_vstage_.assign(static_cast<std::size_t>(units_), -1);
  for (int s = 0; s < p_; ++s)
    for (int c = 0; c < v_; ++c) {
      const int k = virtual_stage(s, c);
      const LayerRange r = stages_[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
      for (int l = r.begin; l < r.end; ++l) unit_vstage_[static_cast<std::size_t>(l + 1)] = k;
    }
  unit_vstage_.front() = 0;
  unit_vstage_.back() = k_last;
  for (int u = 0; u < units_; ++u)
    vstage_units_[static_cast<std::size_t>(unit_vstage_[static_cast<std::size_t>(u)])].push_back(u);
  g_.unit_stage_.resize(static_cast<std::size_t>(units_));
  for (int u = 0; u < units_; ++u)
    g_.unit_stage_[static_cast<std::size_t>(u)] = unit_vstage_[static_cast<std::size_t>(u)] % p_;
}

void SplitGraphBuilder::setup_domains() {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const StageSharding kind = plan_.model_split.sharding;
  const int n = topo_.ranks();
  const bool head_copy = model.tied_embeddings && p_ > 1;
  const double state = schedule::state_bytes_per_parameter(job.precision);
  const double compute_b = bytes_per_element(job.precision.compute);
  const double reduce_b = bytes_per_element(job.precision.reduce);
  const double params_b = bytes_per_element(job.precision.params);
  const bool cast = params_b != compute_b;
  const auto& devices = scenario_.cluster.ranks();
  g_.domain_of_.assign(static_cast<std::size_t>(n), -1);
  g_.domain_position_.assign(static_cast<std::size_t>(n), -1);
  g_.static_bytes_.assign(static_cast<std::size_t>(n), 0.0);
  for (int s = 0; s < p_; ++s) {
    domain_base_.push_back(static_cast<int>(g_.domain_layouts_.size()));
    const int T = topo_.tensor_parallel(s);
    for (int t = 0; t < T; ++t) {
      const int d = static_cast<int>(g_.domain_layouts_.size());
      const std::vector<int> ranks = topo_.domain(s, t);
      const int size = static_cast<int>(ranks.size());
      std::vector<std::int64_t> numel(static_cast<std::size_t>(units_), 0);
      for (int u = 0; u < units_; ++u)
        if (g_.unit_stage_[static_cast<std::size_t>(u)] == s)
          numel[static_cast<std::size_t>(u)] = std::llround(
              costmodels::unit_parameters(model, u, T, t, head_copy && u == units_ - 1));
      std::vector<double> shares;
      for (int r : ranks) shares.push_back(plan_.ranks[static_cast<std::size_t>(r)].state_share);
      Sharding sharding;
      if (kind == StageSharding::None) {
        // A full replica per rank: every rank its own group, owning all of every unit.
        sharding.kind = Sharding::Kind::Hybrid;
        for (int i = 0; i < size; ++i) sharding.groups.push_back({i});
        std::fill(shares.begin(), shares.end(), 1.0);
      } else if (kind == StageSharding::Hybrid) {
        // The domain's ranks on one node shard among themselves; the plan's shares are read
        // relative to their node's.
        std::map<int, std::vector<int>> by_node;
        for (int i = 0; i < size; ++i)
          by_node[devices[static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)])].node]
              .push_back(i);
        sharding.kind = by_node.size() > 1 ? Sharding::Kind::Hybrid : Sharding::Kind::Full;
        if (sharding.hybrid()) {
          for (auto& [node, group] : by_node) {
            double sum = 0;
            for (int i : group) sum += shares[static_cast<std::size_t>(i)];
            if (!(sum > 0))
              throw ValidationError(
                  plan_.scenario, "ranks[*].state_share",
                  "0 over the ranks on node " + std::to_string(node),
                  "a positive share for some rank of every node of a hybrid-sharded domain");
            for (int i : group) shares[static_cast<std::size_t>(i)] /= sum;
            sharding.groups.push_back(group);
          }
        }
      }
      g_.domain_layouts_.emplace_back(sharding, shares, numel);
      const ShardLayout& layout = g_.domain_layouts_.back();
      std::int64_t held = 0;
      for (auto x : numel) held += x;
      for (int i = 0; i < size; ++i) {
        const int r = ranks[static_cast<std::size_t>(i)];
        g_.domain_of_[static_cast<std::size_t>(r)] = d;
        g_.domain_position_[static_cast<std::size_t>(r)] = i;
        const double owned = static_cast<double>(layout.owned_elements(i));
        double bytes = 0;
        switch (kind) {
          case StageSharding::Full:
          case StageSharding::Hybrid:
            bytes = owned * state;
            break;
          case StageSharding::None:
            bytes = owned * state + (cast ? static_cast<double>(held) * compute_b : 0.0);
            break;
          case StageSharding::Optimizer:
            // Master weights (when wider than the compute copy) and Adam's moments sharded;
            // the compute-dtype parameters and the gradient replicated.
            bytes = owned * (8.0 + (cast ? params_b : 0.0)) +
                    static_cast<double>(held) * (compute_b + reduce_b);
            break;
        }
        g_.static_bytes_[static_cast<std::size_t>(r)] = bytes;
      }
      g_.domain_ranks_.push_back(ranks);
    }
  }
}

void SplitGraphBuilder::setup_transfers() {
  const int k_last = p_ * v_ - 1;
  forward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  backward_.assign(static_cast<std::size_t>(std::max(k_last, 0)), {});
  // A micro-batch's samples laid out over a stage's replicas in order.
  auto offsets = [&](int s) {
    std::vector<std::int64_t> off{0};
    for (int j = 0; j < topo_.replicas(s); ++j)
      off.push_back(off.back() +
                    plan_.ranks[static_cast<std::size_t>(topo_.rank_at(s, j, 0))].micro_batch);
    return off;
  };
  for (int k = 0; k < k_last; ++k) {
    const int a = k % p_, b = (k + 1) % p_;
    const int ta = topo_.tensor_parallel(a), tb = topo_.tensor_parallel(b);
    const auto oa = offsets(a), ob = offsets(b);
    for (int ja = 0; ja < topo_.replicas(a); ++ja)
      for (int jb = 0; jb < topo_.replicas(b); ++jb) {
        const std::int64_t rows = std::min(oa[ja + 1], ob[jb + 1]) - std::max(oa[ja], ob[jb]);
        if (rows <= 0) continue;
        for (int t = 0; t < tb; ++t)
          forward_[static_cast<std::size_t>(k)].push_back(
              {topo_.rank_at(a, ja, t % ta), topo_.rank_at(b, jb, t), rows});
        for (int t = 0; t < ta; ++t)
          backward_[static_cast<std::size_t>(k)].push_back(
              {topo_.rank_at(b, jb, t % tb), topo_.rank_at(a, ja, t), rows});
      }
  }
}

// ---- collectives ----------------------------------------------------------------------------

std::int32_t SplitGraphBuilder::tp_collective(RankState& st, OpKind kind, int unit, Pass pass,
                                              int calls, double element_bytes, double elements) {
  const int group = tp_group_base_[static_cast<std::size_t>(st.stage)] + st.place.replica;
  auto& ids = tp_ids_[static_cast<std::size_t>(group)];
  // Every member emits its group's TP collectives in the same order: the n-th of one member is
  // the n-th of every other, made by whichever member comes first.
  auto& cursor = tp_cursor_[static_cast<std::size_t>(st.rank)];
  if (cursor < ids.size()) return ids[cursor++];
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = kind;
  c.group = -1;
  c.unit = unit;
  c.pass = pass;
  c.phase = -1;
  c.element_bytes = element_bytes;
  c.total_bytes = elements * element_bytes;
  c.calls = calls;
  c.phase = pass == Pass::Forward ? unit : 2 * units_ - 1 - unit;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const auto members = topo_.tp_group(st.stage, st.place.replica);
  for (int r : members) {
    CollectiveMember m;
    m.rank = r;
    m.elements = std::llround(elements);
    m.shard_bytes = c.total_bytes / static_cast<double>(members.size());
    g_.members_.push_back(m);
  }
  c.members_count = static_cast<std::uint32_t>(members.size());
  g_.collectives_.push_back(c);
  ids.push_back(c.id);
  ++cursor;
  return c.id;
}

std::int32_t SplitGraphBuilder::transfer_collective(const Transfer& t, bool forward,
                                                    int micro_batch, int boundary, double bytes) {
  const std::array<std::int64_t, 5> key{
      1, forward ? 1 : 0, boundary, static_cast<std::int64_t>(micro_batch) << 32 | t.from, t.to};
  if (auto it = keyed_.find(key); it != keyed_.end()) return it->second;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::Send;
  c.group = -1;
  c.pass = forward ? Pass::Forward : Pass::Backward;
  c.element_bytes = bytes_per_element(scenario_.job.precision.compute);
  c.total_bytes = bytes;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const std::int64_t elements = std::llround(bytes / c.element_bytes);
  g_.members_.push_back({t.from, kNoOp, elements, bytes});  // the sender
  g_.members_.push_back({t.to, kNoOp, elements, 0.0});      // the receiver
  c.members_count = 2;
  g_.collectives_.push_back(c);
  keyed_.emplace(key, c.id);
  return c.id;
}

std::int32_t SplitGraphBuilder::domain_collective(int domain, int group, int unit, OpKind kind) {
  const std::array<std::int64_t, 5> key{2, domain, group, unit, static_cast<std::int64_t>(kind)};
  if (auto it = keyed_.find(key); it != keyed_.end()) return it->second;
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(domain)];
  const auto& ranks = g_.domain_ranks_[static_cast<std::size_t>(domain)];
  const Precision& prec = scenario_.job.precision;
  const bool gather = kind == OpKind::AllGather;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.group = group;
  c.unit = unit;
  c.pass = gather ? Pass::Forward : Pass::Backward;
  c.phase = gather ? unit : 2 * units_ - 1 - unit;
  c.element_bytes = bytes_per_element(gather ? prec.compute : prec.reduce);
  const std::int64_t numel = layout.numel(unit);
  c.total_bytes = static_cast<double>(numel) * c.element_bytes;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  if (kind == OpKind::AllReduce) {
    // The cross-group reduction: every rank of the domain, its pieces (collective_request).
    c.kind = OpKind::AllReduce;
    c.group = -1;
    c.variant = CollectiveVariant::Even;
    for (int i = 0; i < layout.num_ranks(); ++i) {
      const std::int64_t e = layout.slice(unit, i).count;
      g_.members_.push_back(
          {ranks[static_cast<std::size_t>(i)], kNoOp, e, static_cast<double>(e) * c.element_bytes});
    }
    c.members_count = static_cast<std::uint32_t>(layout.num_ranks());
  } else {
    const auto members = layout.group(group);
    const auto counts = layout.group_counts(unit, group);
    const bool even = std::all_of(counts.begin(), counts.end(),
                                  [&](std::int64_t x) { return x == counts.front(); });
    c.variant = CollectiveVariant::Even;
    if (!even) {
      std::vector<int> global;
      std::vector<double> shard_bytes;
      for (std::size_t i = 0; i < members.size(); ++i) {
        global.push_back(ranks[static_cast<std::size_t>(members[i])]);
        shard_bytes.push_back(static_cast<double>(counts[i]) * bytes_per_element(prec.compute));
      }
      c.variant = choose_uneven_variant(global, shard_bytes);
    }
    c.kind = gather
                 ? (c.variant == CollectiveVariant::Even ? OpKind::AllGather : OpKind::AllGatherV)
                 : (c.variant == CollectiveVariant::Even ? OpKind::ReduceScatter
                                                         : OpKind::ReduceScatterV);
    for (std::size_t i = 0; i < members.size(); ++i)
      g_.members_.push_back({ranks[static_cast<std::size_t>(members[i])], kNoOp, counts[i],
                             static_cast<double>(counts[i]) * c.element_bytes});
    c.members_count = static_cast<std::uint32_t>(members.size());
  }
  c.segments_begin = static_cast<std::uint32_t>(g_.segments_.size());
  g_.segments_.push_back({unit, numel, c.variant});
  c.segments_count = 1;
  g_.collectives_.push_back(c);
  keyed_.emplace(key, c.id);
  return c.id;
}

CollectiveVariant SplitGraphBuilder::choose_uneven_variant(const std::vector<int>& ranks,
                                                           const std::vector<double>& shard_bytes) {
  const UnevenCollective chosen = plan_.uneven_collective;
  if (chosen != UnevenCollective::Auto)
    return chosen == UnevenCollective::Padded ? CollectiveVariant::Padded
                                              : CollectiveVariant::Grouped;
  if (!comm_) {
    owned_comm_ = costmodels::make_comm_model(scenario_);
    comm_ = owned_comm_.get();
  }
  costmodels::CollectiveRequest req;
  req.kind = costmodels::CollectiveKind::AllGather;
  req.ranks = ranks;
  req.shard_bytes = shard_bytes;
  return costmodels::uneven_variant(*comm_, scenario_.cluster, std::move(req)) ==
                 UnevenCollective::Padded
             ? CollectiveVariant::Padded
             : CollectiveVariant::Grouped;
}

std::int32_t SplitGraphBuilder::tied_collective(int position, int tp_rank) {
  const std::array<std::int64_t, 5> key{3, position, tp_rank, 0, 0};
  if (auto it = keyed_.find(key); it != keyed_.end()) return it->second;
  const ModelSpec& model = scenario_.job.model;
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::TiedAllReduce;
  c.group = -1;
  c.unit = 0;
  c.pass = Pass::Backward;
  c.element_bytes = bytes_per_element(scenario_.job.precision.reduce);
  const int T = topo_.tensor_parallel(0);
  const std::int64_t e = costmodels::vocab_rows(model.vocab_size, T, tp_rank).size() *
                         static_cast<std::int64_t>(model.hidden);
  c.total_bytes = static_cast<double>(e) * c.element_bytes;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  const int first = topo_.stage_ranks(0)[static_cast<std::size_t>(position)];
  const int last = topo_.stage_ranks(p_ - 1)[static_cast<std::size_t>(position)];
  g_.members_.push_back({first, kNoOp, e, c.total_bytes / 2});
  g_.members_.push_back({last, kNoOp, e, c.total_bytes / 2});
  c.members_count = 2;
  g_.collectives_.push_back(c);
  keyed_.emplace(key, c.id);
  return c.id;
}

// ---- one rank's program -----------------------------------------------------------------------

// This rank's op of domain collective `cid`: the collective's kind, unit, phase and bytes, and
// the rank's own slice of them.
Op SplitGraphBuilder::domain_op(const RankState& st, std::int32_t cid, Pass pass) const {
  const Collective& c = g_.collectives_[static_cast<std::size_t>(cid)];
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  Op o;
  o.kind = c.kind;
  o.pass = pass;
  o.unit = c.unit;
  o.phase = c.phase;
  o.collective = cid;
  o.bytes = c.total_bytes;
  o.shard_bytes = static_cast<double>(layout.slice(c.unit, st.position).count) * c.element_bytes;
  return o;
}

void SplitGraphBuilder::emit_gather(RankState& st, int unit) {
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  Op o = domain_op(
      st, domain_collective(st.domain, layout.group_of(st.position), unit, OpKind::AllGather),
      Pass::Forward);
  o.mem_alloc = o.bytes + (st.cast_send ? o.shard_bytes : 0.0);
  o.mem_free = st.cast_send ? o.shard_bytes : 0.0;
  // Issued once the first forward of the unit `lookahead` places earlier in first-use order is
  // done (the FSDP prefetch rule, schedule::gather_rules), or at the start.
  const int lookahead = plan_.prefetch ? 2 : 1;
  const auto pos = static_cast<int>(std::find(st.first_use.begin(), st.first_use.end(), unit) -
                                    st.first_use.begin());
  OpId gate = kNoOp;
  if (pos >= lookahead) {
    const int before = st.first_use[static_cast<std::size_t>(pos - lookahead)];
    gate = st.first_forward[static_cast<std::size_t>(before)];
  }
  st.gather[static_cast<std::size_t>(unit)] = emit(o, {gate});
}

void SplitGraphBuilder::emit_compute(RankState& st, OpKind kind, int unit, int micro_batch,
                                     Pass pass) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int seq = job.sequence_length;
  const int T = st.place.tensor_parallel;
  const bool sp = plan_.model_split.sequence_parallel;
  const int size = st.size;
  // The op's activation bytes: costmodels' per-op rule, the one the memory model walks.
  const bool gpu = costmodels::runs_gpu_runtime(
      scenario_.cluster.ranks()[static_cast<std::size_t>(st.rank)].slot->spec);
  const auto bytes = [&](costmodels::ComputeStep step) {
    return costmodels::split_compute_op_bytes(job, plan_.activation_checkpointing, unit, step, size,
                                              T, sp, gpu);
  };
  const auto flops = costmodels::unit_flops(model, unit, seq, size);
  const double flop_share =
      costmodels::unit_kind(model, unit) == costmodels::UnitKind::Embedding ? 1.0 : 1.0 / T;
  Op o = micro_batch_op(kind, pass, unit, pass == Pass::Forward ? unit : 2 * units_ - 1 - unit,
                        micro_batch, size);
  std::vector<OpId> deps{st.pending.begin(), st.pending.end()};
  st.pending.clear();
  const bool full = st.gathers;
  const bool core = kind == OpKind::Recompute && schedule::recomputes_attention_core(
                                                     plan_.activation_checkpointing, unit, units_);
  if (kind == OpKind::Forward) {
    o.flops = flops.forward * flop_share;
    const costmodels::OpBytes f = bytes(costmodels::ComputeStep::Forward);
    o.mem_alloc = f.alloc;
    o.mem_free = f.free;
    if (full && !st.used[static_cast<std::size_t>(unit)])
      deps.push_back(st.gather[static_cast<std::size_t>(unit)]);
  } else if (kind == OpKind::Recompute) {
    // The layer's forward again, or under selective recompute its attention core only.
    o.flops =
        (core ? costmodels::attention_core_forward_flops(job, size) : flops.forward) * flop_share;
    o.mem_alloc = bytes(costmodels::ComputeStep::Recompute).alloc;
  } else {
    const std::size_t u = static_cast<std::size_t>(unit);
    const bool alloc_grad = full && !st.grad_held[u];
    st.grad_held[u] = st.grad_held[u] || full;
    const double grad_bytes =
        static_cast<double>(g_.domain_layouts_[static_cast<std::size_t>(st.domain)].numel(unit)) *
        bytes_per_element(job.precision.reduce);
    o.flops = flops.backward * flop_share;
    const costmodels::OpBytes b = bytes(costmodels::ComputeStep::Backward);
    o.mem_alloc = b.alloc + (alloc_grad ? grad_bytes : 0.0);
    o.mem_free = b.free;
    // The gathered parameters go with the unit's last backward (its gradient is complete).
    if (full && --st.backwards_left[u] == 0) {
      o.mem_free += g_.domain_layouts_[static_cast<std::size_t>(st.domain)].numel(unit) *
                    bytes_per_element(job.precision.compute);
      o.frees_gathered = true;
    } else if (!full) {
      --st.backwards_left[u];
    }
  }
  st.last_compute = emit(o, deps);
  if (kind == OpKind::Forward) st.last_forward = st.last_compute;
  if (kind == OpKind::Backward) st.last_backward_op = st.last_compute;
  // The compute op's tensor-parallel collectives (DESIGN §4, "Tensor-parallel ops"), right
  // after it on the compute stream; then the gathers its completion releases.
  // (The attention core runs on the rank's own heads: no TP collective.)
  if (T > 1 && !core) emit_tensor_parallel(st, kind, unit, micro_batch, pass, o.phase);
  if (kind == OpKind::Forward && !st.used[static_cast<std::size_t>(unit)]) {
    st.used[static_cast<std::size_t>(unit)] = 1;
    st.first_forward[static_cast<std::size_t>(unit)] = st.last_forward;
    // The gathers this forward's completion releases (prefetch).
    while (full && st.next_gather < static_cast<int>(st.first_use.size())) {
      const int lookahead = plan_.prefetch ? 2 : 1;
      const int g = st.next_gather;
      const int gate_pos = g - lookahead;
      if (gate_pos >= 0 &&
          !st.used[static_cast<std::size_t>(st.first_use[static_cast<std::size_t>(gate_pos)])])
        break;
      emit_gather(st, st.first_use[static_cast<std::size_t>(g)]);
      ++st.next_gather;
    }
  }
}

void SplitGraphBuilder::emit_tensor_parallel(RankState& st, OpKind kind, int unit, int micro_batch,
                                             Pass pass, int phase) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int seq = job.sequence_length;
  const int T = st.place.tensor_parallel;
  const bool sp = plan_.model_split.sequence_parallel;
  const Dtype act = job.precision.compute;
  const int size = st.size;
  const auto unit_kind = costmodels::unit_kind(model, unit);
  const double tokens = static_cast<double>(size) * costmodels::effective_sequence(model, seq);
  int calls = 0;
  double elements = tokens * model.hidden;
  double element_bytes = bytes_per_element(act);
  if (unit_kind == costmodels::UnitKind::Layer) {
    calls = 2;
  } else if (unit_kind == costmodels::UnitKind::Embedding) {
    calls = kind == OpKind::Forward ? 1 : 0;
  } else if (kind == OpKind::Backward) {
    calls = 1;
  } else {
    // The vocabulary-parallel cross-entropy's max, sum of exponentials and target logit.
    calls = 3;
    elements = tokens;
    element_bytes = 4;
  }
  if (calls == 0) return;
  const OpKind tk = sp && unit_kind == costmodels::UnitKind::Layer ? OpKind::TpGatherScatter
                                                                   : OpKind::TpAllReduce;
  Op tp = micro_batch_op(tk, pass, unit, phase, micro_batch, size);
  tp.collective = tp_collective(st, tk, unit, pass, calls, element_bytes, elements);
  tp.bytes = elements * element_bytes;
  tp.shard_bytes = tp.bytes / T;
  st.last_compute = emit(tp, {});
}

void SplitGraphBuilder::emit_reductions(RankState& st, int unit) {
  const ModelSpec& model = scenario_.job.model;
  const StageSharding kind = plan_.model_split.sharding;
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  const std::size_t u = static_cast<std::size_t>(unit);
  const OpId last_backward = st.last_backward[u];
  // A tied word embedding's two copies: rank i of the first stage with rank i of the last,
  // before either reduces over its domain.
  if (model.tied_embeddings && p_ > 1 &&
      ((unit == 0 && st.stage == 0) || (unit == units_ - 1 && st.stage == p_ - 1))) {
    const auto& list = topo_.stage_ranks(st.stage);
    const int position =
        static_cast<int>(std::find(list.begin(), list.end(), st.rank) - list.begin());
    Op t;
    t.kind = OpKind::TiedAllReduce;
    t.pass = Pass::Backward;
    t.unit = unit;
    t.phase = 2 * units_ - 1 - unit;
    t.collective = tied_collective(position, st.place.tp_rank);
    t.bytes = g_.collectives_[static_cast<std::size_t>(t.collective)].total_bytes;
    t.shard_bytes = t.bytes / 2;
    st.last_reduction = emit(t, {last_backward});
  }
  const int group = layout.group_of(st.position);
  const bool cross = layout.hybrid();
  if (kind != StageSharding::None) {
    Op rs = domain_op(st, domain_collective(st.domain, group, unit, OpKind::ReduceScatter),
                      Pass::Backward);
    if (st.gathers) {
      // The unsharded gradient (allocated by the first backward) and the received shard.
      rs.mem_alloc = (st.grad_held[u] ? 0.0 : rs.bytes) + rs.shard_bytes;
      rs.mem_free = rs.bytes + rs.shard_bytes;
      st.grad_held[u] = false;
    }
    st.last_reduction = emit(rs, {last_backward});
  }
  if (cross) {
    st.last_reduction = emit(
        domain_op(st, domain_collective(st.domain, -1, unit, OpKind::AllReduce), Pass::Backward),
        {last_backward});
  }
}

void SplitGraphBuilder::emit_optimizer(RankState& st) {
  const Job& job = scenario_.job;
  const ShardLayout& layout = g_.domain_layouts_[static_cast<std::size_t>(st.domain)];
  Op opt;
  opt.kind = OpKind::OptimizerStep;
  opt.pass = Pass::Step;
  opt.unit = -1;
  opt.shard_parameters = static_cast<double>(layout.owned_elements(st.position));
  opt.flops = 12.0 * opt.shard_parameters;  // AdamW, as the FSDP graph counts it
  if (bytes_per_element(job.precision.reduce) != 4.0 || job.precision.compute == Dtype::FP16) {
    std::int64_t largest = 0;
    for (int u = 0; u < units_; ++u)
      largest = std::max(largest, layout.slice(u, st.position).count);
    opt.mem_alloc = opt.mem_free = static_cast<double>(largest) * 4.0;
  }
  const OpId step = emit(opt, {st.last_reduction});
  if (plan_.model_split.sharding != StageSharding::Optimizer) return;
  // ZeRO-1: every rank gathers the updated parameters of its stage's units.
  for (int u : st.first_use) {
    emit(domain_op(st,
                   domain_collective(st.domain, layout.group_of(st.position), u, OpKind::AllGather),
                   Pass::Step),
         {step});
  }
}

// This rank's receives of the boundary's rows at its virtual stage, for `forward`: the input of
// the chunk after `boundary` (forward) or the input gradient of the chunk it ends (backward).
void SplitGraphBuilder::emit_recvs(RankState& st, int boundary, bool forward, int unit,
                                   int micro_batch) {
  for (const Transfer& t : transfers(boundary, forward)) {
    if (t.to != st.rank) continue;
    Op o = micro_batch_op(OpKind::Recv, forward ? Pass::Forward : Pass::Backward, unit, -1,
                          micro_batch, st.size);
    o.bytes = boundary_bytes(t.rows);
    o.mem_alloc = o.bytes;
    o.collective = transfer_collective(t, forward, micro_batch, boundary, o.bytes);
    st.pending.push_back(emit(o, {}));
  }
}

// This rank's sends across `boundary`: the chunk's output (forward) or its input gradient
// (backward). The last send frees what the chunk left, or `producer` does when this rank sends
// nothing (another TP rank of its group does).
void SplitGraphBuilder::emit_sends(RankState& st, int boundary, bool forward, int unit,
                                   int micro_batch, OpId producer) {
  std::vector<const Transfer*> sends;
  for (const Transfer& t : transfers(boundary, forward))
    if (t.from == st.rank) sends.push_back(&t);
  const double held = boundary_bytes(st.size);
  if (sends.empty()) g_.ops_[producer].mem_free += held;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    Op o = micro_batch_op(OpKind::Send, forward ? Pass::Forward : Pass::Backward, unit, -1,
                          micro_batch, st.size);
    o.bytes = boundary_bytes(sends[i]->rows);
    o.shard_bytes = o.bytes;
    if (i + 1 == sends.size()) o.mem_free = held;
    o.collective = transfer_collective(*sends[i], forward, micro_batch, boundary, o.bytes);
    emit(o, {st.last_compute});
  }
}

void SplitGraphBuilder::emit_forward_step(RankState& st, int micro_batch, int chunk) {
  const int k = virtual_stage(st.stage, chunk);
  const auto& units = vstage_units_[static_cast<std::size_t>(k)];
  if (k > 0) emit_recvs(st, k - 1, true, units.front(), micro_batch);
  for (int u : units) emit_compute(st, OpKind::Forward, u, micro_batch, Pass::Forward);
  if (k < p_ * v_ - 1) emit_sends(st, k, true, units.back(), micro_batch, st.last_forward);
}

void SplitGraphBuilder::emit_backward_step(RankState& st, int micro_batch, int chunk) {
  const int k = virtual_stage(st.stage, chunk);
  const auto& units = vstage_units_[static_cast<std::size_t>(k)];
  if (k < p_ * v_ - 1) emit_recvs(st, k, false, units.back(), micro_batch);
  const bool last_of_chunk = st.backwards_left_in_chunk[static_cast<std::size_t>(chunk)]-- == 1;
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const int u = *it;
    if (schedule::has_recompute_op(plan_.activation_checkpointing, u, units_))
      emit_compute(st, OpKind::Recompute, u, micro_batch, Pass::Backward);
    emit_compute(st, OpKind::Backward, u, micro_batch, Pass::Backward);
    st.last_backward[static_cast<std::size_t>(u)] = st.last_backward_op;
    if (last_of_chunk) emit_reductions(st, u);
  }
  if (k > 0) emit_sends(st, k - 1, false, units.front(), micro_batch, st.last_backward_op);
}

void SplitGraphBuilder::build_rank(int r) {
  current_rank_ = r;
  const Job& job = scenario_.job;
  RankState st;
  st.rank = r;
  st.place = topo_.place(r);
  st.stage = st.place.stage;
  st.domain = g_.domain_of_[static_cast<std::size_t>(r)];
  st.position = g_.domain_position_[static_cast<std::size_t>(r)];
  st.size = plan_.ranks[static_cast<std::size_t>(r)].micro_batch;
  const StageSharding kind = plan_.model_split.sharding;
  st.gathers = kind == StageSharding::Full || kind == StageSharding::Hybrid;
  st.cast_send =
      bytes_per_element(job.precision.params) != bytes_per_element(job.precision.compute);
  const std::size_t U = static_cast<std::size_t>(units_);
  st.gather.assign(U, kNoOp);
  st.first_forward.assign(U, kNoOp);
  st.last_backward.assign(U, kNoOp);
  st.backwards_left.assign(U, 0);
  st.grad_held.assign(U, false);
  st.used.assign(U, 0);
  st.backwards_left_in_chunk.assign(static_cast<std::size_t>(v_), 0);
  const auto& order = orders_[static_cast<std::size_t>(st.stage)];
  for (const auto& step : order) {
    const auto& units =
        vstage_units_[static_cast<std::size_t>(virtual_stage(st.stage, step.chunk))];
    if (step.pass == pipeline::Pass::Forward) {
      for (int u : units)
        if (std::find(st.first_use.begin(), st.first_use.end(), u) == st.first_use.end())
          st.first_use.push_back(u);
    } else {
      for (int u : units) ++st.backwards_left[static_cast<std::size_t>(u)];
      ++st.backwards_left_in_chunk[static_cast<std::size_t>(step.chunk)];
    }
  }
  if (st.gathers) {
    const int lookahead = plan_.prefetch ? 2 : 1;
    while (st.next_gather < std::min<int>(lookahead, static_cast<int>(st.first_use.size())))
      emit_gather(st, st.first_use[static_cast<std::size_t>(st.next_gather++)]);
  }
  for (const auto& step : order) {
    if (step.pass == pipeline::Pass::Forward)
      emit_forward_step(st, step.micro_batch, step.chunk);
    else
      emit_backward_step(st, step.micro_batch, step.chunk);
  }
  emit_optimizer(st);
}

// ---- the whole graph --------------------------------------------------------------------------

TrainingGraph SplitGraphBuilder::build() {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const ModelSplit& split = plan_.model_split;
  const int n = static_cast<int>(plan_.ranks.size());
  if (n != scenario_.cluster.num_ranks())
    throw Error("plan has " + std::to_string(n) + " ranks but the cluster has " +
                std::to_string(scenario_.cluster.num_ranks()) + " devices");
  units_ = costmodels::num_units(model);
  stages_ = resolved_stages(split, model.num_layers, n);
  p_ = static_cast<int>(stages_.size());
  v_ = topo_.virtual_stages();
  m_ = split.micro_batches;

  GraphSummary& sum = g_.summary_;
  sum.num_ranks = n;
  sum.num_units = units_;
  sum.sequence_length = job.sequence_length;
  sum.global_batch = plan_.global_batch();
  sum.accumulation = plan_.accumulation;
  sum.activation_checkpointing = plan_.activation_checkpointing;
  sum.offload = plan_.offload;
  sum.prefetch = plan_.prefetch;
  sum.split = true;
  sum.pipeline_stages = p_;
  sum.virtual_stages = v_;
  sum.pipeline_micro_batches = m_;
  sum.sequence_parallel = split.sequence_parallel;
  sum.stage_sharding = split.sharding;

  g_.places_.resize(static_cast<std::size_t>(n));
  g_.all_ranks_.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    g_.places_[static_cast<std::size_t>(r)] = topo_.place(r);
    g_.all_ranks_[static_cast<std::size_t>(r)] = r;
  }
  for (int u = 0; u < units_; ++u)
    g_.recomputes_.push_back(schedule::recomputes(plan_.activation_checkpointing, u, units_) ? 1
                                                                                             : 0);
  setup_units();
  orders_ = pipeline::stage_orders(p_, m_, split.schedule);

  const double compute_bytes = bytes_per_element(job.precision.compute);
  const double reduce_bytes = bytes_per_element(job.precision.reduce);
  g_.unit_sizes_.resize(static_cast<std::size_t>(units_));
  for (int u = 0; u < units_; ++u) {
    const int s = g_.unit_stage_[static_cast<std::size_t>(u)];
    UnitSizes& us = g_.unit_sizes_[static_cast<std::size_t>(u)];
    // TP rank 0's slice; a domain's own numel is layout_of(rank).numel(u).
    us.parameters = costmodels::unit_parameters(model, u, topo_.tensor_parallel(s), 0,
                                                model.tied_embeddings && p_ > 1 && u == units_ - 1);
    us.numel = std::llround(us.parameters);
    us.gathered_bytes = us.parameters * compute_bytes;
    us.gradient_bytes = us.parameters * reduce_bytes;
  }
  sum.model_flops_per_iteration = model_flops_per_iteration(job, sum.global_batch);
  // Phases as one round of the FSDP graph numbers them: forward phase u, backward 2U − 1 − u.
  g_.gradient_phase_.assign(static_cast<std::size_t>(2 * units_), -1);
  for (int ph = units_; ph < 2 * units_; ++ph)
    g_.gradient_phase_[static_cast<std::size_t>(ph)] = ph;

  setup_domains();
  setup_transfers();
  int groups = 0;
  for (int s = 0; s < p_; ++s) {
    tp_group_base_.push_back(groups);
    groups += topo_.replicas(s);
  }
  tp_ids_.assign(static_cast<std::size_t>(groups), {});
  tp_cursor_.assign(static_cast<std::size_t>(n), 0);

  g_.rank_offsets_.push_back(0);
  for (int r = 0; r < n; ++r) {
    build_rank(r);
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
  }
  for (const auto& m : g_.members_)
    if (m.op == kNoOp)
      throw std::logic_error("split graph: a collective member without its op (rank " +
                             std::to_string(m.rank) + ")");
  g_.index_streams();
  return std::move(g_);
}

}  // namespace cephalo::traces

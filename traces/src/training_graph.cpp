#include "cephalo/traces/training_graph.hpp"

#include <algorithm>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::traces {

struct TrainingGraph::BoostGraph {
  using Graph =
      boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                         boost::no_property, std::uint32_t, std::uint32_t>;
  Graph graph;
};

TrainingGraph::TrainingGraph() = default;
TrainingGraph::~TrainingGraph() = default;
TrainingGraph::TrainingGraph(TrainingGraph&&) noexcept = default;
TrainingGraph& TrainingGraph::operator=(TrainingGraph&&) noexcept = default;

std::span<const Op> TrainingGraph::program(int rank) const {
  return {ops_.data() + rank_offsets_[rank], ops_.data() + rank_offsets_[rank + 1]};
}

std::span<const OpId> TrainingGraph::stream_program(int rank, Stream stream) const {
  std::size_t i = static_cast<std::size_t>(rank) * kNumStreams + static_cast<int>(stream);
  return {stream_ops_.data() + stream_offsets_[i], stream_ops_.data() + stream_offsets_[i + 1]};
}

std::span<const OpId> TrainingGraph::waits_on(OpId id) const {
  const Op& o = ops_[id];
  return {deps_.data() + o.deps_begin, o.deps_count};
}

std::span<const OpId> TrainingGraph::waited_by(OpId id) const {
  return {succs_.data() + succ_offsets_[id], succs_.data() + succ_offsets_[id + 1]};
}

std::span<const CollectiveMember> TrainingGraph::members(const Collective& c) const {
  return {members_.data() + c.members_begin, c.members_count};
}

std::span<const CollectiveSegment> TrainingGraph::segments(const Collective& c) const {
  return {segments_.data() + c.segments_begin, c.segments_count};
}

std::string TrainingGraph::op_name(OpId id) const {
  const Op& o = ops_[id];
  std::string s = short_name(o.kind);
  if (o.unit >= 0) s += " u" + std::to_string(o.unit);
  if (o.micro_batch >= 0) s += " mb" + std::to_string(o.micro_batch);
  s += " r" + std::to_string(o.rank);
  return s;
}

const TrainingGraph::BoostGraph& TrainingGraph::boost_graph() const {
  if (boost_) return *boost_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  edges.reserve(ops_.size() * 2 + deps_.size());
  // Stream order.
  for (std::size_t s = 0; s + 1 < stream_offsets_.size(); ++s)
    for (std::uint32_t i = stream_offsets_[s]; i + 1 < stream_offsets_[s + 1]; ++i)
      edges.emplace_back(stream_ops_[i], stream_ops_[i + 1]);
  // Cross-stream waits.
  for (const Op& o : ops_)
    for (OpId d : waits_on(o.id)) edges.emplace_back(d, o.id);
  // Cross-rank rendezvous: lowest-ranked participant to every other participant.
  for (const Collective& c : collectives_) {
    auto m = members(c);
    for (std::size_t i = 1; i < m.size(); ++i) edges.emplace_back(m[0].op, m[i].op);
  }
  boost_ = std::make_unique<BoostGraph>(
      BoostGraph{BoostGraph::Graph(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(),
                                   static_cast<std::uint32_t>(ops_.size()))});
  return *boost_;
}

std::size_t TrainingGraph::boost_num_edges() const { return boost::num_edges(boost_graph().graph); }

std::vector<OpId> TrainingGraph::topological_order() const {
  const auto& g = boost_graph().graph;
  std::vector<OpId> reversed;
  reversed.reserve(ops_.size());
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    throw std::logic_error("TrainingGraph has a cycle");
  }
  std::reverse(reversed.begin(), reversed.end());
  return reversed;
}

// ---------------------------------------------------------------------------------------------

class GraphBuilder {
 public:
  GraphBuilder(const Plan& plan, const Scenario& scenario) : plan_(plan), scenario_(scenario) {}
  // Only the ranks in `only` (ascending) get ops and collective memberships; the sharding,
  // variants and static bytes are still those of the whole plan (sim/'s class replay).
  TrainingGraph build(std::span<const int> only = {});

 private:
  struct Phase {
    int unit;
    Pass pass;
    int round;  // standard accumulation: micro-batch round; layered: 0
  };

  OpId emit(Op op, std::initializer_list<OpId> deps);
  void build_rank(int r);
  std::int32_t add_collective(int phase, bool gather, int group);
  std::int32_t add_cross_reduction(int phase, int unit);
  // Units whose gradient phase p reduces for the last time in the step (hybrid: the units the
  // cross-group reduction after phase p's reduce-scatter covers).
  const std::vector<int>& units_finished_at(int phase) const {
    return finished_at_[static_cast<std::size_t>(phase)];
  }
  // Whether unit u's backward is preceded by a Recompute (Plan::activation_checkpointing): a
  // checkpointed layer, the embedding unless checkpointing is none (its recompute is empty),
  // the head always (its logits are recomputed inside the backward in every setting).
  bool recomputes(int u) const;
  // Elements rank r owns over all units (its sharded state).
  std::int64_t owned_elements(int r) const { return g_.layout_.owned_elements(r); }

  const Plan& plan_;
  const Scenario& scenario_;
  TrainingGraph g_;
  std::vector<Phase> phases_;
  std::vector<std::int32_t> ag_collective_, rs_collective_;  // per phase × group
  std::vector<std::int32_t> cross_collective_;               // per unit (-1: none)
  std::vector<std::vector<int>> finished_at_;                // per phase (hybrid only)
  int groups_ = 1;
  int units_ = 0;
  int current_rank_ = 0;
  std::vector<int> built_;         // ranks that get ops, ascending
  std::vector<int> member_index_;  // per rank: position among built_, -1 if not built
  std::vector<int> group_slot_;    // per rank: position among its group's built ranks
  std::vector<signed char>
      unit_equal_;  // per group × unit: equal slices on every member (-1: unknown)
};

OpId GraphBuilder::emit(Op op, std::initializer_list<OpId> deps) {
  op.id = static_cast<OpId>(g_.ops_.size());
  op.rank = current_rank_;
  op.stream = stream_of(op.kind);
  op.deps_begin = static_cast<std::uint32_t>(g_.deps_.size());
  for (OpId d : deps) {
    if (d == kNoOp) continue;
    // The previous op on the same stream is an implicit dependency: not listed.
    if (g_.ops_[d].stream == op.stream) continue;
    if (std::find(g_.deps_.begin() + op.deps_begin, g_.deps_.end(), d) != g_.deps_.end()) continue;
    g_.deps_.push_back(d);
  }
  op.deps_count = static_cast<std::uint32_t>(g_.deps_.size()) - op.deps_begin;
  g_.ops_.push_back(op);
  return op.id;
}

void GraphBuilder::build_rank(int r) {
  current_rank_ = r;
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const Dtype act = job.precision.compute;
  const int seq = job.sequence_length;
  const PlanRank& pr = plan_.ranks[r];
  const std::vector<int> sizes = pr.batch > 0 ? pr.micro_batch_sizes() : std::vector<int>{};
  const int mbs = static_cast<int>(sizes.size());
  const bool offload = plan_.offload == Offload::Host;
  const int lookahead = plan_.prefetch ? 2 : 1;
  const int num_phases = static_cast<int>(phases_.size());
  const int group = g_.layout_.group_of(r);
  auto at = [&](const std::vector<std::int32_t>& per_phase, int p) {
    return per_phase[static_cast<std::size_t>(p) * static_cast<std::size_t>(groups_) +
                     static_cast<std::size_t>(group)];
  };

  // Per micro-batch-size quantities (a rank has at most two distinct sizes).
  auto boundary = [&](int mb) {
    return costmodels::boundary_activation_bytes(model, seq, mb, act);
  };
  auto working = [&](int unit, int mb) {
    return costmodels::unit_working_bytes(model, unit, seq, mb, act);
  };
  // Eager attention's s×s scores and their gradient are held while a layer's backward runs on a
  // GPU (the same term as the closed form's working set, memory_model.cpp; a CPU device computes
  // one head's scores at a time outside its allocator).
  const bool gpu_runtime =
      scenario_.cluster.ranks()[static_cast<std::size_t>(r)].slot->spec.kind != "cpu";
  auto transient = [&](int unit, int mb) {
    return costmodels::unit_backward_transient_bytes(model, unit, seq, mb, act) +
           (gpu_runtime
                ? costmodels::eager_attention_bytes(model, unit, seq, mb, job.implementation)
                : 0.0);
  };
  // Master weights wider or narrower than the compute dtype travel as a cast copy of the shard
  // (tf32 computes on fp32 storage: no copy).
  const bool cast_send = bytes_per_element(job.precision.params) != bytes_per_element(act);

  std::vector<OpId> ag(num_phases, kNoOp);
  std::vector<OpId> phase_done(num_phases, kNoOp);
  std::vector<OpId> d2h(static_cast<std::size_t>(units_) * std::max(mbs, 1), kNoOp);
  std::vector<OpId> backward_steps;  // B ops in order, for the H2D look-ahead
  OpId last_rs = kNoOp;
  // Whether the unsharded gradient buffer of a gradient phase is allocated on this rank (by
  // its first backward; released by its reduce-scatter).
  std::vector<bool> grad_held(static_cast<std::size_t>(num_phases), false);
  std::vector<OpId> grad_last(static_cast<std::size_t>(num_phases), kNoOp);  // its last backward

  auto emit_gather = [&](int p) {
    const Phase& ph = phases_[p];
    const Collective& c = g_.collectives_[at(ag_collective_, p)];
    Op o;
    o.kind = c.variant == CollectiveVariant::Even ? OpKind::AllGather : OpKind::AllGatherV;
    o.pass = ph.pass;
    o.unit = ph.unit;
    o.phase = p;
    o.collective = c.id;
    o.bytes = c.total_bytes;
    o.shard_bytes = g_.members_[c.members_begin + group_slot_[r]].shard_bytes;
    // The gathered phase (freed by the phase's last compute op) and the cast send shard (freed
    // when the gather ends).
    o.mem_alloc = o.bytes + (cast_send ? o.shard_bytes : 0.0);
    o.mem_free = cast_send ? o.shard_bytes : 0.0;
    OpId wait = p - lookahead >= 0 ? phase_done[p - lookahead] : kNoOp;
    ag[p] = emit(o, {wait});
  };

  emit_gather(0);
  if (lookahead == 2 && num_phases > 1) emit_gather(1);

  for (int p = 0; p < num_phases; ++p) {
    const Phase& ph = phases_[p];
    const int u = ph.unit;
    // Micro-batches this rank runs in this phase, in execution order.
    std::vector<int> order;
    const std::int32_t gp = g_.gradient_phase_[p];
    // A layer without a recompute keeps its forward's working set until its backward; the
    // embedding's forward working set is transient either way (its backward needs only ids).
    const bool recompute = recomputes(u);
    const bool keeps = !recompute && u >= 1 && u < units_ - 1;
    if (plan_.accumulation == Accumulation::Layered) {
      for (int m = 0; m < mbs; ++m) order.push_back(ph.pass == Pass::Forward ? m : mbs - 1 - m);
    } else if (ph.round < mbs) {
      order.push_back(ph.round);
    }
    OpId last_compute = kNoOp;
    bool first = true;
    for (int m : order) {
      const int size = sizes[m];
      const auto flops = costmodels::unit_flops(model, u, seq, size);
      if (ph.pass == Pass::Forward) {
        Op f;
        f.kind = OpKind::Forward;
        f.pass = Pass::Forward;
        f.unit = u;
        f.micro_batch = m;
        f.micro_batch_size = size;
        f.phase = p;
        f.flops = flops.forward;
        const double w = working(u, size);
        f.mem_alloc = w + (u < units_ - 1 ? boundary(size) : 0.0);
        f.mem_free = keeps ? 0.0 : w;
        last_compute = emit(f, {first ? ag[p] : kNoOp});
        if (offload && u >= 1) {
          Op c;
          c.kind = OpKind::CopyD2H;
          c.pass = Pass::Forward;
          c.unit = u;
          c.micro_batch = m;
          c.micro_batch_size = size;
          c.phase = p;
          c.bytes = boundary(size);
          c.mem_free = c.bytes;  // the device copy of the unit's input
          d2h[static_cast<std::size_t>(u) * mbs + m] = emit(c, {last_compute});
        }
      } else {
        OpId h2d = kNoOp;
        if (offload && u >= 1) {
          Op c;
          c.kind = OpKind::CopyH2D;
          c.pass = Pass::Backward;
          c.unit = u;
          c.micro_batch = m;
          c.micro_batch_size = size;
          c.phase = p;
          c.bytes = boundary(size);
          c.mem_alloc = c.bytes;
          const std::size_t steps = backward_steps.size();
          OpId gate = steps >= static_cast<std::size_t>(lookahead)
                          ? backward_steps[steps - lookahead]
                          : kNoOp;
          h2d = emit(c, {d2h[static_cast<std::size_t>(u) * mbs + m], gate});
        }
        const double w = working(u, size);
        Op b;
        b.pass = Pass::Backward;
        b.unit = u;
        b.micro_batch = m;
        b.micro_batch_size = size;
        b.phase = p;
        if (recompute) {
          Op rc = b;
          rc.kind = OpKind::Recompute;
          rc.flops = flops.forward;
          rc.mem_alloc = w;
          emit(rc, {first ? ag[p] : kNoOp, h2d});
        }
        b.kind = OpKind::Backward;
        b.flops = flops.backward;
        // The input gradient, the gradient buffer (the first backward that accumulates into
        // it) and the backward's own input-gradient temporaries, held while it runs.
        const double t = transient(u, size);
        const bool alloc_grad = !grad_held[static_cast<std::size_t>(gp)];
        grad_held[static_cast<std::size_t>(gp)] = true;
        b.mem_alloc = (u > 0 ? boundary(size) : 0.0) +
                      (alloc_grad ? g_.unit_sizes_[u].gradient_bytes : 0.0) + t;
        b.mem_free = (recompute || keeps ? w : 0.0) + t + (u >= 1 ? boundary(size) : 0.0) +
                     (u < units_ - 1 ? boundary(size) : 0.0);
        // Without a recompute the backward itself is the phase's first use of the gather.
        last_compute = recompute ? emit(b, {}) : emit(b, {first ? ag[p] : kNoOp, h2d});
        backward_steps.push_back(last_compute);
        grad_last[static_cast<std::size_t>(gp)] = last_compute;
      }
      first = false;
    }
    phase_done[p] = last_compute != kNoOp ? last_compute : ag[p];
    // The gathered parameters are released when the phase's compute is done.
    g_.ops_[phase_done[p]].mem_free += g_.unit_sizes_[u].gathered_bytes;
    g_.ops_[phase_done[p]].frees_gathered = true;

    if (p + lookahead < num_phases) emit_gather(p + lookahead);
    if (ph.pass == Pass::Backward && at(rs_collective_, p) >= 0) {
      const Collective& c = g_.collectives_[at(rs_collective_, p)];
      Op rs;
      rs.kind =
          c.variant == CollectiveVariant::Even ? OpKind::ReduceScatter : OpKind::ReduceScatterV;
      rs.pass = Pass::Backward;
      rs.unit = u;
      rs.phase = p;
      rs.collective = c.id;
      rs.bytes = c.total_bytes;
      rs.shard_bytes = g_.members_[c.members_begin + group_slot_[r]].shard_bytes;
      // The unsharded gradient buffer: allocated by the first backward, or here when the rank
      // ran no backward into it (it contributes zeros); and the received shard.
      rs.mem_alloc = (grad_held[static_cast<std::size_t>(p)] ? 0.0 : rs.bytes) + rs.shard_bytes;
      grad_held[static_cast<std::size_t>(p)] = false;
      rs.mem_free = rs.bytes + rs.shard_bytes;
      // The last backward into the buffer (under no_sync possibly an earlier round's).
      last_rs = emit(rs, {grad_last[static_cast<std::size_t>(p)]});
      // Hybrid: the units this reduce-scatter finished, reduced across groups in place on the
      // gradient shard (no memory of its own).
      for (int unit : units_finished_at(p)) {
        const Collective& x = g_.collectives_[cross_collective_[static_cast<std::size_t>(unit)]];
        Op ar;
        ar.kind = OpKind::AllReduce;
        ar.pass = Pass::Backward;
        ar.unit = unit;
        ar.phase = p;
        ar.collective = x.id;
        ar.bytes = x.total_bytes;
        ar.shard_bytes = g_.members_[x.members_begin + member_index_[r]].shard_bytes;
        last_rs = emit(ar, {});
      }
    }
  }

  Op opt;
  opt.kind = OpKind::OptimizerStep;
  opt.pass = Pass::Step;
  opt.unit = -1;
  opt.shard_parameters = static_cast<double>(owned_elements(r));
  // AdamW: about 12 FLOPs per parameter (moments, bias correction, update, weight decay).
  opt.flops = 12.0 * opt.shard_parameters;
  // AdamW reads fp32 gradients: a 16-bit or loss-scaled (fp16) gradient shard is widened into
  // a transient fp32 copy, one unit at a time.
  if (bytes_per_element(job.precision.reduce) != 4.0 || act == Dtype::FP16) {
    std::int64_t largest = 0;
    for (int u = 0; u < units_; ++u) largest = std::max(largest, g_.slice(u, r).count);
    opt.mem_alloc = opt.mem_free = static_cast<double>(largest) * 4.0;
  }
  emit(opt, {last_rs});
}

// The cross-group reduction of unit u after phase p: members are all ranks (in rank order),
// each moving its slice; the pieces (ShardLayout::pieces) say which ranks reduce what.
std::int32_t GraphBuilder::add_cross_reduction(int p, int u) {
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.kind = OpKind::AllReduce;
  c.group = -1;
  c.unit = u;
  c.pass = Pass::Backward;
  c.phase = p;
  c.variant = CollectiveVariant::Even;
  c.element_bytes = bytes_per_element(scenario_.job.precision.reduce);
  c.total_bytes =
      static_cast<double>(g_.unit_sizes_[static_cast<std::size_t>(u)].numel) * c.element_bytes;
  c.segments_begin = static_cast<std::uint32_t>(g_.segments_.size());
  g_.segments_.push_back(
      {u, g_.unit_sizes_[static_cast<std::size_t>(u)].numel, CollectiveVariant::Even});
  c.segments_count = 1;
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  c.members_count = static_cast<std::uint32_t>(built_.size());
  for (int r : built_) {
    CollectiveMember m;
    m.rank = r;
    m.elements = g_.slice(u, r).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g_.members_.push_back(m);
  }
  g_.collectives_.push_back(c);
  return c.id;
}

bool GraphBuilder::recomputes(int u) const {
  const ActivationCheckpointing& c = plan_.activation_checkpointing;
  if (u == units_ - 1) return true;
  if (u == 0) return c.kind != ActivationCheckpointing::Kind::None;
  return c.checkpoints_layer(u);
}

// One collective of phase p: the gather of its parameters or the reduce-scatter of its
// gradient. The variant of each segment follows from its integer counts; the collective is
// Even only when all of its segments are.
std::int32_t GraphBuilder::add_collective(int p, bool gather, int group) {
  const Phase& ph = phases_[p];
  const ModelSpec& model = scenario_.job.model;
  const Precision& prec = scenario_.job.precision;
  const auto members = g_.layout_.group(group);
  Collective c;
  c.id = static_cast<std::int32_t>(g_.collectives_.size());
  c.group = group;
  c.unit = ph.unit;
  c.pass = ph.pass;
  c.phase = p;
  c.element_bytes = bytes_per_element(gather ? prec.compute : prec.reduce);
  c.segments_begin = static_cast<std::uint32_t>(g_.segments_.size());
  // A head tied to the embedding brings the whole embedding unit (costmodels::phase_parameters).
  const double extra =
      costmodels::phase_parameters(model, ph.unit) - costmodels::unit_parameters(model, ph.unit);
  std::vector<int> units;
  if (extra > 0) {
    if (extra != costmodels::unit_parameters(model, 0))
      throw std::logic_error("phase_parameters adds something other than the embedding unit");
    units.push_back(0);
  }
  units.push_back(ph.unit);
  const UnevenCollective uneven = plan_.uneven_collective;
  c.variant = CollectiveVariant::Even;
  for (int u : units) {
    CollectiveSegment seg;
    seg.unit = u;
    seg.numel = g_.unit_sizes_[u].numel;
    // Whether every member of the group owns as many elements of unit u: once per group and
    // unit (every phase of the unit asks, and the walk is over all the group's ranks).
    if (unit_equal_.empty())
      unit_equal_.assign(static_cast<std::size_t>(groups_) * static_cast<std::size_t>(units_), -1);
    signed char& known =
        unit_equal_[static_cast<std::size_t>(group) * static_cast<std::size_t>(units_) +
                    static_cast<std::size_t>(u)];
    if (known < 0) {
      const std::int64_t first = g_.slice(u, members.front()).count;
      bool same = true;
      for (std::size_t i = 1; i < members.size() && same; ++i)
        same = g_.slice(u, members[i]).count == first;
      known = same ? 1 : 0;
    }
    const bool equal = known == 1;
    seg.variant = equal                                ? CollectiveVariant::Even
                  : uneven == UnevenCollective::Padded ? CollectiveVariant::Padded
                                                       : CollectiveVariant::Grouped;
    if (seg.variant != CollectiveVariant::Even) c.variant = seg.variant;
    c.total_bytes += static_cast<double>(seg.numel) * c.element_bytes;
    g_.segments_.push_back(seg);
  }
  c.segments_count = static_cast<std::uint32_t>(units.size());
  c.kind = gather ? (c.variant == CollectiveVariant::Even ? OpKind::AllGather : OpKind::AllGatherV)
                  : (c.variant == CollectiveVariant::Even ? OpKind::ReduceScatter
                                                          : OpKind::ReduceScatterV);
  c.members_begin = static_cast<std::uint32_t>(g_.members_.size());
  std::uint32_t built_members = 0;
  for (int r : members) {
    if (member_index_[r] < 0) continue;
    ++built_members;
    CollectiveMember m;
    m.rank = r;
    for (int u : units) m.elements += g_.slice(u, r).count;
    m.shard_bytes = static_cast<double>(m.elements) * c.element_bytes;
    g_.members_.push_back(m);
  }
  c.members_count = built_members;
  g_.collectives_.push_back(c);
  return c.id;
}

TrainingGraph GraphBuilder::build(std::span<const int> only) {
  const Job& job = scenario_.job;
  const ModelSpec& model = job.model;
  const int ranks = static_cast<int>(plan_.ranks.size());
  if (ranks != scenario_.cluster.num_ranks())
    throw Error("plan has " + std::to_string(ranks) + " ranks but the cluster has " +
                std::to_string(scenario_.cluster.num_ranks()) + " devices");
  units_ = costmodels::num_units(model);
  member_index_.assign(static_cast<std::size_t>(ranks), -1);
  if (only.empty()) {
    for (int r = 0; r < ranks; ++r) built_.push_back(r);
  } else {
    for (int r : only) {
      if (r < 0 || r >= ranks || (!built_.empty() && r <= built_.back()))
        throw std::logic_error("build_training_graph: ranks to build must be ascending and valid");
      built_.push_back(r);
    }
  }
  for (std::size_t i = 0; i < built_.size(); ++i) member_index_[built_[i]] = static_cast<int>(i);

  g_.summary_.num_ranks = ranks;
  g_.summary_.num_units = units_;
  g_.summary_.sequence_length = job.sequence_length;
  g_.summary_.global_batch = plan_.global_batch();
  g_.summary_.accumulation = plan_.accumulation;
  g_.summary_.activation_checkpointing = plan_.activation_checkpointing;
  // parse_plan refuses the combination; a plan built in code must not slip past it.
  if (plan_.offload == Offload::Host && !plan_.activation_checkpointing.is_full())
    throw Error(
        "offload host needs activation_checkpointing full (offload moves the "
        "checkpointed layer inputs), the plan has " +
        to_string(plan_.activation_checkpointing));
  g_.summary_.offload = plan_.offload;
  g_.summary_.prefetch = plan_.prefetch;

  const double compute_bytes = bytes_per_element(job.precision.compute);
  const double reduce_bytes = bytes_per_element(job.precision.reduce);
  const double param_bytes = bytes_per_element(job.precision.params);
  g_.unit_sizes_.resize(units_);
  for (int u = 0; u < units_; ++u) g_.recomputes_.push_back(recomputes(u) ? 1 : 0);
  std::vector<double> shares;
  for (const auto& r : plan_.ranks) shares.push_back(r.state_share);
  std::vector<std::int64_t> numel;
  for (int u = 0; u < units_; ++u) {
    UnitSizes& s = g_.unit_sizes_[u];
    s.parameters = costmodels::unit_parameters(model, u);
    s.numel = std::llround(s.parameters);
    numel.push_back(s.numel);
  }
  g_.layout_ = ShardLayout(plan_.sharding, shares, numel);
  groups_ = g_.layout_.num_groups();
  // A group collective's members are its group's built ranks, in group order.
  group_slot_.assign(static_cast<std::size_t>(ranks), -1);
  for (int grp = 0; grp < groups_; ++grp) {
    int slot = 0;
    for (int r : g_.layout_.group(grp))
      if (member_index_[r] >= 0) group_slot_[r] = slot++;
  }
  double model_flops = 0;
  for (int u = 0; u < units_; ++u) {
    UnitSizes& s = g_.unit_sizes_[u];
    // What a phase of the unit gathers and reduces: a tied head brings the embedding unit.
    const double phase = costmodels::phase_parameters(model, u);
    s.gathered_bytes = phase * compute_bytes;
    s.gradient_bytes = phase * reduce_bytes;
    auto f = costmodels::unit_flops(model, u, job.sequence_length, 1);
    model_flops += (f.forward + f.backward) * g_.summary_.global_batch;
  }
  g_.summary_.model_flops_per_iteration = model_flops;

  // Phases are common to all ranks, so collectives line up by construction.
  int rounds = 1;
  if (plan_.accumulation != Accumulation::Layered) {
    rounds = 0;
    for (const auto& r : plan_.ranks) rounds = std::max(rounds, r.batch > 0 ? r.micro_batches : 0);
    rounds = std::max(rounds, 1);
  }
  for (int k = 0; k < rounds; ++k) {
    for (int u = 0; u < units_; ++u) phases_.push_back({u, Pass::Forward, k});
    for (int u = units_ - 1; u >= 0; --u) phases_.push_back({u, Pass::Backward, k});
  }
  // Under no_sync only the last round reduce-scatters; every round's backward of a unit
  // accumulates into that round's buffer (its phase index: round-major, forward then backward).
  const bool no_sync = plan_.accumulation == Accumulation::NoSync;
  for (int p = 0; p < static_cast<int>(phases_.size()); ++p) {
    const Phase& ph = phases_[p];
    std::int32_t gp = -1;
    if (ph.pass == Pass::Backward)
      gp = no_sync ? (rounds - 1) * 2 * units_ + units_ + (units_ - 1 - ph.unit) : p;
    g_.gradient_phase_.push_back(gp);
    for (int grp = 0; grp < groups_; ++grp) {
      ag_collective_.push_back(add_collective(p, true, grp));
      rs_collective_.push_back(gp == p ? add_collective(p, false, grp) : -1);
    }
  }
  // Hybrid: each unit is reduced across groups once per step, after the last reduce-scatter
  // that touches its gradient (a tied embedding: the embedding's own phase, after the head's).
  finished_at_.assign(phases_.size(), {});
  if (g_.layout_.hybrid()) {
    std::vector<int> last(static_cast<std::size_t>(units_), -1);
    for (int p = 0; p < static_cast<int>(phases_.size()); ++p) {
      const std::int32_t rs =
          rs_collective_[static_cast<std::size_t>(p) * static_cast<std::size_t>(groups_)];
      if (rs < 0) continue;
      for (const auto& seg : g_.segments(g_.collectives_[rs]))
        last[static_cast<std::size_t>(seg.unit)] = p;
    }
    cross_collective_.assign(static_cast<std::size_t>(units_), -1);
    for (int p = 0; p < static_cast<int>(phases_.size()); ++p)
      for (int u = 0; u < units_; ++u)
        if (last[static_cast<std::size_t>(u)] == p) {
          finished_at_[static_cast<std::size_t>(p)].push_back(u);
          cross_collective_[static_cast<std::size_t>(u)] = add_cross_reduction(p, u);
        }
  }

  g_.rank_offsets_.push_back(0);
  g_.static_bytes_.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    if (member_index_[r] >= 0) build_rank(r);
    g_.rank_offsets_.push_back(static_cast<std::uint32_t>(g_.ops_.size()));
    // Master parameters, gradient shard and the two fp32 Adam moments of the owned slices.
    g_.static_bytes_[r] =
        static_cast<double>(owned_elements(r)) * (param_bytes + reduce_bytes + 8.0);
  }

  // Collective members' op ids (members in group order; the cross reduction's in rank order).
  for (const Op& o : g_.ops_)
    if (o.collective >= 0) {
      const Collective& c = g_.collectives_[o.collective];
      const int slot = c.group < 0 ? member_index_[o.rank] : group_slot_[o.rank];
      g_.members_[c.members_begin + static_cast<std::uint32_t>(slot)].op = o.id;
    }

  // Stream programs (counting sort by rank and stream; issue order is kept).
  const std::size_t lanes = static_cast<std::size_t>(ranks) * kNumStreams;
  g_.stream_offsets_.assign(lanes + 1, 0);
  for (const Op& o : g_.ops_)
    ++g_.stream_offsets_[static_cast<std::size_t>(o.rank) * kNumStreams +
                         static_cast<int>(o.stream) + 1];
  for (std::size_t i = 0; i < lanes; ++i) g_.stream_offsets_[i + 1] += g_.stream_offsets_[i];
  g_.stream_ops_.resize(g_.ops_.size());
  {
    std::vector<std::uint32_t> cursor(g_.stream_offsets_.begin(), g_.stream_offsets_.end() - 1);
    for (const Op& o : g_.ops_)
      g_.stream_ops_[cursor[static_cast<std::size_t>(o.rank) * kNumStreams +
                            static_cast<int>(o.stream)]++] = o.id;
  }

  // Reverse of waits_on.
  g_.succ_offsets_.assign(g_.ops_.size() + 1, 0);
  for (OpId d : g_.deps_) ++g_.succ_offsets_[d + 1];
  for (std::size_t i = 0; i < g_.ops_.size(); ++i) g_.succ_offsets_[i + 1] += g_.succ_offsets_[i];
  g_.succs_.resize(g_.deps_.size());
  {
    std::vector<std::uint32_t> cursor(g_.succ_offsets_.begin(), g_.succ_offsets_.end() - 1);
    for (const Op& o : g_.ops_)
      for (std::uint32_t i = 0; i < o.deps_count; ++i)
        g_.succs_[cursor[g_.deps_[o.deps_begin + i]]++] = o.id;
  }
  return std::move(g_);
}

TrainingGraph build_training_graph(const Plan& plan, const Scenario& scenario) {
  return GraphBuilder(plan, scenario).build();
}

TrainingGraph build_training_graph_of_ranks(const Plan& plan, const Scenario& scenario,
                                            std::span<const int> ranks) {
  if (ranks.empty()) throw std::logic_error("build_training_graph_of_ranks: no ranks");
  return GraphBuilder(plan, scenario).build(ranks);
}

}  // namespace cephalo::traces

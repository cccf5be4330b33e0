#include "cephalo/sim/replay.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/collective_request.hpp"
#include "cephalo/traces/summarize.hpp"
#include "link_flows.hpp"
#include "replay_internal.hpp"

namespace cephalo::sim {
namespace {

using traces::kNoOp;
using traces::Op;
using traces::OpId;
using traces::OpKind;
using traces::Stream;

enum EventKind : std::uint32_t { kOpDone = 0, kFlowDone = 1, kCollectiveStart = 2 };

class Replay {
 public:
  Replay(const traces::TrainingGraph& g, const Scenario& s, const Plan& p,
         const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
         const SimOptions& o, const detail::ClassView* view)
      : g_(g),
        s_(s),
        plan_(p),
        compute_(compute),
        comm_(comm),
        opt_(o),
        view_(view),
        engine_(make_event_queue(o.queue)),
        flows_(engine_, kFlowDone, o.link_sharing,
               3 * static_cast<std::size_t>(g.num_ranks()) + 2 * s.cluster.nodes.size()) {}

  SimResult run();

 private:
  // Everything the event loop reads of an op, packed and filled by one sequential pass before
  // the loop (durations included): an Op is 88 bytes and the loop visits ops in time order, a
  // rank's program apart in the member loops of a collective, so at 10k ranks the Ops (55 MB)
  // missed the cache on nearly every visit (perf: most of start_op and complete_op).
  struct OpState {
    double mem_alloc = 0;
    double mem_free = 0;
    union {
      Time compute_ticks;  // compute ops: the duration (compute_duration)
      double copy_s;       // copies: the isolated transfer time (copy_seconds)
    };
    std::uint32_t lane = 0;        // rank × kNumStreams + stream
    std::uint32_t remaining = 0;   // cross-stream dependencies not yet done
    std::int32_t collective = -1;  // collectives: the collective's id
    std::uint8_t copy = 0;         // 0 not a copy, 1 d2h, 2 h2d
    OpState() : compute_ticks(0) {}
  };
  static int rank_of_lane(std::uint32_t lane) {
    return static_cast<int>(lane / traces::kNumStreams);
  }
  void try_advance(std::uint32_t lane);
  void start_op(OpId id);
  void start_collective(std::int32_t c);
  void complete_op(OpId id);
  void allocate(OpId id);
  void release(const OpState& op);
  void record_memory(int rank);
  Time compute_duration(const Op& op);
  double copy_seconds(const Op& op);
  double collective_seconds(const traces::Collective& c, bool overlaps_compute);
  bool tp_overlapped(const traces::Collective& c) const;
  double tp_overlap_seconds(const traces::Collective& c, costmodels::CollectiveRequest req);

  void on_flow_done(const Event& e);

  const traces::TrainingGraph& g_;
  const Scenario& s_;
  const Plan& plan_;
  const costmodels::ComputeModel& compute_;
  const costmodels::CommModel& comm_;
  const SimOptions& opt_;
  // Class replay (class_replay.cpp): the graph holds one representative per class of identical
  // ranks; collectives are priced over every rank and the others copy their representative.
  const detail::ClassView* view_;
  Engine engine_;
  // Link sharing of copies and collectives (link_flows.hpp). Links: PCIe up and down per rank
  // (2r, 2r+1), NIC up and down per node (2·ranks + 2n, +1), NVLink port per rank
  // (2·ranks + 2·nodes + r).
  detail::LinkFlows flows_;
  SimResult out_;

  const RankDevice* devices_ = nullptr;  // the cluster's rank table (Cluster::ranks())
  std::vector<int> device_class_;        // per rank: index of its (spec, slowdown) class
  std::vector<OpState> state_;           // per op
  std::vector<std::uint32_t> cursor_;
  std::vector<char> busy_;
  std::vector<Time> compute_end_;  // per rank: when its latest compute op ends
  std::vector<std::uint32_t> arrived_;
  std::vector<char> spans_nodes_;  // per collective (link sharing): collective_spans_nodes
  std::vector<double> mem_, peak_, capacity_;
  std::vector<double> dynamic_scale_;  // per rank: 1 + allocator slack on transient allocations
  std::size_t done_ = 0;
  bool oom_ = false;
  traces::OomDetail oom_detail_;

  std::unordered_map<std::uint64_t, Time> compute_memo_;
  // The job's deferred output-layer weight gradient: per rank, its WeightGradient ops (the
  // flush), one per deferred head backward, which are its first ones; and the two parts' times.
  std::vector<int> deferred_wgrads_;
  std::unordered_map<std::uint64_t, Time> part_memo_[2];
  std::unordered_map<std::uint64_t, double> copy_memo_;
  // (kind, variant, overlap), sharding group (-1: cross-group), bytes, first and last member,
  // calls.
  std::map<std::tuple<int, int, double, int, int, int>, double> collective_memo_;

  std::vector<std::uint32_t> scratch_links_;
  int num_nodes_ = 0;
  // Per node: the last collective whose links include its NIC (a stamp, so a collective over a
  // few nodes costs O(members), not O(nodes): hybrid groups make collectives many and small).
  std::vector<std::int32_t> nic_taken_by_;
};

// ----- memory --------------------------------------------------------------------------------

void Replay::record_memory(int r) {
  if (!opt_.record_memory) return;
  auto& m = out_.memory[r];
  if (!m.empty() && m.back().time_ns == engine_.now())
    m.back().bytes = mem_[r];
  else
    m.push_back({engine_.now(), mem_[r]});
}

void Replay::allocate(OpId id) {
  const OpState& op = state_[id];
  if (op.mem_alloc == 0) return;
  const int r = rank_of_lane(op.lane);
  mem_[r] += op.mem_alloc * dynamic_scale_[r];
  peak_[r] = std::max(peak_[r], mem_[r]);
  if (!oom_ && mem_[r] > capacity_[r]) {
    oom_ = true;
    oom_detail_ = {
        r, static_cast<std::int64_t>(id), g_.op_name(id), mem_[r], capacity_[r], op.mem_alloc};
  }
  record_memory(r);
}

void Replay::release(const OpState& op) {
  if (op.mem_free == 0) return;
  const int r = rank_of_lane(op.lane);
  mem_[r] -= op.mem_free * dynamic_scale_[r];
  record_memory(r);
}

// ----- durations -----------------------------------------------------------------------------

Time Replay::compute_duration(const Op& op) {
  const DeviceSlot& slot = *devices_[op.rank].slot;
  if (op.kind == OpKind::OptimizerStep)
    return to_ticks(compute_.optimizer_time(slot.spec, s_.job, op.shard_parameters).seconds *
                    slot.slowdown);
  costmodels::ComputePhase phase =
      op.kind == OpKind::Forward ? costmodels::ComputePhase::Forward
      : op.kind == OpKind::Backward || op.kind == OpKind::WeightGradient
          ? costmodels::ComputePhase::Backward
          : costmodels::ComputePhase::Recompute;
  // A layer's Recompute under selective recompute reruns only its attention core.
  const bool core = op.kind == OpKind::Recompute &&
                    schedule::recomputes_attention_core(g_.summary().activation_checkpointing,
                                                        op.unit, g_.summary().num_units);
  // Layers are identical, so (device class, TP degree, unit kind, phase, size) determines the
  // time (phase 3: the attention core's recompute).
  const auto kind = costmodels::unit_kind(s_.job.model, op.unit);
  const int tp = g_.place(op.rank).tensor_parallel;  // 1 on an FSDP plan's (one-stage) ranks
  std::uint64_t key = (static_cast<std::uint64_t>(device_class_[op.rank]) << 48) |
                      (static_cast<std::uint64_t>(tp) << 36) |
                      (static_cast<std::uint64_t>(kind) << 34) |
                      (static_cast<std::uint64_t>(core ? 3 : static_cast<int>(phase)) << 32) |
                      static_cast<std::uint32_t>(op.micro_batch_size);
  // A deferred output-layer weight gradient: the flush's GEMM takes its share of the head's
  // backward (costmodels::output_weight_gradient_share, the estimate's rule), and each deferred
  // head backward (the rank's first ones, as many as its flush has) the rest.
  const bool flush = op.kind == OpKind::WeightGradient;
  const bool leaves = op.kind == OpKind::Backward && !deferred_wgrads_.empty() &&
                      op.micro_batch < deferred_wgrads_[static_cast<std::size_t>(op.rank)] &&
                      kind == costmodels::UnitKind::Head;
  auto& memo = flush ? part_memo_[0] : leaves ? part_memo_[1] : compute_memo_;
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  double seconds =
      compute_.unit_time(slot.spec, s_.job, op.unit, phase, op.micro_batch_size).seconds;
  // The attention core's share of the recompute, split by heads (costmodels/tensor_parallel.hpp:
  // the rule the 3D estimate prices it with); a tensor-parallel rank's share of the unit
  // otherwise.
  if (core)
    seconds *= costmodels::attention_core_recompute_factor(
        costmodels::layer_attention_core_share(slot.spec, s_.job, op.micro_batch_size), tp);
  else if (tp > 1)
    seconds *= costmodels::tensor_parallel_factor(
        s_.job.model, op.unit, phase, tp, g_.summary().sequence_parallel,
        costmodels::layer_replicated_share(slot.spec, s_.job, op.micro_batch_size));
  if (flush || leaves) {
    const double share =
        costmodels::output_weight_gradient_share(slot.spec, s_.job, op.micro_batch_size);
    seconds *= flush ? share : 1 - share;
  }
  Time t = to_ticks(seconds * slot.slowdown);
  memo.emplace(key, t);
  return t;
}

double Replay::copy_seconds(const Op& op) {
  std::uint64_t key =
      (static_cast<std::uint64_t>(op.rank) << 32) | static_cast<std::uint32_t>(op.micro_batch_size);
  auto it = copy_memo_.find(key);
  if (it != copy_memo_.end()) return it->second;
  double t = comm_.copy_time(s_.cluster, op.rank, op.bytes);
  copy_memo_.emplace(key, t);
  return t;
}

double Replay::collective_seconds(const traces::Collective& c, bool overlaps_compute) {
  // The graph resolved the variant (from the integer slices each member moves); the comm model
  // prices it from the members' shard bytes and, for uneven shards, the padded/grouped choice.
  // Groups of a hybrid plan differ in devices and links, so the group is part of the key.
  // Groups are numbered per data-parallel domain (an FSDP plan has one) and the tensor-parallel
  // and pipeline collectives have none: their members say which devices and links they use, so
  // the first and last member are part of the key too (a group's collectives all have the same
  // members, so this splits no FSDP plan's prices). A tensor-parallel collective stands for
  // `calls` of them (a layer's two, the embedding's one, the loss's three), so the calls are
  // part of the key too.
  const auto members = g_.members(c);
  // Under the job's TP communication overlap a layer's gather/scatter is priced against the
  // GEMMs of the compute op that issues it, so that op's kind is part of the key too.
  const bool tp_overlap = tp_overlapped(c);
  auto key = std::make_tuple(
      (8 * static_cast<int>(c.kind) + 2 * static_cast<int>(c.variant)) +
          (overlaps_compute ? 1 : 0) + (tp_overlap ? 256 * (1 + static_cast<int>(c.issued_by)) : 0),
      c.group, c.total_bytes, members.front().rank, members.back().rank, c.calls);
  auto it = collective_memo_.find(key);
  if (it != collective_memo_.end()) return it->second;
  costmodels::CollectiveRequest req = view_ ? full_collective_request(g_, c, overlaps_compute)
                                            : traces::collective_request(g_, c, overlaps_compute);
  const double t = tp_overlap ? tp_overlap_seconds(c, std::move(req))
                              : traces::collective_seconds(comm_, s_.cluster, std::move(req), c);
  collective_memo_.emplace(key, t);
  return t;
}

bool Replay::tp_overlapped(const traces::Collective& c) const {
  return c.kind == OpKind::TpGatherScatter && s_.job.implementation.tp_comm_overlap &&
         costmodels::unit_kind(s_.job.model, c.unit) == costmodels::UnitKind::Layer;
}

// A layer's sequence-parallel gather/scatter under the job's TP communication overlap: each
// call's all-gather and reduce-scatter exposed only for what the issuing op's GEMMs do not hide
// (costmodels::tp_overlap_exposed_seconds, the 3D estimate's rule), the GEMMs timed as the
// compute op is (the first member's device; a TP group is of one GPU type).
double Replay::tp_overlap_seconds(const traces::Collective& c, costmodels::CollectiveRequest req) {
  const traces::CollectiveMember& first = g_.members(c).front();
  const Op& op = g_.op(first.op);
  const DeviceSlot& slot = *devices_[first.rank].slot;
  const costmodels::ComputePhase phase =
      c.issued_by == OpKind::Backward    ? costmodels::ComputePhase::Backward
      : c.issued_by == OpKind::Recompute ? costmodels::ComputePhase::Recompute
                                         : costmodels::ComputePhase::Forward;
  const double layer_s =
      compute_.unit_time(slot.spec, s_.job, c.unit, phase, op.micro_batch_size).seconds *
      slot.slowdown;
  req.kind = costmodels::CollectiveKind::AllGather;
  const double gather = comm_.collective(s_.cluster, req).seconds;
  req.kind = costmodels::CollectiveKind::ReduceScatter;
  const double scatter = comm_.collective(s_.cluster, req).seconds;
  const auto shares = costmodels::layer_linear_shares(slot.spec, s_.job, op.micro_batch_size);
  // The layer's calls come in the graph's pairs (DESIGN §4: 2 per pass).
  return costmodels::tp_overlap_exposed_seconds(
             shares, phase, layer_s, g_.place(first.rank).tensor_parallel, gather, scatter) *
         (c.calls / 2.0);
}

// ----- flows ---------------------------------------------------------------------------------

void Replay::on_flow_done(const Event& e) {
  detail::LinkFlows::Owner owner;
  if (!flows_.finish(e, owner)) return;  // re-timed since: a stale completion
  if (owner.collective >= 0) {
    for (const auto& m : g_.members(g_.collectives()[owner.collective])) complete_op(m.op);
  } else {
    complete_op(owner.op);
  }
}

// ----- streams and ops -----------------------------------------------------------------------

void Replay::try_advance(std::uint32_t lane) {
  if (busy_[lane]) return;
  const int rank = static_cast<int>(lane / traces::kNumStreams);
  auto prog = g_.stream_program(rank, static_cast<Stream>(lane % traces::kNumStreams));
  if (cursor_[lane] >= prog.size()) return;
  OpId id = prog[cursor_[lane]];
  if (state_[id].remaining > 0) return;
  busy_[lane] = 1;
  start_op(id);
}

void Replay::start_op(OpId id) {
  const OpState& op = state_[id];
  const Time now = engine_.now();
  if (op.collective >= 0) {
    out_.arrive_ns[id] = now;
    const auto& c = g_.collectives()[op.collective];
    // The last arrival starts it after the other events of this instant (completions queued
    // earlier), so a compute op that starts at this same instant counts as overlapping it.
    if (++arrived_[op.collective] == c.members_count)
      engine_.schedule_at(now, kCollectiveStart, static_cast<std::uint32_t>(op.collective));
    return;
  }
  out_.start_ns[id] = now;
  allocate(id);
  const int rank = rank_of_lane(op.lane);
  if (op.copy != 0) {
    const std::uint32_t link = static_cast<std::uint32_t>(2 * rank + (op.copy == 2 ? 1 : 0));
    flows_.start({id, -1}, std::span<const std::uint32_t>(&link, 1), op.copy_s);
    return;
  }
  const Time end = now + op.compute_ticks;
  compute_end_[rank] = end;
  engine_.schedule_at(end, kOpDone, id);
}

void Replay::start_collective(std::int32_t c) {
  const auto& col = g_.collectives()[c];
  const Time now = engine_.now();
  const int ranks = g_.num_ranks();
  scratch_links_.clear();
  // The collective overlaps compute when, as it starts, any member's compute stream runs an op
  // that ends after this instant: one that starts at this instant counts (the start was
  // deferred behind this instant's completions), one ending exactly now does not.
  bool overlaps_compute = false;
  for (const auto& m : g_.members(col)) {
    out_.start_ns[m.op] = now;
    overlaps_compute |= compute_end_[m.rank] > now;
    allocate(m.op);
  }
  if (opt_.link_sharing) {
    // Which links the collective crosses: NVLink ports alone when its full membership sits in
    // one node of NVLink (the first member's), else every member's PCIe and its node's NIC.
    const bool multi_node = spans_nodes_[static_cast<std::size_t>(c)] != 0;
    const int first_node = devices_[g_.members(col).front().rank].node;
    const bool nvlink = !multi_node && s_.cluster.nodes[first_node].intra_link.kind == "nvlink";
    for (const auto& m : g_.members(col)) {
      if (nvlink) {
        scratch_links_.push_back(static_cast<std::uint32_t>(2 * ranks + 2 * num_nodes_ + m.rank));
      } else {
        scratch_links_.push_back(static_cast<std::uint32_t>(2 * m.rank));
        scratch_links_.push_back(static_cast<std::uint32_t>(2 * m.rank + 1));
      }
      if (multi_node) {
        int node = devices_[m.rank].node;
        if (nic_taken_by_[node] != c) {
          nic_taken_by_[node] = c;
          scratch_links_.push_back(static_cast<std::uint32_t>(2 * ranks + 2 * node));
          scratch_links_.push_back(static_cast<std::uint32_t>(2 * ranks + 2 * node + 1));
        }
      }
    }
  }
  flows_.start({kNoOp, c}, scratch_links_, collective_seconds(col, overlaps_compute));
}

void Replay::complete_op(OpId id) {
  const OpState& op = state_[id];
  out_.end_ns[id] = engine_.now();
  release(op);
  const std::uint32_t lane = op.lane;
  busy_[lane] = 0;
  ++cursor_[lane];
  ++done_;
  for (OpId succ : g_.waited_by(id))
    if (--state_[succ].remaining == 0) try_advance(state_[succ].lane);
  try_advance(lane);
}

// ----- run -----------------------------------------------------------------------------------

SimResult Replay::run() {
  const int ranks = g_.num_ranks();
  const std::size_t n = g_.num_ops();
  if (ranks != s_.cluster.num_ranks() || ranks != static_cast<int>(plan_.ranks.size()))
    throw Error("simulate: the graph, plan and cluster disagree on the number of ranks");
  devices_ = s_.cluster.ranks().data();
  num_nodes_ = static_cast<int>(s_.cluster.nodes.size());
  nic_taken_by_.assign(static_cast<std::size_t>(num_nodes_), -1);
  {
    std::map<std::pair<std::string, double>, int> classes;
    for (const auto& d : s_.cluster.ranks())
      device_class_.push_back(classes
                                  .emplace(std::make_pair(d.slot->spec.name, d.slot->slowdown),
                                           static_cast<int>(classes.size()))
                                  .first->second);
  }
  state_.resize(n);
  if (s_.job.implementation.defer_embedding_wgrad_compute) {
    deferred_wgrads_.assign(static_cast<std::size_t>(ranks), 0);
    for (const Op& op : g_.ops())
      if (op.kind == OpKind::WeightGradient) ++deferred_wgrads_[static_cast<std::size_t>(op.rank)];
  }
  for (const Op& op : g_.ops()) {
    OpState& st = state_[op.id];
    st.mem_alloc = op.mem_alloc;
    st.mem_free = op.mem_free;
    st.lane = static_cast<std::uint32_t>(op.rank) * traces::kNumStreams +
              static_cast<std::uint32_t>(op.stream);
    st.remaining = op.deps_count;
    st.collective = op.collective;
    if (op.collective >= 0) continue;
    if (traces::is_copy(op.kind)) {
      st.copy = op.kind == OpKind::CopyH2D ? 2 : 1;
      st.copy_s = copy_seconds(op);
    } else {
      st.compute_ticks = compute_duration(op);
    }
  }
  const std::size_t lanes = static_cast<std::size_t>(ranks) * traces::kNumStreams;
  cursor_.assign(lanes, 0);
  busy_.assign(lanes, 0);
  compute_end_.assign(static_cast<std::size_t>(ranks), 0);
  arrived_.assign(g_.collectives().size(), 0);
  if (opt_.link_sharing) spans_nodes_ = detail::collective_spans_nodes(g_, s_);
  out_.start_ns.assign(n, -1);
  out_.end_ns.assign(n, -1);
  out_.arrive_ns.assign(n, -1);
  if (opt_.record_memory) out_.memory.assign(ranks, {});

  const costmodels::MemoryConstants constants;
  mem_.resize(ranks);
  peak_.resize(ranks);
  capacity_.resize(ranks);
  dynamic_scale_.resize(ranks);
  // What a rank's memory reads of its device, once per slot kind (RankDevice::slot_kind): each
  // rank's own slot is one of 100k places at 100k ranks.
  struct SlotMemory {
    bool known = false;
    double reserve = 0, dynamic_scale = 1, capacity = 0;
  };
  std::vector<SlotMemory> slot_memory;
  for (int r = 0; r < ranks; ++r) {
    const auto kind = static_cast<std::size_t>(devices_[r].slot_kind);
    if (kind >= slot_memory.size()) slot_memory.resize(kind + 1);
    SlotMemory& sm = slot_memory[kind];
    if (!sm.known) {
      const DeviceSpec& spec = devices_[r].slot->spec;
      const bool gpu_runtime = costmodels::runs_gpu_runtime(spec);
      sm.known = true;
      sm.reserve = opt_.reserve_bytes >= 0
                       ? opt_.reserve_bytes
                       : costmodels::runtime_reserve_bytes(gpu_runtime, ranks, constants);
      sm.dynamic_scale = 1.0 + (opt_.fragmentation >= 0
                                    ? opt_.fragmentation
                                    : costmodels::allocator_slack_fraction(gpu_runtime, constants));
      sm.capacity = traces::usable_capacity_bytes(spec, opt_.usable_fraction);
    }
    dynamic_scale_[r] = sm.dynamic_scale;
    mem_[r] = g_.static_bytes(r) + sm.reserve;
    peak_[r] = mem_[r];
    capacity_[r] = sm.capacity;
    if (!oom_ && mem_[r] > capacity_[r]) {
      oom_ = true;
      oom_detail_ = {r, -1, "sharded training state", mem_[r], capacity_[r], mem_[r]};
    }
    record_memory(r);
  }

  for (std::uint32_t lane = 0; lane < lanes; ++lane) try_advance(lane);
  engine_.run([&](const Event& e) {
    if (e.kind == kOpDone)
      complete_op(e.target);
    else if (e.kind == kFlowDone)
      on_flow_done(e);
    else
      start_collective(static_cast<std::int32_t>(e.target));
  });
  if (done_ != n) {
    for (const Op& op : g_.ops())
      if (out_.end_ns[op.id] < 0)
        throw RuntimeFailure("simulation stalled: " + g_.op_name(op.id) + " (op " +
                             std::to_string(op.id) + ") never completed; " +
                             std::to_string(n - done_) + " ops left");
  }

  Time end = 0;
  for (std::size_t i = 0; i < n; ++i) end = std::max(end, out_.end_ns[i]);
  out_.iteration_ns = end;
  traces::IterationMeasurements m;
  m.source = "sim";
  m.start_ns = out_.start_ns;
  m.end_ns = out_.end_ns;
  if (view_ && oom_ && oom_detail_.op >= 0) {
    // The op as the full graph numbers it: ops are numbered rank after rank, and every rank has
    // as many as its representative, so the ranks before this one count their classes' ops.
    const int at = oom_detail_.rank;
    std::int64_t before = 0;
    for (int r = 0; r < at; ++r)
      before += static_cast<std::int64_t>(g_.program(view_->representative[r]).size());
    oom_detail_.op =
        before + (oom_detail_.op - static_cast<std::int64_t>(g_.program(at).front().id));
  }
  if (oom_) m.oom = oom_detail_;
  m.events = engine_.processed();
  m.record_ops = opt_.record_ops;
  m.usable_fraction = opt_.usable_fraction;
  m.rank_rows = opt_.rank_rows;
  // A class replay's ranks peak where their representative did.
  if (view_)
    for (int r = 0; r < ranks; ++r) peak_[r] = peak_[view_->representative[r]];
  m.peak_memory_bytes = peak_;
  out_.report = traces::summarize(g_, s_, plan_, m);
  out_.peak_bytes = std::move(peak_);
  out_.capacity_bytes = std::move(capacity_);
  if (view_ && opt_.rank_rows) {
    // The ranks without ops have empty lanes in the summary: they did what their class did.
    auto& rr = out_.report.ranks;
    for (int r = 0; r < ranks; ++r) {
      const auto& from = rr[view_->representative[r]];
      auto& to = rr[r];
      to.compute_s = from.compute_s;
      to.comm_s = from.comm_s;
      to.copy_s = from.copy_s;
      to.exposed_comm_s = from.exposed_comm_s;
      to.idle_s = from.idle_s;
      to.tp_comm_s = from.tp_comm_s;
      to.pp_comm_s = from.pp_comm_s;
      to.exposed_tp_s = from.exposed_tp_s;
      to.exposed_pp_s = from.exposed_pp_s;
      to.exposed_dp_s = from.exposed_dp_s;
      to.bubble_s = from.bubble_s;
    }
  }
  return std::move(out_);
}

}  // namespace

SimResult simulate(const traces::TrainingGraph& graph, const Scenario& scenario, const Plan& plan,
                   const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                   const SimOptions& options) {
  return Replay(graph, scenario, plan, compute, comm, options, nullptr).run();
}

namespace detail {
SimResult replay_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan, const costmodels::ComputeModel& compute,
                         const costmodels::CommModel& comm, const SimOptions& options,
                         const ClassView& view) {
  return Replay(graph, scenario, plan, compute, comm, options, &view).run();
}
}  // namespace detail

traces::TraceInput trace_input(const SimResult& result, const traces::TrainingGraph& graph,
                               const Scenario& scenario) {
  traces::TraceInput in;
  in.graph = &graph;
  in.start_ns = &result.start_ns;
  in.end_ns = &result.end_ns;
  in.rank_labels = traces::rank_labels(scenario.cluster);
  in.memory = result.memory;
  in.title = "cephalo simulate: " + scenario.name;
  return in;
}

}  // namespace cephalo::sim

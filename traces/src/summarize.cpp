#include "cephalo/traces/summarize.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

namespace cephalo::traces {
namespace {

using Interval = std::pair<std::int64_t, std::int64_t>;

// |∪ intervals|. The intervals of one stream come in stream order (starts non-decreasing; a
// measured lane may still be out of order by a clock tick, hence the check before sorting).
std::int64_t union_length(std::vector<Interval>& v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  std::int64_t total = 0, lo = 0, hi = -1;
  bool open = false;
  for (auto [a, b] : v) {
    if (!open || a > hi) {
      if (open) total += hi - lo;
      lo = a;
      hi = b;
      open = true;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (open) total += hi - lo;
  return total;
}

// The intervals of the ops of one rank's stream that ran, in stream order, appended to `out`.
void lane(const TrainingGraph& g, int rank, Stream s, const IterationMeasurements& m,
          std::vector<Interval>& out) {
  for (OpId id : g.stream_program(rank, s))
    if (m.start_ns[id] >= 0) out.emplace_back(m.start_ns[id], m.end_ns[id]);
}

// Sorted union of two sorted lists (a linear merge instead of a sort).
void merge_into(const std::vector<Interval>& a, const std::vector<Interval>& b,
                std::vector<Interval>& out) {
  out.resize(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), out.begin());
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

double usable_capacity_bytes(const DeviceSpec& spec, double usable_fraction) {
  const double f =
      usable_fraction >= 0 ? usable_fraction : costmodels::MemoryConstants{}.usable_fraction;
  return spec.memory_bytes * f;
}

double effective_peak_flops(const DeviceSlot& slot, Dtype compute) {
  return slot.spec.peak_flops(compute) / slot.slowdown;
}

double model_flops_per_iteration(const Job& job, int global_batch) {
  double flops = 0;
  for (int u = 0; u < costmodels::num_units(job.model); ++u) {
    const auto f = costmodels::unit_flops(job.model, u, job.sequence_length, 1);
    flops += (f.forward + f.backward) * global_batch;
  }
  return flops;
}

double hardware_flops_per_iteration(const Job& job, const Plan& plan) {
  const int batch = plan.global_batch();
  const int units = costmodels::num_units(job.model);
  double flops = model_flops_per_iteration(job, batch);
  for (int u = 0; u < units; ++u)
    if (schedule::recomputes(plan.activation_checkpointing, u, units))
      flops += costmodels::unit_flops(job.model, u, job.sequence_length, 1).forward * batch;
    else if (schedule::recomputes_attention_core(plan.activation_checkpointing, u, units))
      flops += costmodels::attention_core_forward_flops(job, 1) * batch;
  return flops;
}

Throughput throughput(const Scenario& scenario, const Plan& plan, double t) {
  Throughput out;
  if (t <= 0) return out;
  // Summed rank by rank (the order fixes the last bits), each slot kind's peak read once: each
  // rank's own slot is one of 100k places at 100k ranks.
  double peak_flops = 0;
  std::vector<double> kind_flops;
  for (const auto& d : scenario.cluster.ranks()) {
    const auto kind = static_cast<std::size_t>(d.slot_kind);
    if (kind >= kind_flops.size()) kind_flops.resize(kind + 1, -1.0);
    if (kind_flops[kind] < 0)
      kind_flops[kind] = effective_peak_flops(*d.slot, scenario.job.precision.compute);
    peak_flops += kind_flops[kind];
  }
  const int batch = plan.global_batch();  // a sum over the ranks: once
  out.samples_per_s = batch / t;
  out.tokens_per_s = out.samples_per_s * scenario.job.sequence_length;
  if (peak_flops > 0) {
    out.mfu = model_flops_per_iteration(scenario.job, batch) / (t * peak_flops);
    out.hfu = hardware_flops_per_iteration(scenario.job, plan) / (t * peak_flops);
  }
  return out;
}

Throughput report_throughput(const IterationReport& r) {
  return {r.samples_per_s, r.tokens_per_s, r.mfu, r.hfu};
}

std::string render_throughput(const Throughput& rate) {
  const std::string mfu = fixed(100.0 * rate.mfu, 1), hfu = fixed(100.0 * rate.hfu, 1);
  return fixed(rate.samples_per_s, 2) + " samples/s, " + fixed(rate.tokens_per_s, 0) +
         " tokens/s, MFU " + mfu + " %" + (hfu != mfu ? ", HFU " + hfu + " %" : std::string());
}

void add_predicted_throughput(Json& record, const Throughput& rate) {
  record["predicted_samples_per_s"] = rate.samples_per_s;
  record["predicted_tokens_per_s"] = rate.tokens_per_s;
  record["predicted_mfu"] = rate.mfu;
  record["predicted_hfu"] = rate.hfu;
}

std::string plan_hash(const Plan& plan) {
  // Every field of the plan that decides what runs, written field by field (not through the
  // JSON writer: a 10k-rank plan is hashed once per simulation, also inside the planner's
  // search). A field added to Plan must be added here.
  std::uint64_t h = 14695981039346656037ull;
  auto add = [&h](const std::string& text) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;  // field separator
    h *= 1099511628211ull;
  };
  char num[40];
  auto add_number = [&](double v) {
    // The text of printf's "%.17g" (to_chars with a precision is specified as printf in the C
    // locale), without printf's cost: at 100k ranks snprintf was 15 % of planning.
    const auto end =
        std::to_chars(num, num + sizeof num - 1, v, std::chars_format::general, 17).ptr;
    *end = '\0';
    add(num);
  };
  add_number(plan.version);
  add(plan.scenario);
  add(to_string(plan.accumulation));
  // Hashed only when not the default, so records of default plans keep their hashes.
  if (!(plan.activation_checkpointing == ActivationCheckpointing{}))
    add("checkpointing " + to_string(plan.activation_checkpointing));
  add(to_string(plan.offload));
  add(plan.prefetch ? "prefetch" : "no prefetch");
  add(to_string(plan.uneven_collective));
  // Likewise the split, only when there is one.
  if (plan.has_split()) add("split " + to_json(plan.model_split).dump());
  // And the nodes a plan leaves some idle with (the same rows on other nodes are another run).
  if (!plan.nodes.empty()) add("nodes " + plan_nodes_json(plan.nodes).dump());
  // Integers print as "%.17g" prints them (every digit, below 10^17) without a double's
  // formatting.
  auto add_integer = [&](int v) {
    const auto end = std::to_chars(num, num + sizeof num - 1, v).ptr;
    *end = '\0';
    add(num);
  };
  // A row's batch, micro-batches and share, each field's text and separator as the bytes add()
  // hashes, kept while ranks repeat them: formatting the share is most of a row's cost, and a
  // 100k-rank plan has a few distinct rows.
  std::string tail;
  const PlanRank* tail_of = nullptr;
  for (const PlanRank& r : plan.ranks) {
    add_integer(r.rank);
    add_integer(r.node);
    add(r.gpu);
    if (!tail_of || r.batch != tail_of->batch || r.micro_batch != tail_of->micro_batch ||
        r.micro_batches != tail_of->micro_batches ||
        std::bit_cast<std::uint64_t>(r.state_share) !=
            std::bit_cast<std::uint64_t>(tail_of->state_share)) {
      tail.clear();
      for (const double v : {static_cast<double>(r.batch), static_cast<double>(r.micro_batch),
                             static_cast<double>(r.micro_batches), r.state_share}) {
        tail.append(
            num, std::to_chars(num, num + sizeof num - 1, v, std::chars_format::general, 17).ptr);
        tail.push_back('\xff');
      }
      tail_of = &r;
    }
    for (unsigned char c : tail) {
      h ^= c;
      h *= 1099511628211ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

IterationReport summarize(const TrainingGraph& g, const Scenario& scenario, const Plan& plan,
                          const IterationMeasurements& m) {
  const int ranks = g.num_ranks();
  const std::size_t n = g.num_ops();
  if (m.start_ns.size() != n || m.end_ns.size() != n)
    throw RuntimeFailure("summarize: " + std::to_string(m.start_ns.size()) + " start and " +
                         std::to_string(m.end_ns.size()) + " end times for a graph of " +
                         std::to_string(n) + " ops");
  if (static_cast<int>(m.peak_memory_bytes.size()) != ranks)
    throw RuntimeFailure("summarize: " + std::to_string(m.peak_memory_bytes.size()) +
                         " memory peaks for " + std::to_string(ranks) + " ranks");
  const auto& devices = scenario.cluster.ranks();
  if (static_cast<int>(devices.size()) != ranks)
    throw RuntimeFailure("summarize: the graph has " + std::to_string(ranks) +
                         " ranks, the cluster " + std::to_string(devices.size()));

  std::int64_t end = 0;
  for (std::size_t i = 0; i < n; ++i) end = std::max(end, m.end_ns[i]);
  if (m.iteration_end_ns >= 0) end = std::max(end, m.iteration_end_ns);

  IterationReport rep;
  rep.source = m.source;
  if (m.rank_rows) rep.plan_hash = plan_hash(plan);
  rep.iteration_time_s = seconds(end);
  const double t = rep.iteration_time_s;
  const Throughput rate = throughput(scenario, plan, t);
  rep.samples_per_s = rate.samples_per_s;
  rep.tokens_per_s = rate.tokens_per_s;
  rep.mfu = rate.mfu;
  rep.hfu = rate.hfu;
  rep.events = m.events;

  // What a rank's row reads of its device, once per slot kind (RankDevice::slot_kind): each
  // rank's own slot is one of 100k places at 100k ranks.
  struct SlotRow {
    const DeviceSlot* slot = nullptr;
    double capacity = 0;
  };
  std::vector<SlotRow> slot_rows;
  auto slot_row = [&](const RankDevice& d) -> const SlotRow& {
    const auto kind = static_cast<std::size_t>(d.slot_kind);
    if (kind >= slot_rows.size()) slot_rows.resize(kind + 1);
    SlotRow& slot = slot_rows[kind];
    if (!slot.slot) slot = {d.slot, usable_capacity_bytes(d.slot->spec, m.usable_fraction)};
    return slot;
  };
  // A peak above capacity is an OOM verdict when the run saw none (the first such rank).
  auto judge_peak = [&](int r, double peak, double capacity) {
    if (!m.oom && !rep.oom && peak > capacity) {
      rep.oom = true;
      rep.oom_detail = OomDetail{r, -1, "measured peak", peak, capacity, 0.0};
    }
  };
  if (!m.rank_rows)
    for (int r = 0; r < ranks; ++r)
      judge_peak(r, m.peak_memory_bytes[static_cast<std::size_t>(r)],
                 slot_row(devices[static_cast<std::size_t>(r)]).capacity);
  // The rows, when asked for (the peaks are judged there, row by row).
  const int row_ranks = m.rank_rows ? ranks : 0;
  rep.ranks.reserve(static_cast<std::size_t>(row_ranks));
  const bool split = g.summary().split;
  std::vector<Interval> compute, comm, copies, d2h, h2d, busy, tp, pp, work, scratch;
  for (int r = 0; r < row_ranks; ++r) {
    compute.clear();
    comm.clear();
    d2h.clear();
    h2d.clear();
    tp.clear();
    pp.clear();
    std::int64_t last_backward_end = 0;
    if (split) {
      // The compute stream holds the tensor-parallel collectives too: counted apart.
      for (OpId id : g.stream_program(r, Stream::Compute)) {
        if (m.start_ns[id] < 0) continue;
        const OpKind kind = g.op(id).kind;
        (is_tensor_parallel(kind) ? tp : compute).emplace_back(m.start_ns[id], m.end_ns[id]);
        if (kind == OpKind::Backward) last_backward_end = std::max(last_backward_end, m.end_ns[id]);
      }
      lane(g, r, Stream::Send, m, pp);
      lane(g, r, Stream::Recv, m, pp);
      std::sort(pp.begin(), pp.end());
    } else {
      lane(g, r, Stream::Compute, m, compute);
    }
    lane(g, r, Stream::Comm, m, comm);
    lane(g, r, Stream::D2H, m, d2h);
    lane(g, r, Stream::H2D, m, h2d);
    const std::int64_t compute_ns = union_length(compute);  // sorts compute and comm if needed
    std::int64_t comm_ns = union_length(comm);
    RankReport rr;
    std::int64_t busy_ns = 0;
    if (split) {
      // Exposed communication by kind, attributed in order: TP (blocking the compute stream),
      // what the pipeline transfers add, then what the data-parallel collectives add.
      merge_into(compute, tp, work);  // compute ∪ TP
      const std::int64_t with_tp = union_length(work);
      merge_into(work, pp, scratch);  // ∪ PP
      std::sort(scratch.begin(), scratch.end());
      const std::int64_t with_pp = union_length(scratch);
      merge_into(scratch, comm, busy);  // ∪ DP
      std::sort(busy.begin(), busy.end());
      busy_ns = union_length(busy);
      rr.stage = g.place(r).stage;
      rr.tp_comm_s = seconds(union_length(tp));
      rr.pp_comm_s = seconds(union_length(pp));
      rr.exposed_tp_s = seconds(with_tp - compute_ns);
      rr.exposed_pp_s = seconds(with_pp - with_tp);
      rr.exposed_dp_s = seconds(busy_ns - with_pp);
      // Busy time up to the end of the rank's last backward: the rest of that span is bubble.
      work.clear();
      for (auto [a, b] : busy)
        if (a < last_backward_end) work.emplace_back(a, std::min(b, last_backward_end));
      rr.bubble_s = seconds(last_backward_end - union_length(work));
      // comm_s: every collective's time, tensor-parallel and transfers included.
      merge_into(tp, pp, work);
      std::sort(work.begin(), work.end());
      merge_into(work, comm, scratch);
      std::sort(scratch.begin(), scratch.end());
      comm_ns = union_length(scratch);
    } else {
      merge_into(compute, comm, busy);
      busy_ns = union_length(busy);
    }
    if (!std::is_sorted(d2h.begin(), d2h.end())) std::sort(d2h.begin(), d2h.end());
    if (!std::is_sorted(h2d.begin(), h2d.end())) std::sort(h2d.begin(), h2d.end());
    merge_into(d2h, h2d, copies);
    const std::int64_t copy_ns = union_length(copies);
    const auto& d = devices[static_cast<std::size_t>(r)];
    const SlotRow& slot = slot_row(d);
    rr.rank = r;
    rr.gpu = slot.slot->spec.name;
    rr.node = d.node;
    rr.slowdown = slot.slot->slowdown;
    rr.compute_s = seconds(compute_ns);
    rr.comm_s = seconds(comm_ns);
    rr.copy_s = seconds(copy_ns);
    rr.exposed_comm_s = seconds(busy_ns - compute_ns);
    rr.idle_s = seconds(end - busy_ns);
    rr.peak_memory_bytes = m.peak_memory_bytes[static_cast<std::size_t>(r)];
    rr.capacity_bytes = slot.capacity;
    judge_peak(r, rr.peak_memory_bytes, rr.capacity_bytes);
    rep.ranks.push_back(rr);
  }
  if (m.oom) {
    rep.oom = true;
    rep.oom_detail = m.oom;
  }
  if (m.record_ops) {
    rep.ops.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      if (m.start_ns[i] >= 0)
        rep.ops.push_back(
            {static_cast<std::uint32_t>(i), seconds(m.start_ns[i]), seconds(m.end_ns[i])});
  }
  return rep;
}

}  // namespace cephalo::traces

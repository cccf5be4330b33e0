#include "cephalo/traces/summarize.hpp"

#include <algorithm>
#include <cstdio>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/memory_model.hpp"

namespace cephalo::traces {
namespace {

using Interval = std::pair<std::int64_t, std::int64_t>;

// |∪ intervals| (sorts its argument).
std::int64_t union_length(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end());
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

std::string plan_hash(const Plan& plan) {
  Json j = to_json(plan);
  j.erase("strategy");
  j.erase("predicted");
  const std::string text = j.dump();
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
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
  const auto devices = scenario.cluster.ranks();
  if (static_cast<int>(devices.size()) != ranks)
    throw RuntimeFailure("summarize: the graph has " + std::to_string(ranks) +
                         " ranks, the cluster " + std::to_string(devices.size()));

  std::int64_t end = 0;
  for (std::size_t i = 0; i < n; ++i) end = std::max(end, m.end_ns[i]);
  if (m.iteration_end_ns >= 0) end = std::max(end, m.iteration_end_ns);

  IterationReport rep;
  rep.source = m.source;
  rep.plan_hash = plan_hash(plan);
  rep.iteration_time_s = seconds(end);
  const double t = rep.iteration_time_s;
  rep.samples_per_s = t > 0 ? g.summary().global_batch / t : 0;
  rep.tokens_per_s = rep.samples_per_s * g.summary().sequence_length;
  double peak_flops = 0;
  for (const auto& d : devices)
    peak_flops += effective_peak_flops(*d.slot, scenario.job.precision.compute);
  rep.mfu = t > 0 && peak_flops > 0 ? g.summary().model_flops_per_iteration / (t * peak_flops) : 0;
  rep.events = m.events;

  std::vector<Interval> compute, comm, copies, busy;
  for (int r = 0; r < ranks; ++r) {
    compute.clear();
    comm.clear();
    copies.clear();
    for (const Op& op : g.program(r)) {
      const std::int64_t a = m.start_ns[op.id], b = m.end_ns[op.id];
      if (a < 0) continue;
      (is_compute(op.kind) ? compute : is_collective(op.kind) ? comm : copies).emplace_back(a, b);
    }
    busy = compute;
    busy.insert(busy.end(), comm.begin(), comm.end());
    const std::int64_t compute_ns = union_length(compute);
    const std::int64_t busy_ns = union_length(busy);
    const auto& d = devices[static_cast<std::size_t>(r)];
    RankReport rr;
    rr.rank = r;
    rr.gpu = d.slot->spec.name;
    rr.node = d.node;
    rr.slowdown = d.slot->slowdown;
    rr.compute_s = seconds(compute_ns);
    rr.comm_s = seconds(union_length(comm));
    rr.copy_s = seconds(union_length(copies));
    rr.exposed_comm_s = seconds(busy_ns - compute_ns);
    rr.idle_s = seconds(end - busy_ns);
    rr.peak_memory_bytes = m.peak_memory_bytes[static_cast<std::size_t>(r)];
    rr.capacity_bytes = usable_capacity_bytes(d.slot->spec, m.usable_fraction);
    if (!m.oom && !rep.oom && rr.peak_memory_bytes > rr.capacity_bytes) {
      rep.oom = true;
      rep.oom_detail =
          OomDetail{r, -1, "measured peak", rr.peak_memory_bytes, rr.capacity_bytes, 0.0};
    }
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

// The measured report of the last step (the SimResult schema): every rank's op intervals and
// memory samples gathered with host all-reduces, busy time per lane, MFU.
#include <algorithm>

#include "cephalo/backend/executor.hpp"
#include "cephalo/core/table.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

void Executor::last_op_times(std::vector<std::int64_t>& start_ns,
                             std::vector<std::int64_t>& end_ns) {
  auto& I = *impl_;
  const std::size_t n = I.graph.num_ops();
  // Each op belongs to exactly one rank: a sum over ranks of (own value + 1, else 0) gathers
  // them all (values fit a double exactly below 2^53 ns).
  std::vector<double> buf(2 * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    if (I.last_start[i] >= 0) {
      buf[i] = static_cast<double>(I.last_start[i] + 1);
      buf[n + i] = static_cast<double>(I.last_end[i] + 1);
    }
  I.comm.all_reduce_host(buf.data(), static_cast<int>(buf.size()), ReduceOp::Sum);
  start_ns.assign(n, -1);
  end_ns.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    start_ns[i] = static_cast<std::int64_t>(buf[i]) - 1;
    end_ns[i] = static_cast<std::int64_t>(buf[n + i]) - 1;
  }
}

std::vector<std::vector<traces::MemorySample>> Executor::last_memory() {
  auto& I = *impl_;
  std::vector<double> bytes = I.last_bytes;  // zero for other ranks' ops: a sum gathers them
  I.comm.all_reduce_host(bytes.data(), static_cast<int>(bytes.size()), ReduceOp::Sum);
  std::vector<std::int64_t> s, e;
  last_op_times(s, e);
  std::vector<std::vector<traces::MemorySample>> out(static_cast<std::size_t>(I.ranks));
  for (int r = 0; r < I.ranks; ++r) {
    auto& v = out[static_cast<std::size_t>(r)];
    for (const auto& op : I.graph.program(r))
      if (e[op.id] >= 0) v.push_back({e[op.id], bytes[op.id]});
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  }
  return out;
}

traces::IterationReport Executor::last_report() {
  auto& I = *impl_;
  std::vector<std::int64_t> s, e;
  last_op_times(s, e);
  traces::IterationReport rep;
  rep.source = I.dev.kind();
  const int R = I.ranks;
  // Per-rank peak memory and iteration time.
  std::vector<double> per(static_cast<std::size_t>(2 * R), 0.0);
  per[static_cast<std::size_t>(I.rank)] = static_cast<double>(I.last_peak);
  per[static_cast<std::size_t>(R + I.rank)] = I.last_iteration_s;
  I.comm.all_reduce_host(per.data(), 2 * R, ReduceOp::Sum);
  double iter = 0;
  for (int r = 0; r < R; ++r) iter = std::max(iter, per[static_cast<std::size_t>(R + r)]);
  rep.iteration_time_s = iter;
  rep.samples_per_s = iter > 0 ? I.plan.global_batch() / iter : 0;
  rep.tokens_per_s = rep.samples_per_s * I.rows_per_sample;
  double peak_sum = 0;
  auto devices = I.scenario.cluster.ranks();
  for (const auto& d : devices)
    peak_sum += d.slot->spec.peak_flops(I.scenario.job.precision.compute) / d.slot->slowdown;
  const double flops = model_.training_flops(I.plan.global_batch());
  rep.mfu = iter > 0 && peak_sum > 0 ? flops / (iter * peak_sum) : 0;
  rep.events = I.graph.num_ops();  // every rank executes every op of its program
  // Busy time per lane from the measured intervals.
  for (int r = 0; r < R; ++r) {
    traces::RankReport rr;
    rr.rank = r;
    const auto& d = devices[static_cast<std::size_t>(r)];
    rr.gpu = d.slot->type;
    if (d.slot->slowdown != 1.0)
      rr.gpu += " (emulated " + fixed(d.slot->slowdown, 2) + "x slowdown)";
    rr.node = d.node;
    std::vector<std::pair<std::int64_t, std::int64_t>> comp, com;
    for (const auto& op : I.graph.program(r)) {
      if (s[op.id] < 0) continue;
      (tr::is_compute(op.kind) ? comp : com).push_back({s[op.id], e[op.id]});
    }
    auto total = [](std::vector<std::pair<std::int64_t, std::int64_t>> v) {
      std::sort(v.begin(), v.end());
      std::int64_t sum = 0, cur_s = -1, cur_e = -1;
      for (auto [a, b] : v) {
        if (a > cur_e) {
          if (cur_e > cur_s) sum += cur_e - cur_s;
          cur_s = a;
          cur_e = b;
        } else {
          cur_e = std::max(cur_e, b);
        }
      }
      if (cur_e > cur_s) sum += cur_e - cur_s;
      return sum;
    };
    auto both = comp;
    both.insert(both.end(), com.begin(), com.end());
    const double busy_compute = static_cast<double>(total(comp)) * 1e-9;
    const double busy_any = static_cast<double>(total(both)) * 1e-9;
    rr.compute_s = busy_compute;
    rr.comm_s = static_cast<double>(total(com)) * 1e-9;
    rr.exposed_comm_s = std::max(0.0, busy_any - busy_compute);
    rr.idle_s = std::max(0.0, per[static_cast<std::size_t>(R + r)] - busy_any);
    rr.peak_memory_bytes = per[static_cast<std::size_t>(r)];
    rr.capacity_bytes = d.slot->spec.memory_bytes;
    rep.ranks.push_back(rr);
  }
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] >= 0)
      rep.ops.push_back({static_cast<std::uint32_t>(i), static_cast<double>(s[i]) * 1e-9,
                         static_cast<double>(e[i]) * 1e-9});
  return rep;
}

}  // namespace cephalo::backend

// The measured report of the last step (the SimResult schema): every rank's op intervals and
// memory samples gathered with host all-reduces, summarised by traces::summarize.
#include <algorithm>

#include <cmath>
#include "cephalo/backend/executor.hpp"

#include "cephalo/traces/summarize.hpp"
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

// The record is traces::summarize's (the definitions the simulator's record uses too); what the
// executor contributes are the measurements: every op's interval, every rank's peak and wall
// time of the step.
traces::IterationReport Executor::last_report() {
  auto& I = *impl_;
  std::vector<std::int64_t> s, e;
  last_op_times(s, e);
  const int R = I.ranks;
  std::vector<double> per(static_cast<std::size_t>(2 * R), 0.0);
  per[static_cast<std::size_t>(I.rank)] = static_cast<double>(I.last_peak);
  per[static_cast<std::size_t>(R + I.rank)] = I.last_iteration_s;
  I.comm.all_reduce_host(per.data(), 2 * R, ReduceOp::Sum);
  double slowest = 0;
  for (int r = 0; r < R; ++r) slowest = std::max(slowest, per[static_cast<std::size_t>(R + r)]);
  tr::IterationMeasurements m;
  m.source = I.dev.kind();
  m.start_ns = s;
  m.end_ns = e;
  m.peak_memory_bytes.assign(per.begin(), per.begin() + R);
  m.iteration_end_ns = static_cast<std::int64_t>(std::llround(slowest * 1e9));
  m.events = I.graph.num_ops();  // every rank executes every op of its program
  m.record_ops = true;
  return tr::summarize(I.graph, I.scenario, I.plan, m);
}

}  // namespace cephalo::backend

#pragma once
// Replay of a TrainingGraph on a modelled cluster (DESIGN §5).
//
// Semantics:
//  * streams are in order: an op starts when it heads its stream and the ops it waits on are
//    done; a collective starts when every participant has reached it (the wait is visible as
//    a gap before the op on the comm lane and counts as idle time, not communication);
//  * durations come from the cost models (compute: ComputeModel × the slot's emulation
//    slowdown; collectives and copies: CommModel), rounded to 1 ns once;
//  * links are shared resources: a collective is a flow over every participant's links (PCIe
//    up+down of each rank, or NVLink within an NVLink node; plus each node's NIC when it spans
//    nodes), a device→host copy is a flow on the rank's PCIe up link, host→device on the down
//    link. A flow's rate is 1 / (the most flows on any of its links) — equal shares at the
//    bottleneck — and active flows are re-timed whenever a link's flow count changes (fluid
//    model). With `link_sharing = false` every transfer takes its isolated time;
//  * memory per rank: the static sharded state plus framework reserves from t = 0, then every
//    op allocates `mem_alloc` when it starts and releases `mem_free` when it ends. The first
//    time a rank exceeds its usable capacity is the OOM verdict (rank, op, bytes); the replay
//    still runs to the end so the timeline stays inspectable.
#include <cstdint>
#include <string>
#include <vector>

#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/compute_model.hpp"
#include "cephalo/sim/event_queue.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::sim {

struct SimOptions {
  bool record_ops = false;     // per-op start/end in report.ops
  bool record_memory = false;  // per-rank memory timeline (for the trace's counter track)
  bool link_sharing = true;    // fluid bandwidth sharing on links (see above)
  std::string queue = "binary-heap";
  // Usable capacity = device memory × usable_fraction; reserve is device memory the framework
  // holds besides the plan's tensors; transient allocations are scaled by 1 + fragmentation
  // (caching-allocator slack). Negative values take costmodels::MemoryConstants' defaults
  // (CUDA context + NCCL buffers with more than one rank, usable fraction 1, fragmentation
  // 0.08; on CPU devices no reserve and no slack), so the simulated peak and
  // costmodels::predict_memory use the same constants.
  double usable_fraction = -1;
  double fragmentation = -1;
  double reserve_bytes = -1;
  // false: the report leaves out what only a written report reads, its per-rank rows and the
  // plan hash (at 100k ranks a tenth of a candidate replay's time), and keeps the iteration
  // time, the throughput, the events and the OOM verdict; SimResult's per-rank peaks and
  // capacities are there either way. The planner's candidate replays, read only for those.
  bool rank_rows = true;
  // > 0: class_replay.hpp's simulate_plan / replay_plan build no more ranks than this; a plan
  // whose replay would build more (too few alike ranks to replay by class) is refused with
  // ReplayTooLarge before anything is built. The planner's candidates at 100k ranks.
  int most_replayed_ranks = 0;
};

struct SimResult {
  traces::IterationReport report;
  Time iteration_ns = 0;
  std::vector<Time> start_ns, end_ns, arrive_ns;  // per op id (arrive: collectives' arrival)
  std::vector<std::vector<traces::MemorySample>> memory;  // per rank when record_memory
  int replayed_ranks = 0;  // class_replay.hpp's simulate_plan: ranks replayed (0: simulate())
  // Per rank: the peak memory (a class replay's ranks their representative's) and the usable
  // capacity it was judged against, the same as the report's rows carry.
  std::vector<double> peak_bytes, capacity_bytes;
  // simulate_plan of a split plan whose ranks cannot form classes: why, so it replayed every
  // rank (render_replay_summary says it on `cephalo simulate`'s stderr); empty otherwise.
  std::string full_replay_reason;
};

SimResult simulate(const traces::TrainingGraph& graph, const Scenario& scenario, const Plan& plan,
                   const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                   const SimOptions& options = {});

// The trace writer's input for a simulated run ("rank 3 (RTX-A6000, node 0)", traces::rank_label).
traces::TraceInput trace_input(const SimResult& result, const traces::TrainingGraph& graph,
                               const Scenario& scenario);

}  // namespace cephalo::sim

#pragma once
// One summary of one iteration: the simulator (sim/ replay) and the backend (executor) both
// hand their per-op intervals and memory peaks to `summarize`, which builds the SimResult /
// RunResult (`IterationReport`) with the definitions written once in report.hpp. `compare`
// therefore compares like with like by construction: a difference is a measurement, never a
// definition.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

// Usable device memory of a device (the capacity a peak is judged against, and the simulator's
// OOM limit): spec memory × `usable_fraction`, where a negative fraction takes
// costmodels::MemoryConstants::usable_fraction.
double usable_capacity_bytes(const DeviceSpec& spec, double usable_fraction = -1);

// Peak FLOP/s of a slot as it runs: the spec's peak for the compute dtype divided by the slot's
// emulation slowdown (an emulated device is slower by exactly that factor on both sides: the
// simulator multiplies compute times by it, the backend holds the compute stream that much
// longer), so the MFU of an emulated cluster is judged against the cluster it emulates.
double effective_peak_flops(const DeviceSlot& slot, Dtype compute);

// The throughput of one iteration of `plan` taking `iteration_s`, defined once for the
// simulator, the backend (summarize) and the planner (`cephalo plan`'s prediction):
//   samples_per_s = plan.global_batch() / iteration_s; tokens_per_s = samples_per_s × sequence;
//   mfu = model FLOPs (forward + backward of every sample, no recompute: the usual convention)
//         / (iteration_s × Σ effective_peak_flops);
//   hfu = the same with the FLOPs the hardware runs: the model's plus the forward of every unit
//         the graph recomputes (schedule::recomputes: the checkpointed layers, and the head,
//         whose logits the backward always recomputes, so hfu is a little above mfu even
//         without checkpointing).
// All zero when iteration_s <= 0.
struct Throughput {
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double hfu = 0;
};
double model_flops_per_iteration(const Job& job, int global_batch);
double hardware_flops_per_iteration(const Job& job, const Plan& plan);
Throughput throughput(const Scenario& scenario, const Plan& plan, double iteration_s);
// The rates a report carries (summarize computed them with `throughput`).
Throughput report_throughput(const IterationReport& report);
// "12.50 samples/s, 25600 tokens/s, MFU 41.2 %" and ", HFU 52.0 %" when it prints otherwise.
std::string render_throughput(const Throughput& rate);
// Its fields into a record: predicted_samples_per_s, predicted_tokens_per_s, predicted_mfu,
// predicted_hfu (the plan records of both families).
void add_predicted_throughput(Json& record, const Throughput& rate);

// FNV-1a 64 over every field of the plan that decides what runs (version, scenario name,
// accumulation, offload, prefetch, uneven collective, every rank's placement, batches and
// share; not the informational strategy and predictions), as 16 hex digits: two records
// carrying the same hash ran the same plan.
std::string plan_hash(const Plan& plan);

// What one iteration produced, in integer nanoseconds from a common origin (t = 0 when every
// rank starts the step).
struct IterationMeasurements {
  std::string source = "sim";              // "sim", "cpu", "cuda"
  std::span<const std::int64_t> start_ns;  // per op id of the graph; -1: not run here
  std::span<const std::int64_t> end_ns;    // per op id; >= start
  std::vector<double> peak_memory_bytes;   // per rank
  // End of the iteration: -1 takes the last op's end (the simulator); the backend passes the
  // slowest rank's host-measured step, which also covers the final synchronisation.
  std::int64_t iteration_end_ns = -1;
  // First allocation over the usable capacity seen while running (the simulator tracks memory
  // over time); without one, a peak above capacity still gives an OOM verdict (op -1).
  std::optional<OomDetail> oom;
  std::uint64_t events = 0;     // simulator: events processed; backend: ops executed
  bool record_ops = false;      // copy the per-op intervals into report.ops
  double usable_fraction = -1;  // see usable_capacity_bytes
  // false: no per-rank rows and no plan hash in the report (a peak above capacity is still
  // the OOM verdict): the simulator's candidate replays (sim::SimOptions::rank_rows).
  bool rank_rows = true;
};

IterationReport summarize(const TrainingGraph& graph, const Scenario& scenario, const Plan& plan,
                          const IterationMeasurements& measured);

}  // namespace cephalo::traces

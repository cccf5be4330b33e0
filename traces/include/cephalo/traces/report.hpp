#pragma once
// The result schema shared by the simulator (SimResult) and the backend (RunResult): one
// iteration's throughput, per-rank breakdown, OOM verdict and optional per-op timings keyed by
// the TrainingGraph's op ids, so simulated and measured runs compare op by op (DESIGN §4).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"

namespace cephalo::traces {

// Every field is defined here once and computed once, by `summarize` (summarize.hpp), for the
// simulator and the backend alike. Intervals are the ops' [start, end) from the common origin
// (t = 0: every rank starts the step); |∪ X| is the measure of the union of the intervals X.
struct RankReport {
  int rank = 0;
  std::string gpu;  // device type (the resolved spec's name)
  int node = 0;
  double slowdown = 1;   // the slot's emulation slowdown (1 = real hardware)
  double compute_s = 0;  // |∪ compute-stream ops| (forward, backward, recompute, optimizer)
  // |∪ collectives| (the comm stream). A simulated collective starts when its last member
  // arrives, so waiting for a slower rank is idle time; a measured one starts when this rank
  // issues it (a blocking wait inside it is measured as communication).
  double comm_s = 0;
  double copy_s = 0;          // |∪ host<->device copies| (offload); not part of comm_s
  double exposed_comm_s = 0;  // |∪ compute ∪ comm| − compute_s: collectives not hidden by compute
  double idle_s = 0;  // iteration_time_s − |∪ compute ∪ comm| (against the global end)
  double peak_memory_bytes = 0;  // highest device bytes in use during the iteration
  double capacity_bytes = 0;     // usable device memory (usable_capacity_bytes)
  // Under a model split (stage >= 0; -1 for an FSDP plan, whose records carry none of these):
  // the rank's pipeline stage; the time of its tensor-parallel collectives (on the compute
  // stream: all of it exposed) and of its pipeline transfers; exposed_comm_s split by kind, in
  // this order of attribution: tensor-parallel, then what the transfers add, then what the
  // data-parallel collectives add; and the bubble, the time up to the end of the rank's last
  // backward that it spent on nothing (waiting for its pipeline neighbours).
  int stage = -1;
  double tp_comm_s = 0;
  double pp_comm_s = 0;
  double exposed_tp_s = 0;
  double exposed_pp_s = 0;
  double exposed_dp_s = 0;
  double bubble_s = 0;
};

struct OomDetail {
  int rank = 0;
  std::int64_t op = -1;  // op id whose allocation exceeded the capacity
  std::string op_name;
  double bytes = 0;  // device bytes in use once the op allocated
  double capacity_bytes = 0;
  double requested_bytes = 0;  // what the op allocated
};

struct OpTiming {
  std::uint32_t id = 0;
  double start_s = 0;
  double end_s = 0;
};

struct IterationReport {
  std::string source = "sim";   // "sim" (a SimResult), "cpu" or "cuda" (a RunResult)
  std::string plan_hash;        // plan_hash(plan) of the plan that ran ("" in old records)
  double iteration_time_s = 0;  // common origin to the iteration's end (IterationMeasurements)
  double samples_per_s = 0;     // global batch / iteration_time_s
  double tokens_per_s = 0;      // samples_per_s × the job's sequence length
  // Model FLOPs of the iteration (forward + backward, no recompute, costmodels::unit_flops:
  // GraphSummary::model_flops_per_iteration) / (iteration_time_s × Σ effective_peak_flops),
  // the peak of the compute dtype divided by each slot's emulation slowdown.
  double mfu = 0;
  // As mfu with the recomputed forwards counted (hardware FLOPs): the Throughput of
  // summarize.hpp. Records without it read it as mfu.
  double hfu = 0;
  // Some rank exceeded its usable capacity: the first allocation that did (simulator), or the
  // rank whose peak did (op -1, "measured peak") when only peaks are known.
  bool oom = false;
  std::optional<OomDetail> oom_detail;
  std::uint64_t events = 0;  // simulator: events processed; backend: ops executed
  // The software stack that ran (to_string(Implementation), e.g. "eager, unfused"): written by
  // `cephalo run` (backend::executed_implementation); "" when not recorded (SimResult files,
  // whose stack is the scenario's job, and older RunResult files).
  std::string implementation;
  // What the prediction could not price as the job asked (a dtype run on a slower pipeline,
  // costmodels::precision_warnings); empty when none, and then absent from the JSON.
  std::vector<std::string> warnings;
  std::vector<RankReport> ranks;
  std::vector<OpTiming> ops;  // sorted by id; empty unless requested
};

// JSON keys: source, plan_hash, iteration_time_s, samples_per_s, tokens_per_s, mfu, hfu, oom,
// oom_detail (only when oom), events, implementation (only when recorded), warnings (only when
// any), ranks[...], ops (only when non-empty: [{id, start_s, end_s}]).
Json to_json(const IterationReport& report);
IterationReport parse_iteration_report(JsonReader& reader);
IterationReport load_iteration_report(const std::filesystem::path& file);
// Deterministic text (same input, same bytes): `to_json(report).dump(2)` plus a newline.
std::string render_json(const IterationReport& report);
// Summary lines plus an aligned table of the ranks: one row per run of consecutive ranks whose
// rows print the same but for rank and node (their rank range, and node range), or with
// `per_rank` one row per rank. At 1M ranks of one kind that is one row, not a million.
std::string render_table(const IterationReport& report, bool per_rank = false);
// "rank 3 at F u2 mb0 r3 needs 25.1 GiB of 22.4 GiB usable": where an iteration ran out.
std::string render_oom_detail(const OomDetail& detail);

}  // namespace cephalo::traces

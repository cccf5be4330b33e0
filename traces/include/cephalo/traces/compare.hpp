#pragma once
// Simulated vs measured: one SimResult and one RunResult of the same plan (both built by
// `summarize`, so every field means the same on both sides), compared end to end, per rank, per
// op class and op by op, plus one merged Perfetto timeline. `cephalo compare` prints this record.
// Error convention everywhere: (simulated − measured) / measured; absent when nothing was
// measured.
#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

// A result file: a SimResult (`cephalo simulate --json`) or a RunResult (`cephalo run --json`,
// possibly wrapping the report as {"report": {...}} and carrying extra keys, which are ignored).
IterationReport load_result(const std::filesystem::path& file);

// Op classes of the per-class table, in print order.
enum class CompareClass {
  Forward,
  Backward,
  Recompute,
  AllGather,
  ReduceScatter,
  AllReduce,
  Copies,
  Optimizer,
  TensorParallel,   // a split plan's TP collectives
  PipelineTransfer  // its sends and receives between stages
};
constexpr int kNumCompareClasses = 10;
std::string to_string(CompareClass c);  // "forward", ..., "all-gather", "copies", "optimizer"
CompareClass compare_class_of(OpKind kind);

struct MetricComparison {
  std::string metric;  // "iteration_time_s", "samples_per_s", "tokens_per_s"
  double simulated = 0, measured = 0;
  std::optional<double> error;
};

struct RankComparison {
  int rank = 0;
  std::string gpu;
  double simulated_peak_memory_bytes = 0, measured_peak_memory_bytes = 0;
  std::optional<double> peak_memory_error;
  double simulated_compute_s = 0, measured_compute_s = 0;
  std::optional<double> compute_error;
  double simulated_comm_s = 0, measured_comm_s = 0;
  std::optional<double> comm_error;
  double simulated_idle_s = 0, measured_idle_s = 0;
};

// Σ over all ranks of op durations of one class. A collective counts from the arrival of its
// last participant (the simulator's semantics), so a rank blocked waiting for a slower peer is
// not charged to the transfer.
struct ClassComparison {
  CompareClass op_class = CompareClass::Forward;
  int simulated_ops = 0, measured_ops = 0;
  double simulated_s = 0, measured_s = 0;
  std::optional<double> error;
};

struct OpDifference {
  OpId op = 0;
  double simulated_s = 0, measured_s = 0;  // op durations as recorded (collectives with waits)
};

struct CompareReport {
  std::string simulated_file, measured_file;
  std::string simulated_source, measured_source;
  std::vector<MetricComparison> end_to_end;
  std::vector<RankComparison> ranks;
  bool have_ops = false;  // the per-class table and largest differences were computed
  std::string ops_note;   // why not, when !have_ops
  std::vector<ClassComparison> op_classes;        // classes with ops on either side
  std::vector<OpDifference> largest_differences;  // up to 5, largest |measured − simulated|
  std::optional<double> iteration_time_error;
  double max_abs_peak_memory_error = 0;
  std::vector<std::string> warnings;  // e.g. the simulation is an OOM verdict
};

// The graph and plan both records are keyed by (optional: without them only the end-to-end and
// per-rank parts are computed, and the plan check is skipped).
struct CompareContext {
  const TrainingGraph* graph = nullptr;
  const Plan* plan = nullptr;
  std::string plan_file;  // for messages
};

// A measured record whose op timings are to be fitted holds the graph's every op exactly
// once: ValidationError naming `file`, $.ops and what is wrong — no op records at all, an id
// that appears twice, or the ops missing (how many, and the first few by rank and name).
void check_complete_ops(const IterationReport& record, const TrainingGraph& graph,
                        const std::string& file);

// Checks, each a ValidationError naming the file, the JSON path, the value and what was
// expected: SIM is a SimResult (source "sim") and RUN a RunResult (source not "sim"; swapped
// arguments are named as such); the two are not the same file; both have the same number of
// ranks; both iteration times are positive; both records carry the hash of the plan given
// (records without a plan_hash, written before it existed, give a warning); per-op ids belong
// to the graph and have 0 <= start <= end.
CompareReport compare(const IterationReport& sim, const std::string& sim_file,
                      const IterationReport& run, const std::string& run_file,
                      const CompareContext& context = {});

Json to_json(const CompareReport& report, const TrainingGraph* graph = nullptr);
std::string render_compare_table(const CompareReport& report, const TrainingGraph* graph = nullptr);

// One Perfetto trace with the simulated and the measured timeline of every rank as adjacent
// processes ("rank 0 (…) · sim", "rank 0 (…) · measured", ...). Needs per-op timings in both.
std::string render_merged_trace(const TrainingGraph& graph, const IterationReport& sim,
                                const IterationReport& run,
                                const std::vector<std::string>& rank_labels,
                                const std::string& title);

// Which software stack each side of a comparison is: the simulation priced the scenario's job
// ("unknown (no --scenario)" without a scenario), the run executed the backend's (recorded in
// the RunResult; "unknown (not recorded)" in files that predate it). `differ` when both are
// known and not the same; to_json is the comparison record's "implementation".
struct ImplementationSides {
  std::string simulated, measured;
  bool differ = false;
};
ImplementationSides implementation_sides(const Scenario* scenario, const IterationReport& run);
Json to_json(const ImplementationSides& sides);

// compare() as `cephalo compare` and the Python module's compare both run it: with a scenario
// and a plan, the plan checked for the scenario (check_plan_for, messages naming `plan_label`)
// and the graph its op ids key built; without both, the end-to-end and per-rank parts only.
// One without the other is a ValidationError at `source` naming `pair` as the caller spells it
// ("--scenario and --plan"). `record()` is to_json with the graph and the implementation sides.
struct PlannedComparison {
  std::optional<TrainingGraph> graph;
  CompareReport report;
  ImplementationSides implementation;
  const TrainingGraph* graph_or_null() const { return graph ? &*graph : nullptr; }
  Json record() const;
  // "implementation differs: ..." (what to set the job's implementation to) when both sides
  // are known and not the same; empty otherwise.
  std::string implementation_warning() const;
  // render_merged_trace of `sim` and `run` (the records compared) with the cluster's rank
  // labels, written atomically to `file`. InfeasibleError naming `option` when the records'
  // per-op times cannot be merged (report.ops_note says why; no cluster: no scenario given).
  void write_merged_trace(const IterationReport& sim, const IterationReport& run,
                          const Cluster* cluster, const std::string& title, const std::string& file,
                          const std::string& option) const;
};
PlannedComparison compare_planned(const IterationReport& sim, const std::string& sim_file,
                                  const IterationReport& run, const std::string& run_file,
                                  const Scenario* scenario, const Plan* plan,
                                  const std::string& plan_label, const std::string& source,
                                  const std::string& pair);

}  // namespace cephalo::traces

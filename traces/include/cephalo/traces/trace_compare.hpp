#pragma once
// A simulation against a user's own profiler trace (kineto_trace.hpp): the trace's rank and
// step checked against the scenario (GPU, rank count, layer count where the trace shows them),
// and the simulated time of each trace class on that rank beside the measured one.
// `cephalo compare SIM TRACE` prints it, `cephalo calibrate stack --trace` fits from it.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

// The measure of the union of rank `rank`'s simulated op intervals per trace class: forward;
// backward with the recompute (torch's recompute runs inside the backward); the optimizer
// step; every collective (data-parallel, tensor-parallel, pipeline transfers). Copies are in
// no class. Needs the report's op records (simulate --ops) keyed by `graph`.
std::array<double, kNumTraceClasses> simulated_class_seconds(const TrainingGraph& graph,
                                                             const IterationReport& sim, int rank);

// Which rank of the scenario the trace is (distributedInfo.rank, else 0), checked: the trace's
// world size is the cluster's rank count; a GPU trace for a GPU rank and a CPU one for a CPU
// rank; the GPU's memory (within 15 %), SM count and compute capability those of the rank's
// catalog GPU where both are known; the forward's aten::layer_norm calls a multiple of the
// model's 2L + 1 (layer-norm models: two per layer and the final or embedding norm).
// ValidationError naming the trace file, the JSON path, the value and what the scenario
// expects; `notes` gets what could not be checked.
int check_trace_for(const KinetoTrace& trace, const TraceStep& step, const Scenario& scenario,
                    const Plan* plan, std::vector<std::string>& notes);

struct TraceClassComparison {
  TraceClass trace_class = TraceClass::Forward;
  double simulated_s = 0, measured_s = 0;
  std::optional<double> error;  // (simulated − measured) / measured
};

struct TraceComparison {
  std::string simulated_file, trace_file;
  std::string step;
  int rank = 0;
  double simulated_iteration_s = 0;
  double measured_step_s = 0;
  std::optional<double> iteration_error;
  double median_step_s = 0;  // over every step of the trace
  int steps = 0;
  double outside_classes_s = 0;  // the step's time in no class (measured side only)
  bool have_classes = false;     // with a scenario and plan and op records
  std::string classes_note;      // why not
  std::vector<TraceClassComparison> classes;
  std::vector<std::string> notes;
};

// SIM is a SimResult ("sim"); with a graph (scenario and plan given) and op records, the
// per-class table of the trace's rank. `step` "" picks the median step; a step the trace lacks is
// refused at `source` naming `step_option` (KinetoTrace::step).
TraceComparison compare_trace(const IterationReport& sim, const std::string& sim_file,
                              const KinetoTrace& trace, const std::string& step,
                              const Scenario* scenario, const Plan* plan,
                              const TrainingGraph* graph, const std::string& source,
                              const std::string& step_option);

Json to_json(const TraceComparison& c);
std::string render_trace_comparison(const TraceComparison& c);

// compare_trace as `cephalo compare SIM TRACE` and Python's compare both run it: scenario and
// plan both or neither (one alone: ValidationError at `source` naming `pair` as the caller
// spells it); with both, the plan checked for the scenario (check_plan_for, messages naming
// `plan_label`) and the graph its op ids key built. `record` is to_json(comparison) with the
// trace's own summary (to_json(trace)) under "trace"; `text` the trace's table and the
// comparison's.
struct PlannedTraceComparison {
  TraceComparison comparison;
  Json record;
  std::string text;
};
PlannedTraceComparison compare_trace_planned(const IterationReport& sim,
                                             const std::string& sim_file, const KinetoTrace& trace,
                                             const std::string& step, const Scenario* scenario,
                                             const Plan* plan, const std::string& plan_label,
                                             const std::string& source, const std::string& pair,
                                             const std::string& step_option);

}  // namespace cephalo::traces

#pragma once
// `cephalo calibrate stack`: the few factors of a software stack that one measured iteration of
// a plan identifies (planner/README.md, "Calibrating a stack"). The plan is replayed on the
// simulator with the factors until it takes the measured time, so what is fitted is exactly
// what `plan`, `simulate` and `sweep` later multiply.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/core/stack_calibration.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/report.hpp"

namespace cephalo::planner {

// One measured iteration: its throughput (the whole job's tokens per second; identifies the
// compute factor only), a RunResult of the plan (with op records it identifies the compute,
// collective and optimizer factors separately; without, it is read as its iteration time), or
// one step of a PyTorch profiler trace of the user's own run (kineto_trace.hpp: each factor
// its classes' measured / simulated time on the trace's rank; the trace is checked against the
// scenario by traces::check_trace_for).
struct StackMeasurement {
  std::optional<double> tokens_per_s;
  const traces::IterationReport* run = nullptr;
  std::string run_file;  // for messages and the record
  const traces::KinetoTrace* trace = nullptr;
  std::string trace_step;  // "ProfilerStep#N" or N; "" for the median step
  // Who gave the measurement, as PlannerOptions::options_source: a step the trace lacks is
  // refused there, and the refusals name the options as that source spells them (`--step`,
  // `step`; `--run`, `run`).
  std::string options_source = "arguments";
};

struct StackFit {
  StackCalibration stack;
  double measured_iteration_s = 0;
  double predicted_iteration_s = 0;  // the plan simulated without a stack
  double fitted_iteration_s = 0;     // and with the fitted one
  // One line per factor: how it was fitted, or why this measurement cannot identify it.
  std::vector<std::string> notes;
};

// Refusals (InfeasibleError, naming the bound): a measurement faster than the cluster's peak
// FLOP rate allows for the model's FLOPs; one that needs a factor outside
// [kMinStackFactor, kMaxStackFactor]; a plan the simulator finds out of memory. A job's own
// stack is ignored (the fit starts from the cost models alone) and a note says so.
StackFit calibrate_stack(const Scenario& scenario, const Plan& plan,
                         const StackMeasurement& measurement,
                         const std::string& compute_source = "auto");

// calibrate_stack with its stack written to `output` as a "cephalo-stack" file ("" for none),
// as `cephalo calibrate stack -o` and `cephalo.calibrate_stack(output=...)` write it: the
// location is checked before fitting (core/output_file.hpp; named `output_name`, the flag or
// the keyword), so a fit is never lost to an unwritable file, and written after.
StackFit calibrate_stack_to_file(const Scenario& scenario, const Plan& plan,
                                 const StackMeasurement& measurement,
                                 const std::string& compute_source, const std::string& output,
                                 const std::string& output_name);

// {"stack": <cephalo-stack>, "measured_iteration_s", "predicted_iteration_s",
//  "fitted_iteration_s", "notes"}
Json to_json(const StackFit& fit);
std::string render_stack_fit(const StackFit& fit);

}  // namespace cephalo::planner

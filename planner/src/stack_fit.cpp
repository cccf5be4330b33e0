// Fitting a stack's factors to one measured iteration (stack_fit.hpp).
#include "cephalo/planner/stack_fit.hpp"

#include <algorithm>
#include <cmath>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/planner_options.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/summarize.hpp"
#include "cephalo/traces/trace_compare.hpp"

namespace cephalo::planner {

namespace {

// The replay's report with `stack` as the job's stack (nullopt: none).
sim::PlanReplay replay_with(Scenario s, const Plan& plan,
                            const std::optional<StackCalibration>& stack, const std::string& source,
                            bool record_ops) {
  s.job.implementation.stack = stack;
  const auto models = costmodels::make_cost_models(s, source);
  traces::check_plan_for(plan, s, "<plan>");
  sim::SimOptions options;
  options.record_ops = record_ops;
  return sim::replay_plan(plan, s, *models.compute, *models.comm, options);
}

double iteration_with(const Scenario& s, const Plan& plan, const StackCalibration& stack,
                      const std::string& source) {
  return replay_with(s, plan, stack, source, false).result.report.iteration_time_s;
}

std::string ratio_text(double f) { return fixed(f, f < 0.1 ? 4 : 3); }

void check_factor(const char* what, double f, const std::string& how) {
  if (f >= kMinStackFactor && f <= kMaxStackFactor) return;
  throw InfeasibleError(
      "the measurement needs a " + std::string(what) + " factor of " + shortest(f) + " (" + how +
      "), outside [1/64, " + shortest(kMaxStackFactor) +
      "]: no stack the cost models describe runs so much " + (f > 1 ? "slower" : "faster") +
      "; check the measurement, the plan it ran and the scenario's cluster");
}

// The compute factor f with which the simulated iteration takes `target` seconds: the
// iteration time grows with f (every compute op is f times as long), so bisection on log f.
double fit_compute(const Scenario& s, const Plan& plan, double target, const std::string& source) {
  StackCalibration st;
  st.compute.identified = true;
  auto at = [&](double f) {
    st.compute.value = f;
    return iteration_with(s, plan, st, source);
  };
  const double slowest = at(kMaxStackFactor);
  if (slowest < target)
    throw InfeasibleError("the measured iteration (" + format_seconds(target) +
                          ") is slower than " + "the plan simulated with every compute op " +
                          shortest(kMaxStackFactor) + "x as long (" + format_seconds(slowest) +
                          "): no compute factor in the allowed range explains it");
  const double fastest = at(kMinStackFactor);
  if (fastest > target)
    throw InfeasibleError(
        "the measured iteration (" + format_seconds(target) + ") is faster than the plan's " +
        "communication and optimizer allow: with every compute op 64x faster the simulated " +
        "iteration still takes " + format_seconds(fastest) +
        " (check the cluster's links, or calibrate from a RunResult: --run)");
  double lo = std::log(kMinStackFactor), hi = std::log(kMaxStackFactor);
  for (int i = 0; i < 60 && hi - lo > 1e-6; ++i) {
    const double mid = 0.5 * (lo + hi);
    (at(std::exp(mid)) < target ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

// Each factor from one step of a profiler trace: its classes' measured / simulated time on the
// trace's rank (kineto_trace.hpp says how the trace's time is classified). The compute factor
// reads the forward and backward classes the trace measured (a trace whose forward ranges
// carry no annotation fits compute from its backward alone, and says so).
void fit_from_trace(const traces::KinetoTrace& trace, const traces::TraceStep& step, int rank,
                    const sim::PlanReplay& base, StackFit& fit) {
  if (!base.graph) throw RuntimeFailure("the replay kept no graph for the trace's classes");
  const auto simulated = traces::simulated_class_seconds(*base.graph, base.result.report, rank);
  using traces::TraceClass;
  auto at = [](const auto& a, TraceClass c) { return a[static_cast<int>(c)]; };
  const std::string where = step.name + " of " + trace.file + ", rank " + std::to_string(rank) +
                            (trace.times_from_kernels ? ", GPU kernels" : ", CPU ranges");
  struct Group {
    StackFactor* factor;
    const char* name;
    std::vector<TraceClass> classes;
  };
  StackCalibration& st = fit.stack;
  const Group groups[] = {{&st.compute, "compute", {TraceClass::Forward, TraceClass::Backward}},
                          {&st.comm, "comm", {TraceClass::Collective}},
                          {&st.optimizer, "optimizer", {TraceClass::Optimizer}}};
  for (const auto& g : groups) {
    double measured = 0, sim = 0;
    std::string used, unmeasured;
    for (TraceClass c : g.classes) {
      const double m = step.seconds_of(c), s = at(simulated, c);
      if (m > 0 && s > 0) {
        measured += m, sim += s;
        used += (used.empty() ? "" : " + ") + traces::to_string(c);
      } else if (s > 0) {
        unmeasured += (unmeasured.empty() ? "" : ", ") + traces::to_string(c);
      } else if (m > 0) {
        fit.notes.push_back("the trace measures " + format_seconds(m) + " of " +
                            traces::to_string(c) + " in " + step.name +
                            "; the plan simulates none on rank " + std::to_string(rank) +
                            " (not fitted)");
      }
    }
    if (measured <= 0) {
      fit.notes.push_back(std::string(g.name) + ": not identified (" + where + " has no " +
                          (unmeasured.empty() ? std::string(g.name) : unmeasured) +
                          " time the plan also simulates); stays 1");
      continue;
    }
    const double f = measured / sim;
    check_factor(g.name, f, "measured / simulated " + used + " time");
    *g.factor = {f, true};
    fit.notes.push_back(std::string(g.name) + ": " + ratio_text(f) + " = measured " +
                        format_seconds(measured) + " / simulated " + format_seconds(sim) + " of " +
                        used + " (" + where + ")" +
                        (unmeasured.empty() ? "" : "; no " + unmeasured + " in the trace"));
  }
  if (!st.compute.identified && !st.comm.identified && !st.optimizer.identified)
    throw ValidationError(trace.file, "$.traceEvents",
                          step.name + " with no class the plan simulates",
                          "forward, backward, optimizer or collective time on rank " +
                              std::to_string(rank) + " to fit a factor from");
  fit.notes.push_back(step.name + " (" + format_seconds(step.duration_s) +
                      "): " + format_seconds(step.outside_classes_s) +
                      " outside every class (host work outside the annotations; in no factor)");
  if (trace.times_from_kernels)
    fit.notes.push_back(step.name + ": the GPU busy " + format_seconds(step.gpu_busy_s) + " (" +
                        fixed(100 * step.gpu_busy_s / step.duration_s, 1) +
                        " % of the step); the rest it waited for the host (launches, syncs, "
                        "data), which no factor carries");
  for (const auto& u : trace.unclassified)
    fit.notes.push_back("unclassified in the whole trace: " + std::to_string(u.events) + " " +
                        u.category + " events, " + format_seconds(u.seconds));
  for (const auto& n : trace.notes) fit.notes.push_back(n);
}

}  // namespace

StackFit calibrate_stack(const Scenario& scenario, const Plan& plan,
                         const StackMeasurement& measurement, const std::string& source) {
  StackFit fit;
  if (int{measurement.tokens_per_s.has_value()} + int{measurement.run != nullptr} +
          int{measurement.trace != nullptr} !=
      1)
    throw ValidationError("<measurement>", "", "",
                          "one measurement: tokens per second, a run or a profiler trace");
  if (scenario.job.implementation.stack)
    fit.notes.push_back("the job's own stack calibration (" +
                        (scenario.job.implementation.stack_file.empty()
                             ? std::string("inline")
                             : scenario.job.implementation.stack_file) +
                        ") is ignored: the fit starts from the cost models alone");
  const Job& job = scenario.job;
  const double tokens_per_iteration =
      static_cast<double>(job.global_batch) * static_cast<double>(job.sequence_length);

  // The plan without a stack, op by op when a run's op records or a profiler trace's classes
  // are to be compared: a run is fitted only whole (every op of the plan's graph once), so its
  // factors describe the whole iteration rather than the part that was recorded.
  const bool per_class = measurement.run != nullptr || measurement.trace != nullptr;
  const auto base = replay_with(scenario, plan, std::nullopt, source, per_class);
  const auto& sim = base.result.report;
  if (sim.oom)
    throw InfeasibleError("the simulator finds the plan out of memory (" +
                          (sim.oom_detail ? sim.oom_detail->op_name : std::string("?")) +
                          "): calibrate on a plan the cost models can run");
  fit.predicted_iteration_s = sim.iteration_time_s;
  traces::CompareReport class_report;

  const traces::TraceStep* step = nullptr;
  int trace_rank = 0;
  if (measurement.trace) {
    const auto& trace = *measurement.trace;
    step = measurement.trace_step.empty()
               ? &trace.median_step()
               : &trace.step(measurement.trace_step, measurement.options_source,
                             spell_option(measurement.options_source, "step"));
    // The trace is checked to be this scenario's run before anything is read from its times.
    trace_rank = traces::check_trace_for(trace, *step, scenario, &plan, fit.notes);
    fit.measured_iteration_s = step->duration_s;
    if (!(step->duration_s > 0))
      throw ValidationError(trace.file, "$.traceEvents", step->name + " lasting 0 s",
                            "a step with a positive duration");
  } else if (measurement.tokens_per_s) {
    const double t = *measurement.tokens_per_s;
    if (!(t > 0) || !std::isfinite(t))
      throw ValidationError("<measurement>", "tokens_per_s", shortest(t), "a positive number");
    fit.measured_iteration_s = tokens_per_iteration / t;
  } else {
    const auto& run = *measurement.run;
    // A simulation given as the measurement: said here, where there is one file (compare's own
    // words are about its second file).
    if (run.source == "sim")
      throw ValidationError(measurement.run_file, "$.source", "\"sim\"",
                            "a RunResult (source \"cpu\" or \"cuda\", from cephalo run --json "
                            "--ops): " +
                                spell_option(measurement.options_source, "run") +
                                " takes a measured run, not a simulation");
    // compare()'s checks, once: a RunResult of this plan on this cluster, a positive time.
    traces::CompareContext ctx{base.graph ? &*base.graph : nullptr, &plan, "<plan>"};
    class_report = traces::compare(sim, "<simulated>", run, measurement.run_file, ctx);
    if (base.graph) traces::check_complete_ops(run, *base.graph, measurement.run_file);
    fit.notes.insert(fit.notes.end(), class_report.warnings.begin(), class_report.warnings.end());
    fit.measured_iteration_s = run.iteration_time_s;
    if (!run.implementation.empty()) {
      if (run.implementation != to_string(job.implementation))
        fit.notes.push_back("the run executed " + run.implementation + ", the job declares " +
                            to_string(job.implementation) +
                            ": the factors describe the difference too");
    }
  }
  // The roofline: the model's FLOPs at the cluster's peak. MFU scales as 1 / iteration time.
  const double mfu = sim.mfu * sim.iteration_time_s / fit.measured_iteration_s;
  if (mfu > 1.0)
    throw InfeasibleError(
        "the measurement (" + format_seconds(fit.measured_iteration_s) + " per iteration, " +
        fixed(tokens_per_iteration / fit.measured_iteration_s, 0) +
        " tokens/s) is faster than the roofline: it would be " + fixed(100 * mfu, 0) +
        " % of the cluster's peak FLOP rate for the model's FLOPs (at most 100 %)");

  StackCalibration& st = fit.stack;
  if (measurement.trace) {
    fit_from_trace(*measurement.trace, *step, trace_rank, base, fit);
  } else if (per_class && class_report.have_ops) {
    const auto& report = class_report;
    struct Group {
      StackFactor* factor;
      const char* name;
      std::vector<traces::CompareClass> classes;
    };
    using C = traces::CompareClass;
    const Group groups[] = {
        {&st.compute, "compute", {C::Forward, C::Backward, C::Recompute}},
        {&st.comm, "comm", {C::AllGather, C::ReduceScatter, C::AllReduce}},
        {&st.optimizer, "optimizer", {C::Optimizer}},
    };
    for (const auto& g : groups) {
      double simulated = 0, measured = 0;
      int ops = 0;
      for (const auto& c : report.op_classes)
        if (std::find(g.classes.begin(), g.classes.end(), c.op_class) != g.classes.end()) {
          simulated += c.simulated_s;
          measured += c.measured_s;
          ops += std::min(c.simulated_ops, c.measured_ops);
        }
      if (ops == 0 || simulated <= 0 || measured <= 0) {
        fit.notes.push_back(std::string(g.name) + ": not identified (the run has no " + g.name +
                            " ops with a duration); stays 1");
        continue;
      }
      const double f = measured / simulated;
      check_factor(g.name, f, "measured / simulated time of its ops, summed over ranks");
      *g.factor = {f, true};
      fit.notes.push_back(std::string(g.name) + ": " + ratio_text(f) +
                          " = measured / simulated time of its " + std::to_string(ops) +
                          " ops, summed over ranks");
    }
  } else {
    st.compute = {fit_compute(scenario, plan, fit.measured_iteration_s, source), true};
    fit.notes.push_back("compute: " + ratio_text(st.compute.value) +
                        ", the factor on every compute op with which the simulated iteration "
                        "takes the measured time");
    std::string why = !measurement.run ? "one throughput cannot separate it from compute; a "
                                         "RunResult with op records can (--run)"
                      : class_report.ops_note.empty()
                          ? "the run has no op records (`cephalo run --json` writes them)"
                          : class_report.ops_note;
    fit.notes.push_back("comm: not identified (" + why + "); stays 1");
    fit.notes.push_back("optimizer: not identified (" + why + "); stays 1");
  }
  fit.fitted_iteration_s = iteration_with(scenario, plan, st, source);
  if (measurement.trace) {
    const double miss = fit.fitted_iteration_s / fit.measured_iteration_s - 1;
    if (std::abs(miss) > 0.05)
      fit.notes.push_back(
          "the fitted iteration is " + fixed(100 * miss, 1) +
          " % off the measured step: its time "
          "outside the classes (above) is in no factor; --measured-tokens-per-s fits the "
          "compute factor to the whole step instead");
  }

  auto& on = st.fitted_on;
  on.model = job.model_name;
  on.family = job.model.family;
  on.gpus = gpu_types(scenario.cluster);
  on.ranks = scenario.cluster.num_ranks();
  on.sequence_length = job.sequence_length;
  on.global_batch = job.global_batch;
  on.dtype = to_string(job.precision.compute);
  on.implementation = to_string(job.implementation);  // the label leaves the stack out
  on.compute_source = source;
  on.plan_hash = traces::plan_hash(plan);
  if (measurement.trace) {
    on.measured = "trace";
    on.measured_value = fit.measured_iteration_s;
    on.predicted_value = fit.predicted_iteration_s;
  } else if (measurement.tokens_per_s) {
    on.measured = "tokens_per_s";
    on.measured_value = *measurement.tokens_per_s;
    on.predicted_value = tokens_per_iteration / fit.predicted_iteration_s;
  } else {
    on.measured = "run";
    on.measured_value = fit.measured_iteration_s;
    on.predicted_value = fit.predicted_iteration_s;
  }
  return fit;
}

Json to_json(const StackFit& fit) {
  return {{"stack", to_json(fit.stack)},
          {"measured_iteration_s", fit.measured_iteration_s},
          {"predicted_iteration_s", fit.predicted_iteration_s},
          {"fitted_iteration_s", fit.fitted_iteration_s},
          {"notes", fit.notes}};
}

std::string render_stack_fit(const StackFit& fit) {
  TextTable t({"factor", "value", "identified"});
  auto row = [&](const char* name, const StackFactor& f) {
    t.add_row({name, fixed(f.value, 4), f.identified ? "yes" : "no"});
  };
  row("compute", fit.stack.compute);
  row("comm", fit.stack.comm);
  row("optimizer", fit.stack.optimizer);
  std::string out = t.render();
  auto pct = [&](double s) {
    const double e = 100.0 * (s - fit.measured_iteration_s) / fit.measured_iteration_s;
    std::string text = fixed(e, 1);
    if (e > 0) text.insert(text.begin(), '+');
    return text.append(" %");
  };
  out += "iteration: measured " + format_seconds(fit.measured_iteration_s) +
         ", predicted without the stack " + format_seconds(fit.predicted_iteration_s) + " (" +
         pct(fit.predicted_iteration_s) + "), with it " + format_seconds(fit.fitted_iteration_s) +
         " (" + pct(fit.fitted_iteration_s) + ")\n";
  for (const auto& n : fit.notes) out += "note: " + n + "\n";
  return out;
}

StackFit calibrate_stack_to_file(const Scenario& scenario, const Plan& plan,
                                 const StackMeasurement& measurement,
                                 const std::string& compute_source, const std::string& output,
                                 const std::string& output_name) {
  if (!output.empty()) check_outputs({{output_name, output}});
  StackFit fit = calibrate_stack(scenario, plan, measurement, compute_source);
  if (!output.empty()) write_file_atomically(output, to_json(fit.stack).dump(2) + "\n");
  return fit;
}

}  // namespace cephalo::planner

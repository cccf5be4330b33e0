// `cephalo calibrate stack --scenario S --plan P (--measured-tokens-per-s X | --run RUN.json |
//  --trace TRACE.json[.gz] [--step N]) -o STACK.json [--json] [--compute-model M]`
// Fits the factors of a software stack that one measured iteration of the plan identifies and
// writes them as a "cephalo-stack" file that plan, simulate and sweep take with --stack.
#include <iostream>
#include <optional>

#include "cephalo/core/output_file.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/planner/stack_fit.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_calibrate_command(CLI::App& app) {
  struct Args {
    std::string scenario, plan, run, trace, step, output, compute_model = "auto";
    double tokens_per_s = 0;
    bool json = false;
  };
  static Args a;
  auto* cal = app.add_subcommand("calibrate", "Fit the cost models to what you measured");
  cal->require_subcommand(1);
  auto* cmd = cal->add_subcommand(
      "stack",
      "Fit a software stack's compute / collective / optimizer factors to one measured "
      "iteration of a plan");
  cmd->add_option("--scenario", a.scenario, "Scenario the plan ran on")->required();
  cmd->add_option("--plan", a.plan, "Plan that was measured")->required();
  auto* tokens = cmd->add_option("--measured-tokens-per-s", a.tokens_per_s,
                                 "Measured throughput of the whole job (identifies compute only)")
                     ->check(number_in(1e-9, 1e15));
  auto* run = cmd->add_option("--run", a.run,
                              "Measured RunResult (cephalo run --json; with op records it "
                              "identifies compute, comm and optimizer)");
  auto* trace = cmd->add_option("--trace", a.trace,
                                "PyTorch profiler trace of the run (torch.profiler's Chrome "
                                "trace, .json or .json.gz; identifies compute, comm and "
                                "optimizer from one step)");
  auto* step = cmd->add_option("--step", a.step,
                               "The trace's step to fit (ProfilerStep#N or N; default: the "
                               "median step)");
  step->needs(trace);
  tokens->excludes(run);
  tokens->excludes(trace);
  run->excludes(trace);
  cmd->add_option("-o,--output", a.output, "Write the stack calibration here")->required();
  cmd->add_flag("--json", a.json, "Print the fit as JSON instead of the table");
  add_compute_model_option(cmd, a.compute_model, "Compute model the factors multiply", "");
  cmd->callback([tokens, run, trace] {
    if (tokens->count() + run->count() + trace->count() != 1)
      throw CLI::ValidationError("--measured-tokens-per-s / --run / --trace", "give exactly one");
    const Scenario given = read_scenario(a.scenario, "");
    const Plan plan = load_plan(a.plan, &given);
    const Scenario scenario = scenario_for_plan(given, plan, a.plan);
    planner::StackMeasurement m;
    m.options_source = kCommandLine;  // its refusals spell the flags (--step, --run)
    traces::IterationReport measured;
    std::optional<traces::KinetoTrace> profiled;
    if (trace->count()) {
      profiled = traces::load_kineto_trace(a.trace);
      m.trace = &*profiled;
      m.trace_step = a.step;
    } else if (run->count()) {
      measured = traces::load_result(a.run);
      m.run = &measured;
      m.run_file = a.run;
    } else {
      m.tokens_per_s = a.tokens_per_s;
    }
    const planner::StackFit fit =
        planner::calibrate_stack_to_file(scenario, plan, m, a.compute_model, a.output, "--output");
    print_json_or_text(
        a.json, [&] { return planner::to_json(fit); },
        [&] { return planner::render_stack_fit(fit) + "stack written to " + a.output + "\n"; });
  });
}

}  // namespace cephalo::cli

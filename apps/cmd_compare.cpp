// `cephalo compare SIM.json RUN.json [--scenario F --plan P] [--trace T] [--json]`: how far the
// simulator is from a measured run of the same plan, end to end, per rank and (with the graph
// the op ids key: --scenario and --plan) per op class, plus a merged Perfetto timeline. The
// comparison is traces::compare_planned (traces/compare.hpp, what each part reports), which
// Python's compare calls too; this file parses, calls and prints.
// `cephalo compare SIM.json TRACE.json[.gz] [--scenario F --plan P] [--step N] [--json]`: the
// same against one step of a PyTorch profiler trace (traces/trace_compare.hpp), told apart
// from a RunResult by its content (traces::looks_like_trace).
#include <iostream>
#include <optional>

#include "cephalo/core/output_file.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/trace_compare.hpp"
#include "commands.hpp"

namespace cephalo::cli {

namespace {

struct CompareArgs {
  std::string sim_file, run_file, scenario_file, plan_file, trace_file, step;
  bool json = false;
};
CompareArgs compare_args;

void compare_with_trace(const traces::IterationReport& sim, const traces::KinetoTrace& trace) {
  const CompareArgs& a = compare_args;
  if (!a.trace_file.empty())
    throw CLI::ValidationError("--trace",
                               "a merged timeline needs a RunResult, not a profiler trace");
  std::optional<Scenario> scenario;
  std::optional<Plan> plan;
  if (!a.scenario_file.empty()) scenario = costmodels::load_scenario(a.scenario_file);
  if (!a.plan_file.empty()) plan = load_plan(a.plan_file, scenario ? &*scenario : nullptr);
  if (scenario && plan) scenario = scenario_for_plan(*scenario, *plan, a.plan_file);
  // Scenario and plan both or neither, the plan's checks, the graph, the comparison.
  const auto c = traces::compare_trace_planned(
      sim, a.sim_file, trace, a.step, scenario ? &*scenario : nullptr, plan ? &*plan : nullptr,
      a.plan_file, kCommandLine, "--scenario and --plan", "--step");
  print_json_or_text(
      a.json, [&] { return c.record; }, [&] { return c.text; });
}

}  // namespace

void add_compare_command(CLI::App& app) {
  CompareArgs& a = compare_args;
  auto* cmd = app.add_subcommand("compare",
                                 "Compare a simulated result with a measured run of the same plan");
  cmd->add_option("SIM", a.sim_file, "SimResult JSON (cephalo simulate --json --ops)")->required();
  cmd->add_option("RUN", a.run_file,
                  "RunResult JSON (cephalo run --json), or a PyTorch profiler trace "
                  "(.json / .json.gz)")
      ->required();
  cmd->add_option("--step", a.step,
                  "with a profiler trace: the step to compare (ProfilerStep#N or N; default the "
                  "median step)");
  cmd->add_option("--scenario", a.scenario_file,
                  "scenario of the plan (needed for the per-op-class table and --trace)");
  cmd->add_option("--plan", a.plan_file, "the plan both results ran");
  cmd->add_option("--trace", a.trace_file,
                  "write a Perfetto trace with simulated and measured lanes side by side");
  cmd->add_flag("--json", a.json, "print the comparison record as JSON");
  cmd->callback([] {
    const traces::IterationReport sim = traces::load_result(a.sim_file);
    if (const std::string bytes = read_input_file(a.run_file); traces::looks_like_trace(bytes)) {
      compare_with_trace(sim, traces::parse_kineto_trace(bytes, a.run_file));
      return;
    }
    if (!a.step.empty())
      throw CLI::ValidationError("--step", "only with a profiler trace as the second file");
    const traces::IterationReport run = traces::load_result(a.run_file);
    std::optional<Scenario> scenario;
    std::optional<Plan> plan;
    if (!a.scenario_file.empty()) scenario = costmodels::load_scenario(a.scenario_file);
    if (!a.plan_file.empty()) plan = load_plan(a.plan_file, scenario ? &*scenario : nullptr);
    // The plan runs on the nodes it lists (core/plan_nodes.hpp): the scenario cut to them.
    if (scenario && plan) scenario = scenario_for_plan(*scenario, *plan, a.plan_file);
    // The plan's checks for the scenario, the graph, the comparison, the implementation sides.
    const auto c = traces::compare_planned(sim, a.sim_file, run, a.run_file,
                                           scenario ? &*scenario : nullptr, plan ? &*plan : nullptr,
                                           a.plan_file, kCommandLine, "--scenario and --plan");
    for (const auto& w : c.report.warnings) std::cerr << "warning: " << w << "\n";
    check_outputs({{"--trace", a.trace_file}});  // every input is read (output_file.hpp)
    if (const std::string w = c.implementation_warning(); !w.empty())
      std::cerr << "warning: " << w << "\n";
    Json record = c.record();
    if (!a.trace_file.empty()) {
      c.write_merged_trace(sim, run, scenario ? &scenario->cluster : nullptr,
                           "simulated vs measured: " + a.sim_file + " / " + a.run_file,
                           a.trace_file, "--trace");
      record["trace"] = a.trace_file;
    }
    print_json_or_text(
        a.json, [&] { return record; },
        [&] {
          return "implementation  simulated: " + c.implementation.simulated +
                 "; measured: " + c.implementation.measured + "\n" +
                 traces::render_compare_table(c.report, c.graph_or_null()) +
                 (a.trace_file.empty() ? "" : "\nmerged trace written to " + a.trace_file + "\n");
        });
  });
}

}  // namespace cephalo::cli

// `cephalo compare SIM.json RUN.json`: how far the simulator is from a measured run of the same
// plan. Both files use the shared SimResult/RunResult schema (traces/report.hpp). Reports:
//  * end to end: iteration time, samples/s, tokens/s;
//  * per rank: peak memory, compute-stream busy time, communication time;
//  * per op class (forward, backward, recompute, all-gather, reduce-scatter, all-reduce, copies,
//    optimizer): Σ of op durations over all ranks, simulated vs measured. Needs per-op timings
//    in both files (`simulate --ops`, `run --json`) and the graph they are keyed by
//    (`--scenario` and `--plan`: op ids are stable for a given plan and scenario);
//  * `--trace F`: one Perfetto trace with the simulated and the measured timeline of every rank
//    as adjacent processes ("rank 0 · sim", "rank 0 · measured", "rank 1 · sim", ...).
// The comparison itself (checks, classes, totals, merged timeline) is traces::compare
// (traces/compare.hpp); this file parses, calls and prints.
#include <iostream>
#include <optional>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct Options {
  std::string sim_file;
  std::string run_file;
  std::string scenario_file;
  std::string plan_file;
  std::string trace_file;
  bool json = false;
};

void run_compare(const Options& opt) {
  traces::IterationReport sim = traces::load_result(opt.sim_file);
  traces::IterationReport run = traces::load_result(opt.run_file);

  std::optional<Scenario> scenario;
  std::optional<Plan> plan;
  if (!opt.scenario_file.empty() || !opt.plan_file.empty()) {
    if (opt.scenario_file.empty() || opt.plan_file.empty())
      throw CLI::ValidationError("--scenario and --plan", "give both (the graph the op ids key)");
    scenario = costmodels::load_scenario(opt.scenario_file);
    plan = load_plan(opt.plan_file);
  }
  // The plan's checks for the scenario, the graph, the comparison, the implementation sides.
  const auto c =
      traces::compare_planned(sim, opt.sim_file, run, opt.run_file, scenario ? &*scenario : nullptr,
                              plan ? &*plan : nullptr, opt.plan_file);
  const traces::CompareReport& report = c.report;
  for (const auto& w : report.warnings) std::cerr << "warning: " << w << "\n";
  check_outputs({{"--trace", opt.trace_file}});  // every input is read (output_file.hpp)
  const auto& impl = c.implementation;
  if (impl.differ)
    std::cerr << "warning: implementation differs: simulated \"" << impl.simulated
              << "\", measured \"" << impl.measured
              << "\" (set the job's \"implementation\" to the backend's)\n";

  Json record = c.record();
  if (!opt.trace_file.empty()) {
    if (!report.have_ops)
      throw InfeasibleError("--trace: cannot build the merged timeline: " + report.ops_note);
    write_file_atomically(opt.trace_file,
                          traces::render_merged_trace(
                              *c.graph, sim, run, traces::rank_labels(scenario->cluster),
                              "simulated vs measured: " + opt.sim_file + " / " + opt.run_file));
    record["trace"] = opt.trace_file;
  }
  if (opt.json) {
    std::cout << record.dump(2) << "\n";
    return;
  }
  std::cout << "implementation  simulated: " << impl.simulated << "; measured: " << impl.measured
            << "\n"
            << traces::render_compare_table(report, c.graph_or_null());
  if (!opt.trace_file.empty()) std::cout << "\nmerged trace written to " << opt.trace_file << "\n";
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("compare",
                                 "Compare a simulated result with a measured run of the same plan");
  cmd->add_option("SIM", opt->sim_file, "SimResult JSON (cephalo simulate --json --ops)")
      ->required();
  cmd->add_option("RUN", opt->run_file, "RunResult JSON (cephalo run --json)")->required();
  cmd->add_option("--scenario", opt->scenario_file,
                  "scenario of the plan (needed for the per-op-class table and --trace)");
  cmd->add_option("--plan", opt->plan_file, "the plan both results ran");
  cmd->add_option("--trace", opt->trace_file,
                  "write a Perfetto trace with simulated and measured lanes side by side");
  cmd->add_flag("--json", opt->json, "print the comparison record as JSON");
  cmd->callback([opt] { run_compare(*opt); });
}

}  // namespace cephalo::cli

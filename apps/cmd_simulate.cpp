// `cephalo simulate --scenario F --plan P [--trace out.json] [--json] [--ops]`
// Builds the plan's TrainingGraph, replays it on the scenario's modelled cluster with the cost
// models, prints the SimResult (table, or JSON with --json) and optionally writes a Chrome
// trace that opens in Perfetto.
#include <iostream>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_simulate_command(CLI::App& app) {
  struct Args {
    std::string scenario, stack, plan, trace, compute_model = "auto", queue = "binary-heap";
    bool json = false, ops = false, no_link_sharing = false, per_rank = false;
  };
  static Args a;
  auto* cmd = app.add_subcommand(
      "simulate", "Replay one training iteration of a plan on the scenario's modelled cluster");
  cmd->add_option("--scenario", a.scenario, "Scenario file")->required();
  cmd->add_option("--plan", a.plan, "Plan file")->required();
  cmd->add_option("--trace", a.trace, "Write a Chrome/Perfetto trace JSON here");
  cmd->add_flag("--json", a.json, "Print the SimResult as JSON instead of a table");
  cmd->add_flag("--ops", a.ops, "Include per-op start/end times keyed by op id");
  cmd->add_flag("--per-rank", a.per_rank,
                "One table row per rank (default: one per run of ranks with equal rows, with "
                "their rank range; --json is always per rank)");
  add_compute_model_option(cmd, a.compute_model, "Compute model", "--compute-source");
  add_stack_option(cmd, a.stack);
  cmd->add_flag("--no-link-sharing", a.no_link_sharing,
                "Give every transfer its isolated time (no bandwidth sharing on links)");
  cmd->add_option("--queue", a.queue, "Event queue: binary-heap or pairing-heap")
      ->capture_default_str()
      ->check(one_of(sim::event_queue_names()));
  cmd->callback([] {
    if (!a.trace.empty()) traces::check_chrome_trace_name(a.trace, kCommandLine, "--trace");
    const Scenario given = read_scenario(a.scenario, a.stack);
    const Plan plan = load_plan(a.plan, &given);
    // The plan runs on the nodes it lists (core/plan_nodes.hpp): the scenario cut to them.
    const Scenario scenario = scenario_for_plan(given, plan, a.plan);
    sim::SimOptions options;
    options.record_ops = a.ops;
    options.link_sharing = !a.no_link_sharing;
    options.queue = a.queue;
    // The plan's checks, the cost models, the trace's location, the replay, the warnings.
    const auto run = sim::simulate_checked(scenario, plan, a.plan, a.compute_model, options,
                                           {"--trace", a.trace});
    const sim::SimResult& result = run.replay.result;
    std::cerr << sim::render_replay_summary(run, scenario, plan);
    if (!a.trace.empty() && sim::write_simulation_trace(run, scenario, a.trace))
      std::cerr << "wrote trace " << a.trace << "\n";
    if (a.json)
      std::cout << traces::render_json(result.report);
    else
      std::cout << sim::render_simulation(run, scenario, plan, a.plan, a.ops, a.per_rank);
    std::cout.flush();  // the record is out even if something fails at exit
  });
}

}  // namespace cephalo::cli

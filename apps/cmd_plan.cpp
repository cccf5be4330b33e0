// `cephalo plan --scenario F --strategy S [--micro-batch N] [--accumulation A]
//  [--activation-checkpointing C] [-o plan.json] [--json]`
#include <iostream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#include "scenario_input.hpp"

namespace cephalo::cli {
namespace {

struct PlanArgs {
  std::string scenario, stack;
  std::string output;
  bool json = false;
  std::string cephalo_shares = "min_params";
  bool cephalo_corrected = false;
  std::string accumulation;              // empty: left open (planner::resolve_open_choices)
  std::string activation_checkpointing;  // empty: left open; "auto": the strategy chooses
  planner::PlannerOptions options;
};

void run_plan(const PlanArgs& a) {
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  check_outputs({{"--output", a.output}});  // before planning (output_file.hpp)
  planner::PlannerOptions opt = a.options;
  // The planner checks the schedule flags before any search and names them as flags.
  opt.options_source = planner::kOptionsFromCommandLine;
  opt.scenario_label = a.scenario;
  planner::set_cephalo_shares_text(opt, a.cephalo_shares);
  opt.cephalo_published_share_memory = !a.cephalo_corrected;
  opt.progress = opt.progress || opt.strategy == "search";
  planner::set_schedule_text(opt, a.accumulation, a.activation_checkpointing);
  planner::PlanResult result = planner::make_plan(scenario, opt);
  // Only what is asked for is built: at 100k ranks the plan's JSON tree and text cost more than
  // the planning (bench/README.md).
  const bool fits = result.fits();
  const std::string table = a.json ? std::string() : planner::render_table(result);
  if (a.json || !a.output.empty()) {
    // The Plan carries the prediction, so --json and -o are one valid Plan record.
    const std::string text = planner::plan_record(result).dump(2) + "\n";
    if (!a.output.empty()) write_file_atomically(a.output, text);
    if (a.json) std::cout << text;
  }
  if (!a.json) {
    std::cout << planner::render_plan_text(scenario, table, fits);
    if (!a.output.empty()) std::cout << "plan written to " << a.output << "\n";
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Plan per-rank batches, micro-batches and state shares");
  cmd->add_option("--scenario", args->scenario, "Scenario JSON file")->required();
  cmd->add_option("--strategy", args->options.strategy,
                  "even | proportional | cephalo | optimal | search")
      ->check(one_of(planner::strategy_names()));
  cmd->add_option("-o,--output", args->output, "Write the plan (JSON) to this file");
  cmd->add_flag("--json", args->json, "Print the plan as JSON instead of the table");
  cmd->add_option("--offload", args->options.offload, "optimal/search: none | host | auto")
      ->check(one_of({"none", "host", "auto"}));
  add_compute_model_option(cmd, args->options.compute_source, "Compute model", "--compute-source");
  add_stack_option(cmd, args->stack);
  cmd->add_option("--cephalo-shares", args->cephalo_shares, "cephalo: min_params | min_util")
      ->check(one_of({"min_params", "min_util"}));
  cmd->add_flag("--cephalo-corrected-share-memory", args->cephalo_corrected,
                "cephalo: evaluate the share split with the real micro-batch size (the published "
                "code passes the micro-batch count)");
  cmd->add_option("--search-neighbours", args->options.search_neighbours,
                  "search: neighbour plans to simulate at most")
      ->check(integer_in(1, planner::kMaxSearchNeighbours));
  cmd->add_option("--micro-batch", args->options.micro_batch,
                  "Fix every rank's micro-batch size (the last of a rank may be smaller); the "
                  "strategy chooses the rest")
      ->check(integer_in(1, planner::kMaxPlannerMicroBatch));
  cmd->add_option("--accumulation", args->accumulation,
                  "Fix the accumulation: layered | standard | no_sync (default: optimal searches "
                  "all three, the other strategies layered)")
      ->check(one_of({"layered", "standard", "no_sync"}));
  cmd->add_option("--activation-checkpointing", args->activation_checkpointing,
                  "Fix the checkpointing: full | none | every:K, or auto; default: optimal "
                  "searches (as auto), the other strategies full")
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v == "auto") return std::string();
            try {
              parse_activation_checkpointing(v, "--activation-checkpointing");
            } catch (const ValidationError& e) {
              return std::string("got \"") + v + "\", expected " + e.expected() + " or auto";
            }
            return std::string();
          },
          "full|none|every:K|auto"));
  cmd->add_option("--sharding", args->options.sharding,
                  "full | hybrid | auto: shard over every rank, or within groups of nodes "
                  "(replicated across groups; auto simulates full and group sizes); default: "
                  "optimal auto, the other strategies full")
      ->check(one_of({"full", "hybrid", "auto"}));
  cmd->add_option("--group-size", args->options.group_nodes,
                  "hybrid/auto: nodes per sharding group (hybrid default 1)")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_flag("--progress", args->options.progress, "Progress on stderr");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace cephalo::cli

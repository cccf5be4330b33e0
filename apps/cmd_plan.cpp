// `cephalo plan --scenario F --strategy S [--micro-batch N] [--accumulation A]
//  [--activation-checkpointing C] [-o plan.json] [--json]`, and with `--parallelism 3d` the
// search over tensor x pipeline x data parallel splits (planner/split_search.hpp).
#include <iostream>
#include <optional>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_plan.hpp"
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
  std::string parallelism = "fsdp";
  std::string sharding;  // fsdp: full | hybrid | auto; 3d: full | hybrid | optimizer | none
  // 3d only: each fixes one dimension of the search; unset ones are searched.
  int tensor_parallel = 0, pipeline_stages = 0, micro_batches = 0;  // 0: searched
  std::string pipeline_schedule;
  bool sequence_parallel = false;
};

planner::SplitSearchOptions split_options(const PlanArgs& a) {
  planner::SplitSearchOptions o;
  o.options_source = planner::kOptionsFromCommandLine;
  if (a.tensor_parallel > 0) o.tensor_parallel = a.tensor_parallel;
  if (a.pipeline_stages > 0) o.pipeline_stages = a.pipeline_stages;
  if (a.micro_batches > 0) o.micro_batches = a.micro_batches;
  if (!a.pipeline_schedule.empty())
    o.schedule =
        pipeline::parse_pipeline_schedule(a.pipeline_schedule, kCommandLine, "--pipeline-schedule");
  if (a.sequence_parallel) o.sequence_parallel = true;
  if (!a.sharding.empty() && a.sharding != "auto") o.sharding = parse_stage_sharding(a.sharding);
  // The FSDP schedule's flags mean nothing to a split (its micro-batches are --micro-batches).
  if (a.parallelism == "3d" && (a.options.micro_batch > 0 || !a.accumulation.empty()))
    throw ValidationError(
        kCommandLine, a.options.micro_batch > 0 ? "--micro-batch" : "--accumulation",
        a.options.micro_batch > 0 ? std::to_string(a.options.micro_batch) : a.accumulation,
        "no FSDP schedule flag with --parallelism 3d (a split's micro-batch "
        "count is --micro-batches)");
  if (a.activation_checkpointing == "full") o.recompute = true;
  if (a.activation_checkpointing == "none") o.recompute = false;
  if (a.activation_checkpointing.rfind("every:", 0) == 0)
    throw ValidationError(kCommandLine, "--activation-checkpointing", a.activation_checkpointing,
                          "full, none or auto with --parallelism 3d");
  return o;
}

void print_3d(const PlanArgs& a, const planner::SplitPlanResult& r) {
  if (a.json || !a.output.empty()) {
    // One valid Plan record, with its model_split: `simulate` and `run` read it.
    const std::string text = planner::plan_record(r).dump(2) + "\n";
    if (!a.output.empty()) write_file_atomically(a.output, text);
    if (a.json) std::cout << text;
  }
  if (!a.json)
    std::cout << planner::render_split_plan(r)
              << (a.output.empty() ? "" : "plan written to " + a.output + "\n");
}

void run_plan_3d(const PlanArgs& a) {
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  check_outputs({{"--output", a.output}});
  print_3d(a,
           planner::plan_split(scenario, split_options(a),
                               costmodels::make_cost_models(scenario, a.options.compute_source)));
}

planner::PlannerOptions fsdp_options(const PlanArgs& a) {
  planner::PlannerOptions opt = a.options;
  if (!a.sharding.empty()) {
    if (a.sharding != "full" && a.sharding != "hybrid" && a.sharding != "auto")
      throw ValidationError(kCommandLine, "--sharding", a.sharding,
                            "full, hybrid or auto (optimizer and none need --parallelism 3d)");
    opt.sharding = a.sharding;
  }
  // The planner checks the schedule flags before any search and names them as flags.
  opt.options_source = planner::kOptionsFromCommandLine;
  opt.scenario_label = a.scenario;
  planner::set_cephalo_shares_text(opt, a.cephalo_shares);
  opt.cephalo_published_share_memory = !a.cephalo_corrected;
  opt.progress = opt.progress || opt.strategy == "search";
  planner::set_schedule_text(opt, a.accumulation, a.activation_checkpointing);
  return opt;
}

void print_fsdp(const PlanArgs& a, const Scenario& scenario, const planner::PlanResult& result) {
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

// Both plans, then the faster one printed (and written) as its own mode does, with one line on
// why the other lost.
void run_plan_auto(const PlanArgs& a) {
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  check_outputs({{"--output", a.output}});
  const planner::PlanResult fsdp = planner::make_plan(scenario, fsdp_options(a));
  const auto models = costmodels::make_cost_models(scenario, a.options.compute_source);
  std::optional<planner::SplitPlanResult> split;
  std::string split_refusal;
  try {
    split = planner::plan_split(scenario, split_options(a), models);
  } catch (const InfeasibleError& e) {
    split_refusal = e.what();
  }
  const planner::FamilyChoice choice =
      planner::choose_family(scenario, fsdp, split, split_refusal, models);
  if (choice.fsdp)
    print_fsdp(a, scenario, fsdp);
  else
    print_3d(a, *split);
  (a.json ? std::cerr : std::cout) << choice.why << "\n";  // --json: stdout holds one record
}

void run_plan(const PlanArgs& a) {
  if (a.parallelism == "3d") return run_plan_3d(a);
  if (a.parallelism == "auto") return run_plan_auto(a);
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  check_outputs({{"--output", a.output}});  // before planning (output_file.hpp)
  print_fsdp(a, scenario, planner::make_plan(scenario, fsdp_options(a)));
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
  cmd->add_option("--sharding", args->sharding,
                  "full | hybrid | auto: shard over every rank, or within groups of nodes "
                  "(replicated across groups; auto simulates full and group sizes); default: "
                  "optimal auto, the other strategies full. With --parallelism 3d: each stage's "
                  "DP sharding, full | hybrid | optimizer | none (default: searched)")
      ->check(one_of({"full", "hybrid", "auto", "optimizer", "none"}));
  cmd->add_option("--parallelism", args->parallelism,
                  "fsdp (default: the plans above) | 3d (search tensor x pipeline x data "
                  "parallel splits, planner/split_search.hpp) | auto (both; the faster, and "
                  "why the other lost; -o writes the winner's format)")
      ->check(one_of({"fsdp", "3d", "auto"}));
  cmd->add_option("--tensor-parallel", args->tensor_parallel, "3d: fix every stage's TP degree")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--pipeline-stages", args->pipeline_stages, "3d: fix the pipeline stages")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--micro-batches", args->micro_batches, "3d: fix the micro-batches per iteration")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--pipeline-schedule", args->pipeline_schedule,
                  "3d: fix the schedule, gpipe | 1f1b | interleaved:V");
  cmd->add_flag("--sequence-parallel", args->sequence_parallel,
                "3d: require sequence parallelism (default: searched)");
  cmd->add_option("--group-size", args->options.group_nodes,
                  "hybrid/auto: nodes per sharding group (hybrid default 1)")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_flag("--progress", args->options.progress, "Progress on stderr");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace cephalo::cli

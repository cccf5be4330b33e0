// `cephalo plan --scenario F --strategy S [--micro-batch N] [--accumulation A]
//  [--activation-checkpointing C] [-o plan.json] [--json]`, and with `--parallelism 3d` the
// search over tensor x pipeline x data parallel splits made into a plan
// (planner/src/split_plan.hpp).
#include <algorithm>
#include <iostream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/strategies.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct PlanArgs {
  std::string scenario, stack;
  std::string output;
  bool json = false;
  bool explain = false;                    // the whole search log after the summary
  bool per_rank = false, compact = false;  // the rows' form (core/plan.hpp PlanForm)
  planner::PlanRequest request;  // the flags' values; planner/plan_request.hpp checks them
};

void run_plan(PlanArgs& a) {
  // The rows' form is the written plan's: with neither -o nor --json no plan is written, and
  // the table already prints a row per run of alike ranks.
  if (a.compact && !a.json && a.output.empty())
    throw CLI::ValidationError("--compact",
                               "it says how -o or --json write the plan's rows; give one of them "
                               "(the table already prints a row per run of alike ranks)");
  planner::PlanRequest& r = a.request;
  r.options.options_source = planner::kOptionsFromCommandLine;  // messages name the flags
  planner::check_request(r);  // a flag the chosen family would drop: exit 2 before any input
  r.options.scenario_label = a.scenario;
  r.options.progress = r.options.progress || r.options.strategy == "search";
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  check_outputs({{"--output", a.output}});  // before planning (output_file.hpp)
  const planner::PlanResult answer = planner::answer_plan(scenario, r);
  // Only what is asked for is built: at 100k ranks the plan's JSON tree and text cost more than
  // the planning (bench/README.md).
  if (a.json || !a.output.empty()) {
    // Either family's Plan carries its prediction (a split's also its model_split), so --json
    // and -o are one valid Plan record that `simulate` and `run` read.
    const PlanForm form = a.per_rank  ? PlanForm::PerRank
                          : a.compact ? PlanForm::Compact
                                      : PlanForm::Auto;
    const std::string record = planner::plan_record(answer, form).dump(2) + "\n";
    if (!a.output.empty()) write_file_atomically(a.output, record);
    if (a.json) std::cout << record;
  }
  if (!a.json) {
    // A plan that leaves nodes idle is printed as what it runs on: the scenario's used nodes.
    const Scenario used = scenario_for_plan(scenario, answer.plan, a.output);
    std::cout << planner::render_plan(used, answer, a.per_rank);
    if (!a.output.empty()) std::cout << "plan written to " << a.output << "\n";
  }
  // --json: stdout holds one record (its "explanation" has the log)
  if (a.json) return;
  std::cout << planner::plan_summary(answer);
  if (a.explain) std::cout << "search log: " << planner::plan_explanation(answer) << "\n";
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Plan per-rank batches, micro-batches and state shares");
  cmd->add_option("--scenario", args->scenario, "Scenario JSON file")->required();
  cmd->add_option("--strategy", args->request.options.strategy,
                  "even | proportional | cephalo | optimal | search")
      ->check(one_of(planner::strategy_names()));
  cmd->add_option("-o,--output", args->output, "Write the plan (JSON) to this file");
  cmd->add_flag("--json", args->json, "Print the plan as JSON instead of the table");
  cmd->add_flag("--explain", args->explain,
                "Print the planner's whole search log after the summary (the candidates, their "
                "times and why each lost)");
  auto* per_rank = cmd->add_flag(
      "--per-rank", args->per_rank,
      "One table row and one plan row per rank (default: a row per run of alike ranks, and "
      "the compact \"rank_classes\" form above 256 ranks)");
  cmd->add_flag("--compact", args->compact,
                "Write the plan's rows by class (\"rank_classes\") at any size")
      ->excludes(per_rank);
  cmd->add_option("--offload", args->request.options.offload, "optimal/search: none | host | auto")
      ->check(one_of({"none", "host", "auto"}));
  add_compute_model_option(cmd, args->request.options.compute_source, "Compute model",
                           "--compute-source");
  add_stack_option(cmd, args->stack);
  cmd->add_option("--cephalo-shares", args->request.cephalo_shares,
                  "cephalo: min_params | min_util")
      ->check(one_of({"min_params", "min_util"}));
  cmd->add_flag("--cephalo-corrected-share-memory", args->request.cephalo_corrected_share_memory,
                "cephalo: evaluate the share split with the real micro-batch size (the published "
                "code passes the micro-batch count)");
  cmd->add_option("--search-neighbours", args->request.options.search_neighbours,
                  "search: neighbour plans to simulate at most")
      ->check(integer_in(1, planner::kMaxSearchNeighbours));
  cmd->add_option("--micro-batch", args->request.options.micro_batch,
                  "Fix every rank's micro-batch size (the last of a rank may be smaller); the "
                  "strategy chooses the rest")
      ->check(integer_in(1, planner::kMaxPlannerMicroBatch));
  cmd->add_option("--accumulation", args->request.accumulation,
                  "Fix the accumulation: layered | standard | no_sync (default: optimal searches "
                  "all three, the other strategies layered)")
      ->check(one_of({"layered", "standard", "no_sync"}));
  // Checked with the other schedule options (planner::set_schedule_text), as Python's keyword.
  cmd->add_option(
      "--activation-checkpointing", args->request.activation_checkpointing,
      "Fix the checkpointing: full | none | selective | every:K, or auto; default: optimal "
      "searches (as auto), the other strategies full");
  cmd->add_option("--sharding", args->request.sharding,
                  "full | hybrid | auto: shard over every rank, or within groups of nodes "
                  "(replicated across groups; auto simulates full and group sizes); default: "
                  "optimal auto, the other strategies full. With --parallelism 3d: each stage's "
                  "DP sharding, full | hybrid | optimizer | none (default: searched)")
      ->check(one_of({"full", "hybrid", "auto", "optimizer", "none"}));
  cmd->add_option("--parallelism", args->request.parallelism,
                  "fsdp (the plans above) | 3d (search tensor x pipeline x data parallel "
                  "splits, planner/split_search.hpp) | auto (both; the faster, and why the "
                  "other lost; -o writes the winner's format). Default: the family the other "
                  "flags fix (--strategy: fsdp; --tensor-parallel: 3d), else auto")
      ->check(one_of({"fsdp", "3d", "auto"}));
  cmd->add_option("--tensor-parallel", args->request.tensor_parallel,
                  "3d: fix every stage's TP degree")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--pipeline-stages", args->request.pipeline_stages, "3d: fix the pipeline stages")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--micro-batches", args->request.micro_batches,
                  "3d: fix the micro-batches per iteration")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--pipeline-schedule", args->request.pipeline_schedule,
                  "3d: fix the schedule, gpipe | 1f1b | interleaved:V");
  cmd->add_flag("--sequence-parallel", args->request.sequence_parallel,
                "3d: require sequence parallelism (default: searched)");
  cmd->add_option("--group-size", args->request.options.group_nodes,
                  "hybrid/auto: nodes per sharding group (hybrid default 1)")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_flag("--progress", args->request.options.progress, "Progress on stderr");
  cmd->add_flag("--use-all", args->request.use_all,
                "Plan every GPU and weigh no plan that leaves the slowest nodes idle (default: "
                "optimal, search and 3d also plan the cluster without its slowest GPU types and, "
                "when that is at least 1 % faster, write that plan: its \"nodes\" lists the "
                "nodes it runs on, and the summary says which it left idle and why)");
  cmd->callback([args, cmd] {
    // Which flags were given, whatever their values (`--strategy optimal` under 3d is refused
    // like any other FSDP flag: planner::check_request).
    args->request.given.clear();
    for (const CLI::Option* option : cmd->get_options())
      if (option->count() > 0) {
        std::string name = option->get_single_name();
        std::replace(name.begin(), name.end(), '-', '_');
        args->request.given.push_back(name);
      }
    run_plan(*args);
  });
}

}  // namespace cephalo::cli

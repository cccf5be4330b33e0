// `cephalo predict 3d`: the first estimate of one iteration under a tensor x pipeline x data
// parallel split (planner/split_estimate.hpp), as a table or --json.
#include <iostream>

#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_predict_3d_command(CLI::App& predict) {
  struct Args {
    std::string scenario, split, stack;
    planner::SplitEstimateRequest request;  // the flags' values
    bool no_scatter_gather = false, json = false;
  };
  static Args a;
  auto* c = predict.add_subcommand(
      "3d", "One iteration under a tensor x pipeline x data parallel split (first estimate)");
  c->add_option("--scenario", a.scenario, "scenario file")->required();
  c->add_option("--split", a.split, "model split file ({\"model_split\": {...}})")->required();
  c->add_option("--activation-checkpointing", a.request.activation_checkpointing,
                "none, full (every layer recomputed) or selective (each layer's attention core "
                "recomputed); default: a plan file's own, a bare split none")
      ->check(one_of(checkpointing_words()));
  c->add_option("--dp-overlap", a.request.dp_overlap,
                "none (default: DP reduction after the last backward), last-backward, or "
                "per-unit (each unit's reduction after its last backward, as the replay runs "
                "it and the 3D search prices it)")
      ->check(one_of({"none", "last-backward", "per-unit"}));
  c->add_flag("--no-scatter-gather", a.no_scatter_gather,
              "P2P sends every receiving TP rank its own copy (1/T of it under sequence "
              "parallelism), as the replay does and the 3D search prices it");
  c->add_flag("--backward-at-forward-rate", a.request.backward_at_forward_rate,
              "Price each layer's backward at the forward's rate times the op list's backward / "
              "forward work instead of the calibrated backward (a diagnostic: the simulator "
              "keeps the calibrated one; planner/README.md)");
  add_compute_model_option(c, a.request.compute_model, "Compute model", "");
  add_stack_option(c, a.stack);
  c->add_flag("--json", a.json, "Print the record as JSON");
  c->callback([] {
    const Scenario scenario =
        planner::scenario_for_split_file(read_scenario(a.scenario, a.stack), a.split);
    planner::SplitEstimateRequest request = a.request;
    const ModelSplit split = load_model_split_for(a.split, scenario, &request.split_path);
    request.scatter_gather = !a.no_scatter_gather;
    request.options_source = planner::kOptionsFromCommandLine;
    request.split_file = a.split;
    planner::read_split_plan(request);
    const auto estimate = planner::estimate_split_request(scenario, split, request);
    print_json_or_text(
        a.json, [&] { return planner::to_json(estimate); },
        [&] {
          return planner::render_split_estimate(estimate, split) +
                 planner::render_split_summary(estimate);
        },
        1);
    planner::require_fit(estimate);  // exit 3 after the table, which says where it does not fit
  });
}

}  // namespace cephalo::cli

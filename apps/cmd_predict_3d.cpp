// `cephalo predict 3d`: the first estimate of one iteration under a tensor x pipeline x data
// parallel split (planner/split_estimate.hpp), as a table or --json.
#include <iostream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_search.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#include "scenario_input.hpp"

namespace cephalo::cli {
namespace {

struct Predict3dArgs {
  std::string scenario, split, stack, source = "auto", checkpointing = "none", dp_overlap = "none";
  bool no_scatter_gather = false;
  bool json = false;
};

void predict_3d(const Predict3dArgs& a) {
  const Scenario scenario = read_scenario(a.scenario, a.stack);
  const ModelSplit split = load_model_split_for(a.split, scenario);
  planner::SplitOptions options;
  options.recompute = a.checkpointing == "full";
  options.selective_recompute = a.checkpointing == "selective";
  options.scatter_gather = !a.no_scatter_gather;
  options.dp_overlap =
      a.dp_overlap == "last-backward" ? planner::DpOverlap::LastBackward : planner::DpOverlap::None;
  const auto estimate = planner::estimate_split(scenario, split, options,
                                                costmodels::make_cost_models(scenario, a.source));
  if (a.json) {
    std::cout << planner::to_json(estimate).dump(1) << "\n";
  } else {
    std::cout << planner::render_split_estimate(estimate, split) << "iteration "
              << format_seconds(estimate.iteration_s) << " (schedule "
              << format_seconds(estimate.makespan_s) << ", p2p " << format_seconds(estimate.p2p_s)
              << " per transfer)\n";
  }
  planner::require_fit(estimate);
}

}  // namespace

void add_predict_3d_command(CLI::App& predict) {
  static Predict3dArgs args;
  auto* c = predict.add_subcommand(
      "3d", "One iteration under a tensor x pipeline x data parallel split (first estimate)");
  c->add_option("--scenario", args.scenario, "scenario file")->required();
  c->add_option("--split", args.split, "model split file ({\"model_split\": {...}})")->required();
  c->add_option("--activation-checkpointing", args.checkpointing,
                "none (default), full (every layer recomputed) or selective (each layer's "
                "attention core recomputed)")
      ->check(one_of({"none", "full", "selective"}));
  c->add_option("--dp-overlap", args.dp_overlap,
                "none (default: DP reduction after the last backward) or last-backward")
      ->check(one_of({"none", "last-backward"}));
  c->add_flag("--no-scatter-gather", args.no_scatter_gather,
              "P2P sends the full activation from every TP rank");
  add_compute_model_option(c, args.source, "Compute model", "");
  add_stack_option(c, args.stack);
  c->add_flag("--json", args.json, "Print the record as JSON");
  c->callback([] { predict_3d(args); });
}

}  // namespace cephalo::cli

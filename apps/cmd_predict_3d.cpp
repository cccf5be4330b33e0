// `cephalo predict 3d`: the first estimate of one iteration under a tensor x pipeline x data
// parallel split (planner/split_estimate.hpp), as a table or --json.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_estimate.hpp"
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
  options.scatter_gather = !a.no_scatter_gather;
  options.dp_overlap =
      a.dp_overlap == "last-backward" ? planner::DpOverlap::LastBackward : planner::DpOverlap::None;
  const auto estimate = planner::estimate_split(scenario, split, options,
                                                costmodels::make_cost_models(scenario, a.source));
  if (a.json) {
    std::cout << planner::to_json(estimate).dump(1) << "\n";
  } else {
    std::ostringstream out;
    out << estimate.split << "\n" << estimate.schedule << "\n";
    out << std::fixed << std::setprecision(4) << "iteration " << estimate.iteration_s
        << " s (schedule " << estimate.makespan_s << " s, p2p " << estimate.p2p_s << " s)\n";
    out << "stage  gpu  T  replicas  b  layers  fwd_s  bwd_s  tp_fwd_s  tp_bwd_s  dp_s  opt_s  "
           "memory_GiB\n";
    for (const auto& s : estimate.stages)
      out << s.stage << "  " << s.gpu << "  " << s.tensor_parallel << "  " << s.replicas << "  "
          << s.micro_batch << "  " << s.layers << "  " << s.forward_compute << "  "
          << s.backward_compute << "  " << s.tp_comm_forward << "  " << s.tp_comm_backward << "  "
          << s.dp_comm << "  " << s.optimizer_step << "  " << s.memory.total / (1 << 30) << "/"
          << s.memory.capacity / (1 << 30) << "\n";
    std::cout << out.str();
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
                "none (default) or full (every layer recomputed)")
      ->check(one_of({"none", "full"}));
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

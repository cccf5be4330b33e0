// `cephalo sweep --spec F [-o out.csv|out.json] [--json]`
#include <iostream>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/planner/sweep.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct SweepArgs {
  std::string spec;
  std::string output;
  bool json = false;
  bool quiet = false;
};

void run_sweep_command(const SweepArgs& a) {
  const auto spec = planner::load_sweep_spec(a.spec);
  check_outputs({{"--output", a.output}});  // before the sweep (output_file.hpp)
  const auto rows = planner::run_sweep(spec, !a.quiet);
  if (rows.empty()) return;  // MPI ranks other than 0
  if (!a.output.empty()) {
    const bool csv = a.output.size() >= 4 && a.output.substr(a.output.size() - 4) == ".csv";
    write_file_atomically(
        a.output, csv ? planner::sweep_csv(rows) : planner::sweep_json(spec, rows).dump(2) + "\n");
  }
  if (a.json) {
    std::cout << planner::sweep_json(spec, rows).dump(2) << "\n";
  } else {
    std::cout << planner::sweep_table(rows) << "* on the Pareto frontier of $/hour vs simulated "
              << "samples/s (strategy " << spec.strategy << ")\n";
    if (!a.output.empty()) std::cout << "written to " << a.output << "\n";
  }
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand(
      "sweep", "What-if sweep over cluster mixes (Pareto frontier of cost vs throughput)");
  cmd->add_option("--spec", args->spec, "Sweep spec JSON")->required();
  cmd->add_option("-o,--output", args->output, "Write rows to .csv or .json");
  cmd->add_flag("--json", args->json, "Print the JSON record instead of the table");
  cmd->add_flag("--quiet", args->quiet, "No progress on stderr");
  cmd->callback([args] { run_sweep_command(*args); });
}

}  // namespace cephalo::cli

// `cephalo sweep --spec F [-o out.csv|out.json] [--json] [--max-mixes N]`
//
// The sweep and its share-out over processes are planner::run_sweep; under mpirun this file
// gives it the MPI gather (the backend's MpiRuntime: the planner does not depend on MPI), and
// rank 0 prints and writes.
#include <iostream>

#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#include "scenario_input.hpp"

namespace cephalo::cli {
namespace {

struct SweepArgs {
  std::string spec, stack;
  std::string output;
  bool json = false;
  bool quiet = false;
  planner::SweepTableOptions table;
  std::uint64_t max_mixes = planner::kDefaultMaxMixes;
};

void run_sweep_command(const SweepArgs& a) {
  // Refuses a space above --max-mixes (ValidationError, exit 1) before enumerating it.
  const auto input = planner::load_sweep(a.spec, a.stack, a.max_mixes);
  const auto& spec = input.spec;
  check_outputs({{"--output", a.output}});  // before the sweep (output_file.hpp)
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi.world_rank(), size = mpi.world_size();
  const std::string where = size > 1 ? " [rank " + std::to_string(rank) + "]" : "";
  if (!a.quiet && rank == 0)
    std::cerr << "sweep " << spec.name << ": " << input.mixes.size() << " mixes, strategy "
              << spec.strategy << (size > 1 ? ", " + std::to_string(size) + " MPI ranks" : "")
              << "\n";
  planner::SweepProgress progress;
  if (!a.quiet)
    progress = [&](std::size_t done, std::size_t total, const planner::SweepRow& row) {
      std::cerr << "sweep" << where << " " << done << "/" << total << ": " << row.mix << ": "
                << (row.feasible ? fixed(row.samples_per_s, 2) + " samples/s" : "infeasible")
                << "\n";
    };
  const planner::SweepShare share{
      rank, size, [&](const std::string& mine) { return mpi.gather_strings_to_root(mine); }};
  const auto rows = planner::run_sweep(input, share, progress);
  if (rank != 0) return;
  if (!a.output.empty()) planner::write_sweep_file(a.output, spec, rows);
  if (a.json) {
    std::cout << planner::sweep_json(spec, rows).dump(2) << "\n";
  } else {
    std::cout << planner::sweep_table(rows, a.table)
              << "* on the Pareto frontier of $/hour vs simulated "
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
  add_stack_option(cmd, args->stack);
  cmd->add_option("--sort", args->table.sort,
                  "Table order, best first: tokens-per-dollar | throughput | cost | mix")
      ->capture_default_str()
      ->check(one_of(planner::sweep_sort_keys()));
  cmd->add_flag("--wide", args->table.wide,
                "Table with the planner's estimate, samples per dollar and planning time, names "
                "and notes unclipped");
  cmd->add_option("--max-mixes", args->max_mixes,
                  "Refuse (exit 1) a sweep of more mixes than this, counted before any is "
                  "planned (default " +
                      std::to_string(planner::kDefaultMaxMixes) + ")")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  cmd->callback([args] { run_sweep_command(*args); });
}

}  // namespace cephalo::cli

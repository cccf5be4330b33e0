// `[mpirun -np K] cephalo sweep --spec F [-o out.csv|out.json] [--json] [--max-mixes N]`: the
// sweep and its share-out over processes are planner::run_sweep; under mpirun this file gives it
// the MPI gather (the backend's MpiRuntime: the planner does not depend on MPI), and rank 0
// prints and writes.
#include <iostream>

#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/planner/sweep.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_sweep_command(CLI::App& app) {
  static struct {
    std::string spec, stack, output;
    bool json = false, quiet = false;
    planner::SweepTableOptions table;
    std::uint64_t max_mixes = planner::kDefaultMaxMixes;
  } a;
  auto* cmd = app.add_subcommand(
      "sweep", "What-if sweep over cluster mixes (Pareto frontier of cost vs throughput)");
  cmd->add_option("--spec", a.spec, "Sweep spec JSON")->required();
  cmd->add_option("-o,--output", a.output, "Write rows to .csv or .json (the name's ending picks)");
  auto* json = cmd->add_flag("--json", a.json, "Print the JSON record instead of the table");
  cmd->add_flag("--quiet", a.quiet, "No progress on stderr");
  add_stack_option(cmd, a.stack);
  // The table's options: with --json there is no table, so they are refused (exit 2), not
  // dropped.
  cmd->add_option("--sort", a.table.sort,
                  "Table order, best first: tokens-per-dollar | throughput | cost | mix")
      ->capture_default_str()
      ->check(one_of(planner::sweep_sort_keys()))
      ->excludes(json);
  cmd->add_flag("--wide", a.table.wide,
                "Table with the planner's estimate, samples per dollar and planning time, notes "
                "unclipped")
      ->excludes(json);
  cmd->add_option("--max-mixes", a.max_mixes,
                  "Refuse (exit 1) a sweep of more mixes than this, counted before any is "
                  "planned (default " +
                      std::to_string(planner::kDefaultMaxMixes) + ")")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  cmd->callback([] {
    // Refuses a space above --max-mixes (ValidationError, exit 1) before enumerating it.
    const auto input = planner::load_sweep(a.spec, a.stack, a.max_mixes);
    if (!a.output.empty()) planner::check_sweep_file_name(a.output, kCommandLine, "--output");
    check_outputs({{"--output", a.output}});  // before the sweep (output_file.hpp)
    backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
    const int rank = mpi.world_rank(), size = mpi.world_size();
    if (!a.quiet && rank == 0) std::cerr << planner::render_sweep_start(input, size);
    planner::SweepProgress progress;
    if (!a.quiet)
      progress = [&](std::size_t done, std::size_t total, const planner::SweepRow& row) {
        std::cerr << planner::render_sweep_progress(done, total, row, rank, size);
      };
    const planner::SweepShare share{
        rank, size, [&](const std::string& mine) { return mpi.gather_strings_to_root(mine); }};
    const auto rows = planner::run_sweep(input, share, progress);
    if (rank != 0) return;
    if (!a.output.empty()) planner::write_sweep_file(a.output, input.spec, rows);
    print_json_or_text(
        a.json, [&] { return planner::sweep_json(input.spec, rows); },
        [&] {
          return planner::sweep_table(rows, a.table) + planner::render_sweep_legend(input.spec) +
                 (a.output.empty() ? "" : "written to " + a.output + "\n");
        });
  });
}

}  // namespace cephalo::cli

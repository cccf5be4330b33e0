// `cephalo sweep --spec F [-o out.csv|out.json] [--json] [--max-mixes N]`
//
// The sweep itself is a pure function over a list of mixes (planner::evaluate_mixes). Under
// mpirun the mixes are dealt round-robin over the ranks here, where MPI belongs (the backend's
// MpiRuntime), and the rows gathered on rank 0, which marks the Pareto frontier and writes.
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

// This rank's share of the sweep: mixes rank, rank + size, ...
std::vector<std::size_t> dealt(std::size_t mixes, int rank, int size) {
  std::vector<std::size_t> out;
  for (std::size_t i = static_cast<std::size_t>(rank); i < mixes;
       i += static_cast<std::size_t>(size))
    out.push_back(i);
  return out;
}

void run_sweep_command(const SweepArgs& a) {
  auto spec = planner::load_sweep_spec(a.spec);
  if (!a.stack.empty()) planner::set_stack(spec, a.stack);
  // Refuses a space above --max-mixes (ValidationError, exit 1) before enumerating it.
  const auto mixes = planner::enumerate_mixes(spec, a.max_mixes);
  check_outputs({{"--output", a.output}});  // before the sweep (output_file.hpp)
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi.world_rank(), size = mpi.world_size();
  const std::string where = size > 1 ? " [rank " + std::to_string(rank) + "]" : "";
  if (!a.quiet && rank == 0)
    std::cerr << "sweep " << spec.name << ": " << mixes.size() << " mixes, strategy "
              << spec.strategy << (size > 1 ? ", " + std::to_string(size) + " MPI ranks" : "")
              << "\n";
  const auto mine = dealt(mixes.size(), rank, size);
  std::vector<std::vector<int>> my_mixes;
  for (auto i : mine) my_mixes.push_back(mixes[i]);
  planner::SweepProgress progress;
  if (!a.quiet)
    progress = [&](std::size_t done, std::size_t total, const planner::SweepRow& row) {
      std::cerr << "sweep" << where << " " << done << "/" << total << ": " << row.mix << ": "
                << (row.feasible ? fixed(row.samples_per_s, 2) + " samples/s" : "infeasible")
                << "\n";
    };
  const auto my_rows = planner::evaluate_mixes(spec, my_mixes, progress);
  std::vector<planner::SweepRow> rows(mixes.size());
  const auto parts = mpi.gather_strings_to_root(planner::rows_to_json(my_rows, mine).dump());
  if (rank != 0) return;
  for (const auto& part : parts) planner::place_rows(Json::parse(part), rows);
  planner::mark_pareto(rows);
  if (!a.output.empty()) {
    const bool csv = a.output.size() >= 4 && a.output.substr(a.output.size() - 4) == ".csv";
    write_file_atomically(
        a.output, csv ? planner::sweep_csv(rows) : planner::sweep_json(spec, rows).dump(2) + "\n");
  }
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

// `cephalo validate FILE... [--scenario S]`: checks scenarios, clusters, jobs, plans and
// catalogs (planner::check_input_files); one line per file, non-zero exit when any is invalid.
#include <iostream>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/input_files.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_validate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("validate", "Check scenario, cluster, job, plan and catalog files");
  static std::vector<std::string> files;
  static std::string scenario_file;
  cmd->add_option("files", files, "Files to check")->required();
  cmd->add_option("--scenario", scenario_file, "Also check plans against this scenario");
  cmd->callback([] {
    std::optional<Scenario> scenario;
    if (!scenario_file.empty()) scenario = costmodels::load_scenario(scenario_file);
    const auto checked = planner::check_input_files(files, scenario);
    for (const auto& line : checked.lines) std::cout << line << "\n";
    // Unreadable (a FIFO, a folder, missing) is exit 5 as in every command; invalid wins.
    if (const int bad = checked.invalid + checked.unreadable)
      throw CLI::RuntimeError(std::to_string(bad) + " of " + std::to_string(files.size()) +
                                  " file(s) " + (checked.invalid ? "invalid" : "unreadable"),
                              checked.invalid ? kInvalidInput : kIo);
  });
}

}  // namespace cephalo::cli

// `cephalo validate FILE... [--scenario S]`: checks scenarios, clusters, jobs, plans and
// catalogs; one line per file, non-zero exit when any is invalid.
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
    int invalid = 0, unreadable = 0;
    for (const auto& file : files) {
      try {
        std::string what = planner::check_input_file(file, scenario);
        std::cout << file << ": ok (" << what << ")\n";
      } catch (const Error& e) {
        // Unreadable (a FIFO, a folder, missing) is exit 5 as in every command; invalid wins.
        ++(dynamic_cast<const IoError*>(&e) ? unreadable : invalid);
        std::string message = e.what();
        // Messages of ValidationError already start with the file name.
        if (message.rfind(file, 0) != 0) message = file + ": " + message;
        std::cout << message << "\n";
      }
    }
    if (invalid + unreadable)
      throw CLI::RuntimeError(std::to_string(invalid + unreadable) + " of " +
                                  std::to_string(files.size()) + " file(s) " +
                                  (invalid ? "invalid" : "unreadable"),
                              invalid ? kInvalidInput : kIo);
  });
}

}  // namespace cephalo::cli

#include "scenario_input.hpp"

#include <iostream>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"

namespace cephalo::cli {

void add_stack_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--stack", value,
                  "Stack calibration (cephalo calibrate stack -o FILE): its factors multiply the "
                  "modelled compute, collective and optimizer times; replaces the job's own");
}

Scenario read_scenario(const std::string& file, const std::string& stack_file) {
  Scenario s = costmodels::load_scenario(file);
  if (!stack_file.empty()) set_stack(s.job, stack_file);
  for (const auto& w : costmodels::prediction_warnings(s)) std::cerr << "warning: " << w << "\n";
  for (const auto& n : cluster_notes(s.cluster)) std::cerr << "note: " << n << "\n";
  return s;
}

}  // namespace cephalo::cli

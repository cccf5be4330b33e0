#pragma once
// The scenario a predicting command (plan, simulate, calibrate) reads, once: loaded through the
// catalogs, `--stack` applied to its job, and what a reader should know printed on stderr.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::cli {

struct ScenarioInput {
  Scenario scenario;
  // costmodels::prediction_warnings, already printed; records carry them.
  std::vector<std::string> warnings;
};

// `--stack FILE`: a `cephalo calibrate stack` file whose factors multiply the cost models.
void add_stack_option(CLI::App* cmd, std::string& value);

// Prints "warning: ..." and the cluster's "note: ..." lines on stderr.
ScenarioInput read_scenario(const std::string& file, const std::string& stack_file);

}  // namespace cephalo::cli

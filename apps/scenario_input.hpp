#pragma once
// The scenario a predicting command (plan, simulate, calibrate) reads, once: loaded through the
// catalogs, `--stack` applied to its job, and what a reader should know printed on stderr.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::cli {

// `--stack FILE`: a `cephalo calibrate stack` file whose factors multiply the cost models.
void add_stack_option(CLI::App* cmd, std::string& value);

// Prints costmodels::prediction_warnings ("warning: ...", which the records carry too) and the
// cluster's "note: ..." lines on stderr.
Scenario read_scenario(const std::string& file, const std::string& stack_file);

}  // namespace cephalo::cli

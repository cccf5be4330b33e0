#pragma once
// Every kind of file a command reads, recognised by its keys and checked by the code that reads
// it: `cephalo validate` (and anything else that must say what a file is) calls this, so a file
// it passes is one the commands accept.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::planner {

// A short description of the file ("plan, 4 ranks, matches scenario s", "sweep spec x, 3 GPU
// types", ...): scenarios (with the calibration files they list), clusters, jobs, plans (also
// checked for `scenario` when given), GPU and model catalogs, sweep specs ("pool", read as
// `cephalo sweep` reads them), Hugging Face configs ("model_type") and profiler traces (a
// "traceEvents" root, the legacy bare array of events, or gzip by its magic or a .gz name; read
// as `calibrate stack --trace` reads them, its notes in the description). Throws the reader's
// typed error on any problem (IoError when the file cannot be read).
std::string check_input_file(const std::string& file, const std::optional<Scenario>& scenario);

// check_input_file over several files, as `cephalo validate FILE...` reports them: one line
// per file ("FILE: ok (what)", or the error's message, which starts with the file's name), and
// how many were invalid and how many could not be read (an IoError: missing, a folder, a FIFO).
struct InputFilesCheck {
  std::vector<std::string> lines;
  int invalid = 0, unreadable = 0;
};
InputFilesCheck check_input_files(const std::vector<std::string>& files,
                                  const std::optional<Scenario>& scenario);

}  // namespace cephalo::planner

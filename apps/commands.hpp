#pragma once
// Each subcommand family lives in its own cmd_*.cpp and registers itself on the root app.
// A command's callback does its work and throws typed errors; main() maps them to exit codes.
#include <CLI/CLI.hpp>

#include "cephalo/core/error.hpp"

namespace cephalo::cli {

// Exit codes shared by all commands (documented in the top-level README); a library error's
// is its kind (core/error.hpp: error_kind).
enum ExitCode : int {
  kOk = 0,
  kInvalidInput = static_cast<int>(ErrorKind::InvalidInput),  // ValidationError, NotFoundError
  kUsage = 2,                                                 // bad command line (CLI11)
  kInfeasible = static_cast<int>(ErrorKind::Infeasible),      // nothing fits, no profile
  kRuntime = static_cast<int>(ErrorKind::Runtime),            // MPI/CUDA/NCCL or other runtime
  kIo = static_cast<int>(ErrorKind::Io),                      // files not readable or writable
};

// The exit codes as `--help` prints them under every command (one text, read by main()).
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 1 invalid input (the message names file, JSON path, value and what was\n"
    "expected), 2 bad command line, 3 infeasible request, 4 runtime failure (MPI/CUDA/NCCL),\n"
    "5 file not readable or writable.";

// The "file" of a ValidationError about a flag value a command checks itself; main() gives it
// the exit code of a bad command line.
inline constexpr const char* kCommandLine = "command line";

void add_describe_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_predict_3d_command(CLI::App& predict);  // `predict 3d`, under add_predict_command
void add_simulate_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

}  // namespace cephalo::cli

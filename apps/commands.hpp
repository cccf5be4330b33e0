#pragma once
// The command line's one internal header. Each subcommand family lives in its own cmd_*.cpp and
// registers itself on the root app; a command's callback does its work and throws typed errors,
// and main() maps them to exit codes. Here: the exit codes, the one way a command prints its
// result, the validators every enumerated or bounded flag uses (cli_checks.cpp), the options
// several commands share, the one way a predicting command reads its scenario, and the
// commands.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/scenario.hpp"

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

// How every command prints its result: the record as JSON (`--json`, `indent` as
// Json::dump), else its text. Only the one asked for is built: a large plan's record and
// table cost more than the planning (bench/README.md).
template <typename Record, typename Text>
void print_json_or_text(bool json, const Record& record, const Text& text, int indent = 2) {
  if (json)
    std::cout << record().dump(indent) << "\n";
  else
    std::cout << text();
}

// Flag values, by one convention: every enumerated or bounded flag gets one of these
// validators, so a bad value exits 2 (kUsage) with a message naming the flag (CLI11 prefixes
// it), the value given and the allowed values or range. They check the text before CLI11
// converts it, so "1e3" for an integer, "-3" for a count or a seed beyond 64 bits is refused
// rather than truncated, wrapped or clamped.
//
// An integer written in decimal (optional sign, digits only) within [lo, hi].
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
// An unsigned 64-bit integer in decimal: 0 to 18446744073709551615.
CLI::Validator unsigned_64();
// A finite number within [lo, hi].
CLI::Validator number_in(double lo, double hi);
// One of `allowed`, exactly; the message lists them and the closest one.
CLI::Validator one_of(std::vector<std::string> allowed);
// A dtype parse_dtype accepts (fp32, tf32, fp16, bf16 and their other spellings);
// `compute_only`: not tf32, a storage format the layer prediction does not price.
CLI::Validator dtype_name(bool compute_only = false);
// A name (or alias) in the built-in GPU / model catalog; the message lists the closest ones.
CLI::Validator catalog_gpu();
CLI::Validator catalog_model();
// A catalog model, or a path to a Hugging Face config.json.
CLI::Validator catalog_model_or_config();

// Every option that takes a value, of `app` and its commands, refuses an empty one (exit 2,
// naming the option): `-o ""` or `--trace ""` would otherwise read as "no output" and `--stack
// ""` as "no stack", silently. Called once, after every command is added.
void refuse_empty_values(CLI::App& app);

// The compute-model flag, one name on every command that takes one: `--compute-model` (auto |
// profile | calibrated | roofline). `old_name` (e.g. "--compute-source") stays accepted for a
// release as a hidden alias writing the same value, so scripts written against it keep working
// ("" for a command that never had it).
void add_compute_model_option(CLI::App* cmd, std::string& value, const std::string& help,
                              const std::string& old_name);
// `--stack FILE`: a `cephalo calibrate stack` file whose factors multiply the cost models.
void add_stack_option(CLI::App* cmd, std::string& value);

// When argv names a subcommand that does not exist (at the top level or under a command that
// needs one), the message to print: "unknown command \"simulat\"; did you mean \"simulate\"?";
// empty when argv's commands are all known.
std::string unknown_subcommand_message(const CLI::App& app, int argc, const char* const* argv);

// The scenario a predicting command (plan, simulate, predict 3d, calibrate) reads, once: loaded
// through the catalogs, `--stack` applied to its job, and costmodels::prediction_warnings
// ("warning: ...", which the records carry too) and the cluster's "note: ..." lines printed on
// stderr.
Scenario read_scenario(const std::string& file, const std::string& stack_file);

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

// The top-level commands, in the order `cephalo --help` lists them: the name each registers
// (main() registers only the one a command line names) and the function that registers it.
struct Command {
  const char* name;
  void (*add)(CLI::App&);
};
inline constexpr Command kCommands[] = {
    {"describe", add_describe_command}, {"validate", add_validate_command},
    {"plan", add_plan_command},         {"sweep", add_sweep_command},
    {"predict", add_predict_command},   {"simulate", add_simulate_command},
    {"run", add_run_command},           {"compare", add_compare_command},
    {"profile", add_profile_command},   {"calibrate", add_calibrate_command}};

}  // namespace cephalo::cli

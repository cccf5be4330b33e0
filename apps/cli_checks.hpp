#pragma once
// The command line's one convention for flag values: every enumerated or bounded flag gets one
// of these validators, so a bad value exits 2 (kUsage) with a message naming the flag (CLI11
// prefixes it), the value given and the allowed values or range. They check the text before
// CLI11 converts it, so "1e3" for an integer, "-3" for a count or a seed beyond 64 bits is
// refused rather than truncated, wrapped or clamped.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace cephalo::cli {

// An integer written in decimal (optional sign, digits only) within [lo, hi].
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
// An unsigned 64-bit integer in decimal: 0 to 18446744073709551615.
CLI::Validator unsigned_64();
// A finite number within [lo, hi].
CLI::Validator number_in(double lo, double hi);
// One of `allowed`, exactly; the message lists them and the closest one.
CLI::Validator one_of(std::vector<std::string> allowed);
// A compute dtype parse_dtype accepts (fp32, tf32, fp16, bf16 and their long names).
CLI::Validator dtype_name();
// A name (or alias) in the built-in GPU / model catalog; the message lists the closest ones.
CLI::Validator catalog_gpu();
CLI::Validator catalog_model();
// A catalog model, or a path to a Hugging Face config.json.
CLI::Validator catalog_model_or_config();

// The compute-model flag, one name on every command that takes one: `--compute-model` (auto |
// profile | calibrated | roofline). `old_name` (e.g. "--compute-source") stays accepted for a
// release as a hidden alias writing the same value, so scripts written against it keep working
// ("" for a command that never had it).
void add_compute_model_option(CLI::App* cmd, std::string& value, const std::string& help,
                              const std::string& old_name);

// When argv names a subcommand that does not exist (at the top level or under a command that
// needs one), the message to print: "unknown command \"simulat\"; did you mean \"simulate\"?";
// empty when argv's commands are all known.
std::string unknown_subcommand_message(const CLI::App& app, int argc, const char* const* argv);

}  // namespace cephalo::cli

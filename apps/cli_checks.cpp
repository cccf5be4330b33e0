// The pieces commands.hpp declares that several commands share: the flag validators, the
// compute-model and stack options, the unknown-command message and the scenario input.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/scenario_notices.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

std::string in_quotes(const std::string& text) { return "\"" + clip(text) + "\""; }

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

bool decimal_integer_text(const std::string& text, bool allow_sign) {
  std::size_t i = 0;
  if (allow_sign && i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return false;
  return true;
}

}  // namespace

void add_compute_model_option(CLI::App* cmd, std::string& value, const std::string& help,
                              const std::string& old_name) {
  const auto sources = costmodels::compute_sources();
  cmd->add_option("--compute-model", value, help + ": " + join(sources))
      ->capture_default_str()
      ->check(one_of(sources));
  if (old_name.empty()) return;  // a command newer than the alias
  // An empty group hides the alias from --help; CLI11 then leaves a hidden option's name out of
  // its messages, so the alias's check names the flag itself.
  cmd->add_option(old_name, value, "alias of --compute-model")
      ->group("")
      ->check(CLI::Validator(
          [check = one_of(sources), old_name](std::string& text) {
            const std::string message = check(text);
            return message.empty() ? message : old_name + ": " + message;
          },
          ""));
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        std::int64_t v = 0;
        const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* end = text.data() + text.size();
        if (!decimal_integer_text(text, true))
          return "got " + in_quotes(text) + ", which is not an integer; expected " + range;
        auto [ptr, ec] = std::from_chars(begin, end, v);
        if (ec != std::errc() || ptr != end || v < lo || v > hi)
          return "got " + in_quotes(text) + "; expected " + range;
        return {};
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string range = "an integer from 0 to 18446744073709551615 (64 bits)";
        std::uint64_t v = 0;
        if (!decimal_integer_text(text, false))
          return "got " + in_quotes(text) + ", which is not a non-negative integer; expected " +
                 range;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || ptr != text.data() + text.size())
          return "got " + in_quotes(text) + ", which does not fit in 64 bits; expected " + range;
        return {};
      },
      "UINT64");
}

CLI::Validator number_in(double lo, double hi) {
  std::ostringstream r;
  r << "a number from " << lo << " to " << hi;
  const std::string range = r.str();
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        double v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v < lo ||
            v > hi)
          return "got " + in_quotes(text) + "; expected " + range;
        return {};
      },
      "NUMBER in [" + r.str().substr(std::string("a number from ").size()) + "]");
}

CLI::Validator one_of(std::vector<std::string> allowed) {
  const std::string listing = join(allowed);
  return CLI::Validator(
      [allowed, listing](std::string& text) -> std::string {
        for (const auto& a : allowed)
          if (a == text) return {};
        std::string message = "got " + in_quotes(text) + "; expected one of " + listing;
        auto close = closest_names(text, allowed, 1);
        if (!close.empty()) message += " (did you mean \"" + close.front() + "\"?)";
        return message;
      },
      "{" + listing + "}");
}

CLI::Validator dtype_name(bool compute_only) {
  return CLI::Validator(
      [compute_only](std::string& text) -> std::string {
        const auto d = parse_dtype(text);
        if (d && !(compute_only && *d == Dtype::TF32)) return {};
        return "got " + in_quotes(text) + "; expected one of " + dtype_spellings(compute_only);
      },
      compute_only ? "{fp32, fp16, bf16}" : "{fp32, tf32, fp16, bf16}");
}

namespace {

// `or_config`: a Hugging Face config.json is accepted too (an existing file or a `.json` name;
// reading it is the library's job, with its own errors).
template <typename Catalog>
CLI::Validator catalog_name(const char* what, const char* listing_command, bool or_config = false) {
  return CLI::Validator(
      [what, listing_command, or_config](std::string& text) -> std::string {
        const auto& catalog = Catalog::builtin();
        if (catalog.find(text)) return {};
        const std::filesystem::path file = text;
        if (or_config && (file.extension() == ".json" || std::filesystem::exists(file))) return {};
        std::string message = "got " + in_quotes(text) + "; expected a " + what +
                              " from the catalog (`" + listing_command + "`)" +
                              (or_config ? " or a Hugging Face config.json" : "");
        auto close = closest_names(text, catalog.names());
        if (!close.empty()) message += "; closest: " + join(close);
        return message;
      },
      std::string(what) == "GPU" ? "GPU" : "MODEL");
}

}  // namespace

CLI::Validator catalog_gpu() {
  return catalog_name<costmodels::GpuCatalog>("GPU", "cephalo describe gpus");
}
CLI::Validator catalog_model() {
  return catalog_name<costmodels::ModelCatalog>("model", "cephalo describe models");
}
CLI::Validator catalog_model_or_config() {
  return catalog_name<costmodels::ModelCatalog>("model", "cephalo describe models", true);
}

std::string unknown_subcommand_message(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    // Past the first flag, positional words may be flag values; CLI11 judges those.
    if (token.empty() || token[0] == '-') return {};
    const auto subcommands = current->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) return {};
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->check_name(token)) next = sub;
    }
    if (next) {
      current = next;
      continue;
    }
    // A command whose subcommand is optional may take positionals of its own.
    if (current->get_require_subcommand_min() == 0) return {};
    std::string where = current == &app ? "" : " for \"" + current->get_name() + "\"";
    std::string message = "unknown command " + in_quotes(token) + where;
    auto close = closest_names(token, names, 1);
    if (!close.empty()) message += "; did you mean \"" + close.front() + "\"?";
    return message + " (commands: " + join(names) + ")";
  }
  return {};
}

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string {
        if (!text.empty()) return {};
        return "got \"\" (empty); expected a value: leave the option out for its default (no "
               "output file, no input)";
      },
      "");
  for (CLI::Option* option : app.get_options())
    if (option->get_type_size() != 0) option->check(non_empty);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values(*sub);
}

void add_stack_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--stack", value,
                  "Stack calibration (cephalo calibrate stack -o FILE): its factors multiply the "
                  "modelled compute, collective and optimizer times; replaces the job's own");
}

Scenario read_scenario(const std::string& file, const std::string& stack_file) {
  Scenario s = costmodels::load_scenario(file);
  if (!stack_file.empty()) set_stack(s.job, stack_file);
  for (const auto& line : costmodels::scenario_notices(s)) std::cerr << line << "\n";
  return s;
}

}  // namespace cephalo::cli

// The `cephalo` command line: thin glue that parses arguments, calls the libraries and prints.
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "commands.hpp"

namespace {
// The message in one write: under mpirun, a line written piecewise can be split by another
// rank's or another channel's output.
void report(const std::string& message) { std::cerr << ("error: " + message + "\n") << std::flush; }

// A start-up cache entry that was there but ignored (a planted link, a corrupt file) is said once
// as the command ends, whichever way it ends: the answer is the refit's, and the user learns why
// that start was slow and that the file at the entry's name was replaced.
struct CacheNote {
  CacheNote() = default;
  CacheNote(const CacheNote&) = delete;
  CacheNote& operator=(const CacheNote&) = delete;
  ~CacheNote() {
    if (const std::string note = cephalo::costmodels::start_up_cache_note(); !note.empty())
      std::cerr << ("note: " + note + "\n") << std::flush;
  }
};
}  // namespace

int main(int argc, char** argv) {
  using namespace cephalo;
  const CacheNote cache_note;
  CLI::App app{
      "Cephalo: plan, simulate and run transformer training on heterogeneous GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cephalo " CEPHALO_VERSION));
  // A command line that names its command (argv[1], exactly as CLI11 matches it) gets that
  // command alone: building every command's options was a fifth of a `validate`'s start-up
  // (bench/README.md, "Start-up"). Parsing and help are a command's own, so the answer is the
  // same; anything else (no command, a flag, a misspelt command) gets them all, for the root
  // help, the version and the "did you mean".
  const cli::Command* named = nullptr;
  if (argc > 1)
    for (const auto& command : cli::kCommands)
      if (argv[1] == std::string_view(command.name)) named = &command;
  if (named) {
    named->add(app);
    const auto added = app.get_subcommands({});
    if (added.size() != 1 || added.front()->get_name() != named->name)  // a table out of date
      throw std::logic_error(std::string("kCommands: \"") + named->name + "\" registers another");
  } else {
    for (const auto& command : cli::kCommands) command.add(app);
  }
  cli::refuse_empty_values(app);
  // Every command's --help, nested ones (`predict layer`) too, ends with the exit codes.
  const auto add_footer = [](CLI::App* command, const auto& recurse) -> void {
    command->footer(cli::kExitCodesHelp);
    for (CLI::App* sub : command->get_subcommands({})) recurse(sub, recurse);
  };
  add_footer(&app, add_footer);
  // CLI11 would only say the word "was not expected"; name the commands instead.
  if (auto message = cli::unknown_subcommand_message(app, argc, argv); !message.empty()) {
    report(message + "\nRun with --help for more information.");
    return cli::kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    // Commands report "some inputs were bad" this way after printing their own lines.
    if (std::string(e.what()).size()) report(e.what());
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? cli::kOk : cli::kUsage;
  } catch (const std::exception& e) {
    report(e.what());
    // Commands report a flag value they check themselves as the file "command line": that is
    // a bad command line (2), like every value a CLI11 validator refuses. The others take the
    // exit code of their kind (core/error.hpp).
    const auto* invalid = dynamic_cast<const ValidationError*>(&e);
    if (invalid && invalid->file() == cli::kCommandLine) return cli::kUsage;
    return static_cast<int>(error_kind(e));
  }
  return cli::kOk;
}

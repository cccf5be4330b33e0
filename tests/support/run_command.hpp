#pragma once
// Runs commands for the CLI tests (defined in run_command.cpp, library cephalo_test_support,
// linked into every suite): one way to start a process and collect what it printed.
#include <string>

namespace cephalo::test_support {

struct CommandResult {
  int code = -1;           // exit status; -1 when the command did not exit normally
  bool signalled = false;  // killed by a signal (a crash)
  std::string out;
  std::string err;
};

// Runs a shell command and captures its exit code, stdout and stderr separately. Capture files
// are unique per process and call, because ctest runs tests of one suite as parallel processes.
CommandResult run_command(const std::string& command_line);

// What the core CLI tests read: the exit code and stdout followed by stderr.
struct CliOutput {
  int exit_code = -1;
  std::string output;
};

// The command line `<the built cephalo> ARGS`. Built here, in one place: GCC 12 at -O3 reports
// a false out-of-bounds memcpy in libstdc++ when `std::string(CEPHALO_CLI) + " " + args` is
// inlined into a test source that uses the precompiled header.
std::string cephalo_command(const std::string& args);

// `cephalo ARGS` (the built CLI) under `timeout 60`, so a hang fails as exit 124 instead of a
// stuck suite.
CliOutput run_cephalo(const std::string& args);

// A shell command with stdout and stderr interleaved as printed (`2>&1` through a pipe), and
// its wall time; for launcher jobs (mpirun) whose ranks' lines are read as one log.
struct CombinedResult {
  int code = -1;
  std::string output;
  double seconds = 0;
};
CombinedResult run_combined(const std::string& command_line);

}  // namespace cephalo::test_support

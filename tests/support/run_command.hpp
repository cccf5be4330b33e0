#pragma once
// Runs a shell command for CLI tests and captures its exit code, stdout and stderr separately.
// Capture files are unique per process and call, because ctest runs tests of one suite as
// parallel processes.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cephalo::test_support {

struct CommandResult {
  int code = -1;           // exit status; -1 when the command did not exit normally
  bool signalled = false;  // killed by a signal (a crash)
  std::string out;
  std::string err;
};

inline CommandResult run_command(const std::string& command_line) {
  static std::atomic<int> counter{0};
  const std::string stem =
      "cephalo_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
  const auto dir = std::filesystem::temp_directory_path();
  const auto out_path = dir / (stem + ".out");
  const auto err_path = dir / (stem + ".err");
  const std::string cmd = command_line + " >" + out_path.string() + " 2>" + err_path.string();
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  CommandResult result;
  result.signalled = status != -1 && WIFSIGNALED(status);
  result.code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  std::error_code ec;
  std::filesystem::remove(out_path, ec);
  std::filesystem::remove(err_path, ec);
  return result;
}

}  // namespace cephalo::test_support

#include "run_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cephalo::test_support {

CommandResult run_command(const std::string& command_line) {
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

std::string cephalo_command(const std::string& args) {
  return std::string(CEPHALO_CLI) + " " + args;
}

CliOutput run_cephalo(const std::string& args) {
  const CommandResult r = run_command("timeout 60 " + cephalo_command(args));
  return {r.code, r.out + r.err};
}

CombinedResult run_combined(const std::string& command_line) {
  const std::string cmd = command_line + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  CombinedResult result;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace cephalo::test_support

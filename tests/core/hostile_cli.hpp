#pragma once
// What the hostile-input rounds through the built CLI share (core/hostile_round3_test.cpp,
// core/hostile_round4_test.cpp): a case is a command line, the exit code it must give and the
// words its output must hold (the flag, value and rule, or the file, JSON path, value and
// expectation); a test gets a scratch folder of its own for the files it writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"

namespace cephalo::test_support {

struct HostileCase {
  std::string args;
  int code;
  std::vector<std::string> says;
};

inline void expect_cases(const std::vector<HostileCase>& cases) {
  for (const auto& c : cases) {
    const auto o = run_cephalo(c.args);
    EXPECT_EQ(o.exit_code, c.code) << c.args << "\n" << o.output;
    for (const auto& w : c.says)
      EXPECT_NE(o.output.find(w), std::string::npos) << c.args << "\nmissing: " << w << "\n"
                                                     << o.output;
  }
}

// A fixture with a scratch folder per test (and process: ctest runs tests in parallel).
class HostileCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cephalo_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const nlohmann::json& j) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p) << j.dump(1);
    return p.string();
  }
  std::filesystem::path dir_;
};

}  // namespace cephalo::test_support

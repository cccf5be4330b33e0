// Every file under tests/data/bad/ must be rejected by `cephalo validate` with the exit code
// listed in EXPECTED.tsv (1 invalid input, 5 unreadable), never a crash or a hang, and with a
// message naming the file and containing the JSON path or phrase listed there.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/run_command.hpp"

namespace {

const std::filesystem::path kBad = std::filesystem::path(CEPHALO_SOURCE_DIR) / "tests/data/bad";

struct Outcome {
  int exit_code = -1;
  bool signalled = false;
  std::string output;  // stdout and stderr
};

Outcome run(const std::string& command) {
  auto r = cephalo::test_support::run_command(command);
  return {r.code, r.signalled, r.out + r.err};
}

struct Expectation {
  std::string file;
  int exit_code = -1;
  std::string fragment;
};

// EXPECTED.tsv: file <TAB> exit code <TAB> fragment.
std::vector<Expectation> expectations() {
  std::vector<Expectation> rows;
  std::ifstream in(kBad / "EXPECTED.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto tab1 = line.find('\t');
    auto tab2 = line.find('\t', tab1 + 1);
    EXPECT_NE(tab2, std::string::npos) << "three tab-separated columns: " << line;
    if (tab2 == std::string::npos) continue;
    rows.push_back({line.substr(0, tab1), std::stoi(line.substr(tab1 + 1, tab2 - tab1 - 1)),
                    line.substr(tab2 + 1)});
  }
  return rows;
}

TEST(BadInputs, AtLeastTwentyCasesAndAllListed) {
  auto rows = expectations();
  EXPECT_GE(rows.size(), 20u);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kBad))
    if (entry.path().filename() != "EXPECTED.tsv") ++files;
  EXPECT_EQ(files, rows.size()) << "every bad input needs a line in EXPECTED.tsv";
}

TEST(BadInputs, EachIsRejectedClearly) {
  for (const auto& [file, exit_code, expected] : expectations()) {
    SCOPED_TRACE(file);
    // `timeout`: a hang is a failure of its own (exit 124), not a stuck test suite.
    Outcome o =
        run("timeout 60 " + std::string(CEPHALO_CLI) + " validate " + (kBad / file).string());
    EXPECT_FALSE(o.signalled) << o.output;
    EXPECT_EQ(o.exit_code, exit_code) << o.output;
    EXPECT_NE(o.output.find(expected), std::string::npos) << o.output;
    // Every echoed value is clipped: no message is much longer than a few clipped echoes.
    EXPECT_LT(o.output.size(), 8000u) << o.output.substr(0, 2000);
    EXPECT_NE(o.output.find(file), std::string::npos) << "message must name the file: " << o.output;
  }
}

TEST(BadInputs, GoodFilesPass) {
  auto root = std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios";
  Outcome o = run(std::string(CEPHALO_CLI) + " validate " + (root / "default.json").string() + " " +
                  (root / "clusters/modern-mix.json").string() + " " +
                  (root / "jobs/llama-7b-s2048.json").string() + " " +
                  (root / "catalog/gpus.json").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

TEST(BadInputs, UnknownFlagIsRejected) {
  Outcome o = run(std::string(CEPHALO_CLI) + " describe gpus --no-such-flag");
  EXPECT_EQ(o.exit_code, 2) << o.output;
}

}  // namespace

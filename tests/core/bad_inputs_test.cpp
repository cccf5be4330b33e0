// Every file under tests/data/bad/ must be rejected by `cephalo validate` with exit code 1 or 5,
// never a crash, and with a message naming the JSON path listed in EXPECTED.tsv.
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

std::vector<std::pair<std::string, std::string>> expectations() {
  std::vector<std::pair<std::string, std::string>> rows;
  std::ifstream in(kBad / "EXPECTED.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto tab = line.find('\t');
    rows.emplace_back(line.substr(0, tab), line.substr(tab + 1));
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
  for (const auto& [file, expected] : expectations()) {
    SCOPED_TRACE(file);
    Outcome o = run(std::string(CEPHALO_CLI) + " validate " + (kBad / file).string());
    EXPECT_FALSE(o.signalled) << o.output;
    EXPECT_TRUE(o.exit_code == 1 || o.exit_code == 5) << "exit " << o.exit_code << ": " << o.output;
    EXPECT_NE(o.output.find(expected), std::string::npos) << o.output;
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

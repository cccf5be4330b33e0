// Hostile input, round five, through the built CLI: the start-up cache's switch, the memory
// table of a plan, and a trace's file name say what they do or are refused (tests/README.md,
// "Hostile input, round five").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/run_command.hpp"
#include "hostile_cli.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kDefault = kRoot + "/scenarios/default.json";
const std::string kDefaultPlan = kRoot + "/scenarios/plans/default-even.json";
const std::string kMix = kRoot + "/scenarios/modern-mix-gpt2.7b.json";

using Case = cephalo::test_support::HostileCase;
using cephalo::test_support::expect_cases;
using cephalo::test_support::run_command;

class HostileRoundFive : public cephalo::test_support::HostileCliTest {
 protected:
  // `cephalo ARGS` with the start-up cache switched by `value` into a folder of this test's own.
  cephalo::test_support::CommandResult with_cache(const std::string& value,
                                                  const std::string& args) {
    return run_command("env CEPHALO_CACHE='" + value +
                       "' CEPHALO_CACHE_DIR=" + (dir_ / "cache").string() + " timeout 60 " +
                       cephalo::test_support::cephalo_command(args));
  }
  bool cache_written() const { return fs::exists(dir_ / "cache"); }
};

// The lines of `text` that are table rows (they start with a rank or a rank range).
std::vector<std::string> rank_rows(const std::string& text) {
  std::vector<std::string> rows;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? end : end - at);
    if (!line.empty() && line[0] >= '0' && line[0] <= '9') rows.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return rows;
}

}  // namespace

TEST_F(HostileRoundFive, TheCacheSwitchSaysOnOrOffOrIsRefused) {
  // Read as "on", OFF or "disable" left the cache a user meant to turn off reading and writing
  // their folder without a word.
  const std::string sim = "simulate --scenario " + kDefault + " --plan " + kDefaultPlan;
  for (const std::string bad : {"maybe", "disable", "2"}) {
    const auto r = with_cache(bad, sim);
    EXPECT_EQ(r.code, 1) << bad << "\n" << r.err;
    for (const std::string& w :
         {std::string("CEPHALO_CACHE"), "\"" + bad + "\"", std::string("off (0, no, false)")})
      EXPECT_NE(r.err.find(w), std::string::npos) << bad << "\nmissing: " << w << "\n" << r.err;
    EXPECT_FALSE(cache_written()) << bad;
  }
  // Any case of an off word turns it off: nothing written.
  for (const std::string off : {"OFF", "False", "No"}) {
    const auto r = with_cache(off, sim);
    EXPECT_EQ(r.code, 0) << off << "\n" << r.err;
    EXPECT_FALSE(cache_written()) << off;
  }
  // And an on word keeps it on: the entry is written.
  const auto on = with_cache("YES", sim);
  EXPECT_EQ(on.code, 0) << on.err;
  EXPECT_TRUE(cache_written());
}

TEST_F(HostileRoundFive, PredictMemoryPrintsARowPerRunOfAlikeRanks) {
  // modern-mix's even plan: 10 ranks in 4 runs that print alike (two A100 pairs, the H100s, the
  // L4s); a row per rank was pages of equal rows at fleet size.
  const std::string plan = dir_ / "even.json";
  ASSERT_EQ(
      cephalo::test_support::run_cephalo("plan --scenario " + kMix + " --strategy even -o " + plan)
          .exit_code,
      0);
  const std::string memory = "predict memory --scenario " + kMix + " --plan " + plan;
  const auto grouped = run_command(cephalo::test_support::cephalo_command(memory));
  ASSERT_EQ(grouped.code, 0) << grouped.err;
  const auto rows = rank_rows(grouped.out);
  ASSERT_EQ(rows.size(), 4u) << grouped.out;
  EXPECT_EQ(rows[0].rfind("0-1 ", 0), 0u) << grouped.out;
  EXPECT_EQ(rows[3].rfind("6-9 ", 0), 0u) << grouped.out;
  EXPECT_NE(rows[3].find("L4"), std::string::npos) << grouped.out;
  EXPECT_NE(grouped.out.find("a row per run of ranks that print alike"), std::string::npos);
  // --per-rank: every rank's row, each equal to its run's but for the rank.
  const auto each = run_command(cephalo::test_support::cephalo_command(memory + " --per-rank"));
  ASSERT_EQ(each.code, 0) << each.err;
  const auto per_rank = rank_rows(each.out);
  ASSERT_EQ(per_rank.size(), 10u) << each.out;
  auto cells = [](const std::string& row) {
    const std::size_t rank_end = row.find(' ');
    return row.substr(row.find_first_not_of(' ', rank_end));
  };
  for (int r = 6; r <= 9; ++r) EXPECT_EQ(cells(per_rank[r]), cells(rows[3])) << each.out;
  EXPECT_EQ(cells(per_rank[0]), cells(rows[0])) << each.out;
  // The JSON record stays per rank.
  const auto j = run_command(cephalo::test_support::cephalo_command(memory + " --json"));
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(json::parse(j.out)["ranks"].size(), 10u);
}

TEST_F(HostileRoundFive, ATraceNamedGzipIsRefusedBeforeTheReplay) {
  // The trace is plain JSON: written under a .gz name it was text that zcat and the readers of
  // .json.gz traces (calibrate stack --trace) refuse as "not gzip".
  const std::string sim = "simulate --scenario " + kDefault + " --plan " + kDefaultPlan;
  const std::string gz = (dir_ / "t.json.gz").string();
  const std::string upper = (dir_ / "t.JSON.GZ").string();
  expect_cases({
      {sim + " --trace " + gz, 2, {"--trace", gz, "without .gz", "plain JSON"}},
      {sim + " --trace " + upper, 2, {"--trace", upper, "without .gz"}},
  });
  EXPECT_FALSE(fs::exists(gz));
  EXPECT_FALSE(fs::exists(upper));
  // `run` refuses it as a bad command line too, before it trains (a single process needs no
  // launcher).
  const std::string run = "run --scenario " + kRoot + "/scenarios/cpu-1rank.json --plan " + kRoot +
                          "/scenarios/plans/cpu-1rank-full.json --steps 1";
  expect_cases({{run + " --trace " + gz, 2, {"--trace", gz, "without .gz"}}});
  EXPECT_FALSE(fs::exists(gz));
  // A .json name is written, and is JSON.
  const std::string plain = (dir_ / "t.json").string();
  ASSERT_EQ(cephalo::test_support::run_cephalo(sim + " --trace " + plain).exit_code, 0);
  std::ifstream in(plain);
  const json trace = json::parse(in, nullptr, false);
  EXPECT_FALSE(trace.is_discarded());
  EXPECT_TRUE(trace.contains("traceEvents")) << plain;
}

TEST_F(HostileRoundFive, ValidateReadsAProfilerTraceAsCalibrateStackDoes) {
  // `validate` of the trace a user will give `calibrate stack --trace` said "malformed JSON ...
  // last read: '<U+001F>'" (gzip), or asked for a scenario's keys (plain JSON).
  const std::string gz = kRoot + "/tests/data/kineto/a100-resnet-nccl.json.gz";
  std::ifstream in(gz, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 2u);
  const std::string cut = (dir_ / "cut.json.gz").string();
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string fake = (dir_ / "fake.json.gz").string();
  std::ofstream(fake) << "{}";
  const std::string plain =
      write("plain.json", {{"traceEvents",
                            {{{"ph", "X"}, {"name", "ProfilerStep#1"}, {"ts", 0}, {"dur", 10}},
                             {{"ph", "X"}, {"name", "## forward ##"}, {"ts", 1}, {"dur", 4}}}}});
  const std::string empty = write("empty.json", {{"traceEvents", json::array()}});
  // Gzip under a name that does not say so is known by its magic.
  const std::string unnamed = (dir_ / "trace.bin").string();
  ASSERT_EQ(run_command("sh -c 'gzip -c " + plain + " > " + unnamed + "'").code, 0);
  expect_cases({
      {"validate " + gz, 0, {"ok (profiler trace, 3 step(s), 3774 GPU kernel(s)"}},
      {"validate " + unnamed, 0, {"ok (profiler trace, 1 step(s), 0 GPU kernel(s)"}},
      {"validate " + plain, 0, {"ok (profiler trace, 1 step(s), 0 GPU kernel(s)"}},
      {"validate " + cut, 1, {"cut.json.gz", "truncated"}},
      {"validate " + fake, 1, {"fake.json.gz", "gzip"}},
      {"validate " + empty, 1, {"empty.json", "$.traceEvents", "no events"}},
  });
}

TEST_F(HostileRoundFive, ASweepStepThatSkipsMaxCountIsRefused) {
  // "max_count": 2 with "step": 5 swept the A100 at 0 only, and "max_count": 5 with "step": 2
  // stopped at 4: the count the spec names as its largest dropped without a word.
  auto spec = [&](const std::string& name, int max_count, int min_count, int step) {
    json j = {
        {"name", "steps"},
        {"pool",
         {{{"gpu", "a100x80"}, {"max_count", max_count}, {"min_count", min_count}, {"step", step}},
          {{"gpu", "l4"}, {"max_count", 4}, {"step", 2}}}},
        {"node",
         {{"gpus_per_node", 4},
          {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}}},
        {"job", kRoot + "/scenarios/jobs/gpt-2.7b-s512.json"}};
    return write(name, j);
  };
  expect_cases({
      {"validate " + spec("skip.json", 2, 0, 5),
       1,
       {"skip.json", "pool[0].step", "5", "reach max_count 2", "the largest is 0"}},
      {"validate " + spec("odd.json", 6, 1, 2),
       1,
       {"odd.json", "pool[0].step", "dividing max_count - min_count (5)"}},
      {"validate " + spec("short.json", 5, 0, 2), 1, {"pool[0].step", "the largest is 4"}},
      {"sweep --spec " + spec("sweep.json", 2, 0, 5), 1, {"pool[0].step"}},
      {"validate " + spec("fine.json", 6, 2, 2), 0, {"ok (sweep spec steps"}},
  });
}

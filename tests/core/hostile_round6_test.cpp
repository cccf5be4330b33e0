// Hostile input, round six, through the built CLI: a plan's rows are counted against the cluster
// before they are summed, the start-up cache never follows or blocks on what is planted at its
// entry's name, flags a strategy does not read are refused, and a profiler trace's times are
// times the profiler measured (tests/README.md, "Hostile input, round six").
#include <gtest/gtest.h>
#include <sys/stat.h>

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

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class HostileRoundSix : public cephalo::test_support::HostileCliTest {
 protected:
  // `cephalo ARGS` with the start-up cache on, in a folder of this test's own.
  cephalo::test_support::CommandResult cached(const std::string& args, bool on = true) {
    return run_command("env CEPHALO_CACHE=" + std::string(on ? "on" : "off") +
                       " CEPHALO_CACHE_DIR=" + (dir_ / "cache").string() + " timeout 60 " +
                       cephalo::test_support::cephalo_command(args));
  }
  // modern-mix's 10 ranks (4 A100 on node 0, 2 H100 on node 1, 4 L4 on node 2) as classes with
  // explicit shares of 0.1, the L4 class running to `last_l4` (9 fits the cluster).
  json mix_classes(int last_l4) const {
    auto cls = [](int first, int last, int node, const char* gpu, int batch) {
      return json{{"ranks", {first, last}}, {"node", node},         {"gpu", gpu},
                  {"batch", batch},         {"micro_batch", batch}, {"micro_batches", 1},
                  {"state_share", 0.1}};
    };
    return {{"version", 1},
            {"scenario", "modern-mix-gpt2.7b"},
            {"rank_classes",
             {cls(0, 1, 0, "A100-80GB", 4), cls(2, 3, 0, "A100-80GB", 3),
              cls(4, 5, 1, "H100-SXM", 3), cls(6, last_l4, 2, "L4", 3)}}};
  }
};

}  // namespace

TEST_F(HostileRoundSix, RowsAreCountedAgainstTheClusterBeforeTheirSharesAreSummed) {
  // A class running past the cluster (or ending short of it) with explicit shares was blamed on
  // the shares' sum ("got state shares summing to 1.2") by every command that has the scenario.
  const std::string past = write("past.json", mix_classes(11));
  const std::string short_plan = write("short.json", mix_classes(7));
  // Per rank, the same order: 12 rows of 0.1 for a 10-device cluster.
  json rows = json::array();
  for (int r = 0; r < 12; ++r)
    rows.push_back({{"rank", r},
                    {"node", r < 4   ? 0
                             : r < 6 ? 1
                                     : 2},
                    {"gpu", r < 4   ? "A100-80GB"
                            : r < 6 ? "H100-SXM"
                                    : "L4"},
                    {"batch", 3},
                    {"micro_batch", 3},
                    {"micro_batches", 1},
                    {"state_share", 0.1}});
  const std::string per_rank =
      write("per_rank.json", {{"version", 1}, {"scenario", "modern-mix-gpt2.7b"}, {"ranks", rows}});
  const std::string in_mix = " --scenario " + kMix + " --plan ";
  const std::vector<std::string> past_says = {"past.json", "rank_classes[3].ranks", "[6, 11]",
                                              "ranks up to 9", "10 device(s)"};
  std::vector<Case> cases;
  for (const std::string command : {"simulate", "predict memory"})
    cases.push_back({command + in_mix + past, 1, past_says});
  cases.push_back({"validate " + past + " --scenario " + kMix, 1, past_says});
  cases.push_back({"calibrate stack --measured-tokens-per-s 1000 -o " + (dir_ / "s.json").string() +
                       in_mix + past,
                   1, past_says});
  cases.push_back({"simulate" + in_mix + short_plan,
                   1,
                   {"short.json", "rank_classes[3].ranks", "[6, 7]", "run to rank 9"}});
  cases.push_back(
      {"simulate" + in_mix + per_rank, 1, {"per_rank.json", "at ranks", "12 ranks", "10 ranks"}});
  // Without a scenario the sum is all there is to say; it now says over how many ranks.
  cases.push_back({"validate " + past, 1, {"summing to 1.2 over 12 ranks"}});
  // The plan that fits is fine.
  cases.push_back({"validate " + write("fits.json", mix_classes(9)) + " --scenario " + kMix,
                   0,
                   {"ok (plan, 10 ranks"}});
  expect_cases(cases);
}

TEST_F(HostileRoundSix, TheStartUpCacheNeverFollowsNorBlocksOnWhatIsAtItsEntrysName) {
  const std::string sim = "simulate --json --scenario " + kDefault + " --plan " + kDefaultPlan;
  const auto off = cached(sim, false);
  ASSERT_EQ(off.code, 0) << off.err;
  ASSERT_EQ(cached(sim).code, 0);
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir_ / "cache")) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  const fs::path entry = entries[0];
  const std::string good = slurp(entry);
  // Each thing planted at the entry's name: the answer is the cache-off answer, the start says
  // why it refitted, and nothing the name pointed at is touched.
  auto expect_refit = [&](const std::string& what, const std::string& says) {
    const auto r = cached(sim);
    EXPECT_EQ(r.code, 0) << what << "\n" << r.err;
    EXPECT_EQ(r.out, off.out) << what;
    EXPECT_NE(r.err.find("note: the start-up cache entry " + entry.string()), std::string::npos)
        << what << "\n"
        << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << what << "\n" << r.err;
  };
  // A link to a user's file: written through, it replaced the file with the cache's bytes.
  const fs::path victim = dir_ / "precious.txt";
  std::ofstream(victim) << "precious\n";
  fs::remove(entry);
  fs::create_symlink(victim, entry);
  expect_refit("a link to a file", "symbolic link");
  EXPECT_EQ(slurp(victim), "precious\n") << "the link's target is untouched";
  EXPECT_FALSE(fs::is_symlink(entry)) << "the link itself is replaced by the entry";
  EXPECT_EQ(slurp(entry), good);
  // A link to the real entry elsewhere is not followed either (a link is never trusted).
  const fs::path elsewhere = dir_ / "elsewhere.bin";
  fs::copy_file(entry, elsewhere);
  fs::remove(entry);
  fs::create_symlink(elsewhere, entry);
  expect_refit("a link to a valid entry", "symbolic link");
  // A FIFO blocked the start forever; /dev/zero behind a link was read until memory ran out.
  fs::remove(entry);
  ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
  expect_refit("a FIFO", "not a regular file");
  EXPECT_TRUE(fs::is_fifo(entry)) << "a FIFO is not replaced (only a file or a link is)";
  fs::remove(entry);
  fs::create_symlink("/dev/zero", entry);
  expect_refit("a link to /dev/zero", "symbolic link");
  // Garbage, a cut-short entry, a flipped byte: refitted with a note, and rewritten.
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {std::string(4096, 'x'), "not a cache entry"},
           {good.substr(0, 10), "cut short"},
           {good.substr(0, good.size() - 100), "payload bytes where its header says"},
           {[&] {
              std::string flipped = good;
              flipped[flipped.size() / 2] ^= 0x10;
              return flipped;
            }(),
            "checksum"}}) {
    fs::remove(entry);
    std::ofstream(entry, std::ios::binary) << bad;
    expect_refit(says, says);
    EXPECT_EQ(slurp(entry), good) << says;
  }
  // An entry of another build or other inputs is the normal refit: no note.
  std::string other_key = good;
  other_key[12] ^= 1;
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << other_key;
  const auto stale = cached(sim);
  EXPECT_EQ(stale.out, off.out);
  EXPECT_EQ(stale.err.find("note: the start-up cache"), std::string::npos) << stale.err;
  // And a warm start says nothing either.
  EXPECT_EQ(cached(sim).err.find("note:"), std::string::npos);
}

TEST_F(HostileRoundSix, FlagsAStrategyDoesNotReadAreRefused) {
  // Each was accepted and dropped: the plan was even's (or optimal's) whatever they said.
  const std::string plan = "plan --scenario " + kMix;
  expect_cases({
      {plan + " --strategy even --cephalo-shares min_util",
       2,
       {"--cephalo-shares", "min_util", "--strategy cephalo or --strategy search", "even"}},
      {plan + " --strategy proportional --cephalo-corrected-share-memory",
       2,
       {"--cephalo-corrected-share-memory", "proportional"}},
      {plan + " --cephalo-shares min_util", 2, {"--cephalo-shares", "strategy optimal"}},
      {plan + " --strategy optimal --search-neighbours 3",
       2,
       {"--search-neighbours", "3", "--strategy search"}},
      {plan + " --parallelism auto --strategy even --search-neighbours 3",
       2,
       {"--search-neighbours"}},
      // --compact says how -o or --json write the rows: alone it changed nothing.
      {plan + " --strategy even --compact", 2, {"--compact", "-o or --json"}},
      {plan + " --strategy even --compact --json", 0, {"\"rank_classes\""}},
  });
}

TEST_F(HostileRoundSix, AProfilerTracesTimesAreTimesTheProfilerMeasured) {
  // A kernel of 1e308 us was read and reported as a backward pass of 1e+302 s in a 225 ms step;
  // one event at -1e18 us put every time on a 128 us grid (the classes moved by 2 ms).
  auto trace = [&](const std::string& name, double kernel_ts, double kernel_dur) {
    return write(name, {{"traceEvents",
                         {{{"ph", "X"},
                           {"cat", "user_annotation"},
                           {"name", "ProfilerStep#1"},
                           {"ts", 1000},
                           {"dur", 100}},
                          {{"ph", "X"},
                           {"cat", "user_annotation"},
                           {"name", "## forward ##"},
                           {"ts", 1001},
                           {"dur", 40}},
                          {{"ph", "X"},
                           {"cat", "kernel"},
                           {"name", "gemm"},
                           {"ts", kernel_ts},
                           {"dur", kernel_dur}}}}});
  };
  expect_cases({
      {"validate " + trace("long.json", 1010, 1e308),
       1,
       {"long.json", "$.traceEvents[2].dur", "1e+308 us", "within a day"}},
      {"validate " + trace("early.json", -1e18, 5),
       1,
       {"early.json", "$.traceEvents[2].ts", "-1e+18 us", "within a day"}},
      {"validate " + trace("fine.json", 1010, 20), 0, {"ok (profiler trace, 1 step(s)"}},
  });
}

TEST_F(HostileRoundSix, PredictCollectiveNamesItsRanksAndReadsSharesOnlyWhereThereAreShards) {
  // Shares of an all-reduce or broadcast were accepted and priced as even ones (the same
  // output); a rank listed twice was blamed on "<input>" with exit 1; a rank of 1.5 printed as
  // "1.500000".
  const std::string c = "predict collective --scenario " + kMix + " --bytes 64MiB";
  const std::string uneven = " --shares 0.5,0.5,0,0,0,0,0,0,0,0";
  expect_cases({
      {c + " --kind all-reduce" + uneven,
       2,
       {"--shares", "all-reduce", "all-gather and reduce-scatter"}},
      {c + " --kind broadcast" + uneven, 2, {"--shares", "broadcast"}},
      {c + " --kind all-gather --ranks 0,0,1", 2, {"command line", "--ranks", "listed twice"}},
      {c + " --kind all-gather --ranks 0,1.5", 2, {"--ranks", "got 1.5;"}},
      {c + " --kind all-gather" + uneven, 0, {"all-gather"}},
  });
}

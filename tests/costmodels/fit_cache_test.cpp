// The start-up cache of the shipped fit (costmodels/src/fit_cache.cpp) through the binary: the
// answers are byte-identical with a cold cache, a warm one and the cache off; a changed input
// invalidates the entry; a corrupt or foreign entry is ignored and rebuilt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/run_command.hpp"

namespace fs = std::filesystem;
using cephalo::test_support::cephalo_command;
using cephalo::test_support::run_command;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FitCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cephalo-fit-cache-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // stdout of `cephalo ARGS` with the cache in this test's folder (or off), exit code checked.
  std::string run(const std::string& args, bool cache = true, const std::string& env = "") {
    const std::string prefix =
        cache ? "CEPHALO_CACHE=on CEPHALO_CACHE_DIR=" + (dir_ / "cache").string()
              : "CEPHALO_CACHE=off CEPHALO_CACHE_DIR=" + (dir_ / "cache").string();
    auto r = run_command("env " + prefix + " " + env + " " + cephalo_command(args));
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    return r.out;
  }
  // A private copy of the data the fit reads (CEPHALO_DATA_DIR), to change.
  fs::path copy_data() const {
    const fs::path src = fs::path(CEPHALO_SOURCE_DIR) / "scenarios";
    const fs::path data = dir_ / "data";
    for (const char* sub : {"catalog", "models", "calibration/cephalo-profiles",
                            "calibration/published-throughput"}) {
      fs::create_directories(data / sub);
      fs::copy(src / sub, data / sub, fs::copy_options::recursive);
    }
    return data;
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_ / "cache")) out.push_back(e.path());
    return out;
  }

  fs::path dir_;
  const std::string scenario_ = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";
  const std::string simulate_ = "simulate --json --scenario " + scenario_ + " --plan " +
                                std::string(CEPHALO_SOURCE_DIR) +
                                "/scenarios/plans/default-even.json";
};

TEST_F(FitCache, ColdWarmAndOffGiveTheSameBytes) {
  const std::string off = run(simulate_, false);
  EXPECT_TRUE(entries().empty()) << "the cache is off: nothing is written";
  const std::string cold = run(simulate_);
  ASSERT_EQ(entries().size(), 1u) << "a cold start stores its fit";
  const std::string entry = slurp(entries()[0]);
  const std::string warm = run(simulate_);
  EXPECT_EQ(slurp(entries()[0]), entry) << "a warm start reads, it does not rewrite";
  EXPECT_NE(off.find("iteration_time"), std::string::npos) << off;
  EXPECT_EQ(cold, off);
  EXPECT_EQ(warm, off);
  // Another command and source read the same entry.
  EXPECT_EQ(run("validate " + scenario_), run("validate " + scenario_, false));
  const std::string calibrated = simulate_ + " --compute-model calibrated";
  EXPECT_EQ(run(calibrated), run(calibrated, false));
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(FitCache, ACorruptOrForeignEntryIsIgnoredAndRebuilt) {
  const std::string off = run(simulate_, false);
  run(simulate_);
  ASSERT_EQ(entries().size(), 1u);
  const fs::path file = entries()[0];
  const std::string good = slurp(file);
  auto check = [&](const std::string& bad, const char* what) {
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << bad; }
    EXPECT_EQ(run(simulate_), off) << what;
    EXPECT_EQ(slurp(file), good) << what << ": the entry is rebuilt";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // the payload's checksum no longer matches
  check(flipped, "one byte flipped");
  check(good.substr(0, good.size() - 100), "truncated");
  check("", "empty");
  check(std::string(4096, 'x'), "foreign bytes");
  std::string other_key = good;
  other_key[12] ^= 1;  // the key of other inputs or another build
  check(other_key, "another key");
}

TEST_F(FitCache, AChangedInputInvalidatesTheEntry) {
  // A private copy of the data the fit reads, one number of which then changes.
  const fs::path data = copy_data();
  const std::string env = "CEPHALO_DATA_DIR=" + data.string();
  const std::string before = run(simulate_, true, env);
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_EQ(run(simulate_, true, env), before);  // warm

  const fs::path latencies = data / "calibration/cephalo-profiles/model_latencies.json";
  std::string text = slurp(latencies);
  const std::string from = "7.415035999999968";  // gpt-2.7b on the L4 in fp16: forward slope
  ASSERT_EQ(text.find(from), text.rfind(from));
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "9.415035999999968");
  { std::ofstream(latencies, std::ios::binary | std::ios::trunc) << text; }

  const std::string after = run(simulate_, true, env);
  EXPECT_NE(after, before) << "the changed profile must change the answer";
  EXPECT_EQ(after, run(simulate_, false, env)) << "the stale entry must not be used";
  EXPECT_EQ(run(simulate_, true, env), after);  // and the new entry is
}

// The built-in catalogs come from the entry when it is warm (their indexes and each entry's
// text): every entry converts to the spec the file gives, a catalog changed into an error
// gives that error as without the cache, and the file still counts as an input no output may
// overwrite.
TEST_F(FitCache, TheCatalogsFromTheEntryAreTheFiles) {
  const fs::path data = copy_data();
  const std::string env = "CEPHALO_DATA_DIR=" + data.string();
  run(simulate_, true, env);
  ASSERT_EQ(entries().size(), 1u);
  for (const std::string args : {"describe gpus --json", "describe models --json"})
    EXPECT_EQ(run(args, true, env), run(args, false, env)) << args;
  EXPECT_EQ(run(simulate_, true, env), run(simulate_, false, env));
  // Writing over a catalog is refused as it is without the cache.
  const fs::path gpus = data / "catalog" / "gpus.json";
  const auto onto_catalog = [&](const char* cache) {
    return run_command(
        "env CEPHALO_CACHE=" + std::string(cache) +
        " CEPHALO_CACHE_DIR=" + (dir_ / "cache").string() + " " + env + " " +
        cephalo_command("plan --strategy even --scenario " + scenario_ + " -o " + gpus.string()));
  };
  const auto warm_refusal = onto_catalog("on");
  EXPECT_NE(warm_refusal.code, 0) << warm_refusal.out;
  EXPECT_EQ(warm_refusal.err, onto_catalog("off").err);
  // A second entry named "l4" (an alias of the L4 already): the file's error, cache or not.
  std::string text = slurp(gpus);
  const std::string first = "\"name\": \"P40\"";
  ASSERT_NE(text.find(first), std::string::npos);
  text.replace(text.find(first), first.size(), "\"name\": \"l4\"");
  { std::ofstream(gpus, std::ios::binary | std::ios::trunc) << text; }
  const auto broken = [&](const char* cache) {
    return run_command("env CEPHALO_CACHE=" + std::string(cache) + " CEPHALO_CACHE_DIR=" +
                       (dir_ / "cache").string() + " " + env + " " + cephalo_command(simulate_));
  };
  const auto warm = broken("on");
  EXPECT_EQ(warm.code, 1) << warm.err;
  EXPECT_NE(warm.err.find("used twice"), std::string::npos) << warm.err;
  EXPECT_EQ(warm.err, broken("off").err);
}

}  // namespace

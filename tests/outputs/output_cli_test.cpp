// Outputs never destroy anything (core/README.md, "Output rules"), through the `cephalo` binary:
// every data-loss case of the issue, and the neighbouring ones, must give exit code 5 (or write
// through, for devices, FIFOs and symlinks) and leave every input byte-identical. The inputs are
// copies in a private folder, so a regression destroys a copy, never a shipped file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "../support/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::test_support::CommandResult;
using cephalo::test_support::run_command;

const std::string kSrc = CEPHALO_SOURCE_DIR;
const std::string kCli = CEPHALO_CLI;
const std::string kScenario2 = kSrc + "/scenarios/cpu-2rank.json";
const std::string kPlan2 = kSrc + "/scenarios/plans/cpu-2rank-uneven.json";
const std::string kScenario1 = kSrc + "/scenarios/cpu-1rank.json";
const std::string kPlan1 = kSrc + "/scenarios/plans/cpu-1rank-full.json";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Outputs : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("cephalo-outputs-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  fs::path copy(const std::string& from, const std::string& name) {
    fs::copy_file(from, dir / name);
    return dir / name;
  }
  // A scenario of its own (the job by absolute path, so the copy stands alone).
  fs::path own_scenario(const std::string& from, const std::string& name) {
    nlohmann::json sc = nlohmann::json::parse(std::ifstream(from));
    sc["job"] = kSrc + "/scenarios/" + sc["job"].get<std::string>();
    std::ofstream(dir / name) << sc.dump(2) << "\n";
    return dir / name;
  }
  static CommandResult cephalo(const std::string& args) {
    return run_command("timeout -k 5 120 " + kCli + " " + args);
  }
};

// Exit code 5, a message naming the output and the input it would have replaced, and the input
// unchanged.
void expect_refused_as_input(const CommandResult& r, const fs::path& input,
                             const std::string& before, const std::string& flag) {
  EXPECT_EQ(r.code, 5) << r.err << r.out;
  EXPECT_NE(r.err.find(flag + " " + input.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("same file as the input"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(input), before) << input << " was changed";
}

// A plan written over the scenario it was made from would lose the input: `plan -o` onto its
// scenario is refused.
TEST_F(Outputs, PlanOutputOntoItsScenarioIsRefused) {
  const fs::path sc = own_scenario(kScenario2, "scenario.json");
  const std::string before = slurp(sc);
  const auto r = cephalo("plan --scenario " + sc.string() + " --strategy even -o " + sc.string());
  expect_refused_as_input(r, sc, before, "--output");
}

// ...and onto a file the scenario only names (its job file): inputs are recorded as read.
TEST_F(Outputs, PlanOutputOntoAFileTheScenarioNamesIsRefused) {
  nlohmann::json sc = nlohmann::json::parse(std::ifstream(kScenario2));
  const fs::path job = copy(kSrc + "/scenarios/jobs/gpt-tiny-cpu.json", "job.json");
  sc["job"] = job.string();
  std::ofstream(dir / "scenario.json") << sc.dump(2);
  const std::string before = slurp(job);
  const auto r = cephalo("plan --scenario " + (dir / "scenario.json").string() +
                         " --strategy even -o " + job.string());
  expect_refused_as_input(r, job, before, "--output");
}

// Case 2: `simulate --trace` onto its plan.
TEST_F(Outputs, SimulateTraceOntoItsPlanIsRefused) {
  const fs::path plan = copy(kPlan2, "plan.json");
  const std::string before = slurp(plan);
  const auto r = cephalo("simulate --scenario " + kScenario2 + " --plan " + plan.string() +
                         " --trace " + plan.string());
  expect_refused_as_input(r, plan, before, "--trace");
}

// Case 3: `run --result` onto its plan (one process; the mpirun variant is in
// output_mpi_test.cpp). Refused before any training.
TEST_F(Outputs, RunResultOntoItsPlanIsRefused) {
  const fs::path plan = copy(kPlan1, "plan.json");
  const std::string before = slurp(plan);
  const auto r = cephalo("run --scenario " + kScenario1 + " --plan " + plan.string() +
                         " --steps 2 --result " + plan.string());
  expect_refused_as_input(r, plan, before, "--result");
  EXPECT_EQ(r.err.find("loss"), std::string::npos) << "trained before refusing:\n" << r.err;
}

// Case 4: `compare --trace` onto its simulated record.
TEST_F(Outputs, CompareTraceOntoItsSimulatedRecordIsRefused) {
  const fs::path sim = dir / "sim.json", run = dir / "run.json";
  auto s = cephalo("simulate --scenario " + kScenario1 + " --plan " + kPlan1 + " --json --ops");
  ASSERT_EQ(s.code, 0) << s.err;
  std::ofstream(sim) << s.out;
  auto m = cephalo("run --scenario " + kScenario1 + " --plan " + kPlan1 + " --steps 2 --result " +
                   run.string());
  ASSERT_EQ(m.code, 0) << m.err;
  const std::string before = slurp(sim);
  const auto r = cephalo("compare " + sim.string() + " " + run.string() + " --scenario " +
                         kScenario1 + " --plan " + kPlan1 + " --trace " + sim.string());
  expect_refused_as_input(r, sim, before, "--trace");
}

// Case 5: `sweep -o` onto its spec.
TEST_F(Outputs, SweepOutputOntoItsSpecIsRefused) {
  nlohmann::json spec =
      nlohmann::json::parse(std::ifstream(kSrc + "/scenarios/sweeps/gpt2.7b-mixes.json"));
  spec["job"] = kSrc + "/scenarios/sweeps/" + spec["job"].get<std::string>();
  const fs::path file = dir / "spec.json";
  std::ofstream(file) << spec.dump(2);
  const std::string before = slurp(file);
  const auto r = cephalo("sweep --quiet --spec " + file.string() + " -o " + file.string());
  expect_refused_as_input(r, file, before, "--output");
}

// A hard link is the same file under another name: refused too (inode, not name).
TEST_F(Outputs, HardLinkToAnInputIsRefused) {
  const fs::path plan = copy(kPlan2, "plan.json");
  fs::create_hard_link(plan, dir / "alias.json");
  const std::string before = slurp(plan);
  const auto r = cephalo("simulate --scenario " + kScenario2 + " --plan " + plan.string() +
                         " --trace " + (dir / "alias.json").string());
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_EQ(slurp(plan), before);
}

// Case 6: a device node is written through, never replaced by a regular file.
TEST_F(Outputs, DeviceNodeIsWrittenThroughNotReplaced) {
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  const auto r = cephalo("plan --scenario " + kScenario2 + " --strategy even -o /dev/null");
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(::lstat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode)) << "/dev/null is no longer a character device";
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(before.st_rdev, after.st_rdev);
}

// A FIFO with a reader gets the bytes in place; without one it is refused, not blocked on.
TEST_F(Outputs, FifoIsWrittenThroughOrRefusedWithoutAReader) {
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  const auto r = cephalo("plan --scenario " + kScenario2 + " --strategy even -o " + fifo.string());
  reader.join();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_NE(received.find("\"ranks\""), std::string::npos) << received.substr(0, 200);

  const auto lonely =
      cephalo("plan --scenario " + kScenario2 + " --strategy even -o " + fifo.string());
  EXPECT_EQ(lonely.code, 5) << lonely.err;
  EXPECT_NE(lonely.err.find("nobody is reading"), std::string::npos) << lonely.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

// Case 7: a symlink is written through to its target; the link stays a link.
TEST_F(Outputs, SymlinkIsWrittenThroughToItsTarget) {
  const fs::path target = dir / "target.json", link = dir / "link.json";
  std::ofstream(target) << "old\n";
  fs::create_symlink(target, link);
  const auto r = cephalo("plan --scenario " + kScenario2 + " --strategy even -o " + link.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link)) << "the link was replaced by a file";
  EXPECT_EQ(fs::read_symlink(link), target);
  EXPECT_NE(slurp(target).find("\"ranks\""), std::string::npos);
  // A dangling link creates its target.
  const fs::path dangling = dir / "dangling.json", missing = dir / "created.json";
  fs::create_symlink(missing, dangling);
  const auto d =
      cephalo("plan --scenario " + kScenario2 + " --strategy even -o " + dangling.string());
  EXPECT_EQ(d.code, 0) << d.err;
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_TRUE(fs::is_regular_file(missing));
}

// ...and a symlink that leads to an input is that input.
TEST_F(Outputs, SymlinkToAnInputIsRefused) {
  const fs::path plan = copy(kPlan2, "plan.json");
  fs::create_symlink(plan, dir / "link.json");
  const std::string before = slurp(plan);
  const auto r = cephalo("simulate --scenario " + kScenario2 + " --plan " + plan.string() +
                         " --trace " + (dir / "link.json").string());
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_EQ(slurp(plan), before);
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
}

// Folders, read-only files and missing folders are refused before the work, naming the flag.
TEST_F(Outputs, BadLocationsAreRefusedUpFront) {
  fs::create_directory(dir / "folder");
  const std::string base = "plan --scenario " + kScenario2 + " --strategy even -o ";
  auto a = cephalo(base + (dir / "folder").string());
  EXPECT_EQ(a.code, 5) << a.err;
  EXPECT_NE(a.err.find("is a directory"), std::string::npos) << a.err;
  EXPECT_TRUE(fs::is_directory(dir / "folder"));

  auto b = cephalo(base + (dir / "no-such-folder" / "plan.json").string());
  EXPECT_EQ(b.code, 5) << b.err;
  EXPECT_NE(b.err.find("does not exist"), std::string::npos) << b.err;

  if (::geteuid() != 0) {  // root may write anything, so the read-only bit is advisory there
    const fs::path ro = dir / "read-only.json";
    std::ofstream(ro) << "keep\n";
    fs::permissions(ro, fs::perms::owner_read);
    auto c = cephalo(base + ro.string());
    EXPECT_EQ(c.code, 5) << c.err;
    EXPECT_EQ(slurp(ro), "keep\n");
  }
}

// Two outputs of one command may not be the same file (the second would replace the first).
TEST_F(Outputs, TwoOutputsOfOneCommandMustDiffer) {
  const fs::path out = dir / "out.json";
  const auto r = cephalo("run --scenario " + kScenario1 + " --plan " + kPlan1 +
                         " --steps 2 --trace " + out.string() + " --result " + out.string());
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_NE(r.err.find("each output needs a file of its own"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// `run` checks its result folder before training, not after (otherwise the training's work is lost
// at the end).
TEST_F(Outputs, RunChecksItsOutputFolderBeforeTraining) {
  const auto r = cephalo("run --scenario " + kScenario1 + " --plan " + kPlan1 +
                         " --steps 3 --result " + (dir / "missing" / "r.json").string());
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_EQ(r.err.find("loss"), std::string::npos) << "trained before refusing:\n" << r.err;
  const auto c = cephalo("run --scenario " + kScenario1 + " --plan " + kPlan1 +
                         " --steps 3 --checkpoint-every 1 --checkpoint-dir " + kPlan1);
  EXPECT_EQ(c.code, 5) << c.err;
  EXPECT_NE(c.err.find("not a folder"), std::string::npos) << c.err;
}

// A replaced file keeps its permission bits, and no temporary is left beside it.
TEST_F(Outputs, ReplacedFileKeepsItsModeAndNoTemporaryIsLeft) {
  const fs::path out = dir / "plan.json";
  std::ofstream(out) << "old\n";
  fs::permissions(out, fs::perms::owner_read | fs::perms::owner_write);
  const auto r = cephalo("plan --scenario " + kScenario2 + " --strategy even -o " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(e.path(), out) << "left behind: " << e.path();
  }
  EXPECT_EQ(entries, 1);
}

}  // namespace

// Checkpoints verified end to end, through real `mpirun cephalo run` jobs: a flipped byte in a
// shard and a manifest with non-monotone offsets are refused before anything is trained on
// them, a fresh run refuses another run's folder, and the output and checkpoint locations are
// checked before training with the same exit code on 1 rank and on 2.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/mpi_cli.hpp"

namespace fs = std::filesystem;
using namespace cephalo::test_support;

namespace {

std::string job2(const std::string& extra) {
  return "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-uneven") + " " + extra;
}

// Two ranks, checkpoint at step 2 into dir.
void write_checkpoint(const fs::path& dir) {
  auto o = mpirun(2, job2("--steps 2 --checkpoint-dir " + dir.string() + " --checkpoint-every 2"));
  ASSERT_EQ(o.code, 0) << o.output;
  ASSERT_TRUE(fs::exists(dir / "step_00000002" / "manifest.json"));
}

bool trained(const std::string& output) { return output.find("step 2  loss") != std::string::npos; }

}  // namespace

TEST(MpiCheckpoint, FlippedByteInAShardIsRefusedOnResumeNamingTheShard) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  write_checkpoint(ckpt);
  // The untouched checkpoint resumes (the refusal below is the byte, not the folder).
  auto ok = mpirun(2, job2("--steps 3 --resume " + ckpt.string()));
  ASSERT_EQ(ok.code, 0) << ok.output;
  const auto shard = ckpt / "step_00000002" / "rank_00001.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(1000);
    f.write(&c, 1);
  }
  for (int ranks : {1, 2}) {
    auto o = mpirun(ranks, "--scenario " + scenario(ranks) + " --plan " +
                               plan(ranks == 1 ? "cpu-1rank-full" : "cpu-2rank-uneven") +
                               " --steps 4 --resume " + ckpt.string());
    EXPECT_EQ(o.code, 1) << ranks << " ranks\n" << o.output;
    EXPECT_NE(o.output.find(shard.string()), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("corrupt"), std::string::npos) << o.output;
    EXPECT_FALSE(trained(o.output)) << o.output;
  }
}

TEST(MpiCheckpoint, NonMonotoneOffsetsAreRefusedBeforeAnyShardIsRead) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  auto o3 = run_to_checkpoint(3, "cpu-3rank-uneven-layered", 2, ckpt);
  ASSERT_EQ(o3.code, 0) << o3.output;
  const auto manifest = ckpt / "step_00000002" / "manifest.json";
  auto j = nlohmann::json::parse(std::ifstream(manifest));
  // Rank 1's slice of unit 1 running backwards: read, it would run off the shard buffers.
  auto& offs = j["units"][1]["offsets"];
  const auto numel = j["units"][1]["numel"].get<std::int64_t>();
  offs = {0, numel / 2, numel / 4, numel};
  std::ofstream(manifest) << j.dump(2);
  // No shard can be read at all: a refusal naming the offsets proves none was.
  for (const auto& e : fs::directory_iterator(ckpt / "step_00000002"))
    if (e.path().extension() == ".bin") fs::remove(e.path());
  auto o = mpirun(2, job2("--steps 4 --resume " + ckpt.string()));
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find(manifest.string()), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("units[1].offsets[2]"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("never decrease"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("shard"), std::string::npos) << o.output;
  EXPECT_FALSE(trained(o.output)) << o.output;
}

TEST(MpiCheckpoint, FreshRunRefusesAnotherRunsFolderUnlessOverwriting) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  // Another run on 3 ranks, at step 3.
  auto other = run_to_checkpoint(3, "cpu-3rank-uneven-layered", 3, ckpt);
  ASSERT_EQ(other.code, 0) << other.output;
  const auto before =
      nlohmann::json::parse(std::ifstream(ckpt / "step_00000003" / "manifest.json"));
  auto refused =
      mpirun(2, job2("--steps 3 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 3"));
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("--overwrite-checkpoints"), std::string::npos) << refused.output;
  EXPECT_FALSE(trained(refused.output)) << refused.output;
  // Untouched.
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(ckpt / "step_00000003" / "manifest.json")), before);
  EXPECT_TRUE(fs::exists(ckpt / "step_00000003" / "rank_00002.bin"));
  // Overwriting removes the old run's shards: no rank_00002 beside a 2-rank manifest.
  auto o = mpirun(2, job2("--steps 3 --checkpoint-dir " + ckpt.string() +
                          " --checkpoint-every 3 --overwrite-checkpoints"));
  ASSERT_EQ(o.code, 0) << o.output;
  const auto after = nlohmann::json::parse(std::ifstream(ckpt / "step_00000003" / "manifest.json"));
  EXPECT_EQ(after.at("ranks"), 2);
  EXPECT_FALSE(fs::exists(ckpt / "step_00000003" / "rank_00002.bin"));
  // Resuming into its own folder is continuing, not another run.
  auto cont = mpirun(2, job2("--steps 4 --resume " + ckpt.string() + " --checkpoint-dir " +
                             ckpt.string() + " --checkpoint-every 4"));
  EXPECT_EQ(cont.code, 0) << cont.output;
  EXPECT_TRUE(fs::exists(ckpt / "step_00000004" / "manifest.json"));
}

TEST(MpiCheckpoint, OutputAndCheckpointLocationsAreCheckedBeforeTrainingWithOneExitCode) {
  TempDir dir;
  const auto file = dir.path / "plain-file";
  std::ofstream(file) << "x";
  struct Case {
    std::string args;
    int code;
    std::string says;
  };
  for (const auto& c : std::vector<Case>{
           {"--result " + (dir.path / "missing" / "r.json").string(), 5, "does not exist"},
           {"--trace " + (dir.path / "missing" / "t.json").string(), 5, "--trace"},
           {"--checkpoint-dir " + file.string() + " --checkpoint-every 1", 5, "not a folder"},
       })
    for (int ranks : {1, 2}) {
      auto o = mpirun(ranks, "--scenario " + scenario(ranks) + " --plan " +
                                 plan(ranks == 1 ? "cpu-1rank-full" : "cpu-2rank-uneven") +
                                 " --steps 3 " + c.args);
      EXPECT_EQ(o.code, c.code) << ranks << " ranks: " << c.args << "\n" << o.output;
      EXPECT_NE(o.output.find(c.says), std::string::npos) << o.output;
      EXPECT_FALSE(trained(o.output)) << "trained before refusing:\n" << o.output;
    }
  // A checkpoint folder that does not exist yet is created.
  const auto fresh = dir.path / "new" / "ckpt";
  auto o =
      mpirun(2, job2("--steps 1 --checkpoint-dir " + fresh.string() + " --checkpoint-every 1"));
  EXPECT_EQ(o.code, 0) << o.output;
  EXPECT_TRUE(fs::exists(fresh / "latest"));
}

TEST(MpiCheckpoint, CheckpointsWithoutAFolderOrACadenceAreABadCommandLine) {
  for (const std::string args :
       {"--checkpoint-every 2", "--checkpoint-dir /tmp/x", "--overwrite-checkpoints"}) {
    auto o = mpirun(1, "--scenario " + scenario(1) + " --plan " + plan("cpu-1rank-full") +
                           " --steps 2 " + args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.output;
    EXPECT_NE(o.output.find("requires"), std::string::npos) << o.output;
  }
}

// ---- A checkpoint folder belongs to one run; its files are inputs no output may replace ----

namespace {

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(MpiCheckpoint, SwappedShardsWithTheirChecksumsAreRefusedNamingTheShard) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  // Even shares: both shards have the same size, so only their headers tell them apart.
  auto w = mpirun(2, "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-even") +
                         " --steps 2 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 2");
  ASSERT_EQ(w.code, 0) << w.output;
  const auto step = ckpt / "step_00000002";
  const auto manifest = step / "manifest.json";
  auto j = nlohmann::json::parse(std::ifstream(manifest));
  ASSERT_EQ(j["shards"][0]["bytes"], j["shards"][1]["bytes"]);
  fs::rename(step / "rank_00000.bin", step / "swap.bin");
  fs::rename(step / "rank_00001.bin", step / "rank_00000.bin");
  fs::rename(step / "swap.bin", step / "rank_00001.bin");
  std::swap(j["shards"][0]["xxh64"], j["shards"][1]["xxh64"]);
  std::ofstream(manifest) << j.dump(2);
  // Before: resumed into the wrong slices (loss 5.55 instead of 4.73).
  auto o = mpirun(2, "--scenario " + scenario(2) + " --plan " + plan("cpu-2rank-even") +
                         " --steps 3 --resume " + ckpt.string());
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find((step / "rank_00000.bin").string() + ": at header.rank: got 1"),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("swapped or foreign shard"), std::string::npos) << o.output;
  EXPECT_FALSE(trained(o.output)) << o.output;
}

TEST(MpiCheckpoint, ASecondRunOnABusyCheckpointFolderIsRefusedNamingTheHolder) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  // Run A: one process, far more steps than the test waits for, holding the folder.
  const pid_t a = ::fork();
  ASSERT_GE(a, 0);
  if (a == 0) {
    ::setpgid(0, 0);
    const std::string scen = scenario(1), pl = plan("cpu-1rank-full"), dir_arg = ckpt.string();
    ::execl(CEPHALO_CLI, CEPHALO_CLI, "run", "--scenario", scen.c_str(), "--plan", pl.c_str(),
            "--steps", "1000000", "--checkpoint-dir", dir_arg.c_str(), "--checkpoint-every",
            "1000000", "--json", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until A holds the lock (its file names it), at most 60 s.
  std::string holder;
  for (int i = 0; i < 600 && holder.find("pid " + std::to_string(a)) == std::string::npos; ++i) {
    ::usleep(100000);
    holder = read_bytes(ckpt / "cephalo.lock");
  }
  ASSERT_NE(holder.find("pid " + std::to_string(a)), std::string::npos) << holder;
  // Run B on the same folder, 1 and 2 ranks: refused at start naming A; A keeps running.
  // Before: both exited 0 while their checkpoints replaced each other.
  for (int ranks : {1, 2}) {
    auto b = mpirun(ranks, "--scenario " + scenario(ranks) + " --plan " +
                               plan(ranks == 1 ? "cpu-1rank-full" : "cpu-2rank-uneven") +
                               " --steps 2 --checkpoint-dir " + ckpt.string() +
                               " --checkpoint-every 1 --overwrite-checkpoints");
    EXPECT_EQ(b.code, 5) << b.output;
    EXPECT_NE(b.output.find("belongs to another run that is still running (pid " +
                            std::to_string(a) + " on host "),
              std::string::npos)
        << b.output;
    EXPECT_FALSE(trained(b.output)) << b.output;
  }
  EXPECT_EQ(::waitpid(a, nullptr, WNOHANG), 0) << "run A ended early";
  ::kill(-a, SIGKILL);
  ::waitpid(a, nullptr, 0);
  // A killed holder leaves no stale lock: the kernel released it with the process.
  auto c = mpirun(1, "--scenario " + scenario(1) + " --plan " + plan("cpu-1rank-full") +
                         " --steps 1 --checkpoint-dir " + ckpt.string() +
                         " --checkpoint-every 1 --overwrite-checkpoints");
  EXPECT_EQ(c.code, 0) << c.output;
}

TEST(MpiCheckpoint, OutputsOntoCheckpointFilesAreRefusedBeforeTraining) {
  TempDir dir;
  const auto ckpt = dir.path / "ckpt";
  write_checkpoint(ckpt);
  const auto latest = read_bytes(ckpt / "latest");
  const auto shard = ckpt / "step_00000002" / "rank_00000.bin";
  const auto shard_bytes = read_bytes(shard);
  const std::string resume = " --resume " + ckpt.string();
  const std::string into = " --checkpoint-dir " + ckpt.string() + " --checkpoint-every 1";
  fs::create_directories(dir.path / "fresh");
  for (const std::string& args : std::vector<std::string>{
           // Before: each of these exited 0 with `latest` or a shard replaced (D unresumable).
           "--steps 4" + resume + into + " --result " + (ckpt / "latest").string(),
           "--steps 4" + resume + " --trace " + (ckpt / "latest").string(),
           "--steps 4" + into + " --overwrite-checkpoints --result " + shard.string(),
           // A manifest the run reads: before, refused only after all the training.
           "--steps 4" + resume + " --result " + (ckpt / "step_00000002/manifest.json").string(),
           // Another spelling of the same file.
           "--steps 4" + resume + " --result " + ckpt.string() + "/../ckpt/latest",
           // A fresh run's own folder.
           "--steps 2 --checkpoint-dir " + (dir.path / "fresh").string() +
               " --checkpoint-every 1 --result " + (dir.path / "fresh/latest").string(),
       }) {
    SCOPED_TRACE(args);
    auto o = mpirun(2, job2(args));
    EXPECT_EQ(o.code, 5) << o.output;
    EXPECT_NE(o.output.find("refusing"), std::string::npos) << o.output;
    EXPECT_FALSE(trained(o.output)) << o.output;
    EXPECT_EQ(read_bytes(ckpt / "latest"), latest);
    EXPECT_EQ(read_bytes(shard), shard_bytes);
  }
  // The folder still resumes.
  auto ok = mpirun(2, job2("--steps 3" + resume));
  EXPECT_EQ(ok.code, 0) << ok.output;
}

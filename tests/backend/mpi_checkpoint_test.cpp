// Checkpoints verified end to end, through real `mpirun cephalo run` jobs: a flipped byte in a
// shard and a manifest with non-monotone offsets are refused before anything is trained on
// them, a fresh run refuses another run's folder, and the output and checkpoint locations are
// checked before training with the same exit code on 1 rank and on 2.
#include <gtest/gtest.h>

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

// The checkpoint format without a device: the manifest parser refuses every inconsistency
// naming the JSON path before any shard is opened, a shard is verified before it is returned,
// and the folder policy keeps other runs' checkpoints (and other files) safe.
#include "cephalo/backend/checkpoint.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cephalo/core/error.hpp"

namespace fs = std::filesystem;
using namespace cephalo;
using namespace cephalo::backend;

namespace {

// A 2-layer model's manifest written by 2 ranks (units of 10, 7, 7, 4 elements).
CheckpointManifest sample() {
  CheckpointManifest m;
  m.run = {"gpt-tiny", "0123456789abcdef", 42, "fedcba9876543210"};
  m.step = 3;
  m.adam_step = 3;
  m.model = {2, 64, 4, 256, 256, 64, 16, true};
  m.unit_numel = {10, 7, 7, 4};
  m.offsets = {{0, 6, 10}, {0, 3, 7}, {0, 0, 7}, {0, 4, 4}};
  m.shards = {{"rank_00000.bin", 0, 1}, {"rank_00001.bin", 0, 2}};
  for (int r = 0; r < 2; ++r) m.shards[static_cast<std::size_t>(r)].bytes = m.shard_bytes(r);
  return m;
}

std::string edited(const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(render_checkpoint_manifest(sample()));
  edit(j);
  return j.dump();
}

// The parse fails with a ValidationError at `path` whose message contains `says`.
void expect_refused(const std::string& text, const std::string& path, const std::string& says) {
  try {
    parse_checkpoint_manifest(text, "m.json");
    ADD_FAILURE() << "accepted: " << text.substr(0, 300);
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), "m.json");
    EXPECT_EQ(e.json_path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

struct TempDir {
  fs::path path =
      fs::temp_directory_path() / ("cephalo-ckpt-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(CheckpointManifest, RoundTripsAndKnowsItsShardLayout) {
  const auto m = sample();
  const auto back = parse_checkpoint_manifest(render_checkpoint_manifest(m), "m.json");
  EXPECT_EQ(back.run.model, "gpt-tiny");
  EXPECT_EQ(back.run.plan_hash, m.run.plan_hash);
  EXPECT_EQ(back.run.data_seed, 42u);
  EXPECT_EQ(back.offsets, m.offsets);
  EXPECT_EQ(back.shards[1].xxh64, 2u);
  EXPECT_EQ(back.run.run_identity, "fedcba9876543210");
  // The header: 56 bytes and (offset, count) for each of the 4 units.
  EXPECT_EQ(back.shard_header_bytes(), 56 + 16 * 4);
  // Rank 1 owns 4 + 4 + 7 + 0 elements: params, m, v of each, 4 bytes each.
  EXPECT_EQ(back.shard_bytes(1), 120 + 12 * (4 + 4 + 7 + 0));
  // Unit 2's Adam v on rank 1 follows units 0 and 1 (3 x (4 + 4)) and its params and m (2 x 7).
  EXPECT_EQ(back.shard_offset(1, 2, 2), 120 + 4 * (3 * 8 + 2 * 7));
}

TEST(CheckpointManifest, EveryInconsistencyIsRefusedNamingItsPath) {
  expect_refused(edited([](auto& j) {
                   j["units"][1]["offsets"] = {0, 5, 3};
                 }),
                 "units[1].offsets[2]", "never decrease");
  expect_refused(edited([](auto& j) {
                   j["units"][1]["offsets"] = {1, 3, 7};
                 }),
                 "units[1].offsets[0]", "0");
  expect_refused(edited([](auto& j) {
                   j["units"][1]["offsets"] = {0, 3, 8};
                 }),
                 "units[1].offsets[2]", "unit size 7");
  expect_refused(edited([](auto& j) {
                   j["units"][1]["offsets"] = {0, 9, 7};
                 }),
                 "units[1].offsets[1]", "at most the unit size 7");
  expect_refused(edited([](auto& j) {
                   j["units"][1]["offsets"] = {0, 7};
                 }),
                 "units[1].offsets", "3 shard offsets");
  expect_refused(edited([](auto& j) { j["units"][1]["offsets"][1] = "3"; }), "units[1].offsets[1]",
                 "integer");
  expect_refused(edited([](auto& j) { j["units"].erase(3); }), "units", "4 units");
  expect_refused(edited([](auto& j) { j["shards"][1]["bytes"] = 1000; }), "shards[1].bytes", "300");
  expect_refused(edited([](auto& j) { j["shards"][0]["file"] = "../../etc/passwd"; }),
                 "shards[0].file", "rank_00000.bin");
  expect_refused(edited([](auto& j) { j["shards"][0]["xxh64"] = "xyz"; }), "shards[0].xxh64",
                 "16 lowercase hex");
  expect_refused(edited([](auto& j) { j["shards"].erase(1); }), "shards", "2 shards");
  expect_refused(edited([](auto& j) { j["version"] = 1; }), "version", "no shard checksums");
  expect_refused(edited([](auto& j) { j["version"] = 2; }), "version", "without a header");
  expect_refused(edited([](auto& j) { j["run"].erase("run_identity"); }), "run.run_identity",
                 "missing");
  expect_refused(edited([](auto& j) { j["run"]["plan_hash"] = "../x"; }), "run.plan_hash", "16");
  expect_refused(edited([](auto& j) { j.erase("run"); }), "run", "missing");
  expect_refused(edited([](auto& j) { j["adam_step"] = 4; }), "adam_step", "");
  expect_refused(edited([](auto& j) { j["loss_scale"] = -1; }), "loss_scale", "positive");
  expect_refused(edited([](auto& j) { j["extra"] = 1; }), "extra", "unknown key");
  expect_refused("{\"format\": ", "$", "malformed JSON");
  expect_refused("[1, 2]", "$", "an object");
}

TEST(CheckpointShards, ACorruptOrTruncatedShardIsRefusedNamingTheFile) {
  TempDir dir;
  auto m = sample();
  const fs::path step = dir.path / step_dir_name(m.step);
  fs::create_directories(step);
  std::vector<std::string> bytes;
  for (int r = 0; r < 2; ++r) {
    std::string b = render_shard_header(m, r);
    b.resize(static_cast<std::size_t>(m.shard_bytes(r)));
    for (std::size_t i = static_cast<std::size_t>(m.shard_header_bytes()); i < b.size(); ++i)
      b[i] = static_cast<char>(i * 7 + r);
    m.shards[static_cast<std::size_t>(r)].xxh64 = shard_checksum(b);
    std::ofstream(step / rank_file_name(r), std::ios::binary) << b;
    bytes.push_back(b);
  }
  std::ofstream(step / "manifest.json") << render_checkpoint_manifest(m);
  std::ofstream(dir.path / "latest") << step_dir_name(m.step) << "\n";
  auto ck = read_latest_checkpoint(dir.path);
  EXPECT_EQ(read_verified_shard(ck, 1), bytes[1]);
  // One flipped bit.
  bytes[1][125] = static_cast<char>(bytes[1][125] ^ 1);
  std::ofstream(step / rank_file_name(1), std::ios::binary) << bytes[1];
  try {
    read_verified_shard(ck, 1);
    ADD_FAILURE() << "a corrupt shard was returned";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), (step / "rank_00001.bin").string());
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  std::ofstream(step / rank_file_name(0), std::ios::binary) << bytes[0].substr(1);
  EXPECT_THROW(read_verified_shard(ck, 0), ValidationError);
  // A `latest` that points outside the folder's step folders.
  std::ofstream(dir.path / "latest") << "../elsewhere\n";
  EXPECT_THROW(read_latest_checkpoint(dir.path), ValidationError);
}

TEST(CheckpointFolder, AnotherRunsCheckpointsAreRefusedAndOnlyCheckpointsAreRemoved) {
  TempDir dir;
  const auto ck = dir.path / "ck";
  check_checkpoint_dir(ck, "", false);  // created
  EXPECT_TRUE(fs::is_directory(ck));
  EXPECT_FALSE(holds_checkpoints(ck));
  fs::create_directories(ck / "step_00000002");
  std::ofstream(ck / "latest") << "step_00000002\n";
  std::ofstream(ck / "notes.txt") << "mine";
  fs::create_directories(ck / "step_2_backup");
  EXPECT_TRUE(holds_checkpoints(ck));
  EXPECT_THROW(check_checkpoint_dir(ck, "", false), ValidationError);
  EXPECT_NO_THROW(check_checkpoint_dir(ck, ck, false));  // resuming its own folder
  EXPECT_NO_THROW(check_checkpoint_dir(ck, "", true));
  remove_checkpoints(ck);
  EXPECT_FALSE(holds_checkpoints(ck));
  EXPECT_TRUE(fs::exists(ck / "notes.txt"));
  EXPECT_TRUE(fs::exists(ck / "step_2_backup"));
  std::ofstream(dir.path / "file") << "x";
  EXPECT_THROW(check_checkpoint_dir(dir.path / "file", "", false), IoError);
}

TEST(CheckpointShards, AShardWhoseHeaderNamesAnotherRankOrRunIsRefusedNamingTheFile) {
  const auto m = sample();
  const std::string h1 = render_shard_header(m, 1);
  const ShardHeader h = parse_shard_header(h1, "r1.bin");
  EXPECT_EQ(h.rank, 1);
  EXPECT_EQ(h.ranks, 2);
  EXPECT_EQ(h.plan_hash, "0123456789abcdef");
  EXPECT_EQ(h.run_identity, "fedcba9876543210");
  ASSERT_EQ(h.slices.size(), 4u);
  EXPECT_EQ(h.slices[0], std::make_pair(std::int64_t{6}, std::int64_t{4}));
  EXPECT_NO_THROW(check_shard_header(h, m, 1, "r1.bin", "m.json"));
  auto refused = [&](const ShardHeader& header, int rank, const std::string& path) {
    try {
      check_shard_header(header, m, rank, "r.bin", "m.json");
      ADD_FAILURE() << "accepted as rank " << rank;
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.file(), "r.bin");
      EXPECT_EQ(e.json_path(), path) << e.what();
    }
  };
  refused(h, 0, "header.rank");  // rank 1's shard where rank 0's belongs
  auto other_run = m;
  other_run.run.run_identity = "0000000000000001";
  refused(parse_shard_header(render_shard_header(other_run, 1), "r.bin"), 1, "header.run_identity");
  auto other_plan = m;
  other_plan.offsets[1] = {0, 2, 7};
  refused(parse_shard_header(render_shard_header(other_plan, 1), "r.bin"), 1, "header.slices[1]");
  // Short, foreign and malformed headers.
  EXPECT_THROW(parse_shard_header(h1.substr(0, 30), "r.bin"), ValidationError);
  EXPECT_THROW(parse_shard_header(std::string(200, 'x'), "r.bin"), ValidationError);
  std::string bad_rank = h1;
  bad_rank[12] = 9;  // rank 9 of 2
  EXPECT_THROW(parse_shard_header(bad_rank, "r.bin"), ValidationError);
}

TEST(CheckpointFolder, ALockedFolderIsRefusedToASecondHolderAndFreedOnRelease) {
  TempDir dir;
  const auto ck = dir.path / "ck";
  CheckpointLock first;
  check_checkpoint_dir(ck, "", false, &first);
  EXPECT_TRUE(first.held());
  // flock locks belong to the open file description: a second open in this process conflicts
  // as a second process would.
  CheckpointLock second;
  try {
    check_checkpoint_dir(ck, "", false, &second);
    ADD_FAILURE() << "a second holder was admitted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid()) + " on host"),
              std::string::npos)
        << e.what();
  }
  first = CheckpointLock();  // released
  EXPECT_NO_THROW(check_checkpoint_dir(ck, "", false, &second));
  EXPECT_TRUE(second.held());
  // The lock file is not a checkpoint: the folder is still a fresh run's.
  EXPECT_FALSE(holds_checkpoints(ck));
}

TEST(CheckpointFolder, OutputsOntoCheckpointFilesAreRefused) {
  TempDir dir;
  const auto ck = dir.path / "ck";
  fs::create_directories(ck / "step_00000002");
  std::ofstream(ck / "latest") << "step_00000002\n";
  std::ofstream(ck / "step_00000002" / "rank_00000.bin") << "x";
  std::ofstream(ck / "notes.txt") << "mine";
  fs::create_hard_link(ck / "step_00000002" / "rank_00000.bin", dir.path / "link.bin");
  for (const fs::path& out :
       std::vector<fs::path>{ck / "latest", ck / "step_00000002" / "rank_00000.bin",
                             ck / "step_00000009" / "manifest.json", ck / "cephalo.lock",
                             ck / ".." / "ck" / "latest", dir.path / "link.bin"})
    EXPECT_THROW(check_outputs_outside_checkpoints({{"--result", out}}, {ck}), IoError) << out;
  EXPECT_NO_THROW(check_outputs_outside_checkpoints(
      {{"--result", ck / "result.json"}, {"--trace", dir.path / "t.json"}}, {ck, ""}));
}

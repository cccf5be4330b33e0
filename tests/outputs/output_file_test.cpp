// The output rules of core/output_file.hpp, in process: what is refused, what is written
// through, and that refusals leave everything as it was.
#include "cephalo/core/output_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"

namespace {

namespace fs = std::filesystem;
using cephalo::IoError;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class OutputFile : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    cephalo::forget_input_files();
    dir = fs::temp_directory_path() /
          ("cephalo-output-file-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    cephalo::forget_input_files();
    fs::remove_all(dir);
  }
};

TEST_F(OutputFile, AFileReadAsJsonCannotBeWritten) {
  const fs::path in = dir / "in.json";
  std::ofstream(in) << "{\"a\": 1}\n";
  (void)cephalo::read_json_file(in);
  EXPECT_THROW(cephalo::check_output_file(in, "--output"), IoError);
  EXPECT_THROW(cephalo::write_file_atomically(in, "x"), IoError);
  EXPECT_EQ(slurp(in), "{\"a\": 1}\n");
  // Another file in the same folder is fine.
  cephalo::write_file_atomically(dir / "out.json", "x");
  EXPECT_EQ(slurp(dir / "out.json"), "x");
}

TEST_F(OutputFile, NoteInputFileCoversOtherReaders) {
  const fs::path shard = dir / "rank_0.bin";
  std::ofstream(shard) << "bytes";
  cephalo::note_input_file(shard);
  try {
    cephalo::check_outputs({{"--result", shard}});
    FAIL() << "not refused";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("--result " + shard.string()), std::string::npos)
        << e.what();
  }
}

TEST_F(OutputFile, UnrequestedOutputsAreSkippedAndDuplicatesRefused) {
  EXPECT_NO_THROW(cephalo::check_outputs({{"--trace", ""}, {"--result", dir / "a.json"}}));
  EXPECT_THROW(cephalo::check_outputs({{"--trace", dir / "a.json"}, {"--result", dir / "a.json"}}),
               IoError);
  // The same file by two spellings.
  EXPECT_THROW(cephalo::check_outputs(
                   {{"--trace", dir / "a.json"}, {"--result", dir / "." / "x" / ".." / "a.json"}}),
               IoError);
}

TEST_F(OutputFile, DirectoriesAreRefused) {
  EXPECT_THROW(cephalo::write_file_atomically(dir, "x"), IoError);
  EXPECT_TRUE(fs::is_directory(dir));
}

TEST_F(OutputFile, FoldersForCheckpoints) {
  EXPECT_NO_THROW(cephalo::check_output_folder(dir, "--checkpoint-dir"));
  EXPECT_NO_THROW(cephalo::check_output_folder(dir / "new" / "deeper", "--checkpoint-dir"));
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(cephalo::check_output_folder(dir / "file", "--checkpoint-dir"), IoError);
  EXPECT_THROW(cephalo::check_output_folder(dir / "file" / "sub", "--checkpoint-dir"), IoError);
}

TEST_F(OutputFile, AStaleTemporaryIsNeverTruncated) {
  // Anything already named like a temporary is left alone (O_EXCL, then another name).
  const fs::path out = dir / "out.json";
  for (int i = 0; i < 8; ++i) {
    const fs::path stale =
        dir / (".out.json.tmp." + std::to_string(::getpid()) + "." + std::to_string(i));
    std::ofstream(stale) << "stale " << i;
  }
  cephalo::write_file_atomically(out, "new");
  EXPECT_EQ(slurp(out), "new");
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(
        slurp(dir / (".out.json.tmp." + std::to_string(::getpid()) + "." + std::to_string(i))),
        "stale " + std::to_string(i));
}

TEST_F(OutputFile, SymlinkChainsAreFollowedToTheEnd) {
  const fs::path target = dir / "t.json";
  std::ofstream(target) << "old";
  fs::create_symlink("t.json", dir / "l1");  // relative links resolve from their folder
  fs::create_symlink(dir / "l1", dir / "l2");
  cephalo::write_file_atomically(dir / "l2", "new");
  EXPECT_EQ(slurp(target), "new");
  EXPECT_TRUE(fs::is_symlink(dir / "l1"));
  EXPECT_TRUE(fs::is_symlink(dir / "l2"));
  fs::create_symlink(dir / "loop", dir / "loop");
  EXPECT_THROW(cephalo::write_file_atomically(dir / "loop", "x"), IoError);
}

}  // namespace

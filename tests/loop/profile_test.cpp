// `cephalo profile`: what it writes is what the cost models read (the contract between the
// profiler and costmodels::ProfileTables / load_collective_sweep), and bad requests fail with
// the documented exit codes. Under mpirun (label mpi) the collective sweep is checked too.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "implementation.hpp"

#include "../support/run_command.hpp"

namespace fs = std::filesystem;
using cephalo::Json;

namespace {

using Cli = cephalo::test_support::CommandResult;

Cli sh(const std::string& cmd_line) { return cephalo::test_support::run_command(cmd_line); }

Cli cli(const std::string& args) { return sh(cephalo::test_support::cephalo_command(args)); }

fs::path work_dir() {
  fs::path d = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_profile_test");
  fs::create_directories(d);
  return d;
}

TEST(Profile, WritesWhatTheCostModelsRead) {
  fs::path out = work_dir() / "calib.json";
  fs::remove(out);
  Cli c =
      cli("profile --device cpu --model gpt-tiny --seq 16 --micro-batches 1,2,4 --repeats 2 "
          "--warmup 1 --max-bytes 64KiB -o " +
          out.string() + " --json");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("profile: micro-batch 4"), std::string::npos) << "progress on stderr";
  Json printed = Json::parse(c.out);
  Json written = cephalo::read_json_file(out);
  EXPECT_EQ(printed, written);

  auto tables = cephalo::costmodels::ProfileTables::load(out);
  const auto* row = tables.find("gpt-tiny", "cpu", 16, cephalo::Dtype::FP32);
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->micro_batches, (std::vector<int>{1, 2, 4}));
  // The row says which stack was measured: the backend's, read back as the row's label.
  EXPECT_EQ(written["rows"][0]["implementation"],
            cephalo::to_json(cephalo::backend::executed_implementation()));
  EXPECT_EQ(row->implementation, cephalo::backend::executed_implementation());
  const Json& layer = written["rows"][0]["layer"];
  for (int i = 0; i < 3; ++i) {
    auto t = cephalo::costmodels::ProfileTables::evaluate(*row, row->micro_batches[i]);
    EXPECT_TRUE(t.measured);
    EXPECT_DOUBLE_EQ(t.forward_ms, layer[i]["forward_ms"].get<double>());
    EXPECT_DOUBLE_EQ(t.backward_ms, layer[i]["backward_ms"].get<double>());
    EXPECT_DOUBLE_EQ(t.recompute_ms, layer[i]["recompute_ms"].get<double>());
    EXPECT_GT(t.forward_ms, 0);
  }
  EXPECT_NE(tables.find_unit("gpt-tiny", "cpu", 16, cephalo::Dtype::FP32, "head"), nullptr);
  EXPECT_NE(tables.find_unit("gpt-tiny", "cpu", 16, cephalo::Dtype::FP32, "embedding"), nullptr);
  EXPECT_NE(tables.find_optimizer("cpu"), nullptr);
  // A single process has no collectives to sweep.
  EXPECT_FALSE(written.contains("collectives"));
  EXPECT_FALSE(fs::exists(work_dir() / "calib.sweep.json"));
}

TEST(Profile, BadRequestsFailClearly) {
  Cli unknown = cli("profile --model gpt-tinny --seq 16");
  EXPECT_EQ(unknown.code, 2) << unknown.err;  // a bad flag value (apps/README.md)
  EXPECT_NE(unknown.err.find("gpt-tiny"), std::string::npos) << "closest name suggested";
  Cli mb = cli("profile --model gpt-tiny --seq 16 --micro-batches 0");
  EXPECT_EQ(mb.code, 2) << mb.err;
  EXPECT_NE(mb.err.find("--micro-batches"), std::string::npos) << mb.err;
  Cli dev = cli("profile --device tpu --model gpt-tiny --seq 16");
  EXPECT_EQ(dev.code, 2) << dev.err;
  Cli seq = cli("profile --model gpt-tiny --seq 100000");
  EXPECT_EQ(seq.code, 2) << seq.err;
  EXPECT_NE(seq.err.find("max_positions"), std::string::npos) << seq.err;
  Cli missing = cli("profile --seq 16");
  EXPECT_EQ(missing.code, 2) << missing.err;
  // Values the profile request checks itself (backend::complete_profile_request) are a bad
  // command line too, naming the flag and the value.
  Cli small = cli("profile --model gpt-tiny --seq 16 --max-bytes 1KiB");
  EXPECT_EQ(small.code, 2) << small.err;
  EXPECT_NE(small.err.find("--max-bytes"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("1KiB"), std::string::npos) << small.err;
  Cli cuda = cli("profile --device cuda --model gpt-tiny --seq 16");
  EXPECT_EQ(cuda.code, 2) << cuda.err;
  EXPECT_NE(cuda.err.find("--as"), std::string::npos) << cuda.err;
}

TEST(Profile, ValidateReportsLeaveOneGpuOut) {
  Cli c = cli("profile validate --json");
  ASSERT_EQ(c.code, 0) << c.err;
  Json j = Json::parse(c.out);
  EXPECT_GE(j["leave_one_gpu_out"].size(), 10u);
  EXPECT_GT(j["logo_median_over_gpus_pct"].get<double>(), 0);
  EXPECT_GT(j["logo_rows"].size(), 100u);
}

}  // namespace

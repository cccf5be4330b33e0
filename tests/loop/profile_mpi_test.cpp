// `mpirun -np 2 cephalo profile` (label mpi): the collective sweep it writes is one the comm
// model's calibration reads, with even and uneven points at every size.
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

#include "../support/run_command.hpp"

namespace fs = std::filesystem;
using cephalo::Json;

namespace {

using Cli = cephalo::test_support::CommandResult;

Cli sh(const std::string& cmd_line) { return cephalo::test_support::run_command(cmd_line); }

fs::path work_dir() {
  fs::path d = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_profile_test");
  fs::create_directories(d);
  return d;
}

TEST(ProfileMpi, CollectiveSweepCalibratesTheCommModel) {
  fs::path out = work_dir() / "calib2.json";
  fs::path sweep = work_dir() / "calib2.sweep.json";
  fs::remove(out);
  fs::remove(sweep);
  Cli c = sh(std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
             CEPHALO_MPIEXEC + " --allow-run-as-root --oversubscribe -np 2 " + CEPHALO_CLI +
             " profile --model gpt-tiny --seq 16 --micro-batches 1,2 --repeats 2 --max-bytes "
             "64KiB -o " +
             out.string());
  ASSERT_EQ(c.code, 0) << c.err;
  Json written = cephalo::read_json_file(out);
  ASSERT_TRUE(written.contains("collectives"));
  int even = 0, uneven = 0, under_compute = 0;
  for (const Json& p : written["collectives"]) {
    (p["uneven"].get<bool>() ? uneven : even) += 1;
    if (p.value("under_compute", false)) ++under_compute;
    EXPECT_GT(p["time_us"].get<double>(), 0);
  }
  // All-gather and reduce-scatter at 4, 16 and 64 KiB, each on idle ranks and under compute.
  EXPECT_EQ(even, 2 * 3 * 2);
  EXPECT_EQ(uneven, 2 * 3 * 2);
  EXPECT_EQ(under_compute, 2 * 3 * 2);
  auto points = cephalo::costmodels::load_collective_sweep(sweep);
  EXPECT_EQ(points.size(), 12u);
  EXPECT_EQ(points[0].ranks, (std::vector<int>{0, 1}));
  std::size_t loaded = 0;
  for (const auto& p : points) loaded += p.under_compute ? 1 : 0;
  EXPECT_EQ(loaded, 6u);
}

}  // namespace

// `mpirun -np 2 cephalo sweep` (label mpi): the mixes dealt over two ranks and gathered on
// rank 0 (apps/cmd_sweep.cpp through backend::MpiRuntime) give the rows of one process, in the
// same order, with the same Pareto marks (every column but the wall-clock planning time).
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "cephalo/core/json_reader.hpp"

#include "../support/run_command.hpp"
#include "sweep_spec_fixture.hpp"

namespace fs = std::filesystem;
using cephalo::Json;

namespace {

fs::path work_dir() {
  fs::path d = fs::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_sweep_mpi");
  fs::create_directories(d);
  return d;
}

Json rows_without_timing(const fs::path& file) {
  Json j = cephalo::read_json_file(file);
  for (auto& row : j["mixes"]) row.erase("planning_s");
  return j;
}

TEST(SweepMpi, TwoRanksGiveTheRowsOfOne) {
  const fs::path spec = work_dir() / "spec.json";
  cephalo::test_support::write_small_sweep_spec(spec, "proportional");
  const fs::path one = work_dir() / "one.json", two = work_dir() / "two.json";
  auto r1 = cephalo::test_support::run_command(std::string(CEPHALO_CLI) + " sweep --quiet --spec " +
                                               spec.string() + " -o " + one.string());
  ASSERT_EQ(r1.code, 0) << r1.err;
  auto r2 = cephalo::test_support::run_command(
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + CEPHALO_MPIEXEC +
      " --allow-run-as-root --oversubscribe -np 2 " + CEPHALO_CLI + " sweep --spec " +
      spec.string() + " -o " + two.string());
  ASSERT_EQ(r2.code, 0) << r2.err;
  // Both ranks worked (progress names them), and rank 0 alone wrote the record.
  EXPECT_NE(r2.err.find("[rank 0]"), std::string::npos) << r2.err;
  EXPECT_NE(r2.err.find("[rank 1]"), std::string::npos) << r2.err;
  const Json a = rows_without_timing(one), b = rows_without_timing(two);
  ASSERT_EQ(a["mixes"].size(), 8u);
  EXPECT_EQ(a, b);
}

}  // namespace

#pragma once
// `cephalo run` under mpirun for the backend's multi-process tests, and the comparisons of
// dumped parameter/gradient vectors of gpt-tiny (sequence 16) they share.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace cephalo::test_support {

namespace fs = std::filesystem;

inline const std::string kSrc = CEPHALO_SOURCE_DIR;

using Outcome = CombinedResult;

// Runs `mpirun -np N cephalo run ARGS` (stdout and stderr together), under a hard timeout so a
// hung job fails the test instead of the CI.
inline Outcome mpirun(int ranks, const std::string& args, int timeout_s = 120) {
  return run_combined("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 " +
                      std::to_string(timeout_s) + " " + CEPHALO_MPIEXEC +
                      " --oversubscribe --allow-run-as-root -np " + std::to_string(ranks) + " " +
                      CEPHALO_CLI + " run " + args);
}

inline std::string scenario(int ranks) {
  return kSrc + "/scenarios/cpu-" + std::to_string(ranks) + "rank.json";
}
// A variant of the CPU test scenario on `ranks` ranks, written into `dir`: the tiny job inlined
// and changed by `edit` (precision, an inline model, ...); `tag` names the file.
inline std::string scenario_variant(const fs::path& dir, int ranks, const std::string& tag,
                                    const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json sc = nlohmann::json::parse(std::ifstream(scenario(ranks)));
  nlohmann::json job =
      nlohmann::json::parse(std::ifstream(kSrc + "/scenarios/jobs/gpt-tiny-cpu.json"));
  job["name"] = "gpt-tiny-cpu-" + tag;
  edit(job);
  sc["job"] = job;
  // The scenario keeps its name: the shipped plans name it, and a plan made for another
  // scenario is refused.
  const fs::path file = dir / ("cpu-" + std::to_string(ranks) + "rank-" + tag + ".json");
  std::ofstream(file) << sc.dump(2);
  return file.string();
}

inline std::string plan(const std::string& name) {
  return kSrc + "/scenarios/plans/" + name + ".json";
}

inline std::vector<float> read_floats(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("cephalo-mpi-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Unit boundaries of gpt-tiny (embedding, 2 layers, head), for per-unit norms.
inline std::vector<std::size_t> tiny_units() {
  // wpe has gpt-tiny's 64 positions whatever the sequence (16 in the test job).
  const std::size_t C = 64, F = 256, V = 256, P = 64;
  const std::size_t layer = 4 * C + C * 3 * C + 3 * C + C * C + C + C * F + F + F * C + C;
  return {V * C + P * C, layer, layer, 2 * C};
}

// ||a - b|| / ||b|| per unit; the largest over units.
inline double worst_unit_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  std::size_t off = 0;
  for (std::size_t n : tiny_units()) {
    double d = 0, r = 0;
    for (std::size_t i = off; i < off + n; ++i) {
      d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      r += static_cast<double>(b[i]) * b[i];
    }
    worst = std::max(worst, std::sqrt(d) / std::max(std::sqrt(r), 1e-30));
    off += n;
  }
  return worst;
}

// Per element: |a - b| <= rel * max|b| of the unit (an absolute floor at the unit's scale).
inline double worst_element_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  std::size_t off = 0;
  for (std::size_t n : tiny_units()) {
    double scale = 0;
    for (std::size_t i = off; i < off + n; ++i)
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    for (std::size_t i = off; i < off + n; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(scale, 1e-30));
    off += n;
  }
  return worst;
}

}  // namespace cephalo::test_support

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

// `cephalo run` of the shipped plan `plan_name` on the CPU test scenario of `ranks` ranks,
// with `args` after the scenario and plan.
inline Outcome run_plan(int ranks, const std::string& plan_name, const std::string& args,
                        int timeout_s = 120) {
  return mpirun(ranks, "--scenario " + scenario(ranks) + " --plan " + plan(plan_name) + " " + args,
                timeout_s);
}

// `steps` steps of `plan_name` writing a checkpoint into `dir` after the last one.
inline Outcome run_to_checkpoint(int ranks, const std::string& plan_name, int steps,
                                 const fs::path& dir) {
  const std::string n = std::to_string(steps);
  return run_plan(
      ranks, plan_name,
      "--steps " + n + " --checkpoint-dir " + dir.string() + " --checkpoint-every " + n);
}

// `steps` steps of `plan_name` (resuming from `resume` unless empty) dumping the parameters
// into `dump`.
inline Outcome run_and_dump(int ranks, const std::string& plan_name, int steps,
                            const fs::path& dump, const fs::path& resume = {}) {
  return run_plan(ranks, plan_name,
                  "--steps " + std::to_string(steps) +
                      (resume.empty() ? "" : " --resume " + resume.string()) + " --dump-params " +
                      dump.string());
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

// An injected failure or a killed rank must end every rank with an error, not leave the others
// blocked until the mpirun timeout (exit 124). The timeout's exit code is the whole check: a
// wall-clock bound would measure the machine's load (an ASan build on a busy 2-core machine
// takes several times as long to start and stop the ranks), not whether the abort propagates.
inline void expect_every_rank_ended(const Outcome& o) {
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.code, 124) << "the job hung until the timeout (" << o.seconds << " s):\n" << o.output;
}

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

// A shipped plan on the CPU test scenario of its rank count.
struct PlanOn {
  int ranks;
  std::string plan;
};

// The resume check: `steps` uninterrupted steps of `from`; the same run stopped after `at`
// steps with a checkpoint in `ckpt` (complete, no temporaries left) and resumed under `to`
// to `steps`: the parameters match per unit to 1e-5. `at` fresh steps of `from` do not match
// (> 1e-3), so the comparison can fail. `full` gets the uninterrupted run's parameters.
inline void expect_resume_matches(const fs::path& dir, const fs::path& ckpt, const PlanOn& from,
                                  const PlanOn& to, int steps, int at, std::vector<float>* full) {
  auto uninterrupted = run_and_dump(from.ranks, from.plan, steps, dir / "full.bin");
  ASSERT_EQ(uninterrupted.code, 0) << uninterrupted.output;
  auto first = run_to_checkpoint(from.ranks, from.plan, at, ckpt);
  ASSERT_EQ(first.code, 0) << first.output;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "step_%08d", at);
  ASSERT_TRUE(fs::exists(ckpt / "latest"));
  ASSERT_TRUE(fs::exists(ckpt / step_dir / "manifest.json"));
  for (const auto& e : fs::recursive_directory_iterator(ckpt))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  auto resumed = run_and_dump(to.ranks, to.plan, steps, dir / "resumed.bin", ckpt);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  *full = read_floats(dir / "full.bin");
  const auto a = read_floats(dir / "resumed.bin");
  ASSERT_EQ(a.size(), full->size());
  EXPECT_LT(worst_unit_relative(a, *full), 1e-5);
  auto fresh = run_and_dump(from.ranks, from.plan, at, dir / "fresh.bin");
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_GT(worst_unit_relative(read_floats(dir / "fresh.bin"), *full), 1e-3);
}

}  // namespace cephalo::test_support

// What the benchmark programs share: the process's peak resident memory and the timing loop
// of `make_plan` (a planning error skips the benchmark with its message).
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "cephalo/planner/strategies.hpp"

namespace cephalo::bench {

// The process's peak resident memory so far, in bytes (ru_maxrss is in KiB on Linux).
inline double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

inline double peak_rss_mib() { return peak_rss_bytes() / (1024.0 * 1024.0); }

inline void time_make_plan(benchmark::State& state, const Scenario& s,
                           const planner::PlannerOptions& opt) {
  for (auto _ : state) {
    try {
      benchmark::DoNotOptimize(planner::make_plan(s, opt));
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
}

}  // namespace cephalo::bench

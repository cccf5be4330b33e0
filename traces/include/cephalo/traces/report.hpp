#pragma once
// The result schema shared by the simulator (SimResult) and the backend (RunResult): one
// iteration's throughput, per-rank breakdown, OOM verdict and optional per-op timings keyed by
// the TrainingGraph's op ids, so simulated and measured runs compare op by op (DESIGN §4).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"

namespace cephalo::traces {

struct RankReport {
  int rank = 0;
  std::string gpu;  // device type name
  int node = 0;
  double compute_s = 0;       // compute stream busy
  double comm_s = 0;          // collectives in flight (from their start to their end)
  double exposed_comm_s = 0;  // a collective in flight while the compute stream idles
  double idle_s = 0;          // neither; includes waiting at collectives for slower ranks
  double peak_memory_bytes = 0;
  double capacity_bytes = 0;  // usable device memory the peak is judged against
};

struct OomDetail {
  int rank = 0;
  std::int64_t op = -1;  // op id whose allocation exceeded the capacity
  std::string op_name;
  double bytes = 0;  // device bytes in use once the op allocated
  double capacity_bytes = 0;
  double requested_bytes = 0;  // what the op allocated
};

struct OpTiming {
  std::uint32_t id = 0;
  double start_s = 0;
  double end_s = 0;
};

struct IterationReport {
  std::string source = "sim";  // "sim", "cpu", "cuda"
  double iteration_time_s = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs / (time × Σ peak of the compute dtype)
  bool oom = false;
  std::optional<OomDetail> oom_detail;
  std::uint64_t events = 0;  // simulator: events processed; backend: ops executed
  std::vector<RankReport> ranks;
  std::vector<OpTiming> ops;  // sorted by id; empty unless requested
};

// JSON keys: source, iteration_time_s, samples_per_s, tokens_per_s, mfu, oom, oom_detail (only
// when oom), events, ranks[...], ops (only when non-empty: [{id, start_s, end_s}]).
Json to_json(const IterationReport& report);
IterationReport parse_iteration_report(JsonReader& reader);
IterationReport load_iteration_report(const std::filesystem::path& file);
// Deterministic text (same input, same bytes): `to_json(report).dump(2)` plus a newline.
std::string render_json(const IterationReport& report);
// Summary lines plus an aligned per-rank table.
std::string render_table(const IterationReport& report);

}  // namespace cephalo::traces

#pragma once
// Chrome Trace Event JSON (opens in Perfetto and chrome://tracing), DESIGN §4: `ts`/`dur` in
// microseconds (written with 3 decimals, i.e. exact nanoseconds), one pid per rank named
// "rank 3 (A6000, node 0)", one tid per stream with a thread name, complete ("X") events that
// never overlap within a lane, op id / kind / unit / micro-batch / bytes / FLOPs in `args`, and
// a "memory" counter track per rank. Used for simulated and measured timelines alike.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

struct MemorySample {
  std::int64_t time_ns = 0;
  double bytes = 0;
};

struct TraceInput {
  const TrainingGraph* graph = nullptr;
  // Per op id: start and end in integer nanoseconds from the iteration start; an op with
  // start_ns < 0 did not run and is left out.
  const std::vector<std::int64_t>* start_ns = nullptr;
  const std::vector<std::int64_t>* end_ns = nullptr;
  std::vector<std::string> rank_labels;           // "A6000, node 0" per rank
  std::vector<std::vector<MemorySample>> memory;  // per rank; may be empty
  std::string title;                              // stored in metadata
};

// A rank's process label, the one spelling of simulated, measured and merged traces and of a
// run's abort message: "RTX-A6000, node 0" (the catalog name), with ", emulated 2.00x slowdown"
// for a slot that emulates a slower device.
std::string rank_label(const RankDevice& device);
// rank_label of every rank of the cluster, in rank order.
std::vector<std::string> rank_labels(const Cluster& cluster);

// Renders the trace. Throws std::invalid_argument on inconsistent input (sizes, an op ending
// before it starts, or two ops overlapping on a lane).
std::string render_chrome_trace(const TraceInput& input);
// Refuses a trace file name that says another format than the plain JSON written: one ending
// in .gz (any case) would hold uncompressed text under a gzip name, which zcat and the readers
// of .json.gz traces (this project's own, calibrate stack --trace) then refuse. ValidationError
// naming `source` (the command line) and `option` (its flag), before any work.
void check_chrome_trace_name(const std::filesystem::path& file, const std::string& source,
                             const std::string& option);
// Renders and writes atomically (after check_chrome_trace_name).
void write_chrome_trace(const std::filesystem::path& file, const TraceInput& input);

}  // namespace cephalo::traces

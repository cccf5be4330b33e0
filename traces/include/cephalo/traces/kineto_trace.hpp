#pragma once
// A user's own PyTorch profiler trace (Kineto's Chrome-trace JSON, `torch.profiler`'s
// export_chrome_trace, optionally gzip-compressed; also the legacy autograd profiler's bare
// array of events): read, bounded, and its events sorted into the classes the cost models
// price (forward, backward, optimizer, collectives), step by step. What could not be classified
// is counted and timed, never dropped silently. `cephalo calibrate stack --trace` fits a stack
// from one step, `cephalo compare SIM TRACE` compares a simulation with it
// (traces/README.md, "Kineto traces").
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"

namespace cephalo::traces {

// Most bytes a trace may expand to (after gunzip): the bound is checked while inflating, so a
// gzip bomb is refused after at most this much output. Kineto traces of one training run are
// tens of MB (the three real ones in ../shared/data/kineto: 10-26 MB); parsed JSON takes about
// ten times its text.
constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{256} << 20;
// A child event may end this long after its parent on one thread: the legacy profiler writes
// whole microseconds (start and duration rounded apart: a child ends up to 1 µs late, seen in
// torch 1.13's CPU traces), Kineto's real traces show child ends up to 0.25 µs late. Later is
// out of order.
constexpr double kTraceNestingSlackS = 2e-6;

// The classes a trace's time is sorted into.
enum class TraceClass { Forward, Backward, Optimizer, Collective };
constexpr int kNumTraceClasses = 4;
std::string to_string(TraceClass c);  // "forward", "backward", "optimizer", "collectives"

// One GPU of the trace's `deviceProperties`.
struct TraceDevice {
  int id = 0;
  std::string name;
  double memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
};

// The collectives of one kind in a step ("all-reduce", "all-gather", "reduce-scatter",
// "broadcast", "send-recv", "all-to-all", "reduce", or "other").
struct TraceCollective {
  std::string kind;
  int events = 0;  // NCCL kernels (GPU traces) or c10d ranges (CPU traces)
  double seconds = 0;
};

// One ProfilerStep#N (or, without step annotations, the trace's whole span as one step).
struct TraceStep {
  std::string name;
  std::int64_t number = -1;  // N of ProfilerStep#N; -1 for the whole-trace step
  double start_s = 0;        // from the trace's first event
  double duration_s = 0;
  // Wall time of each class in the step: the measure of the union of its intervals (GPU
  // kernels launched in the step when the trace has kernels; else the CPU ranges), so two
  // threads or streams working at once count once.
  double seconds[kNumTraceClasses] = {};
  // The step's time in which no thread was inside a classified range (host work outside the
  // annotations: data loading, loss logging, the Python between phases).
  double outside_classes_s = 0;
  // GPU traces: the union of every kernel, copy and memset launched in the step, classified or
  // not. What the step lasts beyond it the GPUs waited for the host (launches, syncs, data).
  double gpu_busy_s = 0;
  int forward_passes = 0;  // forward ranges that start in the step
  int layer_norms = 0;     // aten::layer_norm calls inside its forward ranges
  std::vector<TraceCollective> collectives;
  double seconds_of(TraceClass c) const { return seconds[static_cast<int>(c)]; }
};

// Events of one category that no class took, and their summed duration.
struct UnclassifiedEvents {
  std::string category;  // "cpu_op", "kernel", ... ("(none)" in legacy traces)
  int events = 0;
  double seconds = 0;
};

struct KinetoTrace {
  std::string file;
  std::string format;  // "kineto" ({"traceEvents": [...]}) or "legacy" (a bare array)
  bool gzip = false;
  std::vector<TraceDevice> devices;
  std::optional<int> rank, world_size;  // distributedInfo
  std::string distributed_backend;
  // Counts over the whole trace.
  int events = 0;        // complete ("X") events read
  int cpu_ranges = 0;    // cpu_op / user_annotation / python_function (legacy: every event)
  int kernels = 0;       // GPU kernels, memcpys and memsets
  int nccl_kernels = 0;  // of which NCCL's
  int kernels_without_launch = 0;
  std::set<int> kernel_devices;  // args.device of the kernels
  // Class times come from GPU kernels when the trace has any, else from CPU ranges.
  bool times_from_kernels = false;
  std::vector<TraceStep> steps;  // in time order
  std::vector<UnclassifiedEvents> unclassified;
  std::map<std::string, int> unknown_categories;  // category -> events ignored
  std::vector<std::string> notes;                 // what was ignored, and why

  // The step named `name` ("ProfilerStep#5" or "5"). A name the trace lacks is a bad argument,
  // not a bad trace: ValidationError at `source` (the command line, or a Python call's
  // arguments) naming `option` as the caller spells it, the name, this file and the steps it has.
  const TraceStep& step(const std::string& name, const std::string& source,
                        const std::string& option) const;
  // The step whose duration is the median of the trace's (the lower one of an even count).
  const TraceStep& median_step() const;
};

// True when the file's name says gzip (it ends in .gz, in any case): the one rule of the trace
// reader (such a file must be gzip), of validate (it is read as a trace) and of the trace
// writer (which writes plain JSON, so refuses such a name).
bool named_gzip(const std::string& file);

// True when `bytes` is gzip (magic 1f 8b) or JSON whose root looks like a Chrome trace (an
// object with "traceEvents", or an array): how `cephalo compare` tells a trace from a RunResult
// without parsing twice.
bool looks_like_trace(const std::string& bytes);

// Reads a trace from its bytes (gunzipped when they start with gzip's magic; a file named
// *.gz that is not gzip is refused). ValidationError naming `file`, the JSON path, the value
// and what was expected for: gzip that is corrupt or truncated, output past `max_bytes`,
// malformed or truncated JSON, a root that is no trace, events without name / ts / dur of the
// right type, a negative or non-finite time, ranges on one thread that overlap without nesting,
// steps out of order or overlapping, and a trace with nothing classifiable (no event of any
// class; unknown categories alone are noted and ignored).
KinetoTrace parse_kineto_trace(const std::string& bytes, const std::string& file,
                               std::uint64_t max_bytes = kMaxTraceBytes);
// read_input_file (regular files only, bounded) + parse_kineto_trace.
KinetoTrace load_kineto_trace(const std::filesystem::path& file);

// The inflated bytes of a gzip stream (one or more members), refused (ValidationError naming
// `file`) when corrupt, truncated, or longer than `max_bytes`.
std::string gunzip(const std::string& bytes, const std::string& file, std::uint64_t max_bytes);

// The measure of the union of [a, b) intervals (empty ones ignored): a class's wall time when
// several threads or streams work at once.
double union_length_s(std::vector<std::pair<double, double>> intervals);

Json to_json(const TraceStep& step);
Json to_json(const KinetoTrace& trace);  // summary: counts, devices, steps, unclassified, notes
std::string render_kineto_trace(const KinetoTrace& trace);

}  // namespace cephalo::traces

#include "cephalo/traces/chrome_trace.hpp"

#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/traces/kineto_trace.hpp"

namespace cephalo::traces {

std::string rank_label(const RankDevice& device) {
  std::string label = device.slot->spec.name + ", node " + std::to_string(device.node);
  if (device.slot->slowdown != 1.0) {
    label += ", emulated ";
    label += fixed(device.slot->slowdown, 2);
    label += "x slowdown";
  }
  return label;
}

std::vector<std::string> rank_labels(const Cluster& cluster) {
  std::vector<std::string> labels;
  for (const auto& d : cluster.ranks()) labels.push_back(rank_label(d));
  return labels;
}

namespace {

// Integer nanoseconds as microseconds with exactly three decimals: lossless and stable.
void append_us(std::string& out, std::int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  out += buf;
}

void append_number(std::string& out, double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

std::string json_quote(const std::string& s) { return Json(s).dump(); }

}  // namespace

std::string render_chrome_trace(const TraceInput& in) {
  if (!in.graph || !in.start_ns || !in.end_ns)
    throw std::invalid_argument("chrome trace: graph and timings are required");
  const TrainingGraph& g = *in.graph;
  const auto& start = *in.start_ns;
  const auto& end = *in.end_ns;
  if (start.size() != g.num_ops() || end.size() != g.num_ops())
    throw std::invalid_argument("chrome trace: timings do not match the graph's op count");
  std::string out;
  out.reserve(256 + g.num_ops() * 220);
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":";
  out += json_quote(in.title);
  out += "},\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int r = 0; r < g.num_ranks(); ++r) {
    std::string label = "rank " + std::to_string(r);
    if (r < static_cast<int>(in.rank_labels.size()) && !in.rank_labels[r].empty())
      label += " (" + in.rank_labels[r] + ")";
    // A split plan's ranks are read by stage: "rank 5 (L4, node 1) stage 2".
    if (g.summary().split) label += " stage " + std::to_string(g.place(r).stage);
    sep();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
           ",\"tid\":0,\"args\":{\"name\":" + json_quote(label) + "}}";
    sep();
    out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
           ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(r) + "}}";
    // The send and receive lanes only where a split plan has pipeline transfers.
    const int lanes = g.summary().split ? kNumStreams : static_cast<int>(Stream::Send);
    for (int s = 0; s < lanes; ++s) {
      sep();
      out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
             ",\"tid\":" + std::to_string(s) + ",\"args\":{\"name\":\"" +
             to_string(static_cast<Stream>(s)) + "\"}}";
      sep();
      out += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
             ",\"tid\":" + std::to_string(s) + ",\"args\":{\"sort_index\":" + std::to_string(s) +
             "}}";
    }
  }
  for (int r = 0; r < g.num_ranks(); ++r) {
    for (int s = 0; s < kNumStreams; ++s) {
      std::int64_t lane_end = -1;
      for (OpId id : g.stream_program(r, static_cast<Stream>(s))) {
        if (start[id] < 0) continue;
        if (end[id] < start[id])
          throw std::invalid_argument("chrome trace: " + g.op_name(id) + " ends before it starts");
        if (start[id] < lane_end)
          throw std::invalid_argument("chrome trace: " + g.op_name(id) +
                                      " overlaps the previous op on its lane");
        lane_end = end[id];
        const Op& o = g.op(id);
        sep();
        out += "{\"name\":\"";
        out += g.op_name(id);
        out += "\",\"cat\":\"";
        out += to_string(o.kind);
        out += "\",\"ph\":\"X\",\"ts\":";
        append_us(out, start[id]);
        out += ",\"dur\":";
        append_us(out, end[id] - start[id]);
        out += ",\"pid\":" + std::to_string(r) + ",\"tid\":" + std::to_string(s);
        out += ",\"args\":{\"op\":" + std::to_string(id) + ",\"kind\":\"" + to_string(o.kind) +
               "\",\"unit\":" + std::to_string(o.unit) +
               ",\"micro_batch\":" + std::to_string(o.micro_batch) +
               ",\"micro_batch_size\":" + std::to_string(o.micro_batch_size);
        if (o.collective >= 0) out += ",\"collective\":" + std::to_string(o.collective);
        out += ",\"bytes\":";
        append_number(out, o.bytes);
        if (o.collective >= 0) {
          out += ",\"shard_bytes\":";
          append_number(out, o.shard_bytes);
        }
        out += ",\"flops\":";
        append_number(out, o.flops);
        out += "}}";
      }
    }
  }
  for (std::size_t r = 0; r < in.memory.size(); ++r) {
    for (const MemorySample& m : in.memory[r]) {
      sep();
      out += "{\"name\":\"memory\",\"ph\":\"C\",\"ts\":";
      append_us(out, m.time_ns);
      out += ",\"pid\":" + std::to_string(r) + ",\"args\":{\"bytes\":";
      append_number(out, m.bytes);
      out += "}}";
    }
  }
  out += "\n]}\n";
  return out;
}

void check_chrome_trace_name(const std::filesystem::path& file, const std::string& source,
                             const std::string& option) {
  if (named_gzip(file.string()))
    throw ValidationError(source, option, file.string(),
                          "a name without .gz: the trace is written as plain JSON (Perfetto and "
                          "chrome://tracing read it as is; compress it afterwards if wanted)");
}

void write_chrome_trace(const std::filesystem::path& file, const TraceInput& input) {
  check_chrome_trace_name(file, "arguments", "trace");
  write_file_atomically(file, render_chrome_trace(input));
}

}  // namespace cephalo::traces

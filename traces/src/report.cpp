#include "cephalo/traces/report.hpp"

#include <string_view>

#include "cephalo/core/scenario.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::traces {

Json to_json(const IterationReport& r) {
  Json j = Json::object();
  j["source"] = r.source;
  j["plan_hash"] = r.plan_hash;
  j["iteration_time_s"] = r.iteration_time_s;
  j["samples_per_s"] = r.samples_per_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["mfu"] = r.mfu;
  j["hfu"] = r.hfu;
  j["oom"] = r.oom;
  if (r.oom && r.oom_detail) {
    const OomDetail& d = *r.oom_detail;
    j["oom_detail"] = {{"rank", d.rank},
                       {"op", d.op},
                       {"op_name", d.op_name},
                       {"bytes", d.bytes},
                       {"capacity_bytes", d.capacity_bytes},
                       {"requested_bytes", d.requested_bytes}};
  }
  j["events"] = r.events;
  if (!r.implementation.empty()) j["implementation"] = r.implementation;
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  Json ranks = Json::array();
  for (const RankReport& k : r.ranks) {
    Json& o = ranks.emplace_back(Json{{"rank", k.rank},
                                      {"gpu", k.gpu},
                                      {"node", k.node},
                                      {"slowdown", k.slowdown},
                                      {"compute_s", k.compute_s},
                                      {"comm_s", k.comm_s},
                                      {"copy_s", k.copy_s},
                                      {"exposed_comm_s", k.exposed_comm_s},
                                      {"idle_s", k.idle_s},
                                      {"peak_memory_bytes", k.peak_memory_bytes},
                                      {"capacity_bytes", k.capacity_bytes}});
    if (k.stage >= 0) {
      o["stage"] = k.stage;
      o["tp_comm_s"] = k.tp_comm_s;
      o["pp_comm_s"] = k.pp_comm_s;
      o["exposed_tp_s"] = k.exposed_tp_s;
      o["exposed_pp_s"] = k.exposed_pp_s;
      o["exposed_dp_s"] = k.exposed_dp_s;
      o["bubble_s"] = k.bubble_s;
    }
  }
  j["ranks"] = std::move(ranks);
  if (!r.ops.empty()) {
    Json ops = Json::array();
    for (const OpTiming& o : r.ops)
      ops.push_back({{"id", o.id}, {"start_s", o.start_s}, {"end_s", o.end_s}});
    j["ops"] = std::move(ops);
  }
  return j;
}

IterationReport parse_iteration_report(JsonReader& in) {
  if (!in.is_object()) in.fail("an iteration report object");
  IterationReport r;
  r.source = in.string_or("source", "sim");
  r.plan_hash = in.string_or("plan_hash", "");
  r.iteration_time_s = in.number("iteration_time_s");
  r.samples_per_s = in.number("samples_per_s");
  r.tokens_per_s = in.number("tokens_per_s");
  r.mfu = in.number("mfu");
  r.hfu = in.number_or("hfu", r.mfu);
  r.oom = in.child("oom").as_bool();
  if (auto d = in.optional_child("oom_detail")) {
    OomDetail o;
    o.rank = static_cast<int>(d->integer("rank", 0));
    o.op = d->integer("op", -1);
    o.op_name = d->string_or("op_name", "");
    o.bytes = d->number("bytes");
    o.capacity_bytes = d->number("capacity_bytes");
    o.requested_bytes = d->number_or("requested_bytes", 0);
    d->finish();
    r.oom_detail = o;
  }
  r.events = static_cast<std::uint64_t>(in.integer("events", 0));
  r.implementation = in.string_or("implementation", "");
  // A RunResult names the run that measured it (backend's run identity): provenance only.
  in.allow({"run_identity"});
  if (auto w = in.optional_child("warnings"))
    for (auto& item : w->elements()) r.warnings.push_back(item.as_string());
  for (auto& k : in.child("ranks").elements()) {
    RankReport rr;
    rr.rank = static_cast<int>(k.integer("rank", 0));
    rr.gpu = k.string("gpu");
    rr.node = static_cast<int>(k.integer_or("node", 0, 0));
    rr.slowdown = k.number_or("slowdown", 1);
    rr.compute_s = k.number("compute_s");
    rr.comm_s = k.number("comm_s");
    rr.copy_s = k.number_or("copy_s", 0);
    rr.exposed_comm_s = k.number("exposed_comm_s");
    rr.idle_s = k.number("idle_s");
    rr.peak_memory_bytes = k.number("peak_memory_bytes");
    rr.capacity_bytes = k.number("capacity_bytes");
    if (k.has("stage")) {
      rr.stage = static_cast<int>(k.integer("stage", 0, kMaxDevices));
      rr.tp_comm_s = k.number("tp_comm_s");
      rr.pp_comm_s = k.number("pp_comm_s");
      rr.exposed_tp_s = k.number("exposed_tp_s");
      rr.exposed_pp_s = k.number("exposed_pp_s");
      rr.exposed_dp_s = k.number("exposed_dp_s");
      rr.bubble_s = k.number("bubble_s");
    }
    k.finish();
    r.ranks.push_back(rr);
  }
  if (auto ops = in.optional_child("ops")) {
    for (auto& o : ops->elements()) {
      OpTiming t;
      t.id = static_cast<std::uint32_t>(o.integer("id", 0, 0xffffffffLL));
      t.start_s = o.number("start_s");
      t.end_s = o.number("end_s");
      o.finish();
      r.ops.push_back(t);
    }
  }
  in.finish();
  return r;
}

IterationReport load_iteration_report(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader r(j, file.string());
  return parse_iteration_report(r);
}

std::string render_json(const IterationReport& report) { return to_json(report).dump(2) + "\n"; }

std::string render_oom_detail(const OomDetail& d) {
  return "rank " + std::to_string(d.rank) + " at " + d.op_name + " needs " + format_bytes(d.bytes) +
         " of " + format_bytes(d.capacity_bytes) + " usable";
}

namespace {

// The runs of ranks a table prints as one row each: consecutive ranks whose columns (all but
// rank and node) are equal, or every rank alone.
std::vector<std::pair<int, int>> table_runs(const IterationReport& r, bool per_rank) {
  const int n = static_cast<int>(r.ranks.size());
  return equal_runs(n, [&](int a, int b) {
    if (per_rank) return false;
    const RankReport& x = r.ranks[static_cast<std::size_t>(a)];
    const RankReport& y = r.ranks[static_cast<std::size_t>(b)];
    // Equal as printed: ranks whose slices differ by an element of rounding (a unit not
    // divisible by the rank count) differ in the last bytes of their peak, which the table
    // does not show; --per-rank and the JSON record keep every rank's exact values. The text
    // is made only when the numbers differ.
    auto seconds = [](double u, double v) {
      return u == v || format_seconds(u) == format_seconds(v);
    };
    auto bytes = [](double u, double v) { return u == v || format_bytes(u) == format_bytes(v); };
    auto percent = [&](double pu, double cu, double pv, double cv) {
      return (pu == pv && cu == cv) ||
             (cu > 0 && cv > 0 && fixed(100.0 * pu / cu, 1) == fixed(100.0 * pv / cv, 1));
    };
    return x.gpu == y.gpu && x.stage == y.stage && seconds(x.compute_s, y.compute_s) &&
           seconds(x.comm_s, y.comm_s) && seconds(x.copy_s, y.copy_s) &&
           seconds(x.exposed_comm_s, y.exposed_comm_s) && seconds(x.idle_s, y.idle_s) &&
           bytes(x.peak_memory_bytes, y.peak_memory_bytes) &&
           bytes(x.capacity_bytes, y.capacity_bytes) &&
           percent(x.peak_memory_bytes, x.capacity_bytes, y.peak_memory_bytes, y.capacity_bytes) &&
           seconds(x.exposed_tp_s, y.exposed_tp_s) && seconds(x.exposed_pp_s, y.exposed_pp_s) &&
           seconds(x.exposed_dp_s, y.exposed_dp_s) && seconds(x.bubble_s, y.bubble_s);
  });
}

}  // namespace

// How a row's columns add up (RankReport's definitions), printed under the tables.
const char* const kFsdpTableFooter =
    "each row: compute + exposed comm + idle = the iteration time (comm overlapped by compute "
    "is not exposed; copies are apart, their exposed part is idle)\n";
const char* const kFsdpTableFooterNoCopies =
    "each row: compute + exposed comm + idle = the iteration time (comm overlapped by compute "
    "is not exposed)\n";
const char* const kSplitTableFooter =
    "each row: compute + TP + PP exposed + DP exposed + idle = the iteration time; the bubble "
    "(waiting for pipeline neighbours) is part of idle\n";

std::string render_table(const IterationReport& r, bool per_rank) {
  std::string out;
  out += "iteration time  " + format_seconds(r.iteration_time_s) + "\n";
  out += "throughput      " + fixed(r.samples_per_s, 2) + " samples/s, " +
         fixed(r.tokens_per_s, 0) + " tokens/s\n";
  out += "MFU             " + fixed(100.0 * r.mfu, 1) + " %\n";
  if (fixed(100.0 * r.hfu, 1) != fixed(100.0 * r.mfu, 1))
    out += "HFU             " + fixed(100.0 * r.hfu, 1) + " % (with the recomputed forwards)\n";
  if (r.oom) {
    out += "OOM             yes";
    if (r.oom_detail) out += ": " + render_oom_detail(*r.oom_detail);
    out += "\n";
  } else {
    out += "OOM             no\n";
  }
  out += "events          " + std::to_string(r.events) + "\n";
  if (!r.implementation.empty()) out += "implementation  " + r.implementation + "\n";
  out += "\n";
  const bool split = !r.ranks.empty() && r.ranks.front().stage >= 0;
  // Columns that could only repeat one value are left out: "node" when every rank is on one
  // node, "copies" when no rank copies anything (no offload). The JSON record keeps both.
  bool one_node = true, copies = false;
  for (const auto& k : r.ranks) {
    one_node = one_node && k.node == r.ranks.front().node;
    copies = copies || k.copy_s != 0;
  }
  // The header and each row through one filter, so a column and its cells leave together.
  const auto keep = [&](std::vector<std::pair<const char*, std::string>> cells) {
    std::vector<std::string> out;
    for (auto& [column, cell] : cells)
      if (!(one_node && std::string_view(column) == "node") &&
          !(!copies && std::string_view(column) == "copies"))
        out.push_back(std::move(cell));
    return out;
  };
  const auto header = [&](std::vector<const char*> columns) {
    std::vector<std::pair<const char*, std::string>> cells;
    for (const char* c : columns) cells.emplace_back(c, c);
    return keep(cells);
  };
  const char* const first = per_rank ? "rank" : "ranks";
  if (split) {
    // A split plan: each rank's stage, its exposed communication by kind and its bubble.
    TextTable t(header({first, "gpu", "node", "stage", "compute", "TP", "PP exposed", "DP exposed",
                        "bubble", "idle", "peak memory", "capacity", "peak %"}));
    t.set_align(1, TextTable::Align::Left);
    for (const auto& [begin, end] : table_runs(r, per_rank)) {
      const RankReport& k = r.ranks[static_cast<std::size_t>(begin)];
      const RankReport& last = r.ranks[static_cast<std::size_t>(end - 1)];
      t.add_row(keep({{first, format_rank_range(k.rank, last.rank)},
                      {"gpu", k.gpu},
                      {"node", format_rank_range(k.node, last.node)},
                      {"stage", std::to_string(k.stage)},
                      {"compute", format_seconds(k.compute_s)},
                      {"TP", format_seconds(k.exposed_tp_s)},
                      {"PP exposed", format_seconds(k.exposed_pp_s)},
                      {"DP exposed", format_seconds(k.exposed_dp_s)},
                      {"bubble", format_seconds(k.bubble_s)},
                      {"idle", format_seconds(k.idle_s)},
                      {"peak memory", format_bytes(k.peak_memory_bytes)},
                      {"capacity", format_bytes(k.capacity_bytes)},
                      {"peak %", k.capacity_bytes > 0
                                     ? fixed(100.0 * k.peak_memory_bytes / k.capacity_bytes, 1)
                                     : "-"}}));
    }
    out += t.render();
    out += kSplitTableFooter;
    return out;
  }
  TextTable t(header({first, "gpu", "node", "compute", "comm", "copies", "exposed comm", "idle",
                      "peak memory", "capacity", "peak %"}));
  t.set_align(1, TextTable::Align::Left);
  for (const auto& [begin, end] : table_runs(r, per_rank)) {
    const RankReport& k = r.ranks[static_cast<std::size_t>(begin)];
    const RankReport& last = r.ranks[static_cast<std::size_t>(end - 1)];
    t.add_row(keep(
        {{first, format_rank_range(k.rank, last.rank)},
         {"gpu", k.gpu},
         {"node", format_rank_range(k.node, last.node)},
         {"compute", format_seconds(k.compute_s)},
         {"comm", format_seconds(k.comm_s)},
         {"copies", format_seconds(k.copy_s)},
         {"exposed comm", format_seconds(k.exposed_comm_s)},
         {"idle", format_seconds(k.idle_s)},
         {"peak memory", format_bytes(k.peak_memory_bytes)},
         {"capacity", format_bytes(k.capacity_bytes)},
         {"peak %",
          k.capacity_bytes > 0 ? fixed(100.0 * k.peak_memory_bytes / k.capacity_bytes, 1) : "-"}}));
  }
  out += t.render();
  out += copies ? kFsdpTableFooter : kFsdpTableFooterNoCopies;
  return out;
}

}  // namespace cephalo::traces

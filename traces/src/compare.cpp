#include "cephalo/traces/compare.hpp"

#include <algorithm>
#include <cmath>
#include <system_error>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo::traces {
namespace {

// The keys of the shared schema. A RunResult may carry more at the top level (per-step losses,
// emulation notes); compare reads only these and ignores the rest.
const std::array<const char*, 12> kSchemaKeys = {
    "source", "plan_hash",  "iteration_time_s", "samples_per_s", "tokens_per_s",   "mfu",
    "oom",    "oom_detail", "events",           "ranks",         "implementation", "ops"};

std::optional<double> rel_error(double simulated, double measured) {
  if (!(std::abs(measured) > 0)) return std::nullopt;
  return (simulated - measured) / measured;
}

Json error_json(std::optional<double> e) { return e ? Json(*e) : Json(nullptr); }

std::string error_text(std::optional<double> e) {
  if (!e) return "-";
  std::string s = fixed(100.0 * *e, 1);
  if (*e >= 0) s = "+" + s;
  return s + " %";
}

// Per-op start/end in ns (-1 = absent) over the graph's ids; ids outside the graph are errors.
void op_times(const IterationReport& r, const TrainingGraph& g, const std::string& file,
              std::vector<std::int64_t>& start, std::vector<std::int64_t>& end) {
  start.assign(g.num_ops(), -1);
  end.assign(g.num_ops(), -1);
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const auto& o = r.ops[i];
    std::string where = "$.ops[" + std::to_string(i) + "]";
    if (o.id >= g.num_ops())
      throw ValidationError(file, where + ".id", std::to_string(o.id),
                            "an op id of the plan's graph (< " + std::to_string(g.num_ops()) +
                                "); was the result produced for another plan or scenario?");
    if (!(o.end_s >= o.start_s) || o.start_s < 0)
      throw ValidationError(
          file, where, "start " + std::to_string(o.start_s) + ", end " + std::to_string(o.end_s),
          "0 <= start_s <= end_s");
    start[o.id] = std::llround(o.start_s * 1e9);
    end[o.id] = std::llround(o.end_s * 1e9);
  }
}

}  // namespace

void check_complete_ops(const IterationReport& r, const TrainingGraph& g, const std::string& file) {
  const std::string whole = "every op of the plan's graph once (" + std::to_string(g.num_ops()) +
                            " ops over " + std::to_string(g.num_ranks()) +
                            " ranks: `cephalo run --json` or --result writes them)";
  if (r.ops.empty()) throw ValidationError(file, "$.ops", "no op records", whole);
  std::vector<int> seen(g.num_ops(), -1);
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const auto id = r.ops[i].id;
    const std::string where = "$.ops[" + std::to_string(i) + "].id";
    if (id >= g.num_ops())
      throw ValidationError(file, where, std::to_string(id),
                            "an op id of the plan's graph (< " + std::to_string(g.num_ops()) + ")");
    if (seen[id] >= 0)
      throw ValidationError(file, where, std::to_string(id),
                            "each op once (op " + g.op_name(id) + " is also $.ops[" +
                                std::to_string(seen[id]) + "])");
    seen[id] = static_cast<int>(i);
  }
  std::size_t missing = 0;
  std::string first;
  for (std::size_t id = 0; id < g.num_ops(); ++id)
    if (seen[id] < 0 && ++missing <= 3)
      first += (first.empty() ? "" : ", ") + g.op_name(static_cast<OpId>(id));
  if (missing)
    throw ValidationError(file, "$.ops",
                          std::to_string(r.ops.size()) + " op records, " + std::to_string(missing) +
                              " ops missing (" + first + (missing > 3 ? ", ..." : "") + ")",
                          whole);
}

namespace {

struct ClassTotals {
  std::array<double, kNumCompareClasses> seconds{};
  std::array<int, kNumCompareClasses> ops{};
};

ClassTotals class_totals(const TrainingGraph& g, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& end) {
  std::vector<std::int64_t> from = start;
  for (const auto& c : g.collectives()) {
    std::int64_t last = -1;
    bool all = true;
    for (const auto& m : g.members(c)) {
      if (start[m.op] < 0) all = false;
      last = std::max(last, start[m.op]);
    }
    if (!all) continue;
    for (const auto& m : g.members(c))
      from[m.op] = std::min(std::max(start[m.op], last), end[m.op]);
  }
  ClassTotals t;
  for (std::size_t id = 0; id < g.num_ops(); ++id) {
    if (start[id] < 0) continue;
    int c = static_cast<int>(compare_class_of(g.op(static_cast<OpId>(id)).kind));
    t.seconds[c] += static_cast<double>(end[id] - from[id]) * 1e-9;
    t.ops[c] += 1;
  }
  return t;
}

void check_kinds(const IterationReport& sim, const std::string& sim_file,
                 const IterationReport& run, const std::string& run_file) {
  if (!sim_file.empty() && !run_file.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(sim_file, run_file, ec) && !ec)
      throw ValidationError(run_file, "$", "the same file as SIM (" + sim_file + ")",
                            "a measured run of the plan, not the simulated record again");
  }
  const bool sim_ok = sim.source == "sim", run_ok = run.source != "sim";
  if (!sim_ok && run.source == "sim")
    throw ValidationError(
        sim_file, "$.source", "\"" + sim.source + "\"",
        "a SimResult first: the arguments are swapped (cephalo compare SIM RUN; " + run_file +
            " is the simulated one)");
  if (!sim_ok)
    throw ValidationError(sim_file, "$.source", "\"" + sim.source + "\"",
                          "\"sim\" (a SimResult from cephalo simulate --json) as the first file");
  if (!run_ok)
    throw ValidationError(run_file, "$.source", "\"sim\"",
                          "a RunResult (source \"cpu\" or \"cuda\", from cephalo run --json) as "
                          "the second file; both files are simulations");
  for (const auto& [r, file] : {std::pair{&sim, &sim_file}, std::pair{&run, &run_file}})
    if (!(r->iteration_time_s > 0) || !std::isfinite(r->iteration_time_s))
      throw ValidationError(*file, "$.iteration_time_s", std::to_string(r->iteration_time_s),
                            "a positive iteration time");
  if (sim.ranks.size() != run.ranks.size())
    throw ValidationError(run_file, "$.ranks", std::to_string(run.ranks.size()) + " ranks",
                          std::to_string(sim.ranks.size()) + " ranks like " + sim_file +
                              " (both results must come from the same plan)");
}

void check_plan(const IterationReport& sim, const std::string& sim_file, const IterationReport& run,
                const std::string& run_file, const CompareContext& ctx,
                std::vector<std::string>& warnings) {
  if (ctx.plan) {
    const std::string want = plan_hash(*ctx.plan);
    const std::string plan_name = ctx.plan_file.empty() ? "the plan given" : ctx.plan_file;
    for (const auto& [r, file] : {std::pair{&sim, &sim_file}, std::pair{&run, &run_file}}) {
      if (r->plan_hash.empty())
        warnings.push_back(*file +
                           " carries no plan_hash (written before records had one): "
                           "cannot check that it ran " +
                           plan_name);
      else if (r->plan_hash != want)
        throw ValidationError(
            *file, "$.plan_hash", "\"" + r->plan_hash + "\"",
            "\"" + want + "\", the hash of " + plan_name + " (the record describes another plan)");
    }
    if (ctx.graph && ctx.graph->num_ranks() != static_cast<int>(sim.ranks.size()))
      throw ValidationError(sim_file, "$.ranks", std::to_string(sim.ranks.size()) + " ranks",
                            std::to_string(ctx.graph->num_ranks()) + " ranks like " + plan_name);
  } else if (!sim.plan_hash.empty() && !run.plan_hash.empty() && sim.plan_hash != run.plan_hash) {
    throw ValidationError(run_file, "$.plan_hash", "\"" + run.plan_hash + "\"",
                          "\"" + sim.plan_hash + "\" like " + sim_file +
                              " (both records must describe the same plan)");
  }
}

}  // namespace

std::string to_string(CompareClass c) {
  switch (c) {
    case CompareClass::Forward:
      return "forward";
    case CompareClass::Backward:
      return "backward";
    case CompareClass::Recompute:
      return "recompute";
    case CompareClass::AllGather:
      return "all-gather";
    case CompareClass::ReduceScatter:
      return "reduce-scatter";
    case CompareClass::AllReduce:
      return "all-reduce";
    case CompareClass::Copies:
      return "copies";
    case CompareClass::Optimizer:
      return "optimizer";
    case CompareClass::TensorParallel:
      return "tensor-parallel";
    case CompareClass::PipelineTransfer:
      return "pipeline transfer";
  }
  return "?";
}

CompareClass compare_class_of(OpKind k) {
  switch (k) {
    case OpKind::Forward:
      return CompareClass::Forward;
    case OpKind::Backward:
    case OpKind::WeightGradient:
      return CompareClass::Backward;
    case OpKind::Recompute:
      return CompareClass::Recompute;
    case OpKind::OptimizerStep:
      return CompareClass::Optimizer;
    case OpKind::AllGather:
    case OpKind::AllGatherV:
      return CompareClass::AllGather;
    case OpKind::ReduceScatter:
    case OpKind::ReduceScatterV:
      return CompareClass::ReduceScatter;
    case OpKind::AllReduce:
    case OpKind::TiedAllReduce:
      return CompareClass::AllReduce;
    case OpKind::TpAllReduce:
    case OpKind::TpGatherScatter:
      return CompareClass::TensorParallel;
    case OpKind::Send:
    case OpKind::Recv:
      return CompareClass::PipelineTransfer;
    case OpKind::CopyD2H:
    case OpKind::CopyH2D:
      return CompareClass::Copies;
  }
  return CompareClass::Forward;
}

IterationReport load_result(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  if (!j.is_object()) {
    JsonReader r(j, file.string());
    r.fail("a SimResult or RunResult object (cephalo simulate --json / cephalo run --json)");
  }
  // A RunResult may wrap the report ("report": {...}); accept both shapes.
  const Json* body = &j;
  std::string path;
  if (!j.contains("iteration_time_s") && j.contains("report") && j["report"].is_object()) {
    body = &j["report"];
    path = ".report";
  }
  Json slim = Json::object();
  for (const char* key : kSchemaKeys)
    if (body->contains(key)) slim[key] = (*body)[key];
  JsonReader r(slim, file.string(), path);
  return parse_iteration_report(r);
}

CompareReport compare(const IterationReport& sim, const std::string& sim_file,
                      const IterationReport& run, const std::string& run_file,
                      const CompareContext& ctx) {
  CompareReport out;
  check_kinds(sim, sim_file, run, run_file);
  check_plan(sim, sim_file, run, run_file, ctx, out.warnings);
  if (sim.oom)
    out.warnings.push_back(sim_file +
                           " is an out-of-memory verdict; its timings are not a "
                           "prediction");
  out.simulated_file = sim_file;
  out.measured_file = run_file;
  out.simulated_source = sim.source;
  out.measured_source = run.source;
  out.end_to_end = {{"iteration_time_s", sim.iteration_time_s, run.iteration_time_s, std::nullopt},
                    {"samples_per_s", sim.samples_per_s, run.samples_per_s, std::nullopt},
                    {"tokens_per_s", sim.tokens_per_s, run.tokens_per_s, std::nullopt}};
  for (auto& m : out.end_to_end) m.error = rel_error(m.simulated, m.measured);
  out.iteration_time_error = out.end_to_end[0].error;

  for (std::size_t i = 0; i < sim.ranks.size(); ++i) {
    const auto& s = sim.ranks[i];
    const auto& m = run.ranks[i];
    RankComparison rc;
    rc.rank = s.rank;
    rc.gpu = s.gpu;
    rc.simulated_peak_memory_bytes = s.peak_memory_bytes;
    rc.measured_peak_memory_bytes = m.peak_memory_bytes;
    rc.peak_memory_error = rel_error(s.peak_memory_bytes, m.peak_memory_bytes);
    if (rc.peak_memory_error)
      out.max_abs_peak_memory_error =
          std::max(out.max_abs_peak_memory_error, std::abs(*rc.peak_memory_error));
    rc.simulated_compute_s = s.compute_s;
    rc.measured_compute_s = m.compute_s;
    rc.compute_error = rel_error(s.compute_s, m.compute_s);
    rc.simulated_comm_s = s.comm_s;
    rc.measured_comm_s = m.comm_s;
    rc.comm_error = rel_error(s.comm_s, m.comm_s);
    rc.simulated_idle_s = s.idle_s;
    rc.measured_idle_s = m.idle_s;
    out.ranks.push_back(rc);
  }

  const TrainingGraph* g = ctx.graph;
  if (!g)
    out.ops_note = "per-op-class table needs --scenario and --plan (the graph the op ids refer to)";
  else if (sim.ops.empty())
    out.ops_note = sim_file + " has no per-op timings (rerun `cephalo simulate --ops --json`)";
  else if (run.ops.empty())
    out.ops_note = run_file + " has no per-op timings";
  out.have_ops = g && !sim.ops.empty() && !run.ops.empty();
  if (!out.have_ops) return out;

  std::vector<std::int64_t> s_start, s_end, m_start, m_end;
  op_times(sim, *g, sim_file, s_start, s_end);
  op_times(run, *g, run_file, m_start, m_end);
  ClassTotals st = class_totals(*g, s_start, s_end);
  ClassTotals mt = class_totals(*g, m_start, m_end);
  for (int c = 0; c < kNumCompareClasses; ++c) {
    if (st.ops[c] == 0 && mt.ops[c] == 0) continue;
    out.op_classes.push_back({static_cast<CompareClass>(c), st.ops[c], mt.ops[c], st.seconds[c],
                              mt.seconds[c], rel_error(st.seconds[c], mt.seconds[c])});
  }
  std::vector<OpDifference> diffs;
  for (std::size_t id = 0; id < g->num_ops(); ++id)
    if (s_start[id] >= 0 && m_start[id] >= 0)
      diffs.push_back({static_cast<OpId>(id), static_cast<double>(s_end[id] - s_start[id]) * 1e-9,
                       static_cast<double>(m_end[id] - m_start[id]) * 1e-9});
  const std::size_t top = std::min<std::size_t>(5, diffs.size());
  std::partial_sort(diffs.begin(), diffs.begin() + static_cast<std::ptrdiff_t>(top), diffs.end(),
                    [](const OpDifference& a, const OpDifference& b) {
                      return std::abs(a.measured_s - a.simulated_s) >
                             std::abs(b.measured_s - b.simulated_s);
                    });
  diffs.resize(top);
  out.largest_differences = std::move(diffs);
  return out;
}

Json to_json(const CompareReport& r, const TrainingGraph* g) {
  Json record = Json::object();
  record["simulated"] = r.simulated_file;
  record["measured"] = r.measured_file;
  record["simulated_source"] = r.simulated_source;
  record["measured_source"] = r.measured_source;
  record["error_definition"] = "(simulated - measured) / measured";
  Json e2e = Json::array();
  for (const auto& m : r.end_to_end)
    e2e.push_back({{"metric", m.metric},
                   {"simulated", m.simulated},
                   {"measured", m.measured},
                   {"error", error_json(m.error)}});
  record["end_to_end"] = e2e;
  Json ranks = Json::array();
  for (const auto& k : r.ranks)
    ranks.push_back({{"rank", k.rank},
                     {"gpu", k.gpu},
                     {"simulated_peak_memory_bytes", k.simulated_peak_memory_bytes},
                     {"measured_peak_memory_bytes", k.measured_peak_memory_bytes},
                     {"peak_memory_error", error_json(k.peak_memory_error)},
                     {"simulated_compute_s", k.simulated_compute_s},
                     {"measured_compute_s", k.measured_compute_s},
                     {"compute_error", error_json(k.compute_error)},
                     {"simulated_comm_s", k.simulated_comm_s},
                     {"measured_comm_s", k.measured_comm_s},
                     {"comm_error", error_json(k.comm_error)},
                     {"simulated_idle_s", k.simulated_idle_s},
                     {"measured_idle_s", k.measured_idle_s}});
  record["ranks"] = ranks;
  if (r.have_ops) {
    Json classes = Json::array();
    for (const auto& c : r.op_classes)
      classes.push_back({{"class", to_string(c.op_class)},
                         {"simulated_ops", c.simulated_ops},
                         {"measured_ops", c.measured_ops},
                         {"simulated_s", c.simulated_s},
                         {"measured_s", c.measured_s},
                         {"error", error_json(c.error)}});
    record["op_classes"] = classes;
    Json largest = Json::array();
    for (const auto& d : r.largest_differences) {
      Json e = {{"op", d.op}, {"simulated_s", d.simulated_s}, {"measured_s", d.measured_s}};
      if (g) {
        e["name"] = g->op_name(d.op);
        e["kind"] = to_string(g->op(d.op).kind);
      }
      largest.push_back(std::move(e));
    }
    record["largest_differences"] = largest;
  } else {
    record["op_classes"] = nullptr;
    record["op_classes_note"] = r.ops_note;
  }
  record["summary"] = {{"iteration_time_error", error_json(r.iteration_time_error)},
                       {"max_abs_peak_memory_error", r.max_abs_peak_memory_error}};
  if (!r.warnings.empty()) record["warnings"] = r.warnings;
  return record;
}

std::string render_compare_table(const CompareReport& r, const TrainingGraph* g) {
  std::string out = "simulated " + r.simulated_file + " (" + r.simulated_source +
                    ")  vs  measured " + r.measured_file + " (" + r.measured_source + ")\n" +
                    "error = (simulated - measured) / measured\n\n";
  TextTable t({"metric", "simulated", "measured", "error"});
  const auto& e = r.end_to_end;
  t.add_row({"iteration time", format_seconds(e[0].simulated), format_seconds(e[0].measured),
             error_text(e[0].error)});
  t.add_row(
      {"samples/s", fixed(e[1].simulated, 2), fixed(e[1].measured, 2), error_text(e[1].error)});
  t.add_row(
      {"tokens/s", fixed(e[2].simulated, 0), fixed(e[2].measured, 0), error_text(e[2].error)});
  out += t.render() + "\n";

  TextTable rt({"rank", "gpu", "peak mem sim", "peak mem run", "error", "compute sim",
                "compute run", "error", "comm sim", "comm run"});
  rt.set_align(1, TextTable::Align::Left);
  for (const auto& k : r.ranks)
    rt.add_row({std::to_string(k.rank), k.gpu, format_bytes(k.simulated_peak_memory_bytes),
                format_bytes(k.measured_peak_memory_bytes), error_text(k.peak_memory_error),
                format_seconds(k.simulated_compute_s), format_seconds(k.measured_compute_s),
                error_text(k.compute_error), format_seconds(k.simulated_comm_s),
                format_seconds(k.measured_comm_s)});
  out += rt.render() + "\n";

  if (!r.have_ops) return out + "per op class: " + r.ops_note + "\n";
  TextTable ct({"op class", "ops sim", "ops run", "Σ time sim", "Σ time run", "error"});
  for (const auto& c : r.op_classes)
    ct.add_row({to_string(c.op_class), std::to_string(c.simulated_ops),
                std::to_string(c.measured_ops), format_seconds(c.simulated_s),
                format_seconds(c.measured_s), error_text(c.error)});
  out +=
      "per op class (Σ over ranks of op durations; collectives from the last participant's "
      "arrival)\n" +
      ct.render();
  TextTable lt({"largest differences", "kind", "sim", "run"});
  for (const auto& d : r.largest_differences)
    lt.add_row({g ? g->op_name(d.op) : "op " + std::to_string(d.op),
                g ? to_string(g->op(d.op).kind) : "", format_seconds(d.simulated_s),
                format_seconds(d.measured_s)});
  out += "\n(op durations as recorded, collectives including any wait)\n" + lt.render();
  return out;
}

namespace {

// Renders one timeline with the shared writer, then renumbers its processes so the simulated
// and the measured lanes of each rank sit next to each other (pid 2r and 2r+1).
void append_timeline(Json& events, const TrainingGraph& g, const IterationReport& r,
                     const std::vector<std::string>& labels, int side, const std::string& tag) {
  std::vector<std::int64_t> start, end;
  op_times(r, g, "", start, end);
  TraceInput in;
  in.graph = &g;
  in.start_ns = &start;
  in.end_ns = &end;
  in.rank_labels = labels;
  in.title = tag;
  Json one = Json::parse(render_chrome_trace(in));
  for (Json& e : one["traceEvents"]) {
    int pid = e.value("pid", 0);
    int merged = 2 * pid + side;
    e["pid"] = merged;
    std::string name = e.value("name", "");
    if (e.value("ph", "") == "M" && name == "process_name")
      e["args"]["name"] = e["args"]["name"].get<std::string>() + " · " + tag;
    if (e.value("ph", "") == "M" && name == "process_sort_index") e["args"]["sort_index"] = merged;
    if (e.value("ph", "") == "X") e["args"]["timeline"] = tag;
    events.push_back(std::move(e));
  }
}

}  // namespace

std::string render_merged_trace(const TrainingGraph& g, const IterationReport& sim,
                                const IterationReport& run, const std::vector<std::string>& labels,
                                const std::string& title) {
  Json events = Json::array();
  append_timeline(events, g, sim, labels, 0, "sim");
  append_timeline(events, g, run, labels, 1, "measured");
  Json trace = {{"displayTimeUnit", "ms"},
                {"otherData", {{"title", title}}},
                {"traceEvents", std::move(events)}};
  return trace.dump() + "\n";
}

ImplementationSides implementation_sides(const Scenario* scenario, const IterationReport& run) {
  ImplementationSides sides;
  sides.simulated =
      scenario ? to_string(scenario->job.implementation) : std::string("unknown (no --scenario)");
  sides.measured =
      run.implementation.empty() ? std::string("unknown (not recorded)") : run.implementation;
  sides.differ = scenario && !run.implementation.empty() && sides.simulated != sides.measured;
  return sides;
}

Json to_json(const ImplementationSides& sides) {
  return {{"simulated", sides.simulated}, {"measured", sides.measured}};
}

PlannedComparison compare_planned(const IterationReport& sim, const std::string& sim_file,
                                  const IterationReport& run, const std::string& run_file,
                                  const Scenario* scenario, const Plan* plan,
                                  const std::string& plan_label, const std::string& source,
                                  const std::string& pair) {
  if (!scenario != !plan)
    throw ValidationError(source, pair, "", "both (the graph the op ids key) or neither");
  PlannedComparison c;
  CompareContext ctx;
  if (scenario && plan) {
    check_plan_for(*plan, *scenario, plan_label);
    c.graph = build_training_graph(*plan, *scenario);
    ctx = {&*c.graph, plan, plan_label};
  }
  c.report = compare(sim, sim_file, run, run_file, ctx);
  c.implementation = implementation_sides(scenario, run);
  return c;
}

Json PlannedComparison::record() const {
  Json j = to_json(report, graph_or_null());
  j["implementation"] = to_json(implementation);
  return j;
}

std::string PlannedComparison::implementation_warning() const {
  if (!implementation.differ) return "";
  return "implementation differs: simulated \"" + implementation.simulated + "\", measured \"" +
         implementation.measured + "\" (set the job's \"implementation\" to the backend's)";
}

void PlannedComparison::write_merged_trace(const IterationReport& sim, const IterationReport& run,
                                           const Cluster* cluster, const std::string& title,
                                           const std::string& file,
                                           const std::string& option) const {
  if (!report.have_ops || !graph || !cluster)
    throw InfeasibleError(option + ": cannot build the merged timeline: " + report.ops_note);
  write_file_atomically(file, render_merged_trace(*graph, sim, run, rank_labels(*cluster), title));
}

}  // namespace cephalo::traces

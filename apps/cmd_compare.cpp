// `cephalo compare SIM.json RUN.json`: how far the simulator is from a measured run of the same
// plan. Both files use the shared SimResult/RunResult schema (traces/report.hpp). Reports:
//  * end to end: iteration time, samples/s, tokens/s;
//  * per rank: peak memory, compute-stream busy time, communication time;
//  * per op class (forward, backward, recompute, all-gather, reduce-scatter, all-reduce, copies,
//    optimizer): Σ of op durations over all ranks, simulated vs measured. Needs per-op timings
//    in both files (`simulate --ops`, `run --json`) and the graph they are keyed by
//    (`--scenario` and `--plan`: op ids are stable for a given plan and scenario);
//  * `--trace F`: one Perfetto trace with the simulated and the measured timeline of every rank
//    as adjacent processes ("rank 0 · sim", "rank 0 · measured", "rank 1 · sim", ...).
// Error convention everywhere: (simulated − measured) / measured; null when nothing was
// measured. The same record is printed as tables or, with --json, as JSON.
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <optional>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

using traces::IterationReport;
using traces::OpKind;

// The keys of the shared schema. A RunResult may carry more at the top level (per-step losses,
// emulation notes); compare reads only these and ignores the rest, so it accepts both files.
const std::array<const char*, 10> kSchemaKeys = {
    "source", "iteration_time_s", "samples_per_s", "tokens_per_s", "mfu",
    "oom",    "oom_detail",       "events",        "ranks",        "ops"};

IterationReport load_result(const std::string& file) {
  Json j = read_json_file(file);
  if (!j.is_object()) {
    JsonReader r(j, file);
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
  JsonReader r(slim, file, path);
  return traces::parse_iteration_report(r);
}

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

// Op classes of the per-class table, in print order.
enum class OpClass {
  Forward,
  Backward,
  Recompute,
  AllGather,
  ReduceScatter,
  AllReduce,
  Copies,
  Optimizer
};
constexpr int kNumClasses = 8;
const char* class_name(OpClass c) {
  switch (c) {
    case OpClass::Forward:
      return "forward";
    case OpClass::Backward:
      return "backward";
    case OpClass::Recompute:
      return "recompute";
    case OpClass::AllGather:
      return "all-gather";
    case OpClass::ReduceScatter:
      return "reduce-scatter";
    case OpClass::AllReduce:
      return "all-reduce";
    case OpClass::Copies:
      return "copies";
    case OpClass::Optimizer:
      return "optimizer";
  }
  return "?";
}
OpClass class_of(OpKind k) {
  switch (k) {
    case OpKind::Forward:
      return OpClass::Forward;
    case OpKind::Backward:
      return OpClass::Backward;
    case OpKind::Recompute:
      return OpClass::Recompute;
    case OpKind::OptimizerStep:
      return OpClass::Optimizer;
    case OpKind::AllGather:
    case OpKind::AllGatherV:
      return OpClass::AllGather;
    case OpKind::ReduceScatter:
    case OpKind::ReduceScatterV:
      return OpClass::ReduceScatter;
    case OpKind::AllReduce:
      return OpClass::AllReduce;
    case OpKind::CopyD2H:
    case OpKind::CopyH2D:
      return OpClass::Copies;
  }
  return OpClass::Forward;
}

struct ClassTotals {
  std::array<double, kNumClasses> seconds{};
  std::array<int, kNumClasses> ops{};
};

// Per-op start/end in ns (-1 = absent) over the graph's ids; ids outside the graph are errors.
void op_times(const IterationReport& r, const traces::TrainingGraph& g, const std::string& file,
              std::vector<std::int64_t>& start, std::vector<std::int64_t>& end) {
  start.assign(g.num_ops(), -1);
  end.assign(g.num_ops(), -1);
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const auto& o = r.ops[i];
    std::string where = ".ops[" + std::to_string(i) + "]";
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

// Σ op durations per class. A collective is counted from the arrival of its last participant
// (the simulator's semantics: it starts when every member has reached it), so time a rank
// spends blocked waiting for a slower peer is not charged to the transfer; that waiting shows
// up as idle / exposed communication in the per-rank table instead.
ClassTotals class_totals(const traces::TrainingGraph& g, const std::vector<std::int64_t>& start,
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
    int c = static_cast<int>(class_of(g.op(static_cast<traces::OpId>(id)).kind));
    t.seconds[c] += static_cast<double>(end[id] - from[id]) * 1e-9;
    t.ops[c] += 1;
  }
  return t;
}

// Renders one timeline with the shared writer, then renumbers its processes so the simulated
// and the measured lanes of each rank sit next to each other (pid 2r and 2r+1).
void append_timeline(Json& events, const traces::TrainingGraph& g,
                     const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& end,
                     const std::vector<std::string>& labels, int side, const std::string& tag) {
  traces::TraceInput in;
  in.graph = &g;
  in.start_ns = &start;
  in.end_ns = &end;
  in.rank_labels = labels;
  in.title = tag;
  Json one = Json::parse(traces::render_chrome_trace(in));
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

struct Options {
  std::string sim_file;
  std::string run_file;
  std::string scenario_file;
  std::string plan_file;
  std::string trace_file;
  bool json = false;
};

void run_compare(const Options& opt) {
  IterationReport sim = load_result(opt.sim_file);
  IterationReport run = load_result(opt.run_file);
  if (sim.ranks.size() != run.ranks.size())
    throw ValidationError(opt.run_file, "$.ranks", std::to_string(run.ranks.size()) + " ranks",
                          std::to_string(sim.ranks.size()) + " ranks like " + opt.sim_file +
                              " (both results must come from the same plan)");
  if (sim.oom)
    std::cerr << "warning: " << opt.sim_file
              << " is an out-of-memory verdict; its timings are not a prediction\n";

  Json record = Json::object();
  record["simulated"] = opt.sim_file;
  record["measured"] = opt.run_file;
  record["simulated_source"] = sim.source;
  record["measured_source"] = run.source;
  record["error_definition"] = "(simulated - measured) / measured";

  struct Metric {
    const char* name;
    double s, m;
  };
  std::vector<Metric> metrics = {{"iteration_time_s", sim.iteration_time_s, run.iteration_time_s},
                                 {"samples_per_s", sim.samples_per_s, run.samples_per_s},
                                 {"tokens_per_s", sim.tokens_per_s, run.tokens_per_s}};
  Json e2e = Json::array();
  for (const Metric& m : metrics)
    e2e.push_back({{"metric", m.name},
                   {"simulated", m.s},
                   {"measured", m.m},
                   {"error", error_json(rel_error(m.s, m.m))}});
  record["end_to_end"] = e2e;

  Json ranks = Json::array();
  double worst_mem = 0;
  for (std::size_t i = 0; i < sim.ranks.size(); ++i) {
    const auto& s = sim.ranks[i];
    const auto& m = run.ranks[i];
    auto mem_err = rel_error(s.peak_memory_bytes, m.peak_memory_bytes);
    if (mem_err) worst_mem = std::max(worst_mem, std::abs(*mem_err));
    ranks.push_back({{"rank", s.rank},
                     {"gpu", s.gpu},
                     {"simulated_peak_memory_bytes", s.peak_memory_bytes},
                     {"measured_peak_memory_bytes", m.peak_memory_bytes},
                     {"peak_memory_error", error_json(mem_err)},
                     {"simulated_compute_s", s.compute_s},
                     {"measured_compute_s", m.compute_s},
                     {"compute_error", error_json(rel_error(s.compute_s, m.compute_s))},
                     {"simulated_comm_s", s.comm_s},
                     {"measured_comm_s", m.comm_s},
                     {"comm_error", error_json(rel_error(s.comm_s, m.comm_s))},
                     {"simulated_idle_s", s.idle_s},
                     {"measured_idle_s", m.idle_s}});
  }
  record["ranks"] = ranks;

  std::optional<traces::TrainingGraph> graph;
  std::vector<std::string> labels;
  if (!opt.scenario_file.empty() || !opt.plan_file.empty()) {
    if (opt.scenario_file.empty() || opt.plan_file.empty())
      throw CLI::ValidationError("--scenario and --plan", "give both (the graph the op ids key)");
    Scenario scenario = costmodels::load_scenario(opt.scenario_file);
    Plan plan = load_plan(opt.plan_file);
    validate_plan_for(plan, scenario, opt.plan_file);
    graph = traces::build_training_graph(plan, scenario);
    for (const auto& rd : scenario.cluster.ranks())
      labels.push_back(rd.slot->spec.name + ", node " + std::to_string(rd.node) +
                       (rd.slot->slowdown != 1.0 ? ", emulated x" + fixed(rd.slot->slowdown, 2)
                                                 : std::string()));
    if (graph->num_ranks() != static_cast<int>(sim.ranks.size()))
      throw ValidationError(opt.sim_file, "$.ranks", std::to_string(sim.ranks.size()) + " ranks",
                            std::to_string(graph->num_ranks()) + " ranks like " + opt.plan_file);
  }

  check_outputs({{"--trace", opt.trace_file}});  // every input is read (output_file.hpp)
  std::vector<std::int64_t> s_start, s_end, m_start, m_end;
  bool have_ops = graph && !sim.ops.empty() && !run.ops.empty();
  std::string ops_note;
  if (!graph)
    ops_note = "per-op-class table needs --scenario and --plan (the graph the op ids refer to)";
  else if (sim.ops.empty())
    ops_note = opt.sim_file + " has no per-op timings (rerun `cephalo simulate --ops --json`)";
  else if (run.ops.empty())
    ops_note = opt.run_file + " has no per-op timings";
  if (have_ops) {
    op_times(sim, *graph, opt.sim_file, s_start, s_end);
    op_times(run, *graph, opt.run_file, m_start, m_end);
    ClassTotals st = class_totals(*graph, s_start, s_end);
    ClassTotals mt = class_totals(*graph, m_start, m_end);
    Json classes = Json::array();
    for (int c = 0; c < kNumClasses; ++c) {
      if (st.ops[c] == 0 && mt.ops[c] == 0) continue;
      classes.push_back({{"class", class_name(static_cast<OpClass>(c))},
                         {"simulated_ops", st.ops[c]},
                         {"measured_ops", mt.ops[c]},
                         {"simulated_s", st.seconds[c]},
                         {"measured_s", mt.seconds[c]},
                         {"error", error_json(rel_error(st.seconds[c], mt.seconds[c]))}});
    }
    record["op_classes"] = classes;
    // The ops whose simulated and measured durations differ most: where to look first.
    struct Diff {
      traces::OpId id;
      double sim_s, run_s;
    };
    std::vector<Diff> diffs;
    for (std::size_t id = 0; id < graph->num_ops(); ++id)
      if (s_start[id] >= 0 && m_start[id] >= 0)
        diffs.push_back({static_cast<traces::OpId>(id),
                         static_cast<double>(s_end[id] - s_start[id]) * 1e-9,
                         static_cast<double>(m_end[id] - m_start[id]) * 1e-9});
    const std::size_t top = std::min<std::size_t>(5, diffs.size());
    std::partial_sort(diffs.begin(), diffs.begin() + static_cast<std::ptrdiff_t>(top), diffs.end(),
                      [](const Diff& a, const Diff& b) {
                        return std::abs(a.run_s - a.sim_s) > std::abs(b.run_s - b.sim_s);
                      });
    Json largest = Json::array();
    for (std::size_t i = 0; i < top; ++i)
      largest.push_back({{"op", diffs[i].id},
                         {"name", graph->op_name(diffs[i].id)},
                         {"kind", traces::to_string(graph->op(diffs[i].id).kind)},
                         {"simulated_s", diffs[i].sim_s},
                         {"measured_s", diffs[i].run_s}});
    record["largest_differences"] = largest;
  } else {
    record["op_classes"] = nullptr;
    record["op_classes_note"] = ops_note;
  }

  auto it_err = rel_error(sim.iteration_time_s, run.iteration_time_s);
  record["summary"] = {{"iteration_time_error", error_json(it_err)},
                       {"max_abs_peak_memory_error", worst_mem}};

  if (!opt.trace_file.empty()) {
    if (!have_ops) throw InfeasibleError("--trace: cannot build the merged timeline: " + ops_note);
    Json events = Json::array();
    append_timeline(events, *graph, s_start, s_end, labels, 0, "sim");
    append_timeline(events, *graph, m_start, m_end, labels, 1, "measured");
    Json trace = {
        {"displayTimeUnit", "ms"},
        {"otherData", {{"title", "simulated vs measured: " + opt.sim_file + " / " + opt.run_file}}},
        {"traceEvents", std::move(events)}};
    write_file_atomically(opt.trace_file, trace.dump() + "\n");
    record["trace"] = opt.trace_file;
  }

  if (opt.json) {
    std::cout << record.dump(2) << "\n";
    return;
  }
  std::cout << "simulated " << opt.sim_file << " (" << sim.source << ")  vs  measured "
            << opt.run_file << " (" << run.source << ")\n"
            << "error = (simulated - measured) / measured\n\n";
  TextTable t({"metric", "simulated", "measured", "error"});
  t.add_row({"iteration time", format_seconds(sim.iteration_time_s),
             format_seconds(run.iteration_time_s), error_text(it_err)});
  t.add_row({"samples/s", fixed(sim.samples_per_s, 2), fixed(run.samples_per_s, 2),
             error_text(rel_error(sim.samples_per_s, run.samples_per_s))});
  t.add_row({"tokens/s", fixed(sim.tokens_per_s, 0), fixed(run.tokens_per_s, 0),
             error_text(rel_error(sim.tokens_per_s, run.tokens_per_s))});
  std::cout << t.render() << "\n";

  TextTable rt({"rank", "gpu", "peak mem sim", "peak mem run", "error", "compute sim",
                "compute run", "error", "comm sim", "comm run"});
  rt.set_align(1, TextTable::Align::Left);
  for (std::size_t i = 0; i < sim.ranks.size(); ++i) {
    const auto& s = sim.ranks[i];
    const auto& m = run.ranks[i];
    rt.add_row({std::to_string(s.rank), s.gpu, format_bytes(s.peak_memory_bytes),
                format_bytes(m.peak_memory_bytes),
                error_text(rel_error(s.peak_memory_bytes, m.peak_memory_bytes)),
                format_seconds(s.compute_s), format_seconds(m.compute_s),
                error_text(rel_error(s.compute_s, m.compute_s)), format_seconds(s.comm_s),
                format_seconds(m.comm_s)});
  }
  std::cout << rt.render() << "\n";

  if (have_ops) {
    TextTable ct({"op class", "ops sim", "ops run", "Σ time sim", "Σ time run", "error"});
    for (const Json& c : record["op_classes"])
      ct.add_row({c["class"].get<std::string>(), std::to_string(c["simulated_ops"].get<int>()),
                  std::to_string(c["measured_ops"].get<int>()),
                  format_seconds(c["simulated_s"].get<double>()),
                  format_seconds(c["measured_s"].get<double>()),
                  c["error"].is_null() ? "-" : error_text(c["error"].get<double>())});
    std::cout << "per op class (Σ over ranks of op durations; collectives from the last "
                 "participant's arrival)\n"
              << ct.render();
    TextTable lt({"largest differences", "kind", "sim", "run"});
    for (const Json& d : record["largest_differences"])
      lt.add_row({d["name"].get<std::string>(), d["kind"].get<std::string>(),
                  format_seconds(d["simulated_s"].get<double>()),
                  format_seconds(d["measured_s"].get<double>())});
    std::cout << "\n(op durations as recorded, collectives including any wait)\n" << lt.render();
  } else {
    std::cout << "per op class: " << ops_note << "\n";
  }
  if (!opt.trace_file.empty()) std::cout << "\nmerged trace written to " << opt.trace_file << "\n";
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("compare",
                                 "Compare a simulated result with a measured run of the same plan");
  cmd->add_option("SIM", opt->sim_file, "SimResult JSON (cephalo simulate --json --ops)")
      ->required();
  cmd->add_option("RUN", opt->run_file, "RunResult JSON (cephalo run --json)")->required();
  cmd->add_option("--scenario", opt->scenario_file,
                  "scenario of the plan (needed for the per-op-class table and --trace)");
  cmd->add_option("--plan", opt->plan_file, "the plan both results ran");
  cmd->add_option("--trace", opt->trace_file,
                  "write a Perfetto trace with simulated and measured lanes side by side");
  cmd->add_flag("--json", opt->json, "print the comparison record as JSON");
  cmd->callback([opt] { run_compare(*opt); });
}

}  // namespace cephalo::cli

// A simulation against a profiler trace (trace_compare.hpp), and the trace's own record.
#include "cephalo/traces/trace_compare.hpp"

#include <algorithm>
#include <cmath>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/traces/shard_layout.hpp"

namespace cephalo::traces {

// Named, not anonymous: the library compiles as unity files.
namespace trace_compare_detail {

std::string percent(std::optional<double> e) {
  if (!e) return "-";
  std::string t = fixed(100 * *e, 1);
  if (*e > 0) t.insert(t.begin(), '+');
  return t + " %";
}

// The compute capability's generation, as the GPU catalog names it ("" when unknown).
std::string generation(int major, int minor) {
  if (major == 6) return "pascal";
  if (major == 7) return minor >= 5 ? "turing" : "volta";
  if (major == 8) return minor == 9 ? "ada" : "ampere";
  if (major == 9) return "hopper";
  if (major == 10 || major == 12) return "blackwell";
  return "";
}

}  // namespace trace_compare_detail

std::array<double, kNumTraceClasses> simulated_class_seconds(const TrainingGraph& graph,
                                                             const IterationReport& sim, int rank) {
  std::array<std::vector<std::pair<double, double>>, kNumTraceClasses> v;
  for (const auto& t : sim.ops) {
    if (t.id >= graph.num_ops()) continue;
    const Op& op = graph.op(static_cast<OpId>(t.id));
    if (op.rank != rank) continue;
    int c = -1;
    switch (op.kind) {
      case OpKind::Forward:
        c = static_cast<int>(TraceClass::Forward);
        break;
      case OpKind::Backward:
      case OpKind::Recompute:
      case OpKind::WeightGradient:
        c = static_cast<int>(TraceClass::Backward);
        break;
      case OpKind::OptimizerStep:
        c = static_cast<int>(TraceClass::Optimizer);
        break;
      case OpKind::CopyD2H:
      case OpKind::CopyH2D:
        break;
      default:
        c = static_cast<int>(TraceClass::Collective);
    }
    if (c >= 0) v[c].push_back({t.start_s, t.end_s});
  }
  std::array<double, kNumTraceClasses> out{};
  for (int c = 0; c < kNumTraceClasses; ++c) out[c] = union_length_s(v[c]);
  return out;
}

int check_trace_for(const KinetoTrace& trace, const TraceStep& step, const Scenario& scenario,
                    const Plan* plan, std::vector<std::string>& notes) {
  const int ranks = scenario.cluster.num_ranks();
  if (trace.world_size && *trace.world_size != ranks)
    throw ValidationError(
        trace.file, "$.distributedInfo.world_size", std::to_string(*trace.world_size),
        "the scenario's " + std::to_string(ranks) + " ranks (a trace of a run on this cluster)");
  const int rank = trace.rank.value_or(0);
  if (rank >= ranks)
    throw ValidationError(
        trace.file, "$.distributedInfo.rank", std::to_string(rank),
        "a rank of the scenario's cluster (0.." + std::to_string(ranks - 1) + ")");
  const DeviceSpec& gpu = scenario.cluster.ranks()[static_cast<std::size_t>(rank)].slot->spec;
  const std::string who = "the scenario's rank " + std::to_string(rank) + " (" + gpu.name + ")";
  if (gpu.kind == "cpu") {
    if (trace.kernels > 0)
      throw ValidationError(trace.file, "$.traceEvents",
                            std::to_string(trace.kernels) + " GPU kernels",
                            "a CPU run's trace: " + who + " is a CPU");
  } else {
    if (trace.kernels == 0)
      throw ValidationError(
          trace.file, "$.traceEvents", "no GPU kernels",
          "the kernels of a GPU run (profile with ProfilerActivity.CUDA): " + who + " is a GPU");
    const int id = trace.kernel_devices.empty() ? 0 : *trace.kernel_devices.begin();
    const auto d = std::find_if(trace.devices.begin(), trace.devices.end(),
                                [&](const TraceDevice& x) { return x.id == id; });
    if (d == trace.devices.end()) {
      notes.push_back("the trace has no deviceProperties for device " + std::to_string(id) +
                      ": its GPU could not be checked against " + gpu.name);
    } else {
      const std::string path =
          "$.deviceProperties[" + std::to_string(d - trace.devices.begin()) + "]";
      const std::string dev = "\"" + clip(d->name, 80) + "\"";
      if (d->memory_bytes > 0 && gpu.memory_bytes > 0 &&
          std::abs(d->memory_bytes / gpu.memory_bytes - 1) > 0.15)
        throw ValidationError(
            trace.file, path + ".totalGlobalMem", dev + " with " + format_bytes(d->memory_bytes),
            who + " with " + format_bytes(gpu.memory_bytes) + " (a trace from another GPU?)");
      if (d->sm_count > 0 && gpu.sm_count > 0 && d->sm_count != gpu.sm_count)
        throw ValidationError(
            trace.file, path + ".numSms", dev + " with " + std::to_string(d->sm_count) + " SMs",
            who + " with " + std::to_string(gpu.sm_count) + " SMs (a trace from another GPU?)");
      const std::string g = trace_compare_detail::generation(d->compute_major, d->compute_minor);
      if (!g.empty() && !gpu.architecture.empty() && g != gpu.architecture)
        throw ValidationError(trace.file, path + ".computeMajor",
                              dev + ", compute capability " + std::to_string(d->compute_major) +
                                  "." + std::to_string(d->compute_minor) + " (" + g + ")",
                              who + ", a " + gpu.architecture + " GPU (a trace from another GPU?)");
    }
  }
  const ModelSpec& m = scenario.job.model;
  if (plan && plan->has_split()) {
    notes.push_back("the model's layer count is not checked against a split plan's stage");
  } else if (m.norm != "layernorm" || step.layer_norms == 0) {
    notes.push_back("the model's layer count could not be checked (" +
                    std::string(m.norm != "layernorm" ? "the model has no LayerNorm"
                                                      : "no aten::layer_norm inside the step's "
                                                        "forward ranges") +
                    ")");
  } else {
    const int per_pass = 2 * m.num_layers + 1;
    if (step.layer_norms % per_pass != 0)
      throw ValidationError(trace.file, "$.traceEvents",
                            std::to_string(step.layer_norms) + " aten::layer_norm calls in " +
                                step.name + "'s forward",
                            "a multiple of " + std::to_string(per_pass) +
                                " (2 per layer + 1: " + "the scenario's " + m.name + " has " +
                                std::to_string(m.num_layers) +
                                " layers; a trace of another model?)");
    if (step.forward_passes > 0 && step.layer_norms / per_pass != step.forward_passes)
      notes.push_back(std::to_string(step.layer_norms / per_pass) +
                      " forward passes of the model by their layer norms, " +
                      std::to_string(step.forward_passes) + " forward ranges annotated");
  }
  return rank;
}

TraceComparison compare_trace(const IterationReport& sim, const std::string& sim_file,
                              const KinetoTrace& trace, const std::string& step_name,
                              const Scenario* scenario, const Plan* plan,
                              const TrainingGraph* graph, const std::string& source,
                              const std::string& step_option) {
  if (sim.source != "sim")
    throw ValidationError(sim_file, "$.source", "\"" + sim.source + "\"",
                          "\"sim\" (a SimResult from cephalo simulate --json) as the first file");
  if (!(sim.iteration_time_s > 0))
    throw ValidationError(sim_file, "$.iteration_time_s", shortest(sim.iteration_time_s),
                          "a positive iteration time");
  TraceComparison c;
  c.simulated_file = sim_file;
  c.trace_file = trace.file;
  const TraceStep& step =
      step_name.empty() ? trace.median_step() : trace.step(step_name, source, step_option);
  c.step = step.name;
  c.steps = static_cast<int>(trace.steps.size());
  c.median_step_s = trace.median_step().duration_s;
  c.measured_step_s = step.duration_s;
  c.simulated_iteration_s = sim.iteration_time_s;
  c.outside_classes_s = step.outside_classes_s;
  if (c.measured_step_s > 0)
    c.iteration_error = (c.simulated_iteration_s - c.measured_step_s) / c.measured_step_s;
  c.notes = trace.notes;
  if (scenario) c.rank = check_trace_for(trace, step, *scenario, plan, c.notes);
  if (!graph) {
    c.classes_note = "per class needs --scenario and --plan";
  } else if (sim.ops.empty()) {
    c.classes_note = "the SimResult has no op records (cephalo simulate --json --ops)";
  } else {
    c.have_classes = true;
    const auto simulated = simulated_class_seconds(*graph, sim, c.rank);
    for (int k = 0; k < kNumTraceClasses; ++k) {
      TraceClassComparison row;
      row.trace_class = static_cast<TraceClass>(k);
      row.simulated_s = simulated[k];
      row.measured_s = step.seconds[k];
      if (row.simulated_s <= 0 && row.measured_s <= 0) continue;
      if (row.measured_s > 0) row.error = (row.simulated_s - row.measured_s) / row.measured_s;
      c.classes.push_back(row);
    }
  }
  return c;
}

PlannedTraceComparison compare_trace_planned(const IterationReport& sim,
                                             const std::string& sim_file, const KinetoTrace& trace,
                                             const std::string& step, const Scenario* scenario,
                                             const Plan* plan, const std::string& plan_label,
                                             const std::string& source, const std::string& pair,
                                             const std::string& step_option) {
  if ((scenario == nullptr) != (plan == nullptr))
    throw ValidationError(source, "",
                          scenario ? "a scenario without a plan" : "a plan without a scenario",
                          pair + ": both or neither");
  std::optional<TrainingGraph> graph;
  if (scenario) {
    check_plan_for(*plan, *scenario, plan_label);
    graph = build_training_graph(*plan, *scenario);
  }
  PlannedTraceComparison out;
  out.comparison = compare_trace(sim, sim_file, trace, step, scenario, plan,
                                 graph ? &*graph : nullptr, source, step_option);
  out.record = to_json(out.comparison);
  out.record["trace"] = to_json(trace);
  out.text = render_kineto_trace(trace) + render_trace_comparison(out.comparison);
  return out;
}

Json to_json(const TraceComparison& c) {
  Json classes = Json::array();
  for (const auto& r : c.classes) {
    Json j = {{"class", to_string(r.trace_class)},
              {"simulated_s", r.simulated_s},
              {"measured_s", r.measured_s}};
    j["error"] = r.error ? Json(*r.error) : Json(nullptr);
    classes.push_back(j);
  }
  Json j = {{"simulated_file", c.simulated_file},
            {"trace_file", c.trace_file},
            {"step", c.step},
            {"rank", c.rank},
            {"simulated_iteration_s", c.simulated_iteration_s},
            {"measured_step_s", c.measured_step_s},
            {"median_step_s", c.median_step_s},
            {"steps", c.steps},
            {"outside_classes_s", c.outside_classes_s},
            {"classes", classes},
            {"notes", c.notes}};
  j["iteration_error"] = c.iteration_error ? Json(*c.iteration_error) : Json(nullptr);
  if (!c.have_classes) j["classes_note"] = c.classes_note;
  return j;
}

std::string render_trace_comparison(const TraceComparison& c) {
  std::string out = "trace " + c.trace_file + ", " + c.step + " of " + std::to_string(c.steps) +
                    " step(s), rank " + std::to_string(c.rank) + "\n";
  TextTable t({"", "simulated", "measured", "error"});
  t.add_row({"iteration", format_seconds(c.simulated_iteration_s),
             format_seconds(c.measured_step_s), trace_compare_detail::percent(c.iteration_error)});
  for (const auto& r : c.classes)
    t.add_row({to_string(r.trace_class), format_seconds(r.simulated_s),
               format_seconds(r.measured_s), trace_compare_detail::percent(r.error)});
  out += t.render();
  out += "median step " + format_seconds(c.median_step_s) + "; outside every class in " + c.step +
         ": " + format_seconds(c.outside_classes_s) + "\n";
  if (!c.have_classes) out += "per class: " + c.classes_note + "\n";
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  return out;
}

Json to_json(const TraceStep& s) {
  Json classes = Json::object();
  for (int k = 0; k < kNumTraceClasses; ++k)
    classes[to_string(static_cast<TraceClass>(k))] = s.seconds[k];
  Json coll = Json::array();
  for (const auto& c : s.collectives)
    coll.push_back({{"kind", c.kind}, {"events", c.events}, {"seconds", c.seconds}});
  return {{"name", s.name},
          {"start_s", s.start_s},
          {"duration_s", s.duration_s},
          {"seconds", classes},
          {"outside_classes_s", s.outside_classes_s},
          {"gpu_busy_s", s.gpu_busy_s},
          {"forward_passes", s.forward_passes},
          {"layer_norms", s.layer_norms},
          {"collectives", coll}};
}

Json to_json(const KinetoTrace& t) {
  Json devices = Json::array();
  for (const auto& d : t.devices)
    devices.push_back({{"id", d.id},
                       {"name", d.name},
                       {"memory_bytes", d.memory_bytes},
                       {"compute_capability",
                        std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                       {"sm_count", d.sm_count}});
  Json steps = Json::array();
  for (const auto& s : t.steps) steps.push_back(to_json(s));
  Json unclassified = Json::array();
  for (const auto& u : t.unclassified)
    unclassified.push_back(
        {{"category", u.category}, {"events", u.events}, {"seconds", u.seconds}});
  Json unknown = Json::object();
  for (const auto& [cat, n] : t.unknown_categories) unknown[cat] = n;
  Json j = {{"file", t.file},
            {"format", t.format},
            {"gzip", t.gzip},
            {"devices", devices},
            {"events", t.events},
            {"cpu_ranges", t.cpu_ranges},
            {"kernels", t.kernels},
            {"nccl_kernels", t.nccl_kernels},
            {"kernels_without_launch", t.kernels_without_launch},
            {"times_from", t.times_from_kernels ? "gpu kernels" : "cpu ranges"},
            {"steps", steps},
            {"unclassified", unclassified},
            {"unknown_categories", unknown},
            {"notes", t.notes}};
  j["rank"] = t.rank ? Json(*t.rank) : Json(nullptr);
  j["world_size"] = t.world_size ? Json(*t.world_size) : Json(nullptr);
  return j;
}

std::string render_kineto_trace(const KinetoTrace& t) {
  std::string out = t.file + ": " + std::to_string(t.events) + " events (" +
                    std::to_string(t.cpu_ranges) + " CPU ranges, " + std::to_string(t.kernels) +
                    " GPU kernels, " + std::to_string(t.nccl_kernels) +
                    " NCCL); class times from " +
                    (t.times_from_kernels ? "GPU kernels" : "CPU ranges") + "\n";
  std::vector<std::string> head = {"step",      "duration",    "forward", "backward",
                                   "optimizer", "collectives", "outside"};
  if (t.times_from_kernels) head.push_back("GPU busy");
  TextTable s(head);
  for (const auto& st : t.steps) {
    std::vector<std::string> row = {st.name,
                                    format_seconds(st.duration_s),
                                    format_seconds(st.seconds[0]),
                                    format_seconds(st.seconds[1]),
                                    format_seconds(st.seconds[2]),
                                    format_seconds(st.seconds[3]),
                                    format_seconds(st.outside_classes_s)};
    if (t.times_from_kernels) row.push_back(format_seconds(st.gpu_busy_s));
    s.add_row(row);
  }
  out += s.render();
  for (const auto& u : t.unclassified)
    out += "unclassified: " + std::to_string(u.events) + " " + u.category + " events, " +
           format_seconds(u.seconds) + "\n";
  return out;
}

}  // namespace cephalo::traces

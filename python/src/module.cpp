// `cephalo._cephalo`: the pybind11 layer over the libraries. Every result is the libraries' own
// JSON record (the serialisers the CLI prints) handed to Python as text and decoded there
// (python/cephalo/__init__.py), so a Python record and a CLI record are the same bytes. Long
// calls release the GIL; a sweep's progress callback takes it back for each row.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/layer_ops.hpp"
#include "cephalo/costmodels/model_description.hpp"
#include "cephalo/costmodels/prediction_records.hpp"
#include "cephalo/costmodels/scenario_notices.hpp"
#include "cephalo/planner/input_files.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/stack_fit.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/trace_compare.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace py = pybind11;
using namespace cephalo;

namespace {

// A JSON document given as a file path or as text (a Python dict, dumped); `label` names it
// in messages ("<dict>").
Json document(const std::string& text, const std::string& label) {
  return parse_json_text(text, label);
}

Scenario scenario_from_file(const std::string& file) { return costmodels::load_scenario(file); }

Scenario scenario_from_text(const std::string& text, const std::string& label,
                            const std::string& base_dir) {
  Json j = document(text, label);
  JsonReader r(j, label);
  return parse_scenario(r, costmodels::CatalogLookup::builtin(), base_dir);
}

// With the scenario the plan is for, its rows are counted against the cluster before any sum.
Plan plan_from_file(const std::string& file, const std::optional<Scenario>& scenario) {
  return load_plan(file, scenario ? &*scenario : nullptr);
}

Plan plan_from_text(const std::string& text, const std::string& label,
                    const std::optional<Scenario>& scenario) {
  Json j = document(text, label);
  JsonReader r(j, label);
  return parse_plan(r, scenario ? &*scenario : nullptr);
}

std::string cluster_json(const std::string& text, const std::string& label, bool is_file) {
  if (is_file) return to_json(load_cluster(label, costmodels::CatalogLookup::builtin())).dump();
  Json j = document(text, label);
  JsonReader r(j, label);
  return to_json(parse_cluster(r, costmodels::CatalogLookup::builtin())).dump();
}

std::string job_json(const std::string& text, const std::string& label, bool is_file) {
  Job job;
  if (is_file) {
    job = load_job(label, costmodels::CatalogLookup::builtin());
  } else {
    Json j = document(text, label);
    JsonReader r(j, label);
    job = parse_job(r, costmodels::CatalogLookup::builtin());
  }
  return to_self_contained_json(job).dump();
}

// Columns of a per-op table, by name: what the graph says of each op (name, kind, rank, stream,
// unit, micro-batch, FLOPs, bytes) for the ops a record lists, in the record's order. Plain
// vectors, so the table is built without the GIL and converted once it is held again.
using Column =
    std::variant<std::vector<std::string>, std::vector<std::int64_t>, std::vector<double>>;
using Columns = std::map<std::string, Column>;

Columns op_columns(const traces::TrainingGraph& graph, const std::vector<traces::OpTiming>& ops) {
  std::vector<std::string> name, kind, stream;
  std::vector<std::int64_t> rank, unit, micro_batch, micro_batch_samples;
  std::vector<double> flops, bytes;
  for (const auto& timing : ops) {
    if (timing.id >= graph.num_ops())
      throw ValidationError(
          "<record>", "ops[].id", std::to_string(timing.id),
          "an op id of the plan's graph (below " + std::to_string(graph.num_ops()) + ")");
    const traces::Op& op = graph.op(timing.id);
    name.push_back(graph.op_name(timing.id));
    kind.push_back(traces::to_string(op.kind));
    stream.push_back(traces::to_string(op.stream));
    rank.push_back(op.rank);
    unit.push_back(op.unit);
    micro_batch.push_back(op.micro_batch);
    micro_batch_samples.push_back(op.micro_batch_size);
    flops.push_back(op.flops);
    bytes.push_back(op.bytes);
  }
  return {{"name", std::move(name)},
          {"kind", std::move(kind)},
          {"stream", std::move(stream)},
          {"rank", std::move(rank)},
          {"unit", std::move(unit)},
          {"micro_batch", std::move(micro_batch)},
          {"micro_batch_samples", std::move(micro_batch_samples)},
          {"flops", std::move(flops)},
          {"bytes", std::move(bytes)}};
}

// A count keyword: None leaves it open (0 to the planner); a given value must be positive, as
// the CLI's flags require.
int positive_or_open(std::optional<int> value, const char* keyword, const char* what) {
  if (value && *value < 1)
    throw ValidationError("arguments", keyword, std::to_string(*value),
                          std::string("a positive number of ") + what);
  return value.value_or(0);
}

// What `cephalo simulate --json [--ops]` prints, byte for byte, with the per-op columns of the
// ops it lists (empty without ops) and the notes it prints on stderr (sim::replay_notices); with
// a trace file, the Chrome/Perfetto trace `simulate --trace` writes, through the same calls.
std::tuple<std::string, Columns, std::vector<std::string>> simulate_json(
    const Scenario& given, const Plan& plan, const std::string& plan_label, bool ops,
    const std::string& compute_model, bool link_sharing, const std::string& queue,
    const std::string& trace) {
  sim::SimOptions options;
  options.record_ops = ops;
  options.link_sharing = link_sharing;
  options.queue = queue;
  // The plan runs on the nodes it lists (core/plan_nodes.hpp), as the CLI's `simulate`.
  const Scenario scenario = scenario_for_plan(given, plan, plan_label);
  // The CLI's sequence (checks, cost models, the trace's location, replay, warnings).
  auto run =
      sim::simulate_checked(scenario, plan, plan_label, compute_model, options, {"trace", trace});
  const auto& replay = run.replay;
  const sim::SimResult& result = replay.result;
  if (!trace.empty()) sim::write_simulation_trace(run, scenario, trace);
  Columns columns;
  if (ops) columns = op_columns(*replay.graph, result.report.ops);
  return {traces::render_json(result.report), std::move(columns), sim::replay_notices(run)};
}

// The per-op columns of a record's ops (a SimResult or a RunResult of `cephalo run`, whose op
// ids are the same graph's), from the scenario and the plan that ran.
Columns op_table(const Scenario& given, const Plan& plan, const std::string& plan_label,
                 const std::string& record_text) {
  const Scenario scenario = scenario_for_plan(given, plan, plan_label);
  traces::check_plan_for(plan, scenario, plan_label);
  Json j = document(record_text, "<record>");
  JsonReader r(j, "<record>");
  const auto report = traces::parse_iteration_report(r);
  auto models = costmodels::make_cost_models(scenario, "auto");
  return op_columns(traces::build_training_graph(plan, scenario, models.comm.get()), report.ops);
}

traces::IterationReport report_from(const std::string& text, const std::string& label,
                                    bool is_file) {
  if (is_file) return traces::load_result(label);
  Json j = document(text, label);
  JsonReader r(j, label);
  return traces::parse_iteration_report(r);
}

// `cephalo compare --json` and the warning it prints on stderr only (the implementation sides
// differ; the record's own warnings are in it); with `trace`, the merged timeline `compare
// --trace` writes. A measured file that is a PyTorch profiler trace (traces::looks_like_trace,
// as the CLI tells) is compared at its step `step` (`compare SIM TRACE --step`).
std::pair<std::string, std::vector<std::string>> compare_json(
    const std::string& sim_text, const std::string& sim_label, bool sim_is_file,
    const std::string& run_text, const std::string& run_label, bool run_is_file,
    std::optional<Scenario> scenario, const std::optional<Plan>& plan,
    const std::string& plan_label, const std::string& trace, const std::string& step) {
  if (scenario && plan) scenario = scenario_for_plan(*scenario, *plan, plan_label);
  auto sim = report_from(sim_text, sim_label, sim_is_file);
  if (run_is_file) {
    if (const std::string bytes = read_input_file(run_label); traces::looks_like_trace(bytes)) {
      if (!trace.empty())
        throw ValidationError("arguments", "trace", trace,
                              "no merged timeline: it needs a RunResult, not a profiler trace");
      const auto c = traces::compare_trace_planned(
          sim, sim_label, traces::parse_kineto_trace(bytes, run_label), step,
          scenario ? &*scenario : nullptr, plan ? &*plan : nullptr, plan_label, "arguments",
          "scenario and plan", "step");
      return {c.record.dump(2) + "\n", {}};
    }
  }
  if (!step.empty())
    throw ValidationError("arguments", "step", step, "a step only with a profiler trace");
  auto run = report_from(run_text, run_label, run_is_file);
  // The CLI's sequence: the plan's checks, the graph, the comparison, the implementation sides.
  const auto c = traces::compare_planned(sim, sim_label, run, run_label,
                                         scenario ? &*scenario : nullptr, plan ? &*plan : nullptr,
                                         plan_label, "arguments", "scenario and plan");
  check_outputs({{"trace", trace}});
  Json record = c.record();
  if (!trace.empty()) {
    c.write_merged_trace(sim, run, scenario ? &scenario->cluster : nullptr,
                         "simulated vs measured: " + sim_label + " / " + run_label, trace, "trace");
    record["trace"] = trace;
  }
  std::vector<std::string> notices;
  if (const std::string w = c.implementation_warning(); !w.empty())
    notices.push_back("warning: " + w);
  return {record.dump(2) + "\n", std::move(notices)};
}

std::string sweep_json(const std::string& spec_file, std::uint64_t max_mixes,
                       const std::function<void(std::size_t, std::size_t, std::string)>& progress,
                       const std::string& stack_file) {
  const auto input = planner::load_sweep(spec_file, stack_file, max_mixes);
  planner::SweepProgress report;
  if (progress)
    report = [&](std::size_t done, std::size_t total, const planner::SweepRow& row) {
      py::gil_scoped_acquire gil;
      progress(done, total, row.mix);
    };
  const auto rows = planner::run_sweep(input, {}, report);
  return planner::sweep_json(input.spec, rows).dump(2) + "\n";
}

// `cephalo calibrate stack --json`; the stack file written atomically when `output` is given.
// A profiler trace (`trace`, a file: --trace) with its `step` (--step) is the third measurement.
std::string calibrate_stack_json(const Scenario& given, const Plan& plan,
                                 std::optional<double> tokens_per_s, const std::string& run_text,
                                 const std::string& run_label, bool run_is_file,
                                 const std::string& output, const std::string& compute_model,
                                 const std::string& trace, const std::string& step) {
  planner::StackMeasurement m;
  traces::IterationReport run;
  std::optional<traces::KinetoTrace> profiled;
  if (!trace.empty()) {
    profiled = traces::load_kineto_trace(trace);
    m.trace = &*profiled;
    m.trace_step = step;
  } else if (tokens_per_s) {
    m.tokens_per_s = tokens_per_s;
  } else {
    run = report_from(run_text, run_label, run_is_file);
    m.run = &run;
    m.run_file = run_label;
  }
  // The plan runs on the nodes it lists (core/plan_nodes.hpp), as `calibrate stack` reads it.
  const Scenario scenario = scenario_for_plan(given, plan, "plan");
  const auto fit =
      planner::calibrate_stack_to_file(scenario, plan, m, compute_model, output, "output");
  return planner::to_json(fit).dump(2) + "\n";
}

// The record of `cephalo describe WHAT [MODEL] --json`.
std::string describe_json(const std::string& what, const std::string& model) {
  return costmodels::describe(what, model, "arguments").record.dump();
}

// `cephalo predict 3d --json`: the estimate of one split file for the scenario.
std::string split_estimate_json(const Scenario& given, const std::string& split_file,
                                const std::string& activation_checkpointing,
                                const std::string& dp_overlap, bool scatter_gather,
                                const std::string& compute_model, bool backward_at_forward_rate) {
  const Scenario scenario = planner::scenario_for_split_file(given, split_file);
  planner::SplitEstimateRequest request;
  const ModelSplit split = load_model_split_for(split_file, scenario, &request.split_path);
  request.activation_checkpointing = activation_checkpointing;
  request.dp_overlap = dp_overlap;
  request.scatter_gather = scatter_gather;
  request.compute_model = compute_model;
  request.options_source = "arguments";
  request.split_file = split_file;
  request.backward_at_forward_rate = backward_at_forward_rate;
  planner::read_split_plan(request);
  return planner::to_json(planner::estimate_split_request(scenario, split, request)).dump();
}

// Keyword arguments of a Python call: errors name them as they are spelt there.
const costmodels::QueryOrigin kArguments{"arguments", false};

// `cephalo predict layer --json`.
std::string layer_json(const costmodels::LayerQuery& query, bool ops) {
  if (ops) return costmodels::to_json(costmodels::predict_layer_ops(query, kArguments)).dump();
  return costmodels::to_json(costmodels::predict_layer(query, kArguments)).dump();
}

// `cephalo predict memory --json`: the same checks of the plan, then the memory model's terms.
std::string memory_json(const Scenario& given, const Plan& plan, const std::string& plan_label) {
  const Scenario s = scenario_for_plan(given, plan, plan_label);
  traces::check_plan_for(plan, s, plan_label);
  return costmodels::memory_record(s, plan_label, costmodels::predict_plan_memory(s, plan)).dump();
}

// `cephalo predict collective --json`.
std::string collective_json(const Scenario& s, const costmodels::CollectiveQuery& query) {
  return costmodels::to_json(costmodels::predict_collective(s, query, kArguments)).dump();
}

// Raises the Python class of cephalo.errors that mirrors the C++ error kind.
void translate(std::exception_ptr p) {
  auto raise = [](const char* kind, const std::exception& e, py::dict fields) {
    py::gil_scoped_acquire gil;
    py::object cls = py::module_::import("cephalo.errors").attr(kind);
    py::object instance = cls(e.what(), **fields);
    PyErr_SetObject(cls.ptr(), instance.ptr());
  };
  try {
    std::rethrow_exception(p);
  } catch (const ValidationError& e) {
    py::dict f;
    f["file"] = e.file();
    f["json_path"] = e.json_path();
    f["value"] = e.value();
    f["expected"] = e.expected();
    raise("ValidationError", e, f);
  } catch (const IoError& e) {
    raise("IoError", e, py::dict());
  } catch (const NotFoundError& e) {
    raise("NotFoundError", e, py::dict());
  } catch (const InfeasibleError& e) {
    raise("InfeasibleError", e, py::dict());
  } catch (const RuntimeFailure& e) {
    raise("RuntimeFailure", e, py::dict());
  } catch (const Error& e) {
    raise("CephaloError", e, py::dict());
  }
}

}  // namespace

PYBIND11_MODULE(_cephalo, m) {
  m.doc() = "Cephalo's libraries (use the `cephalo` package, which wraps this module)";
  py::register_exception_translator(&translate);
  // Tests only: throws the C++ error of `kind`, so the suite sees every kind cross into its
  // Python class through translate() (RuntimeFailure and the bare Error have no input that
  // reaches them from the public functions).
  m.def("_raise_error_for_test", [](const std::string& kind) {
    if (kind == "ValidationError") throw ValidationError("f.json", "a.b", "1", "a string");
    if (kind == "IoError") throw IoError("io");
    if (kind == "NotFoundError") throw NotFoundError("GPU", "no-such-gpu", {"a100", "h100"});
    if (kind == "InfeasibleError") throw InfeasibleError("infeasible");
    if (kind == "RuntimeFailure") throw RuntimeFailure("runtime");
    if (kind == "CephaloError") throw Error("generic");
    throw std::invalid_argument("unknown kind " + kind);
  });
  using release = py::call_guard<py::gil_scoped_release>;

  m.attr("__version__") = CEPHALO_VERSION;

  // Pickled as its self-contained JSON (the job's architecture included), which reads back to
  // the same scenario in any process; copies are C++ copies.
  auto scenario_text = [](const Scenario& s) { return to_self_contained_json(s).dump(); };
  py::class_<Scenario>(m, "Scenario", R"(A validated scenario (cluster + job), from load_scenario().

name, model (the job's model name), sequence_length (tokens), global_batch (samples per
iteration), num_ranks and gpus (device type per rank). to_json() is its self-contained JSON
(cluster and job inline, the job's resolved architecture as "model_spec"), which
load_scenario(json.loads(...)) reads back; pickle goes through that JSON, copy.copy and
copy.deepcopy copy it, == compares the JSON.)")
      .def_readonly("name", &Scenario::name)
      .def_property_readonly("num_ranks", [](const Scenario& s) { return s.cluster.num_ranks(); })
      .def_property_readonly("model", [](const Scenario& s) { return s.job.model_name; })
      .def_property_readonly("sequence_length",
                             [](const Scenario& s) { return s.job.sequence_length; })
      .def_property_readonly("global_batch", [](const Scenario& s) { return s.job.global_batch; })
      .def_property_readonly("gpus",
                             [](const Scenario& s) {
                               std::vector<std::string> names;
                               for (const auto& r : s.cluster.ranks())
                                 names.push_back(r.slot->spec.name);
                               return names;
                             })
      .def("to_json", scenario_text)
      .def("__repr__",
           [](const Scenario& s) {
             // "4 GPUs (2x L4, RTX-A6000, P40)": counts of each device type in rank order.
             std::vector<std::pair<std::string, int>> counts;
             for (const auto& r : s.cluster.ranks()) {
               if (counts.empty() || counts.back().first != r.slot->spec.name)
                 counts.emplace_back(r.slot->spec.name, 0);
               ++counts.back().second;
             }
             std::string gpus;
             for (const auto& [name, n] : counts)
               gpus += (gpus.empty() ? "" : ", ") + (n > 1 ? std::to_string(n) + "x " : "") + name;
             const int n = s.cluster.num_ranks();
             return "<cephalo.Scenario '" + s.name + "': " + s.job.model_name + ", sequence " +
                    std::to_string(s.job.sequence_length) + ", global batch " +
                    std::to_string(s.job.global_batch) + ", " + std::to_string(n) +
                    (n == 1 ? " GPU (" : " GPUs (") + gpus + ")>";
           })
      .def("__eq__",
           [scenario_text](const Scenario& a, const Scenario& b) {
             return scenario_text(a) == scenario_text(b);
           })
      .def("__copy__", [](const Scenario& s) { return Scenario(s); })
      .def(
          "__deepcopy__", [](const Scenario& s, const py::dict&) { return Scenario(s); },
          py::arg("memo"))
      .def(py::pickle(scenario_text, [](const std::string& text) {
        return scenario_from_text(text, "<pickled scenario>", ".");
      }));
  py::class_<Plan>(m, "Plan", R"(A validated plan, from load_plan() or the record plan() returns.

Per rank: batch and micro_batch in samples, the micro-batch count, the state share (a
fraction); num_ranks, nodes (the scenario's nodes it runs on, None for every node; rank r is
the r-th GPU of those nodes), and to_json() the plan file's text.)")
      .def_property_readonly("num_ranks", [](const Plan& p) { return p.ranks.size(); })
      // The scenario's nodes the plan runs on (its "nodes"); None: every node.
      .def_property_readonly("nodes",
                             [](const Plan& p) -> std::optional<std::vector<int>> {
                               if (p.nodes.empty()) return std::nullopt;
                               return p.nodes;
                             })
      .def("to_json", [](const Plan& p) { return to_json(p).dump(2) + "\n"; });

  m.def("scenario_from_file", &scenario_from_file, py::arg("file"));
  m.def("scenario_from_text", &scenario_from_text, py::arg("text"), py::arg("label"),
        py::arg("base_dir"));
  m.def("plan_from_file", &plan_from_file, py::arg("file"), py::arg("scenario") = py::none());
  m.def("plan_from_text", &plan_from_text, py::arg("text"), py::arg("label"),
        py::arg("scenario") = py::none());
  m.def("cluster_json", &cluster_json, py::arg("text"), py::arg("label"), py::arg("is_file"));
  m.def("job_json", &job_json, py::arg("text"), py::arg("label"), py::arg("is_file"));
  m.def(
      "validate_plan",
      [](const Plan& plan, const Scenario& s, const std::string& label) {
        traces::check_plan_for(plan, scenario_for_plan(s, plan, label), label);
      },
      py::arg("plan"), py::arg("scenario"), py::arg("label"));
  m.def(
      "validate_scenario", [](const Scenario& s) { (void)costmodels::make_cost_models(s, "auto"); },
      py::arg("scenario"), release());
  // What the CLI prints on stderr beside its answer, for the module to raise as warnings
  // (cephalo/__init__.py, _say): a scenario's notices, the network's alone, and the start-up
  // cache's note (an entry that was there but ignored; the CLI prints it as it ends).
  m.def("scenario_notices", [](const Scenario& s) { return costmodels::scenario_notices(s); });
  m.def("cluster_notices",
        [](const Scenario& s) { return costmodels::cluster_notices(s.cluster); });
  m.def("start_up_cache_note", [] { return costmodels::start_up_cache_note(); });
  m.def("strategy_names", [] { return planner::strategy_names(); });
  m.def("compute_sources", [] { return costmodels::compute_sources(); });
  m.def("supported_hf_model_types", [] { return supported_hf_model_types(); });
  m.def(
      "plan_json",
      [](const Scenario& s, const std::string& strategy, const std::string& compute_model,
         const std::string& offload, int max_micro_batch, bool verify, int search_neighbours,
         std::optional<int> micro_batch, const std::string& accumulation,
         const std::string& activation_checkpointing, const std::string& sharding,
         std::optional<int> group_size, const std::string& cephalo_shares,
         bool cephalo_corrected_share_memory, const std::string& parallelism,
         std::optional<int> tensor_parallel, std::optional<int> pipeline_stages,
         std::optional<int> micro_batches, const std::string& pipeline_schedule,
         bool sequence_parallel, bool use_all, const std::vector<std::string>& given) {
        // `cephalo plan`'s request, spelt as keyword arguments in messages.
        planner::PlanRequest r;
        planner::PlannerOptions& o = r.options;
        o.options_source = "arguments";
        o.strategy = strategy;
        o.compute_source = compute_model;
        o.offload = offload;
        o.max_micro_batch = max_micro_batch;
        o.verify_with_simulator = verify;
        o.search_neighbours = search_neighbours;
        o.micro_batch = positive_or_open(micro_batch, "micro_batch", "samples per micro-batch");
        o.group_nodes = positive_or_open(group_size, "group_size", "nodes per sharding group");
        r.accumulation = accumulation;
        r.activation_checkpointing = activation_checkpointing;
        r.sharding = sharding;
        r.cephalo_shares = cephalo_shares;
        r.cephalo_corrected_share_memory = cephalo_corrected_share_memory;
        r.parallelism = parallelism;
        r.tensor_parallel = positive_or_open(tensor_parallel, "tensor_parallel", "TP degree");
        r.pipeline_stages = positive_or_open(pipeline_stages, "pipeline_stages", "pipeline stages");
        r.micro_batches =
            positive_or_open(micro_batches, "micro_batches", "micro-batches per iteration");
        r.pipeline_schedule = pipeline_schedule;
        r.sequence_parallel = sequence_parallel;
        r.use_all = use_all;
        r.given = given;
        // Per rank at any size: the record's frames (ranks_frame) read its "ranks".
        return planner::plan_record(planner::answer_plan(s, r), PlanForm::PerRank).dump(2) + "\n";
      },
      py::arg("scenario"), py::arg("strategy"), py::arg("compute_model"), py::arg("offload"),
      py::arg("max_micro_batch"), py::arg("verify_with_simulator"), py::arg("search_neighbours"),
      py::arg("micro_batch"), py::arg("accumulation"), py::arg("activation_checkpointing"),
      py::arg("sharding"), py::arg("group_size"), py::arg("cephalo_shares"),
      py::arg("cephalo_corrected_share_memory"), py::arg("parallelism"), py::arg("tensor_parallel"),
      py::arg("pipeline_stages"), py::arg("micro_batches"), py::arg("pipeline_schedule"),
      py::arg("sequence_parallel"), py::arg("use_all"), py::arg("given"), release());
  m.def("simulate_json", &simulate_json, py::arg("scenario"), py::arg("plan"),
        py::arg("plan_label"), py::arg("ops"), py::arg("compute_model"), py::arg("link_sharing"),
        py::arg("queue"), py::arg("trace"), release());
  m.def("op_table", &op_table, py::arg("scenario"), py::arg("plan"), py::arg("plan_label"),
        py::arg("record_text"), release());
  m.def("compare_json", &compare_json, release());
  m.def("sweep_json", &sweep_json, py::arg("spec_file"), py::arg("max_mixes"), py::arg("progress"),
        py::arg("stack"), release());
  m.def("calibrate_stack_json", &calibrate_stack_json, py::arg("scenario"), py::arg("plan"),
        py::arg("tokens_per_s"), py::arg("run_text"), py::arg("run_label"), py::arg("run_is_file"),
        py::arg("output"), py::arg("compute_model"), py::arg("trace"), py::arg("step"), release());
  m.def(
      "with_stack",
      [](Scenario s, const std::string& file) {
        set_stack(s.job, file);
        return s;
      },
      py::arg("scenario"), py::arg("file"));
  m.def(
      "stack_json",
      [](const std::string& file) { return to_json(load_stack_calibration(file)).dump(); },
      py::arg("file"));
  m.def("describe_json", &describe_json, py::arg("what"), py::arg("model"));
  // The checkpointing words core accepts, listed for a message ("full, none or selective").
  m.def("checkpointing_words_text", [] { return checkpointing_words_text(" or "); });
  m.def("split_estimate_json", &split_estimate_json, py::arg("scenario"), py::arg("split_file"),
        py::arg("activation_checkpointing"), py::arg("dp_overlap"), py::arg("scatter_gather"),
        py::arg("compute_model"), py::arg("backward_at_forward_rate"), release());
  m.def(
      "check_files",
      [](const std::vector<std::string>& files, const std::optional<Scenario>& scenario) {
        const auto checked = planner::check_input_files(files, scenario);
        return std::make_tuple(checked.lines, checked.invalid, checked.unreadable);
      },
      py::arg("files"), py::arg("scenario"), release());
  m.def("memory_json", &memory_json, py::arg("scenario"), py::arg("plan"), py::arg("plan_label"),
        release());
  m.def(
      "layer_json",
      [](const std::string& gpu, const std::string& model, int seq, const std::string& dtype,
         int micro_batch, const std::string& source, const std::string& attention,
         bool fused_elementwise, bool compiled, const std::string& framework,
         const std::string& flash_kernel, bool ops) {
        return layer_json({gpu, model, seq, dtype, micro_batch, source, attention,
                           fused_elementwise, compiled, framework, flash_kernel},
                          ops);
      },
      py::arg("gpu"), py::arg("model"), py::arg("seq"), py::arg("dtype"), py::arg("micro_batch"),
      py::arg("source"), py::arg("attention"), py::arg("fused_elementwise"), py::arg("compiled"),
      py::arg("framework"), py::arg("flash_kernel"), py::arg("ops"), release());
  m.def(
      "collective_json",
      [](const Scenario& s, const std::string& kind, const std::string& bytes,
         std::optional<std::vector<double>> ranks, std::optional<std::vector<double>> shares,
         const std::string& uneven, const std::string& sweep) {
        return collective_json(s,
                               {kind, bytes, std::move(ranks), std::move(shares), uneven, sweep});
      },
      py::arg("scenario"), py::arg("kind"), py::arg("bytes"), py::arg("ranks"), py::arg("shares"),
      py::arg("uneven"), py::arg("sweep"), release());
}

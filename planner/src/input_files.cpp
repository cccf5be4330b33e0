#include "cephalo/planner/input_files.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/stack_calibration.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cephalo/traces/compare.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/shard_layout.hpp"

namespace cephalo::planner {

namespace {

// Whether the file starts with gzip's magic or is named *.gz: a profiler trace (the only gzip
// input a command reads), read as `calibrate stack --trace` reads it.
bool gzip_named_or_made(const std::string& file) {
  if (traces::named_gzip(file)) return true;
  // Only a regular file is opened here: a FIFO would block the open, and read_json_file refuses
  // what is not a regular file, naming what it is.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  char magic[2] = {0, 0};
  std::ifstream in(file, std::ios::binary);
  return in.read(magic, 2) && static_cast<unsigned char>(magic[0]) == 0x1f &&
         static_cast<unsigned char>(magic[1]) == 0x8b;
}

// A Chrome / Kineto trace's root: {"traceEvents": ...}, or the legacy profiler's bare array of
// events.
bool trace_root(const Json& j) {
  if (j.is_object()) return j.contains("traceEvents");
  return j.is_array() && !j.empty() && j.front().is_object() && j.front().contains("ph");
}

std::string describe_trace(const std::string& file) {
  const traces::KinetoTrace t = traces::load_kineto_trace(file);
  std::string out = "profiler trace, " + std::to_string(t.steps.size()) + " step(s), " +
                    std::to_string(t.kernels) + " GPU kernel(s)";
  for (const auto& note : t.notes) out += "; note: " + note;
  return out;
}

// A split read without a scenario: its stages' ranks are all it knows of the cluster.
std::string describe_split(const ModelSplit& split) {
  if (split.stages.empty())
    return "TP " + std::to_string(split.tensor_parallel) + " x PP 1 over every rank, " +
           to_string(split.sharding) + " sharding";
  int ranks = 0;
  for (const auto& st : split.stages)
    for (int r : st.ranks) ranks = std::max(ranks, r + 1);
  return describe(split, ranks);
}

}  // namespace

std::string check_input_file(const std::string& file, const std::optional<Scenario>& scenario) {
  if (gzip_named_or_made(file)) return describe_trace(file);
  Json j = read_json_file(file);
  JsonReader r(j, file);
  if (trace_root(j)) return describe_trace(file);
  const auto& lookup = costmodels::CatalogLookup::builtin();
  if (!j.is_object())
    r.fail(
        "a JSON object (scenario, cluster, job, plan, catalog, sweep spec or Hugging Face "
        "config) or a profiler trace");
  // A SimResult / RunResult (`simulate --json`, `run --result`, what `compare` reads) has
  // "ranks" too: told from a plan by its source and iteration time.
  if (j.contains("source") && j.contains("iteration_time_s")) {
    const traces::IterationReport report = traces::load_result(file);
    return std::string(report.source == "sim" ? "simulated" : "measured") + " result, " +
           std::to_string(report.ranks.size()) + " ranks, iteration " +
           format_seconds(report.iteration_time_s);
  }
  if (j.contains("ranks") || j.contains("rank_classes")) {
    Plan plan = parse_plan(r, scenario ? &*scenario : nullptr);
    if (scenario) traces::check_plan_for(plan, scenario_for_plan(*scenario, plan, file), file);
    return "plan, " + std::to_string(plan.ranks.size()) + " ranks" +
           (plan.nodes.empty()
                ? std::string()
                : " on nodes " + format_index_ranges(plan.nodes) + " (the others idle)") +
           (plan.rank_classes.empty()
                ? std::string()
                : " in " + std::to_string(plan.rank_classes.size()) + " class(es)") +
           (scenario ? ", matches scenario " + scenario->name : "");
  }
  // A sweep spec also has a "job": recognised by its pool first, and read as `sweep` reads it.
  if (j.contains("pool")) {
    const auto spec = planner::load_sweep_spec(file);
    return "sweep spec " + spec.name + ", " + std::to_string(spec.pool.size()) + " GPU types";
  }
  if (j.contains("model_type")) {
    const auto hf = load_hf_config(file);
    return "Hugging Face config, model_type " + hf.model_type;
  }
  if (j.contains("cluster") || j.contains("job")) {
    Scenario s = parse_scenario(r, lookup, std::filesystem::path(file).parent_path());
    // What every command does next: read the calibration files it lists, with the same code.
    costmodels::make_cost_models(s);
    return "scenario " + s.name + ", " + std::to_string(s.cluster.num_ranks()) + " devices, " +
           s.job.model_name;
  }
  if (j.contains("nodes")) {
    Cluster c = parse_cluster(r, lookup);
    return "cluster " + c.name + ", " + std::to_string(c.num_ranks()) + " devices";
  }
  if (j.contains("model") || j.contains("global_batch")) {
    Job job = parse_job(r, lookup);
    return "job " + job.model_name;
  }
  if (j.contains("devices")) {
    auto catalog = costmodels::GpuCatalog::load(file);
    return "GPU catalog, " + std::to_string(catalog.size()) + " devices";
  }
  if (j.contains("models")) {
    auto catalog = costmodels::ModelCatalog::load(file);
    return "model catalog, " + std::to_string(catalog.size()) + " models";
  }
  // What commands write and read back: a stack calibration (`calibrate stack -o`, `--stack`), a
  // measured profile or collective sweep (`profile -o`, a scenario's "calibration").
  if (j.contains("format") && j["format"] == "cephalo-stack") {
    const StackCalibration stack = load_stack_calibration(file);
    const auto factor = [](double x) {
      char text[32];
      std::snprintf(text, sizeof text, "x%.3g", x);
      return std::string(text);
    };
    return "stack calibration, fitted on " + stack.fitted_on.model + " (compute " +
           factor(stack.compute.value) + ", comm " + factor(stack.comm.value) + ", optimizer " +
           factor(stack.optimizer.value) + ")";
  }
  if (auto calibration = costmodels::check_calibration_file(file)) return *calibration;
  if (j.contains("format"))
    r.child("format").fail(
        "\"cephalo-profile\", \"cephalo-collective-sweep\" or \"cephalo-stack\" (the formats "
        "cephalo writes), or a file of another kind without a \"format\" key");
  // A split file, as `predict 3d --split` reads it: {"model_split": {...}} or the object itself.
  if (j.contains("model_split") || j.contains("stages") || j.contains("tensor_parallel") ||
      j.contains("micro_batches") || j.contains("schedule") || j.contains("sequence_parallel") ||
      j.contains("sharding")) {
    if (!scenario) return "split file, " + describe_split(load_model_split(file));
    // With the scenario: the estimate's own checks, as `predict 3d --split` makes them (even
    // replicas: the global batch divided by micro-batches and every stage's replicas).
    SplitEstimateRequest request;
    request.split_file = file;
    const ModelSplit split = load_model_split_for(file, *scenario, &request.split_path);
    read_split_plan(request);
    (void)estimate_split_request(*scenario, split, request);
    return "split file, " + describe(split, scenario->cluster.num_ranks()) + ", matches scenario " +
           scenario->name;
  }
  r.fail(
      "a scenario (\"cluster\", \"job\"), cluster (\"nodes\"), job (\"model\"), plan "
      "(\"ranks\" or \"rank_classes\"), split (\"model_split\", \"stages\", ...), profile, "
      "sweep or stack (\"format\"), result (\"source\"), catalog "
      "(\"devices\", \"models\"), sweep spec (\"pool\"), Hugging Face config (\"model_type\") or "
      "profiler trace (\"traceEvents\", or gzip)");
}

InputFilesCheck check_input_files(const std::vector<std::string>& files,
                                  const std::optional<Scenario>& scenario) {
  InputFilesCheck out;
  for (const auto& file : files) {
    try {
      out.lines.push_back(file + ": ok (" + check_input_file(file, scenario) + ")");
    } catch (const Error& e) {
      ++(dynamic_cast<const IoError*>(&e) ? out.unreadable : out.invalid);
      std::string message = e.what();
      // A ValidationError's message already starts with the file's name.
      out.lines.push_back(message.rfind(file, 0) == 0 ? message : file + ": " + message);
    }
  }
  return out;
}

}  // namespace cephalo::planner

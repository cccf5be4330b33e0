// `cephalo run` between its flags and its printing: the inputs loaded, checked and agreed by
// every rank, this rank's options, and what the run reports (training_session.hpp).
#include <sstream>

#include "cephalo/backend/checkpoint.hpp"
#include "cephalo/backend/training_session.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "implementation.hpp"

namespace cephalo::backend {

RunSetup load_run_inputs(const RunRequest& r, int world_size) {
  RunSetup s;
  s.scenario = costmodels::load_scenario(r.scenario_file);
  s.plan = traces::load_plan_for(s.scenario, r.plan_file);
  // The backend runs each head backward whole: its executor has no deferred weight-gradient
  // GEMM (the graph's WeightGradient ops), so a job that declares one is refused before any
  // training rather than trained in another order than the one simulated.
  if (s.scenario.job.implementation.defer_embedding_wgrad_compute)
    throw ValidationError(r.scenario_file, "job.implementation.defer_embedding_wgrad_compute",
                          "true",
                          "false or absent for `cephalo run`: the backend does not defer the "
                          "output layer's weight gradient (plan and simulate price it)");
  // The backend accumulates each weight gradient its own way (into the reduce type's buffer, as
  // the profiled stacks' time carries it); a job that declares another stack's path is priced
  // for a run this backend does not do.
  if (s.scenario.job.implementation.weight_gradients != WeightGradients::Autocast)
    throw ValidationError(r.scenario_file, "job.implementation.weight_gradients",
                          to_string(s.scenario.job.implementation.weight_gradients),
                          "\"autocast\" or absent for `cephalo run`: the backend accumulates "
                          "weight gradients its own way (plan and simulate price the others)");
  s.model = GptConfig::from_spec(s.scenario.job.model, s.scenario.job.sequence_length);
  if (r.loss_scale_given && s.scenario.job.precision.compute != Dtype::FP16)
    throw ValidationError("command line", "--loss-scale", shortest(r.settings.loss_scale),
                          "no loss scale for a job that computes in " +
                              to_string(s.scenario.job.precision.compute) + " (" + r.scenario_file +
                              "): only fp16 scales its loss");
  // The checkpoint this run resumes from is read now, not after the outputs are checked: its
  // manifest and the shards it lists are inputs that no output may replace.
  const auto& resume = r.settings.resume;
  if (!resume.empty()) {
    const auto ckpt = read_latest_checkpoint(resume);
    for (const auto& shard : ckpt.manifest.shards) note_input_file(ckpt.step_dir / shard.file);
  }
  // Every output location before any training, on every rank: one verdict, one exit code.
  if (!r.trace.empty()) traces::check_chrome_trace_name(r.trace, "command line", "--trace");
  const std::vector<OutputTarget> outputs = {{"--trace", r.trace},
                                             {"--result", r.result},
                                             {"--dump-params", r.dump_params},
                                             {"--dump-grads", r.dump_grads}};
  check_outputs(outputs);
  const auto& checkpoint_dir = r.settings.checkpoint_dir;
  if (!checkpoint_dir.empty()) check_output_folder(checkpoint_dir, "--checkpoint-dir");
  // Nor may an output be a file of the checkpoint folders (`latest`, a manifest, a shard),
  // which the run itself advances or reads.
  std::vector<std::pair<std::string, std::filesystem::path>> named;
  for (const auto& o : outputs) named.emplace_back(o.what, o.file);
  check_outputs_outside_checkpoints(named, {checkpoint_dir, resume});
  if (!r.dump_oracle.empty()) check_output_folder(r.dump_oracle, "--dump-oracle");
  // The process count last: what no launch can fix (the job, the flags, the outputs) is said
  // first, so that a user told to start N processes is not then told the run cannot happen.
  if (static_cast<int>(s.plan.ranks.size()) != world_size)
    throw ValidationError(r.plan_file, s.plan.rank_classes.empty() ? "ranks" : "rank_classes",
                          std::to_string(s.plan.ranks.size()) + " ranks",
                          "one rank per MPI process: start with mpirun -np " +
                              std::to_string(s.plan.ranks.size()) + " (this job has " +
                              std::to_string(world_size) + ")");
  return s;
}

RunSetup prepare_run(const MpiRuntime& mpi, const RunRequest& request) {
  RunSetup setup;
  const int size = mpi.world_size();
  if (!mpi.initialized()) {
    try {
      setup = load_run_inputs(request, size);
    } catch (const std::exception& e) {
      throw AgreedFailure(error_kind(e), 0, e.what());
    }
  } else {
    // Ranks may be started with different files or flags: the inputs, then the identity.
    auto comm = make_mpi_communicator();
    try {
      agree(*comm, [&] { setup = load_run_inputs(request, size); });
    } catch (const AgreedFailure& e) {
      // Only some ranks refused their inputs (different files per rank): say which.
      if (e.failed_rank() == 0) throw;
      throw AgreedFailure(e.kind(), e.failed_rank(),
                          "rank " + std::to_string(e.failed_rank()) + " of " +
                              std::to_string(size) + ": " + e.what());
    }
    setup.identity =
        make_run_fingerprint(setup.scenario, setup.plan, request.plan_file, request.settings);
    agree_run_identity(*comm, setup.identity);
    return setup;
  }
  setup.identity =
      make_run_fingerprint(setup.scenario, setup.plan, request.plan_file, request.settings);
  return setup;
}

RunOptions run_options(const RunSetup& setup, const RunSettings& settings, int rank, int threads) {
  const Scenario& sc = setup.scenario;
  const auto devices = sc.cluster.ranks();
  const RankDevice& me = devices[static_cast<std::size_t>(rank)];
  RunOptions o;
  o.runtime.device = settings.device;
  o.runtime.cpu.ordinal = rank;
  o.runtime.cpu.threads = threads > 0 ? threads : (me.slot->threads > 0 ? me.slot->threads : 1);
  o.runtime.cpu.capacity = static_cast<std::size_t>(me.slot->spec.memory_bytes);
  o.runtime.allow_tf32 = sc.job.precision.compute == Dtype::TF32;
  o.executor.data_seed = settings.data_seed;
  o.executor.run_identity = setup.identity.hex();
  o.executor.slowdown = me.slot->slowdown;
  o.executor.loss_scale_init = settings.loss_scale;
  o.session.steps = settings.steps;
  o.session.report = settings.report;
  o.session.checkpoint_dir = settings.checkpoint_dir;
  o.session.checkpoint_every = settings.checkpoint_every;
  o.session.overwrite_checkpoints = settings.overwrite_checkpoints;
  o.session.resume = settings.resume;
  o.session.rank_label = traces::rank_label(me);
  return o;
}

std::vector<std::string> run_notes(const Scenario& sc, const std::string& device) {
  std::vector<std::string> notes;
  const Dtype compute = sc.job.precision.compute;
  if (device != "cuda" && compute != Dtype::FP32 && compute != Dtype::TF32)
    notes.push_back("the CPU device stores " + to_string(compute) +
                    " and computes in fp32, rounding every output (slower than fp32 on CPU)");
  if (sc.cluster.emulated())
    notes.emplace_back(
        "EMULATION: ranks with a slowdown factor hold their compute stream (factor - 1)x each "
        "op's measured time");
  return notes;
}

std::string implementation_warning(const Scenario& sc) {
  // The backend runs one stack; a scenario that declares another is simulated differently from
  // what runs here (compare prints both sides).
  // A stack calibration multiplies the modelled times; it is no other kernel: compared without
  // it, so a job with a stack that declares what runs here gets no warning.
  Implementation declared = sc.job.implementation;
  declared.stack.reset();
  declared.stack_file.clear();
  if (declared == executed_implementation()) return {};
  std::string w = "the scenario's job declares implementation \"";
  w += to_string(sc.job.implementation);
  w += "\" but the backend runs \"";
  w += to_string(executed_implementation());
  w += "\": its simulation prices a different stack (set the job's \"implementation\" to "
       "{\"attention\": \"eager\", \"fused_elementwise\": false} to compare like with like)";
  return w;
}

std::string reported_step_label(const SessionResult& result, const std::string& statistic) {
  std::string label = "step " + std::to_string(result.reported.step);
  if (result.window_size == 1) return label;
  label += " (";
  label += statistic;
  label += " step time of steps " + std::to_string(result.window_first) + "-" +
           std::to_string(result.window_last) + ")";
  return label;
}

traces::TraceInput trace_input(const traces::TrainingGraph& graph, const SessionResult& result,
                               const Scenario& scenario, const std::string& device_kind,
                               const std::string& step_label) {
  const MeasuredStep& chosen = result.reported;
  traces::TraceInput in;
  in.graph = &graph;
  in.start_ns = &chosen.start_ns;
  in.end_ns = &chosen.end_ns;
  in.rank_labels = traces::rank_labels(scenario.cluster);
  in.memory = chosen.memory;
  in.title = "cephalo run (" + device_kind + ", measured): " + scenario.name + ", " + step_label;
  if (scenario.cluster.emulated()) in.title += " [EMULATED slowdown]";
  return in;
}

traces::IterationReport reported_report(const SessionResult& result) {
  traces::IterationReport report = result.reported.report;
  report.implementation = to_string(executed_implementation());
  return report;
}

namespace {
void write_floats(const std::filesystem::path& file, const std::vector<float>& v) {
  write_file_atomically(
      file, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}
}  // namespace

void write_run_outputs(const RunRequest& r, const RunSetup& setup,
                       const traces::TrainingGraph& graph, const SessionResult& result,
                       const traces::IterationReport& report, const std::string& device_kind,
                       const std::string& step_label, const std::vector<float>& params,
                       const std::vector<float>& grads) {
  if (!r.trace.empty())
    traces::write_chrome_trace(r.trace,
                               trace_input(graph, result, setup.scenario, device_kind, step_label));
  Json result_json = traces::to_json(report);
  result_json["run_identity"] = setup.identity.hex();
  if (!r.result.empty()) write_file_atomically(r.result, result_json.dump(2) + "\n");
  if (!r.dump_params.empty()) write_floats(r.dump_params, params);
  if (!r.dump_grads.empty()) write_floats(r.dump_grads, grads);
}

Json run_record(const TrainingOutcome& run) {
  const RunSetup& setup = run.setup;
  const SessionResult& result = run.result;
  Json emulation = Json::array();
  for (const auto& d : setup.scenario.cluster.ranks())
    if (d.slot->slowdown != 1.0)
      emulation.push_back({{"rank", d.rank}, {"slowdown", d.slot->slowdown}});
  Json steps = Json::array();
  for (const auto& r : result.steps)
    steps.push_back({{"step", r.step},
                     {"loss", r.loss},
                     {"time_s", r.time_s},
                     {"samples_per_s", r.samples_per_s},
                     {"loss_scale", r.loss_scale},
                     {"update_skipped", r.skipped}});
  return {{"scenario", setup.scenario.name},
          {"plan", run.request.plan_file},
          {"device", run.device_kind},
          {"ranks", run.ranks},
          {"emulated", !emulation.empty()},
          {"emulation", emulation},
          {"steps", steps},
          {"report_step", result.reported.step},
          {"report_statistic", run.request.settings.report},
          {"run_identity", setup.identity.hex()},
          {"implementation", to_json(executed_implementation())},
          {"report", traces::to_json(run.report)}};
}

std::string render_step(const StepResult& r) {
  return "step " + std::to_string(r.step) + "  loss " + fixed(r.loss, 5) + "  " +
         format_seconds(r.time_s) +
         (r.skipped ? "  (fp16 overflow: update skipped, loss scale lowered)" : "");
}

std::string render_run(const TrainingOutcome& run) {
  const RunSetup& setup = run.setup;
  const SessionResult& result = run.result;
  const traces::IterationReport& report = run.report;
  const std::string& device_kind = run.device_kind;
  const std::string& step_label = run.step_label;
  const int ranks = run.ranks;
  const Scenario& sc = setup.scenario;
  const bool fp16 = sc.job.precision.compute == Dtype::FP16;
  std::vector<std::string> columns{"step", "loss", "step time", "samples/s", "tokens/s"};
  if (fp16) columns.insert(columns.end(), {"loss scale", "update"});
  TextTable table(columns);
  for (const auto& r : result.steps) {
    std::vector<std::string> row{std::to_string(r.step), fixed(r.loss, 5), format_seconds(r.time_s),
                                 fixed(r.samples_per_s, 1),
                                 fixed(r.samples_per_s * sc.job.sequence_length, 0)};
    if (fp16) row.insert(row.end(), {fixed(r.loss_scale, 0), r.skipped ? "skipped" : "applied"});
    table.add_row(row);
  }
  std::ostringstream out;
  out << "cephalo run: " << sc.name << " (" << sc.job.model_name << ", seq "
      << sc.job.sequence_length << ", global batch " << setup.plan.global_batch() << ") on "
      << ranks << " " << device_kind << " rank" << (ranks == 1 ? "" : "s") << ", "
      << to_string(setup.plan.accumulation) << " accumulation, implementation "
      << report.implementation << "\n";
  if (sc.cluster.emulated())
    out << "EMULATED: some ranks run with a slowdown factor (see the rank table)\n";
  // The nodes the plan leaves out (its "nodes", core/plan_nodes.hpp) ran nothing.
  if (const std::string idle = idle_line(sc.cluster); !idle.empty()) out << idle << "\n";
  out << table.render() << "\n" << step_label << ", measured:\n" << traces::render_table(report);
  return out.str();
}

}  // namespace cephalo::backend

// `cephalo run --scenario F --plan P --steps K [...]`: trains the scenario's model under the
// plan on real devices, one process per plan rank (started by mpirun), and reports measured
// per-step loss and throughput, a RunResult (the SimResult schema) and a Chrome trace.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/implementation.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/oracle_dump.hpp"
#include "cephalo/backend/run_identity.hpp"
#include "cephalo/backend/runtime.hpp"
#include "cephalo/backend/training_session.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct RunArgs {
  std::string scenario, plan, trace, result, checkpoint_dir, resume, dump_params, dump_grads,
      dump_oracle;
  std::string device = "cpu";
  std::string inject_failure;  // "RANK:STEP"
  int steps = 10;
  int checkpoint_every = 0;
  int threads = 0;
  std::uint64_t seed = 42;
  double loss_scale = 65536.0;    // initial dynamic loss scale (fp16 jobs only)
  std::string report = "median";  // which step the RunResult and trace describe
  bool json = false;
  bool overwrite_checkpoints = false;
};

struct InjectedFailure {
  int rank = -1;
  int step = -1;
  bool kill = false;
};

// "RANK:STEP" (the rank throws) or "RANK:STEP:kill" (the rank dies on SIGKILL).
InjectedFailure parse_failure(const std::string& text) {
  InjectedFailure f;
  std::string body = text;
  if (body.size() > 5 && body.ends_with(":kill")) {
    f.kill = true;
    body.resize(body.size() - 5);
  }
  auto colon = body.find(':');
  if (colon != std::string::npos) {
    auto a = std::from_chars(body.data(), body.data() + colon, f.rank);
    auto b = std::from_chars(body.data() + colon + 1, body.data() + body.size(), f.step);
    if (a.ec == std::errc() && b.ec == std::errc() && b.ptr == body.data() + body.size() &&
        a.ptr == body.data() + colon && f.rank >= 0 && f.step >= 0)
      return f;
  }
  throw CLI::ValidationError("--inject-failure",
                             "expected RANK:STEP or RANK:STEP:kill, got \"" + text + "\"");
}

// Everything that can be refused before any compute: same outcome on every rank.
struct Setup {
  Scenario scenario;
  Plan plan;
  backend::GptConfig model;
};

Setup load_and_check(const RunArgs& a, int world_size) {
  Setup s;
  s.scenario = costmodels::load_scenario(a.scenario);
  s.plan = load_plan(a.plan);
  traces::check_plan_for(s.plan, s.scenario, a.plan);
  if (static_cast<int>(s.plan.ranks.size()) != world_size)
    throw ValidationError(a.plan, "ranks", std::to_string(s.plan.ranks.size()) + " ranks",
                          "one rank per MPI process: start with mpirun -np " +
                              std::to_string(s.plan.ranks.size()) + " (this job has " +
                              std::to_string(world_size) + ")");
  s.model = backend::GptConfig::from_spec(s.scenario.job.model, s.scenario.job.sequence_length);
  // The checkpoint this run resumes from is read now, not after the outputs are checked: its
  // manifest and the shards it lists are inputs that no output may replace.
  if (!a.resume.empty()) {
    const auto ckpt = backend::read_latest_checkpoint(a.resume);
    for (const auto& shard : ckpt.manifest.shards) note_input_file(ckpt.step_dir / shard.file);
  }
  // Every output location before any training, on every rank: one verdict, one exit code.
  const std::vector<OutputTarget> outputs = {{"--trace", a.trace},
                                             {"--result", a.result},
                                             {"--dump-params", a.dump_params},
                                             {"--dump-grads", a.dump_grads}};
  check_outputs(outputs);
  if (!a.checkpoint_dir.empty()) check_output_folder(a.checkpoint_dir, "--checkpoint-dir");
  // Nor may an output be a file of the checkpoint folders (`latest`, a manifest, a shard),
  // which the run itself advances or reads.
  std::vector<std::pair<std::string, std::filesystem::path>> named;
  for (const auto& o : outputs) named.emplace_back(o.what, o.file);
  backend::check_outputs_outside_checkpoints(named, {a.checkpoint_dir, a.resume});
  if (!a.dump_oracle.empty()) check_output_folder(a.dump_oracle, "--dump-oracle");
  return s;
}

backend::RunSettings run_settings(const RunArgs& a) {
  backend::RunSettings r;
  r.steps = a.steps;
  r.data_seed = a.seed;
  r.device = a.device;
  r.loss_scale = a.loss_scale;
  r.report = a.report;
  r.checkpoint_dir = a.checkpoint_dir;
  r.checkpoint_every = a.checkpoint_every;
  r.overwrite_checkpoints = a.overwrite_checkpoints;
  r.resume = a.resume;
  r.dump_params = !a.dump_params.empty();
  r.dump_grads = !a.dump_grads.empty();
  return r;
}

[[noreturn]] void fail_agreed(int rank, const backend::AgreedFailure& e) {
  if (rank == 0) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
  }
  throw CLI::RuntimeError("", static_cast<int>(e.kind()));
}

std::string rank_label(const RankDevice& d) {
  std::string label = d.slot->type + ", node " + std::to_string(d.node);
  if (d.slot->slowdown != 1.0) label += ", emulated " + fixed(d.slot->slowdown, 2) + "x slowdown";
  return label;
}

void run(RunArgs& a) {
  // A single process started without mpirun needs no MPI at all (a GPU machine without an MPI
  // installation): it is rank 0 of 1 over the single-rank communicator.
  backend::MpiRuntime mpi_runtime(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi_runtime.world_rank(), size = mpi_runtime.world_size();
  std::optional<InjectedFailure> failure;
  if (!a.inject_failure.empty()) failure = parse_failure(a.inject_failure);

  Setup setup;
  backend::RunFingerprint identity;
  if (mpi_runtime.initialized()) {
    // Ranks may be started with different files or flags. Both steps below are a fixed set of
    // small host collectives, the same on every rank whatever its inputs, so every rank ends
    // together with one message: first the inputs (the lowest rank that refused them speaks),
    // then the run identity (the fields that differ and the ranks), before any collective
    // whose size the inputs decide.
    auto comm = backend::make_mpi_communicator();
    try {
      try {
        backend::agree(*comm, [&] { setup = load_and_check(a, size); });
      } catch (const backend::AgreedFailure& e) {
        // Only some ranks refused their inputs (different files per rank): say which.
        if (e.failed_rank() == 0) throw;
        throw backend::AgreedFailure(e.kind(), e.failed_rank(),
                                     "rank " + std::to_string(e.failed_rank()) + " of " +
                                         std::to_string(size) + ": " + e.what());
      }
      identity = backend::make_run_fingerprint(setup.scenario, setup.plan, a.plan, run_settings(a));
      backend::agree_run_identity(*comm, identity);
    } catch (const backend::AgreedFailure& e) {
      fail_agreed(rank, e);
    }
  } else {
    try {
      setup = load_and_check(a, size);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
      throw CLI::RuntimeError("", static_cast<int>(backend::error_kind(e)));
    }
    identity = backend::make_run_fingerprint(setup.scenario, setup.plan, a.plan, run_settings(a));
  }
  const Scenario& sc = setup.scenario;
  const Plan& plan = setup.plan;
  const auto devices = sc.cluster.ranks();
  const RankDevice& me = devices[static_cast<std::size_t>(rank)];
  auto graph = traces::build_training_graph(plan, sc);

  if (rank == 0) {
    if (a.device != "cuda" && sc.job.precision.compute != Dtype::FP32 &&
        sc.job.precision.compute != Dtype::TF32)
      std::cerr << "note: the CPU device stores " << to_string(sc.job.precision.compute)
                << " and computes in fp32, rounding every output (slower than fp32 on CPU)\n";
    if (sc.cluster.emulated())
      std::cerr << "note: EMULATION: ranks with a slowdown factor hold their compute stream "
                   "(factor - 1)x each op's measured time\n";
  }
  backend::RuntimeOptions ropt;
  ropt.device = a.device;
  ropt.cpu.ordinal = rank;
  ropt.cpu.threads = a.threads > 0 ? a.threads : (me.slot->threads > 0 ? me.slot->threads : 1);
  ropt.cpu.capacity = static_cast<std::size_t>(me.slot->spec.memory_bytes);
  ropt.allow_tf32 = sc.job.precision.compute == Dtype::TF32;
  // --device cuda fails with CUDA's reason (exit 4) on a machine without a usable GPU.
  backend::Runtime rt = backend::make_runtime(mpi_runtime, ropt);
  // The backend runs one stack; a scenario that declares another is simulated differently from
  // what runs here (compare prints both sides).
  if (rank == 0 && !(sc.job.implementation == backend::executed_implementation()))
    std::cerr << "warning: the scenario's job declares implementation \""
              << to_string(sc.job.implementation) << "\" but the backend runs \""
              << to_string(backend::executed_implementation())
              << "\": its simulation prices a different stack (set the job's \"implementation\" "
                 "to {\"attention\": \"eager\", \"fused_elementwise\": false} to compare like "
                 "with like)\n";

  backend::ExecutorOptions eopt;
  eopt.data_seed = a.seed;
  eopt.run_identity = identity.hex();
  eopt.slowdown = me.slot->slowdown;
  eopt.loss_scale_init = a.loss_scale;
  if (failure && failure->rank == rank) {
    eopt.fail_at_step = failure->step;
    eopt.fail_by_kill = failure->kill;
  }
  backend::SessionOptions sopt;
  sopt.steps = a.steps;
  sopt.report = a.report;
  sopt.checkpoint_dir = a.checkpoint_dir;
  sopt.checkpoint_every = a.checkpoint_every;
  sopt.overwrite_checkpoints = a.overwrite_checkpoints;
  sopt.resume = a.resume;
  sopt.rank_label = rank_label(me);

  backend::TrainingSession session(*rt.comm, sopt);
  try {
    backend::Executor& exec = session.prepare([&] {
      return std::make_unique<backend::Executor>(sc, plan, graph, setup.model, *rt.device, *rt.comm,
                                                 eopt);
    });
    if (!a.resume.empty() && rank == 0)
      std::cerr << "resumed from " << a.resume << " at step " << exec.next_step() << "\n";
  } catch (const backend::AgreedFailure& e) {
    fail_agreed(rank, e);
  }

  const bool fp16 = sc.job.precision.compute == Dtype::FP16;
  std::vector<std::string> columns{"step", "loss", "step time", "samples/s", "tokens/s"};
  if (fp16) columns.insert(columns.end(), {"loss scale", "update"});
  TextTable table(columns);
  std::optional<backend::OracleDump> oracle;
  if (!a.dump_oracle.empty()) {
    oracle.emplace(a.dump_oracle, session.executor(), sc, plan, a.seed, rank);
    oracle->before_training();
  }
  auto result = session.run([&](const backend::StepResult& r) {
    if (oracle) oracle->after_step(r);
    std::vector<std::string> row{std::to_string(r.step), fixed(r.loss, 5), format_seconds(r.time_s),
                                 fixed(r.samples_per_s, 1),
                                 fixed(r.samples_per_s * sc.job.sequence_length, 0)};
    if (fp16) row.insert(row.end(), {fixed(r.loss_scale, 0), r.skipped ? "skipped" : "applied"});
    table.add_row(row);
    if (rank == 0 && !a.json)
      std::cerr << "step " << r.step << "  loss " << fixed(r.loss, 5) << "  "
                << format_seconds(r.time_s)
                << (r.skipped ? "  (fp16 overflow: update skipped, loss scale lowered)" : "")
                << "\n";
  });
  backend::Executor& exec = session.executor();
  if (oracle) oracle->finish();
  if (result.steps.empty()) {
    if (rank == 0) std::cerr << "nothing to run: already at step " << exec.next_step() << "\n";
    return;
  }
  const auto& chosen = result.reported;
  traces::IterationReport report = chosen.report;
  report.implementation = to_string(backend::executed_implementation());
  const std::string which = result.window_size == 1
                                ? "step " + std::to_string(chosen.step)
                                : "step " + std::to_string(chosen.step) + " (" + a.report +
                                      " step time of steps " + std::to_string(result.window_first) +
                                      "-" + std::to_string(result.window_last) + ")";
  std::vector<float> params, grads;
  if (!a.dump_params.empty()) params = exec.gather_parameters();
  if (!a.dump_grads.empty()) grads = exec.gather_gradients();
  if (rank != 0) return;

  if (!a.trace.empty()) {
    traces::TraceInput in;
    in.graph = &graph;
    in.start_ns = &chosen.start_ns;
    in.end_ns = &chosen.end_ns;
    for (const auto& d : devices) in.rank_labels.push_back(rank_label(d));
    in.memory = chosen.memory;
    in.title = "cephalo run (" + rt.device->kind() + ", measured): " + sc.name + ", " + which +
               (sc.cluster.emulated() ? " [EMULATED slowdown]" : "");
    traces::write_chrome_trace(a.trace, in);
  }
  // The RunResult names the run that measured it (the identity its checkpoints carry too).
  Json result_json = traces::to_json(report);
  result_json["run_identity"] = identity.hex();
  if (!a.result.empty()) write_file_atomically(a.result, result_json.dump(2) + "\n");
  if (!a.dump_params.empty())
    write_file_atomically(a.dump_params, std::string(reinterpret_cast<const char*>(params.data()),
                                                     params.size() * sizeof(float)));
  if (!a.dump_grads.empty())
    write_file_atomically(a.dump_grads, std::string(reinterpret_cast<const char*>(grads.data()),
                                                    grads.size() * sizeof(float)));
  Json emulation = Json::array();
  for (const auto& d : devices)
    if (d.slot->slowdown != 1.0)
      emulation.push_back({{"rank", d.rank}, {"slowdown", d.slot->slowdown}});
  if (a.json) {
    Json js = Json::array();
    for (const auto& r : result.steps)
      js.push_back({{"step", r.step},
                    {"loss", r.loss},
                    {"time_s", r.time_s},
                    {"samples_per_s", r.samples_per_s},
                    {"loss_scale", r.loss_scale},
                    {"update_skipped", r.skipped}});
    Json out = {{"scenario", sc.name},
                {"plan", a.plan},
                {"device", rt.device->kind()},
                {"ranks", size},
                {"emulated", !emulation.empty()},
                {"emulation", emulation},
                {"steps", js},
                {"report_step", chosen.step},
                {"report_statistic", a.report},
                {"run_identity", identity.hex()},
                {"implementation", to_json(backend::executed_implementation())},
                {"report", traces::to_json(report)}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "cephalo run: " << sc.name << " (" << sc.job.model_name << ", seq "
            << sc.job.sequence_length << ", global batch " << plan.global_batch() << ") on " << size
            << " " << rt.device->kind() << " rank" << (size == 1 ? "" : "s") << ", "
            << to_string(plan.accumulation) << " accumulation, implementation "
            << report.implementation << "\n";
  if (!emulation.empty())
    std::cout << "EMULATED: some ranks run with a slowdown factor (see the rank table)\n";
  std::cout << table.render() << "\n" << which << ", measured:\n" << traces::render_table(report);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Train under a plan on real devices (launch with mpirun -np <plan ranks>)");
  static RunArgs a;
  cmd->add_option("--scenario", a.scenario, "Scenario file")->required();
  cmd->add_option("--plan", a.plan, "Plan file")->required();
  cmd->add_option("--steps", a.steps, "Train until this step (counting resumed steps)")
      ->check(integer_in(1, 1000000));
  cmd->add_option("--trace", a.trace, "Write the reported step's Chrome/Perfetto trace here");
  cmd->add_option("--result", a.result, "Write the reported step's RunResult JSON here");
  cmd->add_option("--report", a.report,
                  "Which step the RunResult and trace describe: median (typical step time), min "
                  "(fastest) or last; the run's first step is left out when there are others, "
                  "and the window is the last 31 steps")
      ->capture_default_str()
      ->check(one_of({"median", "min", "last"}));
  cmd->add_flag("--json", a.json, "Print the record as JSON instead of tables");
  // A folder without a cadence (or the reverse) would silently write nothing: refused (exit 2).
  auto* ckpt_dir =
      cmd->add_option("--checkpoint-dir", a.checkpoint_dir, "Folder for sharded checkpoints");
  auto* ckpt_every = cmd->add_option("--checkpoint-every", a.checkpoint_every,
                                     "Checkpoint every N steps (needs --checkpoint-dir)")
                         ->check(integer_in(1, 1000000));
  ckpt_dir->needs(ckpt_every);
  ckpt_every->needs(ckpt_dir);
  cmd->add_flag("--overwrite-checkpoints", a.overwrite_checkpoints,
                "Replace the checkpoints another run left in --checkpoint-dir (removed before "
                "training)")
      ->needs(ckpt_dir);
  cmd->add_option("--resume", a.resume, "Resume from the latest checkpoint in this folder");
  cmd->add_option("--device", a.device, "cpu or cuda")->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--threads", a.threads, "CPU threads per rank (default: cluster spec or 1)")
      ->check(integer_in(1, 1024));
  cmd->add_option("--seed", a.seed, "Seed of the synthetic token stream")->check(unsigned_64());
  cmd->add_option("--loss-scale", a.loss_scale,
                  "Initial dynamic loss scale of fp16 jobs (halved on overflow, doubled after "
                  "2000 clean steps)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& text) {
            double v = 0;
            std::istringstream in(text);
            in >> v;
            return in && in.eof() && v > 0 && std::isfinite(v)
                       ? std::string()
                       : "expected a positive loss scale such as 65536, got \"" + text + "\"";
          },
          "POSITIVE"));
  // Testing hooks, not shown in --help.
  cmd->add_option("--inject-failure", a.inject_failure, "")->group("");
  cmd->add_option("--dump-params", a.dump_params, "")->group("");
  cmd->add_option("--dump-grads", a.dump_grads, "")->group("");
  // Every step's parameters, gradients, batch and loss for tests/oracle (oracle_dump.hpp).
  cmd->add_option("--dump-oracle", a.dump_oracle, "")->group("");
  cmd->callback([] { run(a); });
}

}  // namespace cephalo::cli

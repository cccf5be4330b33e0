// `cephalo run --scenario F --plan P --steps K [...]`: trains the scenario's model under the
// plan on real devices, one process per plan rank (started by mpirun), and reports measured
// per-step loss and throughput, a RunResult (the SimResult schema) and a Chrome trace.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/oracle_dump.hpp"
#include "cephalo/backend/training_session.hpp"
#include "cephalo/core/table.hpp"
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

// One stderr line in one write: mpirun forwards each rank's stdout and stderr on their own
// channels, and a line written piecewise can be split by the other channel's output.
template <typename... Parts>
void progress(const Parts&... parts) {
  std::ostringstream line;
  (line << ... << parts) << '\n';
  std::cerr << line.str() << std::flush;
}

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

backend::RunRequest run_request(const RunArgs& a) {
  backend::RunRequest r;
  r.scenario_file = a.scenario;
  r.plan_file = a.plan;
  backend::RunSettings& s = r.settings;
  s.steps = a.steps;
  s.data_seed = a.seed;
  s.device = a.device;
  s.loss_scale = a.loss_scale;
  s.report = a.report;
  s.checkpoint_dir = a.checkpoint_dir;
  s.checkpoint_every = a.checkpoint_every;
  s.overwrite_checkpoints = a.overwrite_checkpoints;
  s.resume = a.resume;
  s.dump_params = !a.dump_params.empty();
  s.dump_grads = !a.dump_grads.empty();
  r.trace = a.trace;
  r.result = a.result;
  r.dump_params = a.dump_params;
  r.dump_grads = a.dump_grads;
  r.dump_oracle = a.dump_oracle;
  return r;
}

// Every rank ends with the agreed failure's exit code; rank 0 says why.
[[noreturn]] void fail_agreed(int rank, const backend::AgreedFailure& e) {
  if (rank == 0) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
  }
  throw CLI::RuntimeError("", static_cast<int>(e.kind()));
}

void run(RunArgs& a) {
  // A single process started without mpirun needs no MPI at all (a GPU machine without an MPI
  // installation): it is rank 0 of 1 over the single-rank communicator.
  backend::MpiRuntime mpi_runtime(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi_runtime.world_rank(), size = mpi_runtime.world_size();
  std::optional<InjectedFailure> failure;
  if (!a.inject_failure.empty()) failure = parse_failure(a.inject_failure);

  const backend::RunRequest request = run_request(a);
  backend::RunSetup setup;
  try {
    setup = backend::prepare_run(mpi_runtime, request);
  } catch (const backend::AgreedFailure& e) {
    fail_agreed(rank, e);
  }
  const Scenario& sc = setup.scenario;
  const Plan& plan = setup.plan;
  auto graph = traces::build_training_graph(plan, sc);

  if (rank == 0)
    for (const auto& n : backend::run_notes(sc, a.device)) progress("note: ", n);
  backend::RunOptions opt = backend::run_options(setup, request.settings, rank, a.threads);
  // --device cuda fails with CUDA's reason (exit 4) on a machine without a usable GPU.
  backend::Runtime rt = backend::make_runtime(mpi_runtime, opt.runtime);
  if (const auto w = backend::implementation_warning(sc); rank == 0 && !w.empty())
    progress("warning: ", w);
  if (failure && failure->rank == rank) {
    opt.executor.fail_at_step = failure->step;
    opt.executor.fail_by_kill = failure->kill;
  }

  backend::TrainingSession session(*rt.comm, opt.session);
  try {
    backend::Executor& exec = session.prepare([&] {
      return std::make_unique<backend::Executor>(sc, plan, graph, setup.model, *rt.device, *rt.comm,
                                                 opt.executor);
    });
    if (!a.resume.empty() && rank == 0)
      progress("resumed from ", a.resume, " at step ", exec.next_step());
  } catch (const backend::AgreedFailure& e) {
    fail_agreed(rank, e);
  }

  std::optional<backend::OracleDump> oracle;
  if (!a.dump_oracle.empty()) {
    oracle.emplace(a.dump_oracle, session.executor(), sc, plan, a.seed, rank);
    oracle->before_training();
  }
  auto result = session.run([&](const backend::StepResult& r) {
    if (oracle) oracle->after_step(r);
    if (rank == 0 && !a.json)
      progress("step ", r.step, "  loss ", fixed(r.loss, 5), "  ", format_seconds(r.time_s),
               r.skipped ? "  (fp16 overflow: update skipped, loss scale lowered)" : "");
  });
  backend::Executor& exec = session.executor();
  if (oracle) oracle->finish();
  if (result.steps.empty()) {
    if (rank == 0) progress("nothing to run: already at step ", exec.next_step());
    return;
  }
  const traces::IterationReport report = backend::reported_report(result);
  const std::string which = backend::reported_step_label(result, a.report);
  std::vector<float> params, grads;
  if (!a.dump_params.empty()) params = exec.gather_parameters();
  if (!a.dump_grads.empty()) grads = exec.gather_gradients();
  if (rank != 0) return;

  const std::string kind = rt.device->kind();
  backend::write_run_outputs(request, setup, graph, result, report, kind, which, params, grads);
  if (a.json) {
    std::cout << backend::run_record(setup, request, result, report, kind, size).dump(2) << "\n";
    return;
  }
  std::cout << backend::render_run(setup, result, report, kind, size, which);
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

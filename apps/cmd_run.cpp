// `cephalo run --scenario F --plan P --steps K [...]`: trains the scenario's model under the
// plan on real devices, one process per plan rank (started by mpirun), and reports measured
// per-step loss and throughput, a RunResult (the SimResult schema) and a Chrome trace. The
// flags fill a backend::RunRequest; backend::train runs it (training_session.hpp), this file
// prints its progress and its record.
#include <cmath>
#include <iostream>
#include <sstream>

#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/training_session.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

// One stderr line in one write: mpirun forwards each rank's stdout and stderr on their own
// channels, and a line written piecewise can be split by the other channel's output.
void progress(const std::string& line) { std::cerr << (line + "\n") << std::flush; }

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Train under a plan on real devices (launch with mpirun -np <plan ranks>)");
  static struct {
    backend::RunRequest request;  // backend::train's; its defaults are the flags'
    std::string inject_failure;   // "RANK:STEP[:HOW]"
    bool json = false;
  } a;
  backend::RunRequest& r = a.request;
  backend::RunSettings& s = r.settings;
  cmd->add_option("--scenario", r.scenario_file, "Scenario file")->required();
  cmd->add_option("--plan", r.plan_file, "Plan file")->required();
  cmd->add_option("--steps", s.steps, "Train until this step (counting resumed steps)")
      ->check(integer_in(1, 1000000));
  cmd->add_option("--trace", r.trace, "Write the reported step's Chrome/Perfetto trace here");
  cmd->add_option("--result", r.result, "Write the reported step's RunResult JSON here");
  cmd->add_option("--report", s.report,
                  "Which step the RunResult and trace describe: median (typical step time), min "
                  "(fastest) or last; the run's first step is left out when there are others, "
                  "and the window is the last 31 steps")
      ->capture_default_str()
      ->check(one_of({"median", "min", "last"}));
  cmd->add_flag("--json", a.json, "Print the record as JSON instead of tables");
  // A folder without a cadence (or the reverse) would silently write nothing: refused (exit 2).
  auto* ckpt_dir =
      cmd->add_option("--checkpoint-dir", s.checkpoint_dir, "Folder for sharded checkpoints");
  auto* ckpt_every = cmd->add_option("--checkpoint-every", s.checkpoint_every,
                                     "Checkpoint every N steps (needs --checkpoint-dir)")
                         ->check(integer_in(1, 1000000));
  ckpt_dir->needs(ckpt_every);
  ckpt_every->needs(ckpt_dir);
  cmd->add_flag("--overwrite-checkpoints", s.overwrite_checkpoints,
                "Replace the checkpoints another run left in --checkpoint-dir (removed before "
                "training)")
      ->needs(ckpt_dir);
  cmd->add_option("--resume", s.resume, "Resume from the latest checkpoint in this folder");
  cmd->add_option("--device", s.device, "cpu or cuda")->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--threads", r.threads, "CPU threads per rank (default: cluster spec or 1)")
      ->check(integer_in(1, 1024));
  cmd->add_option("--seed", s.data_seed, "Seed of the synthetic token stream")
      ->check(unsigned_64());
  auto* loss_scale =
      cmd->add_option("--loss-scale", s.loss_scale,
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
  cmd->add_option("--dump-params", r.dump_params, "")->group("");
  cmd->add_option("--dump-grads", r.dump_grads, "")->group("");
  // Every step's parameters, gradients, batch and loss for tests/oracle (oracle_dump.hpp).
  cmd->add_option("--dump-oracle", r.dump_oracle, "")->group("");
  cmd->callback([loss_scale] {
    // A single process started without mpirun needs no MPI at all (a GPU machine without an MPI
    // installation): it is rank 0 of 1 over the single-rank communicator.
    backend::MpiRuntime mpi_runtime(nullptr, nullptr, /*only_under_launcher=*/true);
    const int rank = mpi_runtime.world_rank();
    backend::RunRequest request = a.request;
    request.loss_scale_given = loss_scale->count() > 0;
    if (!a.inject_failure.empty()) {
      const auto failure = backend::parse_injected_failure(a.inject_failure);
      if (!failure)
        throw ValidationError(kCommandLine, "--inject-failure", a.inject_failure,
                              "RANK:STEP or RANK:STEP:HOW, HOW one of kill, nan-loss, "
                              "nan-gradients, nan-parameters, inf-moments");
      request.failure = *failure;
    }
    if (!request.trace.empty())
      traces::check_chrome_trace_name(request.trace, kCommandLine, "--trace");
    backend::TrainingProgress shown;
    shown.say = progress;
    shown.on_step = [&](const backend::StepResult& r) {
      if (rank == 0 && !a.json) progress(backend::render_step(r));
    };
    backend::TrainingOutcome out;
    try {
      out = backend::train(mpi_runtime, request, shown);
    } catch (const backend::AgreedFailure& e) {
      // Every rank ends with the agreed failure's exit code. Rank 0 says why before mpi_runtime
      // finalizes MPI: after it, mpirun may end the job on another rank's exit first.
      if (rank == 0) std::cerr << ("error: " + std::string(e.what()) + "\n") << std::flush;
      throw CLI::RuntimeError("", static_cast<int>(e.kind()));
    }
    if (rank == 0 && out.trained())
      print_json_or_text(
          a.json, [&] { return backend::run_record(out); },
          [&] { return backend::render_run(out); });
  });
}

}  // namespace cephalo::cli

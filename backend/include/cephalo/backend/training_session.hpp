#pragma once
// A training session (DESIGN §7): what `cephalo run` does between parsing and printing.
//  1. prepare(): everything that can be refused before a step runs, checked on every rank and
//     agreed, so a bad checkpoint folder, another run's checkpoints, a corrupt checkpoint or
//     an infeasible precision ends every rank with the same message and exit code whether the
//     job has 1 rank or many;
//  2. run(): the loop — checkpoint cadence, the window of steps the report is picked from, and
//     the abort policy (a rank that fails mid-step names itself and takes the job down).
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cephalo/backend/checkpoint.hpp"
#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/run_identity.hpp"
#include "cephalo/backend/runtime.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"

namespace cephalo::backend {

// The kinds of failure a session distinguishes are core's (error.hpp), whose values are the
// CLI's exit codes, so every rank of a job exits with the same one. error_kind here also reads
// an AgreedFailure's kind.
using cephalo::ErrorKind;
ErrorKind error_kind(const std::exception& e);

// A failure before training, agreed by every rank: the kind and message of the lowest rank
// that failed (`failed_rank`), identical on every rank.
class AgreedFailure : public Error {
 public:
  AgreedFailure(ErrorKind kind, int failed_rank, const std::string& message)
      : Error(message), kind_(kind), failed_rank_(failed_rank) {}
  ErrorKind kind() const { return kind_; }
  int failed_rank() const { return failed_rank_; }

 private:
  ErrorKind kind_;
  int failed_rank_;
};

// Runs `check` on every rank; when it throws on any, every rank throws AgreedFailure.
// Collective: one all-reduce, plus a broadcast of the message on failure. `check` itself must
// not be collective (a rank that throws would leave the others waiting).
void agree(Communicator& comm, const std::function<void()>& check);

struct SessionOptions {
  int steps = 10;                 // train until this step (counting resumed steps)
  std::string report = "median";  // median | min | last: which step the report describes
  std::filesystem::path checkpoint_dir;
  int checkpoint_every = 0;  // with checkpoint_dir: save after every N-th step
  bool overwrite_checkpoints = false;
  std::filesystem::path resume;  // resume from this folder's latest checkpoint
  std::string rank_label;        // this rank's device, for the abort message
};

// One measured step as the RunResult and the trace describe it.
struct MeasuredStep {
  int step = 0;
  double time_s = 0;
  traces::IterationReport report;
  std::vector<std::int64_t> start_ns, end_ns;
  std::vector<std::vector<traces::MemorySample>> memory;
};

// The steps a report may be taken from: all but the run's first (it pays for first-touch
// allocations and cold caches) when there are others, and at most the last 31 of them so that
// a long run keeps a bounded window.
inline constexpr std::size_t kReportWindow = 31;

// `median` = the step whose time is the (lower) median of the window (typical), `min` = the
// fastest (least disturbed on a shared machine), `last` = the last.
const MeasuredStep& pick_report_step(const std::deque<MeasuredStep>& window,
                                     const std::string& statistic);

struct SessionResult {
  std::vector<StepResult> steps;  // this run's steps (empty: already at --steps)
  MeasuredStep reported;          // the step the report describes
  int window_first = 0, window_last = 0;
  std::size_t window_size = 0;
};

class TrainingSession {
 public:
  // RuntimeFailure for inconsistent options (a cadence without a folder or the reverse: the
  // command line refuses those first).
  TrainingSession(Communicator& comm, SessionOptions options);

  // Before any step, agreed across ranks (AgreedFailure): the checkpoint folder, the
  // executor's construction, the resume (the command checks its output files before, with
  // core/output_file.hpp). Then, with overwrite_checkpoints, the old checkpoints are removed
  // (rank 0).
  Executor& prepare(const std::function<std::unique_ptr<Executor>()>& make_executor);

  // Trains up to options.steps, calling on_step after each step on every rank. A failure on
  // a one-rank job is rethrown; on a larger job the failing rank prints "error: rank R of N
  // (label) failed at step S: cause; aborting all ranks" and ends the job with its kind's exit
  // code (the other ranks may be inside a collective and cannot agree any more).
  SessionResult run(const std::function<void(const StepResult&)>& on_step);

  Executor& executor() { return *exec_; }

 private:
  Communicator& comm_;
  SessionOptions opt_;
  // Rank 0's hold on the checkpoint folder, for the session's life (checkpoint.hpp).
  CheckpointLock lock_;
  // Outlives a failure: the comm thread may still be inside a collective on its buffers until
  // the abort ends the process.
  std::unique_ptr<Executor> exec_;
};

// A failure a test asks for (`cephalo run --inject-failure RANK:STEP[:HOW]`): rank `rank`
// fails at the start of step `step`, by throwing or, with `kill`, by dying on SIGKILL; or,
// with `non_finite` ("loss", "gradients", "parameters", "moments"), it writes an inf or NaN
// into that part of its state from that step on (executor.hpp, NonFiniteState).
struct InjectedFailure {
  int rank = -1;  // -1: none
  int step = -1;
  bool kill = false;
  std::string non_finite;
};
// "RANK:STEP", "RANK:STEP:kill", or RANK:STEP: followed by nan-loss, nan-gradients,
// nan-parameters or inf-moments (non-negative decimal integers); nullopt for anything else, so
// that the caller names the flag in its own message.
std::optional<InjectedFailure> parse_injected_failure(std::string_view text);

// `cephalo run`'s defaults: 10 steps, token stream seed 42, the CPU device, fp16's initial
// dynamic loss scale 65536, and the median step (after the first) reported.
inline RunSettings default_run_settings() {
  RunSettings s;
  s.steps = 10;
  s.data_seed = 42;
  s.device = "cpu";
  s.loss_scale = 65536.0;
  s.report = "median";
  return s;
}

// What `cephalo run` is asked for: the input files, the settings and the files it writes (each
// named in messages by the run command's flag).
struct RunRequest {
  std::string scenario_file, plan_file;
  RunSettings settings = default_run_settings();
  std::filesystem::path trace, result, dump_params, dump_grads;  // "--trace", ... ("" = none)
  std::filesystem::path dump_oracle;                             // "--dump-oracle" folder
  int threads = 0;  // CPU threads per rank (0: the cluster slot's, else 1)
  // The caller set settings.loss_scale (`--loss-scale`): refused for a job that does not
  // compute in fp16, which scales no loss (the value would be dropped).
  bool loss_scale_given = false;
  InjectedFailure failure;
};

// Everything that can be refused before any compute, with the same outcome on every rank.
struct RunSetup {
  Scenario scenario;
  Plan plan;  // checked for the scenario (traces::check_plan_for)
  GptConfig model;
  RunFingerprint identity;
};

// Loads and checks this rank's inputs: the scenario, the plan for it, one rank per process
// (`world_size`), the model, the checkpoint resumed from (its files are inputs no output may
// replace), and every output location (files, folders, none inside the checkpoint folders).
RunSetup load_run_inputs(const RunRequest& request, int world_size);

// load_run_inputs on every rank, then the run identity. Under MPI both are a fixed set of small
// host collectives whatever each rank's inputs, so every rank ends together with one message:
// first the inputs (the lowest rank that refused them speaks, named when it is not rank 0),
// then the identity (agree_run_identity). Without MPI a refusal is an AgreedFailure too, so a
// caller handles one exception type for one rank and for many.
RunSetup prepare_run(const MpiRuntime& mpi, const RunRequest& request);

// This rank's runtime, executor and session options for the set-up run: CPU threads from
// `threads` (> 0), else the cluster slot's, else 1; the slot's slowdown; the agreed identity.
struct RunOptions {
  RuntimeOptions runtime;
  ExecutorOptions executor;
  SessionOptions session;
};
RunOptions run_options(const RunSetup& setup, const RunSettings& settings, int rank, int threads);

// The notes a run prints once before training (the CPU's rounding of low-precision compute,
// emulated slowdowns), and the warning when the job declares another implementation than the
// one the backend runs ("" when they agree).
std::vector<std::string> run_notes(const Scenario& scenario, const std::string& device);
std::string implementation_warning(const Scenario& scenario);

// Which step the report describes: "step 7", or "step 7 (median step time of steps 1-9)".
std::string reported_step_label(const SessionResult& result, const std::string& statistic);

// The measured trace's input for the reported step: every rank's label (traces::rank_label),
// its memory, and a title naming the device kind, the scenario and the step.
traces::TraceInput trace_input(const traces::TrainingGraph& graph, const SessionResult& result,
                               const Scenario& scenario, const std::string& device_kind,
                               const std::string& step_label);

// The reported step's RunResult: the session's report, with the implementation the backend ran.
traces::IterationReport reported_report(const SessionResult& result);

// Rank 0 after training, where the request names files: the trace (trace_input), the RunResult
// (naming the run identity its checkpoints carry too) and the raw fp32 parameter and gradient
// dumps (gathered by every rank before).
void write_run_outputs(const RunRequest& request, const RunSetup& setup,
                       const traces::TrainingGraph& graph, const SessionResult& result,
                       const traces::IterationReport& report, const std::string& device_kind,
                       const std::string& step_label, const std::vector<float>& params,
                       const std::vector<float>& grads);

// What `train` reports while it runs: rank 0's lines (the notes and warning before training,
// "resumed from ...", "nothing to run: ..."), and every step on every rank. The caller decides
// where they go (`cephalo run`: stderr, one write per line).
struct TrainingProgress {
  std::function<void(const std::string& line)> say;
  std::function<void(const StepResult& step)> on_step;
};

// What a finished `train` hands back for printing.
struct TrainingOutcome {
  RunRequest request;  // as run: the dump settings follow the dump files asked for
  RunSetup setup;
  SessionResult result;
  traces::IterationReport report;  // reported_report(result)
  std::string device_kind;         // "cpu" or "cuda", as the device names itself
  std::string step_label;          // reported_step_label(result, the settings' report)
  int rank = 0, ranks = 1;
  // False when the run was already at its last step (resumed): nothing was trained, reported
  // or written.
  bool trained() const { return !result.steps.empty(); }
};

// `cephalo run` from its request to its outputs, on this rank: prepare_run, run_options,
// make_runtime, the session (prepare, then run), the oracle dump when asked for, the parameter
// and gradient gathers the dumps need (collective), and on rank 0 write_run_outputs. One
// function, so that every caller runs the same sequence with the same checks. AgreedFailure
// when the inputs, the identity or the session's preparation are refused (the same on every
// rank); other failures as the steps throw them.
TrainingOutcome train(const MpiRuntime& mpi, const RunRequest& request,
                      const TrainingProgress& progress);

// The run's record (`cephalo run --json`): scenario, plan file, device, ranks, emulation, every
// step, the reported step and statistic, the run identity, the implementation and `report`.
Json run_record(const TrainingOutcome& run);
// The same as `cephalo run` prints it without --json: a line naming the run, the emulation
// notice, a row per step (with the loss scale and the update of fp16 jobs) and the reported
// step's table.
std::string render_run(const TrainingOutcome& run);
// The line `cephalo run` prints on rank 0 after each step, "step 3  loss 5.12345  12.3 ms", with
// a note when an fp16 step overflowed and its update was skipped.
std::string render_step(const StepResult& step);

}  // namespace cephalo::backend

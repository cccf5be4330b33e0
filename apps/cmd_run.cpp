// `cephalo run --scenario F --plan P --steps K [...]`: trains the scenario's model under the
// plan on real devices, one process per plan rank (started by mpirun), and reports measured
// per-step loss and throughput, a RunResult (the SimResult schema) and a Chrome trace.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cephalo/backend/cpu_device.hpp"
#ifdef CEPHALO_HAVE_CUDA
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/nccl_communicator.hpp"
#endif
#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/single_rank_communicator.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct RunArgs {
  std::string scenario, plan, trace, result, checkpoint_dir, resume, dump_params, dump_grads;
  std::string device = "cpu";
  std::string inject_failure;  // "RANK:STEP"
  int steps = 10;
  int checkpoint_every = 0;
  int threads = 0;
  std::uint64_t seed = 42;
  double loss_scale = 65536.0;    // initial dynamic loss scale (fp16 jobs only)
  std::string report = "median";  // which step the RunResult and trace describe
  bool json = false;
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
  validate_plan_for(s.plan, s.scenario, a.plan);
  if (static_cast<int>(s.plan.ranks.size()) != world_size)
    throw ValidationError(a.plan, "ranks", std::to_string(s.plan.ranks.size()) + " ranks",
                          "one rank per MPI process: start with mpirun -np " +
                              std::to_string(s.plan.ranks.size()) + " (this job has " +
                              std::to_string(world_size) + ")");
  s.model = backend::GptConfig::from_spec(s.scenario.job.model, s.scenario.job.sequence_length);
  if (a.device != "cpu" && a.device != "cuda")
    throw CLI::ValidationError("--device", "expected cpu or cuda, got \"" + a.device + "\"");
  // Every output location before any training, on every rank: one verdict, one exit code.
  check_outputs({{"--trace", a.trace},
                 {"--result", a.result},
                 {"--dump-params", a.dump_params},
                 {"--dump-grads", a.dump_grads}});
  if (!a.checkpoint_dir.empty()) check_output_folder(a.checkpoint_dir, "--checkpoint-dir");
  return s;
}

// One measured step as the RunResult and the trace describe it.
struct MeasuredStep {
  int step = 0;
  double time_s = 0;
  traces::IterationReport report;
  std::vector<std::int64_t> start_ns, end_ns;
  std::vector<std::vector<traces::MemorySample>> memory;
};

// The steps a report may be taken from: all but the run's first (it pays for first-touch
// allocations and cold caches) when there are others, and at most the last 31 of them so that a
// long run keeps a bounded window.
constexpr std::size_t kReportWindow = 31;

// The step the report describes: `median` = the step whose time is the median of the window
// (typical), `min` = the fastest (least disturbed on a shared machine), `last` = the last.
const MeasuredStep& pick_report_step(const std::deque<MeasuredStep>& window,
                                     const std::string& statistic) {
  if (statistic == "last") return window.back();
  std::vector<const MeasuredStep*> by_time;
  for (const auto& m : window) by_time.push_back(&m);
  std::sort(by_time.begin(), by_time.end(),
            [](const MeasuredStep* a, const MeasuredStep* b) { return a->time_s < b->time_s; });
  if (statistic == "min") return *by_time.front();
  return *by_time[(by_time.size() - 1) / 2];  // the lower median: a step that really ran
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
  try {
    setup = load_and_check(a, size);
  } catch (const std::exception& e) {
    // Every rank reaches the same verdict. Rank 0 prints it, then all ranks meet before
    // exiting: a rank that exits early makes mpirun kill the job, message included.
    int code = kRuntime;
    if (dynamic_cast<const ValidationError*>(&e) || dynamic_cast<const NotFoundError*>(&e))
      code = kInvalidInput;
    else if (dynamic_cast<const InfeasibleError*>(&e))
      code = kInfeasible;
    else if (dynamic_cast<const IoError*>(&e))
      code = kIo;
    else if (dynamic_cast<const CLI::Error*>(&e))
      code = kUsage;
    if (rank == 0) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
    }
    if (mpi_runtime.initialized()) backend::make_mpi_communicator()->barrier();
    throw CLI::RuntimeError("", code);
  }
  const Scenario& sc = setup.scenario;
  const Plan& plan = setup.plan;
  const auto devices = sc.cluster.ranks();
  const RankDevice& me = devices[static_cast<std::size_t>(rank)];

  auto graph = traces::build_training_graph(plan, sc);
#ifndef CEPHALO_HAVE_CUDA
  if (a.device == "cuda")
    throw RuntimeFailure(
        "this build of cephalo has no CUDA backend (configure with a CUDA "
        "toolkit and NCCL; see backend/cuda/)");
#endif
  if (rank == 0) {
    if (a.device != "cuda" && sc.job.precision.compute != Dtype::FP32 &&
        sc.job.precision.compute != Dtype::TF32)
      std::cerr << "note: the CPU device stores " << to_string(sc.job.precision.compute)
                << " and computes in fp32, rounding every output (slower than fp32 on CPU)\n";
    if (sc.cluster.emulated())
      std::cerr << "note: EMULATION: ranks with a slowdown factor hold their compute stream "
                   "(factor - 1)x each op's measured time\n";
  }
  backend::CpuDeviceOptions dopt;
  dopt.ordinal = rank;
  dopt.threads = a.threads > 0 ? a.threads : (me.slot->threads > 0 ? me.slot->threads : 1);
  dopt.capacity = static_cast<std::size_t>(me.slot->spec.memory_bytes);
  // --device cuda: the CUDA device of this rank's local GPU and NCCL (its unique id over MPI);
  // make_cuda_device fails with CUDA's reason (exit 4) on a machine without a usable GPU.
  std::unique_ptr<backend::Device> device;
  // Uneven shards are gathered and reduced the way the plan says (the cost model priced that
  // variant): MPI's -v collectives or padding around the even ones; NCCL's grouped
  // broadcast/reduce or padding around its ring.
  std::unique_ptr<backend::Communicator> mpi, nccl, single;
  if (mpi_runtime.initialized()) mpi = backend::make_mpi_communicator({plan.uneven_collective});
#ifdef CEPHALO_HAVE_CUDA
  if (a.device == "cuda") {
    device = cuda::make_cuda_device(
        {cuda::local_device_index(), sc.job.precision.compute == Dtype::TF32});
    cuda::NcclOptions nopt;
    nopt.uneven = plan.uneven_collective == UnevenCollective::Padded
                      ? cuda::UnevenAlgorithm::PaddedRing
                      : cuda::UnevenAlgorithm::GroupedBroadcastReduce;
    if (mpi) nccl = cuda::make_nccl_communicator(*device, *mpi, nopt);
  }
#endif
  if (!device) device = backend::make_cpu_device(dopt);
  if (!mpi && !nccl) single = backend::make_single_rank_communicator(*device);
  backend::Communicator* comm = nccl ? nccl.get() : mpi ? mpi.get() : single.get();

  backend::ExecutorOptions eopt;
  eopt.data_seed = a.seed;
  eopt.slowdown = me.slot->slowdown;
  eopt.loss_scale_init = a.loss_scale;
  if (failure && failure->rank == rank) {
    eopt.fail_at_step = failure->step;
    eopt.fail_by_kill = failure->kill;
  }

  int step_now = 0;
  // Outside the try: on a failure the executor's buffers must stay alive (the comm thread may
  // still be inside a collective on them) until MPI_Abort ends the process.
  std::unique_ptr<backend::Executor> owned_exec;
  try {
    owned_exec =
        std::make_unique<backend::Executor>(sc, plan, graph, setup.model, *device, *comm, eopt);
    backend::Executor& exec = *owned_exec;
    if (!a.resume.empty()) {
      exec.load_checkpoint(a.resume);
      if (rank == 0)
        std::cerr << "resumed from " << a.resume << " at step " << exec.next_step() << "\n";
    }
    std::vector<backend::StepResult> steps;
    const bool fp16 = sc.job.precision.compute == Dtype::FP16;
    std::vector<std::string> columns{"step", "loss", "step time", "samples/s", "tokens/s"};
    if (fp16) columns.insert(columns.end(), {"loss scale", "update"});
    TextTable table(columns);
    std::deque<MeasuredStep> window;
    while (exec.next_step() < a.steps) {
      step_now = exec.next_step();
      auto r = exec.run_step();
      steps.push_back(r);
      // Collective on every rank (each gathers the step's measurements from all ranks).
      MeasuredStep m;
      m.step = r.step;
      m.time_s = r.time_s;
      m.report = exec.last_report();
      exec.last_op_times(m.start_ns, m.end_ns);
      m.memory = exec.last_memory();
      if (steps.size() == 2 && a.report != "last") window.clear();  // drop the first step
      window.push_back(std::move(m));
      if (window.size() > kReportWindow) window.pop_front();
      std::vector<std::string> row{std::to_string(r.step), fixed(r.loss, 5),
                                   format_seconds(r.time_s), fixed(r.samples_per_s, 1),
                                   fixed(r.samples_per_s * sc.job.sequence_length, 0)};
      if (fp16) row.insert(row.end(), {fixed(r.loss_scale, 0), r.skipped ? "skipped" : "applied"});
      table.add_row(row);
      if (rank == 0 && !a.json)
        std::cerr << "step " << r.step << "  loss " << fixed(r.loss, 5) << "  "
                  << format_seconds(r.time_s)
                  << (r.skipped ? "  (fp16 overflow: update skipped, loss scale lowered)" : "")
                  << "\n";
      if (!a.checkpoint_dir.empty() && a.checkpoint_every > 0 &&
          exec.next_step() % a.checkpoint_every == 0)
        exec.save_checkpoint(a.checkpoint_dir);
    }
    if (steps.empty()) {
      if (rank == 0) std::cerr << "nothing to run: already at step " << exec.next_step() << "\n";
      return;
    }
    const MeasuredStep& chosen = pick_report_step(window, a.report);
    const auto& report = chosen.report;
    const std::string which = window.size() == 1 ? "step " + std::to_string(chosen.step)
                                                 : "step " + std::to_string(chosen.step) + " (" +
                                                       a.report + " step time of steps " +
                                                       std::to_string(window.front().step) + "-" +
                                                       std::to_string(window.back().step) + ")";
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
      in.title = "cephalo run (" + device->kind() + ", measured): " + sc.name + ", " + which +
                 (sc.cluster.emulated() ? " [EMULATED slowdown]" : "");
      traces::write_chrome_trace(a.trace, in);
    }
    if (!a.result.empty()) write_file_atomically(a.result, traces::render_json(report));
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
      for (const auto& r : steps)
        js.push_back({{"step", r.step},
                      {"loss", r.loss},
                      {"time_s", r.time_s},
                      {"samples_per_s", r.samples_per_s},
                      {"loss_scale", r.loss_scale},
                      {"update_skipped", r.skipped}});
      Json out = {{"scenario", sc.name},
                  {"plan", a.plan},
                  {"device", device->kind()},
                  {"ranks", size},
                  {"emulated", !emulation.empty()},
                  {"emulation", emulation},
                  {"steps", js},
                  {"report_step", chosen.step},
                  {"report_statistic", a.report},
                  {"report", traces::to_json(report)}};
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::cout << "cephalo run: " << sc.name << " (" << sc.job.model_name << ", seq "
              << sc.job.sequence_length << ", global batch " << plan.global_batch() << ") on "
              << size << " " << device->kind() << " rank" << (size == 1 ? "" : "s") << ", "
              << to_string(plan.accumulation) << " accumulation\n";
    if (!emulation.empty())
      std::cout << "EMULATED: some ranks run with a slowdown factor (see the rank table)\n";
    std::cout << table.render() << "\n" << which << ", measured:\n" << traces::render_table(report);
  } catch (const std::exception& e) {
    if (size == 1) throw;
    // Tell the user which rank died and why, then take the whole job down now rather than
    // leaving the other ranks blocked in a collective.
    std::fprintf(stderr, "error: rank %d of %d (%s) failed at step %d: %s; aborting all ranks\n",
                 rank, size, rank_label(me).c_str(), step_now, e.what());
    std::fflush(stderr);
    comm->abort(kRuntime);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Train under a plan on real devices (launch with mpirun -np <plan ranks>)");
  static RunArgs a;
  cmd->add_option("--scenario", a.scenario, "Scenario file")->required();
  cmd->add_option("--plan", a.plan, "Plan file")->required();
  cmd->add_option("--steps", a.steps, "Train until this step (counting resumed steps)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--trace", a.trace, "Write the reported step's Chrome/Perfetto trace here");
  cmd->add_option("--result", a.result, "Write the reported step's RunResult JSON here");
  cmd->add_option("--report", a.report,
                  "Which step the RunResult and trace describe: median (typical step time), min "
                  "(fastest) or last; the run's first step is left out when there are others, "
                  "and the window is the last 31 steps")
      ->capture_default_str()
      ->check(CLI::IsMember({"median", "min", "last"}));
  cmd->add_flag("--json", a.json, "Print the record as JSON instead of tables");
  cmd->add_option("--checkpoint-dir", a.checkpoint_dir, "Folder for sharded checkpoints");
  cmd->add_option("--checkpoint-every", a.checkpoint_every, "Checkpoint every N steps")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--resume", a.resume, "Resume from the latest checkpoint in this folder");
  cmd->add_option("--device", a.device, "cpu or cuda");
  cmd->add_option("--threads", a.threads, "CPU threads per rank (default: cluster spec or 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", a.seed, "Seed of the synthetic token stream");
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
  cmd->callback([] { run(a); });
}

}  // namespace cephalo::cli

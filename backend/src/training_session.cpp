#include "cephalo/backend/training_session.hpp"

#include <algorithm>
#include <cstdio>

#include "cephalo/backend/checkpoint.hpp"

namespace cephalo::backend {

namespace fs = std::filesystem;

ErrorKind error_kind(const std::exception& e) {
  if (const auto* a = dynamic_cast<const AgreedFailure*>(&e)) return a->kind();
  return cephalo::error_kind(e);
}

void agree(Communicator& comm, const std::function<void()>& check) {
  std::string message;
  ErrorKind kind = ErrorKind::Runtime;
  bool failed = false;
  try {
    check();
  } catch (const std::exception& e) {
    failed = true;
    kind = error_kind(e);
    message = e.what();
  }
  // The lowest failing rank speaks for the job.
  double first = failed ? comm.rank() : comm.size();
  comm.all_reduce_host(&first, 1, ReduceOp::Min);
  const int root = static_cast<int>(first);
  if (root >= comm.size()) return;
  std::string packet = std::to_string(static_cast<int>(kind)) + ":" + message;
  comm.broadcast_host(packet, root);
  const auto colon = packet.find(':');
  throw AgreedFailure(static_cast<ErrorKind>(std::stoi(packet.substr(0, colon))), root,
                      packet.substr(colon + 1));
}

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

TrainingSession::TrainingSession(Communicator& comm, SessionOptions options)
    : comm_(comm), opt_(std::move(options)) {
  if (opt_.checkpoint_dir.empty() != (opt_.checkpoint_every <= 0))
    throw RuntimeFailure(
        "training session: checkpoints need both a folder and a cadence (every N steps)");
  if (opt_.overwrite_checkpoints && opt_.checkpoint_dir.empty())
    throw RuntimeFailure("training session: overwrite_checkpoints without a checkpoint folder");
}

Executor& TrainingSession::prepare(
    const std::function<std::unique_ptr<Executor>()>& make_executor) {
  const bool checkpoints = !opt_.checkpoint_dir.empty();
  agree(comm_, [&] {
    if (checkpoints)
      check_checkpoint_dir(opt_.checkpoint_dir, opt_.resume, opt_.overwrite_checkpoints,
                           comm_.rank() == 0 ? &lock_ : nullptr);
    exec_ = make_executor();
    if (!opt_.resume.empty()) exec_->load_checkpoint(opt_.resume);
  });
  std::error_code ec;
  const bool continuing =
      !opt_.resume.empty() && fs::equivalent(opt_.checkpoint_dir, opt_.resume, ec);
  if (checkpoints && opt_.overwrite_checkpoints && !continuing)
    agree(comm_, [&] {
      if (comm_.rank() == 0) remove_checkpoints(opt_.checkpoint_dir);
    });
  return *exec_;
}

SessionResult TrainingSession::run(const std::function<void(const StepResult&)>& on_step) {
  if (!exec_) throw RuntimeFailure("training session: run() before prepare()");
  Executor& exec = *exec_;
  SessionResult out;
  std::deque<MeasuredStep> window;
  int step_now = exec.next_step();
  try {
    while (exec.next_step() < opt_.steps) {
      step_now = exec.next_step();
      auto r = exec.run_step();
      out.steps.push_back(r);
      // Collective on every rank (each gathers the step's measurements from all ranks).
      MeasuredStep m;
      m.step = r.step;
      m.time_s = r.time_s;
      m.report = exec.last_report();
      exec.last_op_times(m.start_ns, m.end_ns);
      m.memory = exec.last_memory();
      if (out.steps.size() == 2 && opt_.report != "last") window.clear();  // drop the first
      window.push_back(std::move(m));
      if (window.size() > kReportWindow) window.pop_front();
      on_step(r);
      if (!opt_.checkpoint_dir.empty() && exec.next_step() % opt_.checkpoint_every == 0)
        exec.save_checkpoint(opt_.checkpoint_dir);
    }
  } catch (const NonFiniteState& e) {
    // Found by every rank at the same point through the same all-reduce: none is left inside a
    // collective, so every rank ends with the one message instead of an abort.
    throw AgreedFailure(ErrorKind::Runtime, 0, e.what());
  } catch (const std::exception& e) {
    if (comm_.size() == 1) throw;
    // Tell the user which rank died and why, then take the whole job down now rather than
    // leaving the other ranks blocked in a collective.
    std::fprintf(stderr, "error: rank %d of %d (%s) failed at step %d: %s; aborting all ranks\n",
                 comm_.rank(), comm_.size(), opt_.rank_label.c_str(), step_now, e.what());
    std::fflush(stderr);
    comm_.abort(static_cast<int>(error_kind(e)));
  }
  if (out.steps.empty()) return out;
  out.reported = pick_report_step(window, opt_.report);
  out.window_first = window.front().step;
  out.window_last = window.back().step;
  out.window_size = window.size();
  return out;
}

}  // namespace cephalo::backend

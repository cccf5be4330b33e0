// `cephalo run` from its request to its outputs (training_session.hpp: train): the one sequence
// of set-up, session, dumps and outputs, so that the command line holds only its flags and its
// printing.
#include <charconv>
#include <optional>
#include <utility>

#include "cephalo/backend/training_session.hpp"
#include "oracle_dump.hpp"

namespace cephalo::backend {

std::optional<InjectedFailure> parse_injected_failure(std::string_view text) {
  InjectedFailure f;
  std::string_view body = text;
  // RANK:STEP[:HOW]; HOW is kill or one of the non-finite values a check must catch.
  static constexpr std::pair<std::string_view, std::string_view> kHow[] = {
      {":kill", ""},
      {":nan-loss", "loss"},
      {":nan-gradients", "gradients"},
      {":nan-parameters", "parameters"},
      {":inf-moments", "moments"}};
  for (const auto& [suffix, part] : kHow)
    if (body.size() > suffix.size() && body.ends_with(suffix)) {
      f.kill = part.empty();
      f.non_finite = std::string(part);
      body.remove_suffix(suffix.size());
      break;
    }
  const auto colon = body.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const char* end = body.data() + body.size();
  auto a = std::from_chars(body.data(), body.data() + colon, f.rank);
  auto b = std::from_chars(body.data() + colon + 1, end, f.step);
  if (a.ec == std::errc() && b.ec == std::errc() && b.ptr == end && a.ptr == body.data() + colon &&
      f.rank >= 0 && f.step >= 0)
    return f;
  return std::nullopt;
}

TrainingOutcome train(const MpiRuntime& mpi, const RunRequest& asked,
                      const TrainingProgress& progress) {
  // A dump file asked for is a gather every rank makes, and part of the run identity.
  TrainingOutcome out;
  out.request = asked;
  RunRequest& request = out.request;
  request.settings.dump_params = !request.dump_params.empty();
  request.settings.dump_grads = !request.dump_grads.empty();
  out.rank = mpi.world_rank();
  out.ranks = mpi.world_size();
  const int rank = out.rank;
  const auto say = [&](const std::string& line) {
    if (rank == 0 && progress.say) progress.say(line);
  };
  out.setup = prepare_run(mpi, request);
  const Scenario& sc = out.setup.scenario;
  const Plan& plan = out.setup.plan;
  const RunSettings& settings = request.settings;
  const auto graph = traces::build_training_graph(plan, sc);

  for (const auto& n : run_notes(sc, settings.device)) say("note: " + n);
  RunOptions opt = run_options(out.setup, settings, rank, request.threads);
  // --device cuda fails with CUDA's reason (RuntimeFailure) on a machine without a usable GPU.
  Runtime rt = make_runtime(mpi, opt.runtime);
  if (const auto w = implementation_warning(sc); !w.empty()) say("warning: " + w);
  if (request.failure.rank == rank) {
    opt.executor.fail_at_step = request.failure.step;
    opt.executor.fail_by_kill = request.failure.kill;
    opt.executor.fail_non_finite = request.failure.non_finite;
  }
  out.device_kind = rt.device->kind();

  TrainingSession session(*rt.comm, opt.session);
  Executor& exec = session.prepare([&] {
    return std::make_unique<Executor>(sc, plan, graph, out.setup.model, *rt.device, *rt.comm,
                                      opt.executor);
  });
  if (!settings.resume.empty())
    say("resumed from " + settings.resume.string() + " at step " +
        std::to_string(exec.next_step()));

  std::optional<OracleDump> oracle;
  if (!request.dump_oracle.empty()) {
    oracle.emplace(request.dump_oracle, exec, sc, plan, settings.data_seed, rank);
    oracle->before_training();
  }
  out.result = session.run([&](const StepResult& r) {
    if (oracle) oracle->after_step(r);
    if (progress.on_step) progress.on_step(r);
  });
  if (oracle) oracle->finish();
  if (!out.trained()) {
    say("nothing to run: already at step " + std::to_string(exec.next_step()));
    return out;
  }
  out.report = reported_report(out.result);
  out.step_label = reported_step_label(out.result, settings.report);
  // Collective: every rank gathers what a dump needs, rank 0 writes.
  std::vector<float> params, grads;
  if (settings.dump_params) params = exec.gather_parameters();
  if (settings.dump_grads) grads = exec.gather_gradients();
  if (rank == 0)
    write_run_outputs(request, out.setup, graph, out.result, out.report, out.device_kind,
                      out.step_label, params, grads);
  return out;
}

}  // namespace cephalo::backend

// `[mpirun -np N] cephalo profile --device cpu --model M --seq S ...`: the command line of the
// profiler (backend/profiler.hpp: what is measured and how). The flags fill a
// backend::ProfileRequest, whose text complete_profile_request parses and checks;
// backend::profile_this_rank (profile_run.hpp) measures this rank and writes the files. Progress
// goes to stderr; rank 0 prints. `cephalo profile validate` is the face of
// costmodels::validate_compute_models (used by notebooks/costmodel_validation.ipynb).
#include <iostream>
#include <memory>

#include "cephalo/backend/profile_run.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct ProfileArgs {
  backend::ProfileRequest request;
  backend::ProfileRequestText text;  // parsed and checked by backend::complete_profile_request
  bool json = false;
};

void run_profile(const ProfileArgs& a) {
  backend::ProfileRequest request =
      backend::complete_profile_request(a.request, a.text, kCommandLine);
  request.tool = "cephalo profile " CEPHALO_VERSION;
  // Without mpirun a single process profiles without initialising MPI (no collective sweep).
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const bool lead = mpi.world_rank() == 0;
  const auto out = backend::profile_this_rank(mpi, request, [&](const std::string& line) {
    if (lead) std::cerr << "profile: " << line << std::endl;
  });
  if (out.lead)
    print_json_or_text(
        a.json, [&] { return out.record; },
        [&] { return backend::render_profile_outcome(out, request); });
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand(
      "profile", "Measure per-layer compute, optimizer, copies and (under mpirun) collectives");
  cmd->add_option("--device", a->request.device, "cpu or cuda")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--model", a->text.model, "catalog model (required to measure)")
      ->check(catalog_model());
  cmd->add_option("--seq", a->request.seq, "sequence length (required to measure)")
      ->check(integer_in(1, 1 << 22));
  cmd->add_option("--micro-batches", a->text.micro_batches, "sizes: 1..K, K or a list 1,2,4")
      ->capture_default_str();
  cmd->add_option("--as", a->request.record_as,
                  "catalog device the rows are recorded under (default: cpu for --device cpu)")
      ->check(catalog_gpu());
  cmd->add_option("--dtype", a->text.dtype,
                  "compute type of the layer timings: fp32, tf32, bf16, fp16")
      ->capture_default_str()
      ->check(dtype_name());
  cmd->add_option("--threads", a->request.threads, "CPU threads per rank")
      ->capture_default_str()
      ->check(integer_in(1, 1024));
  cmd->add_option("--repeats", a->request.profiler.repeats, "timed calls per point (median)")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  cmd->add_option("--warmup", a->request.profiler.warmup, "untimed calls before each point")
      ->capture_default_str()
      ->check(integer_in(0, 100000));
  cmd->add_option("--statistic", a->request.profiler.statistic, "of the repeats: median or min")
      ->capture_default_str()
      ->check(one_of({"median", "min"}));
  cmd->add_option("--max-bytes", a->text.max_bytes, "largest collective and copy size")
      ->capture_default_str();
  auto* no_collectives = cmd->add_flag("--no-collectives", a->text.no_collectives,
                                       "skip the collective sweep under mpirun");
  cmd->add_option("-o,--output", a->request.output, "write the calibration file (cephalo-profile)");
  // No sweep, no sweep file: refused rather than dropped.
  cmd->add_option("--sweep-out", a->request.sweep_output,
                  "collective sweep file (default: <output stem>.sweep.json under mpirun)")
      ->excludes(no_collectives);
  cmd->add_flag("--json", a->json, "print the calibration record as JSON");
  // How well the calibrated compute model predicts profiles it was not fitted to (leave one GPU
  // or one model out of the shipped profiles plus any given).
  static struct {
    std::vector<std::string> profiles;
    bool json = false;
  } v;
  auto* val = cmd->add_subcommand(
      "validate", "Leave-one-GPU-out / leave-one-model-out errors of the calibrated model");
  val->add_option("--profiles", v.profiles, "extra profile files (either format)");
  val->add_flag("--json", v.json, "print the record as JSON");
  val->callback([] {
    costmodels::ProfileTables tables = costmodels::ProfileTables::builtin();
    for (const auto& f : v.profiles) tables.merge(costmodels::ProfileTables::load(f));
    // The report points into `tables` (its inconsistent rows).
    const costmodels::ValidationReport rep = costmodels::validate_compute_models(tables);
    print_json_or_text(
        v.json, [&] { return costmodels::to_json(rep); },
        [&] { return costmodels::render_validation(rep); });
  });
  cmd->require_subcommand(0, 1);
  cmd->callback([a, cmd, val] {
    if (cmd->got_subcommand(val)) return;
    if (a->text.model.empty()) throw CLI::RequiredError("--model");
    if (a->request.seq == 0) throw CLI::RequiredError("--seq");
    run_profile(*a);
  });
}

}  // namespace cephalo::cli

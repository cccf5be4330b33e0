// `cephalo profile`: the command line of the profiler (backend/profiler.hpp: what is measured
// and how). Checks and parses the flags into a backend::ProfileRequest; backend::
// profile_this_rank (profile_run.hpp) builds this rank's device + communicator, measures and
// writes the record through costmodels' writers (the project's calibration format
// "cephalo-profile", read by costmodels::ProfileTables::load_own, and under mpirun the
// "cephalo-collective-sweep" that costmodels::calibrate_comm fits). Progress goes to stderr;
// rank 0 prints. `cephalo profile validate` is the face of
// costmodels::validate_compute_models.
#include <iostream>
#include <memory>

#include "cephalo/backend/profile_run.hpp"
#include "cephalo/core/checked.hpp"
#include "cephalo/core/dtype.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "cephalo/costmodels/profile_writer.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct ProfileArgs {
  backend::ProfileRequest request;
  std::string model;
  std::string micro_batches = "1..4";
  std::string dtype = "fp32";  // compute type of parameters and activations (as a job's)
  std::string max_collective_bytes = "16MiB";
  bool no_collectives = false;
  bool json = false;
};

void run_profile(const ProfileArgs& a) {
  // --device, --seq, --statistic, --repeats, --warmup and --dtype passed their validators.
  backend::ProfileRequest request = a.request;
  const auto micro_batches = backend::parse_micro_batch_sizes(a.micro_batches);
  if (!micro_batches)
    throw CLI::ValidationError(
        "--micro-batches",
        "expected 1..K, K or a list like 1,2,4 of sizes >= 1, got \"" + a.micro_batches + "\"");
  request.profiler.micro_batches = *micro_batches;
  request.model = costmodels::ModelCatalog::builtin().get(a.model);
  // The job parser's rule (a model's usable learned positions), not one of the profiler's own.
  if (const std::string why = sequence_refusal(request.model, request.seq); !why.empty())
    throw CLI::ValidationError("--seq", why + ", got " + std::to_string(request.seq));
  request.profiler.dtype = parse_dtype(a.dtype).value();
  const auto max_bytes = parse_quantity(a.max_collective_bytes, Quantity::Bytes);
  if (!max_bytes || *max_bytes < 64 * 1024)
    throw CLI::ValidationError("--max-bytes",
                               "expected a size of at least 64KiB such as "
                               "\"16MiB\", got \"" +
                                   a.max_collective_bytes + "\"");
  request.profiler.max_bytes = *max_bytes;
  request.profiler.collectives = !a.no_collectives;
  if (request.device == "cuda" && request.record_as.empty())
    throw CLI::ValidationError("--as",
                               "--device cuda needs --as GPU: the catalog name the "
                               "measurements are recorded under (e.g. h100)");
  request.tool = "cephalo profile " CEPHALO_VERSION;

  // Without mpirun a single process profiles without initialising MPI (no collective sweep).
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const bool lead = mpi.world_rank() == 0;
  const auto out = backend::profile_this_rank(mpi, request, [&](const std::string& line) {
    if (lead) std::cerr << "profile: " << line << std::endl;
  });
  if (!out.lead) return;
  if (a.json) {
    std::cout << out.record.dump(2) << "\n";
    return;
  }
  std::cout << "profile of " << request.model.name << " at sequence " << request.seq << " on "
            << out.device_name << " (recorded as " << out.recorded_as << ")\n\n"
            << costmodels::render_profile_tables(out.profile);
}

// `cephalo profile validate`: how well the calibrated compute model predicts profiles it was
// not fitted to (leave-one-GPU-out and leave-one-model-out over the shipped profiles plus any
// given profile files). The numbers come from costmodels::validate_compute_models; this is its
// command-line face, used by notebooks/costmodel_validation.ipynb.
struct ValidateArgs {
  std::vector<std::string> profiles;
  bool json = false;
};

void run_validate(const ValidateArgs& a) {
  costmodels::ProfileTables tables = costmodels::ProfileTables::builtin();
  for (const auto& f : a.profiles) tables.merge(costmodels::ProfileTables::load(f));
  // The report points into `tables` (its inconsistent rows).
  const costmodels::ValidationReport rep = costmodels::validate_compute_models(tables);
  if (a.json)
    std::cout << costmodels::to_json(rep).dump(2) << "\n";
  else
    std::cout << costmodels::render_validation(rep);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand(
      "profile", "Measure per-layer compute, optimizer, copies and (under mpirun) collectives");
  cmd->add_option("--device", a->request.device, "cpu or cuda")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--model", a->model, "catalog model (required to measure)")
      ->check(catalog_model());
  cmd->add_option("--seq", a->request.seq, "sequence length (required to measure)")
      ->check(integer_in(1, 1 << 22));
  cmd->add_option("--micro-batches", a->micro_batches, "sizes: 1..K, K or a list 1,2,4")
      ->capture_default_str();
  cmd->add_option("--as", a->request.record_as,
                  "catalog device the rows are recorded under (default: cpu for --device cpu)");
  cmd->add_option("--dtype", a->dtype, "compute type of the layer timings: fp32, tf32, bf16, fp16")
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
  cmd->add_option("--max-bytes", a->max_collective_bytes, "largest collective and copy size")
      ->capture_default_str();
  cmd->add_flag("--no-collectives", a->no_collectives, "skip the collective sweep under mpirun");
  cmd->add_option("-o,--output", a->request.output, "write the calibration file (cephalo-profile)");
  cmd->add_option("--sweep-out", a->request.sweep_output,
                  "collective sweep file (default: <output stem>.sweep.json under mpirun)");
  cmd->add_flag("--json", a->json, "print the calibration record as JSON");
  auto v = std::make_shared<ValidateArgs>();
  auto* val = cmd->add_subcommand(
      "validate", "Leave-one-GPU-out / leave-one-model-out errors of the calibrated model");
  val->add_option("--profiles", v->profiles, "extra profile files (either format)");
  val->add_flag("--json", v->json, "print the record as JSON");
  val->callback([v] { run_validate(*v); });
  cmd->require_subcommand(0, 1);
  cmd->callback([a, cmd, val] {
    if (cmd->got_subcommand(val)) return;
    if (a->model.empty()) throw CLI::RequiredError("--model");
    if (a->request.seq == 0) throw CLI::RequiredError("--seq");
    run_profile(*a);
  });
}

}  // namespace cephalo::cli

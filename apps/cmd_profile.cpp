// `cephalo profile`: the command line of the profiler (backend/profiler.hpp: what is measured
// and how). Parses, builds this rank's device + communicator (backend/runtime.hpp), calls
// backend::profile_model and writes its record through costmodels' writers (the project's
// calibration format "cephalo-profile", read by costmodels::ProfileTables::load_own, and under
// mpirun the "cephalo-collective-sweep" that costmodels::calibrate_comm fits). Progress goes to
// stderr; rank 0 prints and writes. `cephalo profile validate` is the face of
// costmodels::validate_compute_models.
#include <algorithm>
#include <iostream>
#include <memory>

#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/profiler.hpp"
#include "cephalo/backend/runtime.hpp"
#include "cephalo/core/checked.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/table.hpp"
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
  std::string device = "cpu";
  std::string model;
  int seq = 0;
  std::string micro_batches = "1..4";
  std::string as_gpu;          // catalog name recorded in the rows (default: CPU-core / the GPU)
  std::string dtype = "fp32";  // compute type of parameters and activations (as a job's)
  int threads = 1;
  int repeats = 5;
  int warmup = 1;
  std::string statistic = "median";  // of the timed repeats: median, or min (least disturbed)
  std::string output;
  std::string sweep_output;
  std::string max_collective_bytes = "16MiB";
  bool no_collectives = false;
  bool json = false;
};

// "1..K", "K" (= 1..K) or "1,2,4,8".
std::vector<int> parse_micro_batches(const std::string& text) {
  auto bad = [&]() -> std::vector<int> {
    throw CLI::ValidationError(
        "--micro-batches",
        "expected 1..K, K or a list like 1,2,4 of sizes >= 1, got \"" + text + "\"");
  };
  std::vector<int> out;
  try {
    auto dots = text.find("..");
    if (dots != std::string::npos) {
      int lo = std::stoi(text.substr(0, dots)), hi = std::stoi(text.substr(dots + 2));
      if (lo < 1 || hi < lo || hi > 4096) return bad();
      for (int m = lo; m <= hi; ++m) out.push_back(m);
      return out;
    }
    std::size_t pos = 0;
    while (pos < text.size()) {
      auto comma = text.find(',', pos);
      std::string part =
          text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      std::size_t used = 0;
      int m = std::stoi(part, &used);
      if (used != part.size() || m < 1 || m > 4096) return bad();
      out.push_back(m);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } catch (const std::logic_error&) {
    return bad();
  }
  if (out.empty()) return bad();
  if (out.size() == 1 && text.find(',') == std::string::npos) {
    int k = out[0];
    out.clear();
    for (int m = 1; m <= k; ++m) out.push_back(m);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void run_profile(const ProfileArgs& a) {
  // --device, --seq, --statistic, --repeats, --warmup and --dtype passed their validators.
  const std::vector<int> micro_batches = parse_micro_batches(a.micro_batches);
  const ModelSpec& spec = costmodels::ModelCatalog::builtin().get(a.model);
  // The job parser's rule (a model's usable learned positions), not one of the profiler's own.
  if (const std::string why = sequence_refusal(spec, a.seq); !why.empty())
    throw CLI::ValidationError("--seq", why + ", got " + std::to_string(a.seq));
  const backend::GptConfig cfg = backend::GptConfig::from_spec(spec, a.seq);
  const Dtype dtype = parse_dtype(a.dtype).value();
  const auto max_bytes = parse_quantity(a.max_collective_bytes, Quantity::Bytes);
  if (!max_bytes || *max_bytes < 64 * 1024)
    throw CLI::ValidationError("--max-bytes",
                               "expected a size of at least 64KiB such as "
                               "\"16MiB\", got \"" +
                                   a.max_collective_bytes + "\"");

  // Without mpirun a single process profiles without initialising MPI (no collective sweep).
  backend::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  const int rank = mpi.world_rank(), world = mpi.world_size();
  const bool lead = rank == 0;
  // Output locations before measuring (output_file.hpp); the sweep file as written below.
  const std::string sweep_file = !a.sweep_output.empty() || world == 1 || a.no_collectives
                                     ? a.sweep_output
                                     : backend::sweep_file_beside(a.output);
  check_outputs({{"--output", a.output}, {"--sweep-out", sweep_file}});
  std::string gpu_name = a.as_gpu;
  if (a.device == "cuda" && gpu_name.empty())
    throw CLI::ValidationError("--as",
                               "--device cuda needs --as GPU: the catalog name the "
                               "measurements are recorded under (e.g. h100)");
  if (gpu_name.empty()) gpu_name = "cpu";
  backend::RuntimeOptions ropt;
  ropt.device = a.device;
  ropt.cpu.ordinal = rank;
  ropt.cpu.threads = a.threads;
  ropt.allow_tf32 = dtype == Dtype::TF32;  // fp32 rows are measured without tensor-core TF32
  backend::Runtime rt = backend::make_runtime(mpi, ropt);
  const DeviceSpec& dspec = costmodels::GpuCatalog::builtin().get(gpu_name);
  auto say = [&](const std::string& line) {
    if (lead) std::cerr << "profile: " << line << std::endl;
  };
  say(rt.device->name() + ", model " + spec.name + " (" + std::to_string(cfg.layers) +
      " layers, hidden " + std::to_string(cfg.hidden) + "), sequence " + std::to_string(a.seq) +
      ", " + std::to_string(world) + " rank(s), recorded as " + dspec.name);

  backend::ProfilerOptions popt;
  popt.micro_batches = micro_batches;
  popt.dtype = dtype;
  popt.repeats = a.repeats;
  popt.warmup = a.warmup;
  popt.statistic = a.statistic;
  popt.max_bytes = *max_bytes;
  popt.collectives = !a.no_collectives;
  popt.record_as = dspec.name;
  popt.model_name = spec.name;
  costmodels::MeasuredProfile prof = backend::profile_model(*rt.device, *rt.comm, cfg, popt, say);
  if (world == 1) say("single process: no collective sweep (run under mpirun -np N for one)");
  if (!lead) return;
  backend::stamp_provenance(prof, "cephalo profile " CEPHALO_VERSION, rt.device->name(), world,
                            popt);
  const Json record = costmodels::profile_to_json(prof);
  if (!a.output.empty()) {
    write_file_atomically(a.output, record.dump(2) + "\n");
    std::cerr << "profile: wrote " << a.output << std::endl;
  }
  if (!prof.collectives.empty() && !sweep_file.empty()) {
    write_file_atomically(
        sweep_file, costmodels::collective_sweep_to_json(prof, rt.device->name()).dump(2) + "\n");
    std::cerr << "profile: wrote " << sweep_file << std::endl;
  }
  if (a.json) {
    std::cout << record.dump(2) << "\n";
    return;
  }
  std::cout << "profile of " << spec.name << " at sequence " << a.seq << " on " << rt.device->name()
            << " (recorded as " << dspec.name << ")\n\n"
            << costmodels::render_profile_tables(prof);
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
  cmd->add_option("--device", a->device, "cpu or cuda")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda"}));
  cmd->add_option("--model", a->model, "catalog model (required to measure)")
      ->check(catalog_model());
  cmd->add_option("--seq", a->seq, "sequence length (required to measure)")
      ->check(integer_in(1, 1 << 22));
  cmd->add_option("--micro-batches", a->micro_batches, "sizes: 1..K, K or a list 1,2,4")
      ->capture_default_str();
  cmd->add_option("--as", a->as_gpu,
                  "catalog device the rows are recorded under (default: cpu for --device cpu)");
  cmd->add_option("--dtype", a->dtype, "compute type of the layer timings: fp32, tf32, bf16, fp16")
      ->capture_default_str()
      ->check(dtype_name());
  cmd->add_option("--threads", a->threads, "CPU threads per rank")
      ->capture_default_str()
      ->check(integer_in(1, 1024));
  cmd->add_option("--repeats", a->repeats, "timed calls per point (median)")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  cmd->add_option("--warmup", a->warmup, "untimed calls before each point")
      ->capture_default_str()
      ->check(integer_in(0, 100000));
  cmd->add_option("--statistic", a->statistic, "of the repeats: median or min")
      ->capture_default_str()
      ->check(one_of({"median", "min"}));
  cmd->add_option("--max-bytes", a->max_collective_bytes, "largest collective and copy size")
      ->capture_default_str();
  cmd->add_flag("--no-collectives", a->no_collectives, "skip the collective sweep under mpirun");
  cmd->add_option("-o,--output", a->output, "write the calibration file (cephalo-profile)");
  cmd->add_option("--sweep-out", a->sweep_output,
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
    if (a->seq == 0) throw CLI::RequiredError("--seq");
    run_profile(*a);
  });
}

}  // namespace cephalo::cli

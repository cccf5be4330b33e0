// `cephalo profile` between its flags and its printing (profile_run.hpp).
#include "cephalo/backend/profile_run.hpp"

#include <algorithm>
#include <stdexcept>

#include "cephalo/backend/runtime.hpp"
#include "cephalo/core/checked.hpp"
#include "cephalo/core/dtype.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile_writer.hpp"

namespace cephalo::backend {

std::optional<std::vector<int>> parse_micro_batch_sizes(std::string_view text_view) {
  const std::string text(text_view);
  std::vector<int> out;
  try {
    auto dots = text.find("..");
    if (dots != std::string::npos) {
      int lo = std::stoi(text.substr(0, dots)), hi = std::stoi(text.substr(dots + 2));
      if (lo < 1 || hi < lo || hi > 4096) return std::nullopt;
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
      if (used != part.size() || m < 1 || m > 4096) return std::nullopt;
      out.push_back(m);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } catch (const std::logic_error&) {
    return std::nullopt;
  }
  if (out.empty()) return std::nullopt;
  if (out.size() == 1 && text.find(',') == std::string::npos) {
    const int k = out[0];
    out.clear();
    for (int m = 1; m <= k; ++m) out.push_back(m);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ProfileRequest complete_profile_request(ProfileRequest request, const ProfileRequestText& text,
                                        const std::string& source) {
  const auto micro_batches = parse_micro_batch_sizes(text.micro_batches);
  if (!micro_batches)
    throw ValidationError(source, "--micro-batches", text.micro_batches,
                          "1..K, K or a list like 1,2,4 of sizes >= 1");
  request.profiler.micro_batches = *micro_batches;
  request.model = costmodels::ModelCatalog::builtin().get(text.model);
  if (const std::string why = sequence_refusal(request.model, request.seq); !why.empty())
    throw ValidationError(source, "--seq", std::to_string(request.seq), why);
  const auto dtype = parse_dtype(text.dtype);
  if (!dtype) throw ValidationError(source, "--dtype", text.dtype, "one of " + dtype_spellings());
  request.profiler.dtype = *dtype;
  const auto max_bytes = parse_quantity(text.max_bytes, Quantity::Bytes);
  if (!max_bytes || *max_bytes < 64 * 1024)
    throw ValidationError(source, "--max-bytes", text.max_bytes,
                          "a size of at least 64KiB such as \"16MiB\"");
  request.profiler.max_bytes = *max_bytes;
  request.profiler.collectives = !text.no_collectives;
  if (request.device == "cuda" && request.record_as.empty())
    throw ValidationError(source, "--as", "",
                          "with --device cuda, the catalog GPU the measurements are recorded "
                          "under (e.g. h100)");
  return request;
}

std::string render_profile_outcome(const ProfileOutcome& out, const ProfileRequest& request) {
  return "profile of " + request.model.name + " at sequence " + std::to_string(request.seq) +
         " on " + out.device_name + " (recorded as " + out.recorded_as + ")\n\n" +
         costmodels::render_profile_tables(out.profile);
}

std::string profile_sweep_file(const ProfileRequest& request, int world_size) {
  // A named sweep file that a single process would never write is refused before measuring,
  // not left unwritten after an exit 0.
  if (!request.sweep_output.empty() && world_size == 1)
    throw ValidationError("command line", "--sweep-out", request.sweep_output,
                          "no --sweep-out for a single process: the collective sweep is "
                          "measured only under mpirun -np N with N >= 2");
  if (!request.sweep_output.empty() || world_size == 1 || !request.profiler.collectives)
    return request.sweep_output;
  return sweep_file_beside(request.output);
}

ProfileOutcome profile_this_rank(const MpiRuntime& mpi, const ProfileRequest& request,
                                 const std::function<void(const std::string&)>& say) {
  const int rank = mpi.world_rank(), world = mpi.world_size();
  ProfileOutcome out;
  out.lead = rank == 0;
  const GptConfig cfg = GptConfig::from_spec(request.model, request.seq);
  // Output locations before measuring (output_file.hpp).
  const std::string sweep_file = profile_sweep_file(request, world);
  check_outputs({{"--output", request.output}, {"--sweep-out", sweep_file}});
  RuntimeOptions ropt;
  ropt.device = request.device;
  ropt.cpu.ordinal = rank;
  ropt.cpu.threads = request.threads;
  // fp32 rows are measured without tensor-core TF32.
  ropt.allow_tf32 = request.profiler.dtype == Dtype::TF32;
  Runtime rt = make_runtime(mpi, ropt);
  out.device_name = rt.device->name();
  const DeviceSpec& dspec = costmodels::GpuCatalog::builtin().get(
      request.record_as.empty() ? std::string("cpu") : request.record_as);
  out.recorded_as = dspec.name;
  say(out.device_name + ", model " + request.model.name + " (" + std::to_string(cfg.layers) +
      " layers, hidden " + std::to_string(cfg.hidden) + "), sequence " +
      std::to_string(request.seq) + ", " + std::to_string(world) + " rank(s), recorded as " +
      dspec.name);

  ProfilerOptions popt = request.profiler;
  popt.record_as = dspec.name;
  popt.model_name = request.model.name;
  out.profile = profile_model(*rt.device, *rt.comm, cfg, popt, say);
  if (world == 1) say("single process: no collective sweep (run under mpirun -np N for one)");
  if (!out.lead) return out;
  stamp_provenance(out.profile, request.tool, out.device_name, world, popt);
  out.record = costmodels::profile_to_json(out.profile);
  if (!request.output.empty()) {
    write_file_atomically(request.output, out.record.dump(2) + "\n");
    say("wrote " + request.output);
  }
  if (!out.profile.collectives.empty() && !sweep_file.empty()) {
    write_file_atomically(
        sweep_file,
        costmodels::collective_sweep_to_json(out.profile, out.device_name).dump(2) + "\n");
    say("wrote " + sweep_file);
  }
  return out;
}

}  // namespace cephalo::backend

// `cephalo profile` between its flags and its printing (profile_run.hpp).
#include "cephalo/backend/profile_run.hpp"

#include <algorithm>
#include <stdexcept>

#include "cephalo/backend/runtime.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/costmodels/catalog.hpp"

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

std::string profile_sweep_file(const ProfileRequest& request, int world_size) {
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

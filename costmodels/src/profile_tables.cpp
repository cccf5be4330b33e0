// The per-layer profile tables: rows, lookups by catalog name, evaluation at a micro-batch.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "fit_cache.hpp"
#include "profile_util.hpp"

namespace cephalo::costmodels {
using detail::lower;
using detail::read_pair;

std::string to_string(ProfileShape shape) {
  switch (shape) {
    case ProfileShape::Measured:
      return "measured";
    case ProfileShape::Fit:
      return "fit";
    case ProfileShape::Combined:
      return "combined";
    case ProfileShape::CombinedSlope:
      return "combined-slope";
  }
  return "?";
}

int LayerProfile::richness() const {
  int base = shape == ProfileShape::Measured   ? 3000
             : shape == ProfileShape::Fit      ? 2000
             : shape == ProfileShape::Combined ? 1000
                                               : 0;
  return base + static_cast<int>(micro_batches.size());
}

namespace {

// Piecewise-linear in the measured points, linear beyond them.
double interpolate(const std::vector<int>& m, const std::vector<double>& t, double slope, int x,
                   bool& extrapolated, bool& exact) {
  extrapolated = false;
  exact = false;
  if (x <= m.front()) {
    exact = x == m.front();
    if (exact) return t.front();
    extrapolated = true;
    return std::max(t.front() * x / m.front(), t.front() + slope * (x - m.front()));
  }
  if (x >= m.back()) {
    exact = x == m.back();
    if (!exact) extrapolated = true;
    return t.back() + slope * (x - m.back());
  }
  auto it = std::lower_bound(m.begin(), m.end(), x);
  std::size_t hi = static_cast<std::size_t>(it - m.begin());
  if (m[hi] == x) {
    exact = true;
    return t[hi];
  }
  std::size_t lo = hi - 1;
  double w = static_cast<double>(x - m[lo]) / (m[hi] - m[lo]);
  return t[lo] + w * (t[hi] - t[lo]);
}

}  // namespace

Implementation cephalo_profile_implementation(const std::string& family,
                                              const std::string& architecture, Dtype dtype) {
  const bool hf = family == "llama";
  const bool ampere_or_newer = architecture == "ampere" || architecture == "ada" ||
                               architecture == "hopper" || architecture == "blackwell";
  const bool half = dtype == Dtype::FP16 || dtype == Dtype::BF16;
  return {hf && ampere_or_newer && half ? AttentionKernel::Flash : AttentionKernel::Eager, false};
}

void ProfileTables::add(LayerProfile row) {
  // One search of the index, whether the row is new or not (the start-up cache adds ~300).
  const auto [it, added] = index_.try_emplace(
      std::make_tuple(lower(row.model), lower(row.gpu), row.seq, static_cast<int>(row.dtype)),
      rows_.size());
  if (!added) {
    LayerProfile& existing = rows_[it->second];
    if (row.richness() > existing.richness()) existing = std::move(row);
    return;
  }
  rows_.push_back(std::move(row));
}

const LayerProfile* ProfileTables::lookup(const std::string& model_lower,
                                          const std::string& gpu_lower, int seq,
                                          Dtype dtype) const {
  auto it = index_.find(std::make_tuple(model_lower, gpu_lower, seq, static_cast<int>(dtype)));
  return it == index_.end() ? nullptr : &rows_[it->second];
}

void ProfileTables::merge(const ProfileTables& other) {
  for (const auto& r : other.rows_) add(r);
  for (const auto& u : other.units_) units_.push_back(u);
  for (const auto& o : other.optimizers_) optimizers_.push_back(o);
  for (const auto& n : other.unresolved_) unresolved_.push_back(n);
}

ProfileTables ProfileTables::load(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  if (j.is_object() && j.contains("format")) return load_own(file);
  if (!is_cephalo_layout(j))
    throw ValidationError(file.string(), "format", "nothing (no \"format\" key)",
                          "a profile: \"format\": \"cephalo-profile\", or Cephalo's "
                          "model_latencies.json layout {model: {gpu: {seq: {dtype: entry}}}}");
  return load_cephalo(file);
}

const ProfileTables& ProfileTables::builtin() {
  static const ProfileTables tables = [] {
    if (auto cached = fit_cache::cached_tables()) return std::move(*cached);
    return load_cephalo(data_dir() / "calibration" / "cephalo-profiles" / "model_latencies.json");
  }();
  return tables;
}

const LayerProfile* ProfileTables::find(const std::string& model_name, const std::string& gpu_name,
                                        int seq, Dtype dtype) const {
  // Fast path: canonical names (what the simulator passes), then catalog aliases.
  if (const auto* r = lookup(lower(model_name), lower(gpu_name), seq, dtype)) return r;
  auto model = ModelCatalog::builtin().find(model_name);
  auto gpu = GpuCatalog::builtin().find(gpu_name);
  if (!model || !gpu) return nullptr;
  return lookup(lower(model->name), lower(gpu->name), seq, dtype);
}

const LayerProfile* ProfileTables::find_for(const std::string& model, const std::string& gpu,
                                            int seq, Dtype dtype, std::string* note) const {
  if (const auto* r = find(model, gpu, seq, dtype)) return r;
  // An fp16 row stands for bf16 only on a GPU with a bf16 tensor rate: a V100 or T4 asked for
  // bf16 has none (it computes on its fp32 pipeline, precision_warnings), so its fp16 row,
  // measured on tensor cores, would price it 5-10x too fast.
  const auto spec = GpuCatalog::builtin().find(gpu);
  if (dtype == Dtype::BF16 && spec && spec->peak_bf16 > 0) {
    if (const auto* r = find(model, gpu, seq, Dtype::FP16)) {
      if (note) *note = "fp16 profile used for bf16";
      return r;
    }
  }
  return nullptr;
}

LayerTime ProfileTables::evaluate(const LayerProfile& row, int micro_batch) {
  if (micro_batch <= 0)
    throw ValidationError("", "micro_batch", std::to_string(micro_batch), "a micro-batch >= 1");
  LayerTime t;
  if (!row.micro_batches.empty()) {
    bool ext = false, exact = false;
    t.forward_ms = interpolate(row.micro_batches, row.forward_ms, row.forward.slope_ms, micro_batch,
                               ext, exact);
    t.backward_ms = interpolate(row.micro_batches, row.backward_ms, row.backward.slope_ms,
                                micro_batch, ext, exact);
    t.recompute_ms = row.recompute_ms.empty()
                         ? t.forward_ms
                         : interpolate(row.micro_batches, row.recompute_ms, row.forward.slope_ms,
                                       micro_batch, ext, exact);
    t.extrapolated = ext;
    t.measured = exact;
    t.detail = exact ? "measured"
               : ext ? "extrapolated linearly beyond m=" + std::to_string(row.measured_max())
                     : "interpolated";
  } else {
    // A fit without its points: negative intercepts make tiny micro-batches implausibly fast,
    // so the per-sample time never drops below a quarter of the slope.
    auto eval = [&](const LinearFit& f) {
      return std::max(f.at(micro_batch), 0.25 * f.slope_ms * micro_batch);
    };
    t.forward_ms = eval(row.forward);
    t.backward_ms = eval(row.backward);
    t.recompute_ms = t.forward_ms;
    t.detail = row.shape == ProfileShape::Fit ? "linear fit (measured range not published)"
                                              : "linear fit of forward+backward, split";
  }
  return t;
}

LayerTime ProfileTables::layer_time(const std::string& model, const std::string& gpu, int seq,
                                    Dtype dtype, int micro_batch) const {
  std::string note;
  const LayerProfile* row = find_for(model, gpu, seq, dtype, &note);
  if (!row)
    throw InfeasibleError("no profile for model " + model + " on GPU " + gpu + " at sequence " +
                          std::to_string(seq) + " in " + to_string(dtype) +
                          "; use --source calibrated (fitted to the profiles that exist) or "
                          "roofline");
  LayerTime t = evaluate(*row, micro_batch);
  if (!note.empty()) t.detail += "; " + note;
  return t;
}

const UnitProfile* ProfileTables::find_unit(const std::string& model, const std::string& gpu,
                                            int seq, Dtype dtype, const std::string& unit) const {
  auto m = ModelCatalog::builtin().find(model);
  auto g = GpuCatalog::builtin().find(gpu);
  for (const auto& u : units_)
    if (m && g && u.model == m->name && u.gpu == g->name && u.seq == seq && u.dtype == dtype &&
        u.unit == unit)
      return &u;
  return nullptr;
}

const OptimizerProfile* ProfileTables::find_optimizer(const std::string& gpu) const {
  auto g = GpuCatalog::builtin().find(gpu);
  for (const auto& o : optimizers_)
    if (g && o.gpu == g->name) return &o;
  return nullptr;
}

}  // namespace cephalo::costmodels

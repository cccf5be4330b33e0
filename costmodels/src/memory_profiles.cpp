// Cephalo's published compute-memory curves (model_memory.json) per cluster, model and dtype.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "profile_util.hpp"

namespace cephalo::costmodels {
using detail::lower;
using detail::read_pair;

double MemoryCurve::compute_gib_at(int m, bool* extrapolated) const {
  if (m <= 0) throw ValidationError("", "micro_batch", std::to_string(m), "a micro-batch >= 1");
  if (compute_gib.empty()) throw InfeasibleError("memory curve without points");
  const int k = static_cast<int>(compute_gib.size());
  if (extrapolated) *extrapolated = m > k;
  if (m <= k) return compute_gib[static_cast<std::size_t>(m - 1)];
  double slope = k >= 2 ? compute_gib[static_cast<std::size_t>(k - 1)] -
                              compute_gib[static_cast<std::size_t>(k - 2)]
                        : (ga_model ? ga_model->slope_ms : compute_gib[0]);
  return compute_gib.back() + slope * (m - k);
}

MemoryProfiles MemoryProfiles::load(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  if (!root.is_object()) root.fail("an object {cluster: {model: {...}}}");
  MemoryProfiles out;
  for (auto& [cluster, models] : j.items()) {
    JsonReader c = root.child(cluster);
    for (auto& [model_name, entry] : models.items()) {
      JsonReader e = c.child(model_name);
      auto model = ModelCatalog::builtin().find(model_name);
      if (!model) {
        out.unresolved_.push_back("model " + model_name + " (cluster " + cluster + ")");
        continue;
      }
      double parameters = e.number_or("parameters", 0);
      std::map<Dtype, LinearFit> ga;
      if (auto g = e.optional_child("profiled_ga_model"); g && !g->value().is_null()) {
        for (auto& [dt, v] : g->value().items()) {
          auto d = parse_dtype(dt);
          if (!d) g->child(dt).fail_value(dt, "a dtype key: one of " + dtype_spellings());
          LinearFit f = read_pair(g->child(dt));
          ga[*d] = {f.slope_ms, f.intercept_ms};
        }
      }
      auto mem = e.child("profiled_compute_memory");
      for (auto& [dt, v] : mem.value().items()) {
        auto d = parse_dtype(dt);
        if (!d) mem.child(dt).fail_value(dt, "a dtype key: one of " + dtype_spellings());
        MemoryCurve curve;
        curve.cluster = cluster;
        curve.model = model->name;
        curve.file_model = model_name;
        curve.dtype = *d;
        curve.parameters = parameters;
        for (auto& x : mem.child(dt).elements()) {
          double gib = x.as_number();
          if (!(gib > 0)) x.fail("a memory size > 0 GiB");
          curve.compute_gib.push_back(gib);
        }
        if (curve.compute_gib.empty()) mem.child(dt).fail("a non-empty list");
        if (auto it = ga.find(*d); it != ga.end()) curve.ga_model = it->second;
        out.curves_.push_back(std::move(curve));
      }
      e.finish();
    }
  }
  return out;
}

const MemoryProfiles& MemoryProfiles::builtin() {
  static const MemoryProfiles p =
      load(data_dir() / "calibration" / "cephalo-profiles" / "model_memory.json");
  return p;
}

const MemoryCurve* MemoryProfiles::find(const std::string& cluster, const std::string& model,
                                        Dtype dtype) const {
  auto m = ModelCatalog::builtin().find(model);
  // Prefer the curve written under the name given (gpt_2.7b and deepspeedgpt_2.7b differ).
  const MemoryCurve* by_canonical = nullptr;
  for (const auto& c : curves_) {
    if (c.cluster != cluster || c.dtype != dtype) continue;
    if (lower(c.file_model) == lower(model)) return &c;
    if (m && c.model == m->name && !by_canonical) by_canonical = &c;
  }
  return by_canonical;
}

std::vector<std::string> MemoryProfiles::clusters() const {
  std::vector<std::string> out;
  for (const auto& c : curves_)
    if (std::find(out.begin(), out.end(), c.cluster) == out.end()) out.push_back(c.cluster);
  return out;
}

}  // namespace cephalo::costmodels

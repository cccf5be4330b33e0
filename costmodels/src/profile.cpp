#include "cephalo/costmodels/profile.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::costmodels {

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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

LinearFit least_squares(const std::vector<int>& m, const std::vector<double>& t) {
  if (m.empty()) return {};
  if (m.size() == 1) return {t[0] / m[0], 0};
  Eigen::MatrixXd A(static_cast<Eigen::Index>(m.size()), 2);
  Eigen::VectorXd y(static_cast<Eigen::Index>(m.size()));
  for (std::size_t i = 0; i < m.size(); ++i) {
    A(static_cast<Eigen::Index>(i), 0) = m[i];
    A(static_cast<Eigen::Index>(i), 1) = 1;
    y(static_cast<Eigen::Index>(i)) = t[i];
  }
  Eigen::Vector2d x = A.colPivHouseholderQr().solve(y);
  return {x(0), x(1)};
}

LinearFit read_pair(JsonReader r) {
  if (!r.is_array() || r.size() != 2) r.fail("[slope_ms, intercept_ms]");
  LinearFit f{r.element(0).as_number(), r.element(1).as_number()};
  return f;
}

std::vector<double> read_times(JsonReader r) {
  if (!r.is_array() || r.size() == 0) r.fail("a non-empty list of times in ms");
  std::vector<double> out;
  for (auto& e : r.elements()) {
    double v = e.as_number();
    if (!(v > 0)) e.fail("a time > 0 ms");
    out.push_back(v);
  }
  return out;
}

struct Key {
  std::string model, gpu;
  int seq;
  Dtype dtype;
  auto operator<=>(const Key&) const = default;
};

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

// A row's identity: catalog names (what lookups use) and the names as the file wrote them.
LayerProfile profile_row(const std::string& model, const std::string& gpu, int seq, Dtype dtype,
                         const std::string& file_model, const std::string& file_gpu,
                         const std::filesystem::path& file) {
  LayerProfile p;
  p.model = model;
  p.gpu = gpu;
  p.seq = seq;
  p.dtype = dtype;
  p.file_model = file_model;
  p.file_gpu = file_gpu;
  p.file = file.string();
  return p;
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
  auto key =
      std::make_tuple(lower(row.model), lower(row.gpu), row.seq, static_cast<int>(row.dtype));
  if (auto it = index_.find(key); it != index_.end()) {
    LayerProfile& existing = rows_[it->second];
    if (row.richness() > existing.richness()) existing = std::move(row);
    return;
  }
  index_.emplace(key, rows_.size());
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

ProfileTables ProfileTables::load_cephalo(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  if (!root.is_object()) root.fail("an object {model: {gpu: {seq: {dtype: entry}}}}");
  ProfileTables out;
  std::vector<LayerProfile> combined;
  for (auto& [model_name, by_gpu] : j.items()) {
    JsonReader model_reader = root.child(model_name);
    auto model = ModelCatalog::builtin().find(model_name);
    if (!model) {
      out.unresolved_.push_back("model " + model_name);
      continue;
    }
    for (auto& [gpu_name, by_seq] : by_gpu.items()) {
      JsonReader gpu_reader = model_reader.child(gpu_name);
      auto gpu = GpuCatalog::builtin().find(gpu_name);
      if (!gpu) {
        out.unresolved_.push_back("gpu " + gpu_name + " (model " + model_name + ")");
        continue;
      }
      for (auto& [seq_text, by_dtype] : by_seq.items()) {
        JsonReader seq_reader = gpu_reader.child(seq_text);
        int seq = 0;
        try {
          seq = std::stoi(seq_text);
        } catch (...) {
          seq_reader.fail_value(seq_text, "a sequence length as the key");
        }
        if (seq <= 0) seq_reader.fail_value(seq_text, "a sequence length > 0 as the key");
        for (auto& [dtype_text, entry] : by_dtype.items()) {
          JsonReader r = seq_reader.child(dtype_text);
          auto dtype = parse_dtype(dtype_text);
          if (!dtype) r.fail_value(dtype_text, "a dtype key (float16, float32, bfloat16)");
          LayerProfile p =
              profile_row(model->name, gpu->name, seq, *dtype, model_name, gpu_name, file);
          p.implementation =
              cephalo_profile_implementation(model->family, gpu->architecture, *dtype);
          if (entry.is_number()) {
            p.shape = ProfileShape::CombinedSlope;
            p.forward = {r.as_number(), 0};
            if (!(p.forward.slope_ms > 0)) r.fail("a slope > 0 ms per sample");
          } else if (entry.is_array() && entry.size() == 2 && entry[0].is_number()) {
            p.shape = ProfileShape::Combined;
            p.forward = read_pair(r);
          } else if (entry.is_array() && (entry.size() == 2 || entry.size() == 4)) {
            p.forward = read_pair(r.element(0));
            p.backward = read_pair(r.element(1));
            p.shape = ProfileShape::Fit;
            if (entry.size() == 4) {
              p.forward_ms = read_times(r.element(2));
              p.backward_ms = read_times(r.element(3));
              std::size_t n = std::min(p.forward_ms.size(), p.backward_ms.size());
              p.forward_ms.resize(n);
              p.backward_ms.resize(n);
              for (std::size_t i = 0; i < n; ++i)
                p.micro_batches.push_back(static_cast<int>(i) + 1);
              p.shape = ProfileShape::Measured;
            }
          } else {
            r.fail(
                "[[fwd_slope, fwd_intercept], [bwd_slope, bwd_intercept], fwd_ms?, bwd_ms?], "
                "[slope, intercept] or a slope");
          }
          if (p.shape == ProfileShape::Combined || p.shape == ProfileShape::CombinedSlope)
            combined.push_back(std::move(p));
          else
            out.add(std::move(p));
        }
      }
    }
  }
  // Split forward+backward rows with the forward fraction of the separate rows on the same GPU
  // and dtype (median), else of all separate rows.
  std::map<std::pair<std::string, Dtype>, std::vector<double>> fractions;
  std::vector<double> all;
  for (const auto& r : out.rows_) {
    double f = r.forward.slope_ms / (r.forward.slope_ms + r.backward.slope_ms);
    if (f > 0 && f < 1) {
      fractions[{r.gpu, r.dtype}].push_back(f);
      all.push_back(f);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 1.0 / 3;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double global = median(all);
  for (auto& p : combined) {
    auto it = fractions.find({p.gpu, p.dtype});
    double f = it != fractions.end() ? median(it->second) : global;
    LinearFit total = p.forward;
    p.forward = {total.slope_ms * f, total.intercept_ms * f};
    p.backward = {total.slope_ms * (1 - f), total.intercept_ms * (1 - f)};
    out.add(std::move(p));
  }
  return out;
}

ProfileTables ProfileTables::load_own(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  root.allow({"_comment", "tool", "date", "host", "source"});
  if (root.string("format") != "cephalo-profile") root.child("format").fail("\"cephalo-profile\"");
  root.integer("version", 1, 1);
  ProfileTables out;
  auto read_points = [](JsonReader list, LayerProfile& p, bool recompute) {
    int last = 0;
    for (auto& pt : list.elements()) {
      int m = static_cast<int>(pt.integer("micro_batch", 1, 1 << 20));
      if (m <= last) pt.child("micro_batch").fail("micro-batch sizes in increasing order");
      last = m;
      double f = pt.number("forward_ms"), b = pt.number("backward_ms");
      if (!(f > 0)) pt.child("forward_ms").fail("a time > 0 ms");
      if (!(b > 0)) pt.child("backward_ms").fail("a time > 0 ms");
      p.micro_batches.push_back(m);
      p.forward_ms.push_back(f);
      p.backward_ms.push_back(b);
      if (recompute) {
        double r = pt.has("recompute_ms") ? pt.number("recompute_ms") : f;
        if (!(r > 0)) pt.child("recompute_ms").fail("a time > 0 ms");
        p.recompute_ms.push_back(r);
      }
      pt.allow({"samples", "repeats", "stddev_ms"});
      pt.finish();
    }
    if (p.micro_batches.empty()) list.fail("at least one measured micro-batch");
    p.forward = least_squares(p.micro_batches, p.forward_ms);
    p.backward = least_squares(p.micro_batches, p.backward_ms);
    p.shape = ProfileShape::Measured;
  };
  for (auto& r : root.child("rows").elements()) {
    std::string model_name = r.string("model"), gpu_name = r.string("gpu");
    auto model = ModelCatalog::builtin().find(model_name);
    if (!model) throw NotFoundError("model", model_name, ModelCatalog::builtin().names());
    auto gpu = GpuCatalog::builtin().find(gpu_name);
    if (!gpu) throw NotFoundError("GPU", gpu_name, GpuCatalog::builtin().names());
    int seq = static_cast<int>(r.integer("seq", 1, 1 << 24));
    auto dtype_text = r.string("dtype");
    auto dtype = parse_dtype(dtype_text);
    if (!dtype) r.child("dtype").fail("fp16, bf16, fp32 or tf32");
    LayerProfile p = profile_row(model->name, gpu->name, seq, *dtype, model_name, gpu_name, file);
    // Version-1 files carry no label: the only writer is `cephalo profile`, whose CPU and CUDA
    // devices run eager attention (materialised scores) and unfused elementwise kernels.
    p.implementation = {AttentionKernel::Eager, false};
    if (auto impl = r.optional_child("implementation"))
      p.implementation = parse_implementation(*impl);
    read_points(r.child("layer"), p, true);
    for (const char* unit : {"embedding", "head"}) {
      if (auto u = r.optional_child(unit)) {
        UnitProfile up{p.model, p.gpu, unit, seq, *dtype, {}};
        read_points(*u, up.points, false);
        out.units_.push_back(std::move(up));
      }
    }
    r.finish();
    out.add(std::move(p));
  }
  if (auto opt = root.optional_child("optimizer")) {
    for (auto& o : opt->elements()) {
      auto gpu = GpuCatalog::builtin().find(o.string("gpu"));
      if (!gpu) throw NotFoundError("GPU", o.string("gpu"), GpuCatalog::builtin().names());
      double n = o.number("parameters"), ms = o.number("ms");
      if (!(n > 0)) o.child("parameters").fail("a parameter count > 0");
      if (!(ms > 0)) o.child("ms").fail("a time > 0 ms");
      o.finish();
      auto it = std::find_if(out.optimizers_.begin(), out.optimizers_.end(),
                             [&](const OptimizerProfile& x) { return x.gpu == gpu->name; });
      if (it == out.optimizers_.end()) {
        out.optimizers_.push_back({gpu->name, {}});
        it = out.optimizers_.end() - 1;
      }
      it->points.push_back({n, ms});
    }
  }
  root.allow({"copies", "collectives"});  // read by the comm calibration
  root.finish();
  return out;
}

bool ProfileTables::is_cephalo_layout(const nlohmann::json& j) {
  if (!j.is_object() || j.empty()) return false;
  for (const auto& [model, by_gpu] : j.items()) {
    if (!by_gpu.is_object() || by_gpu.empty()) return false;
    for (const auto& [gpu, by_seq] : by_gpu.items()) {
      if (!by_seq.is_object() || by_seq.empty()) return false;
      for (const auto& [seq, by_dtype] : by_seq.items())
        if (seq.empty() || seq.find_first_not_of("0123456789") != std::string::npos ||
            !by_dtype.is_object())
          return false;
    }
  }
  return true;
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
  static const ProfileTables tables =
      load_cephalo(data_dir() / "calibration" / "cephalo-profiles" / "model_latencies.json");
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
  if (dtype == Dtype::BF16) {
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

// ---------------------------------------------------------------------------------------------

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
          if (!d) g->child(dt).fail_value(dt, "a dtype key");
          LinearFit f = read_pair(g->child(dt));
          ga[*d] = {f.slope_ms, f.intercept_ms};
        }
      }
      auto mem = e.child("profiled_compute_memory");
      for (auto& [dt, v] : mem.value().items()) {
        auto d = parse_dtype(dt);
        if (!d) mem.child(dt).fail_value(dt, "a dtype key");
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

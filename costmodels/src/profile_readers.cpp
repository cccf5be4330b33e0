// Reading profile files: Cephalo's published model_latencies.json layout and the project's own
// "cephalo-profile" format (costmodels/README.md, "The published data, as read").
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

namespace {

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
          if (!dtype) r.fail_value(dtype_text, "a dtype key: one of " + dtype_spellings());
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
    if (!dtype) r.child("dtype").fail("one of " + dtype_spellings());
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

}  // namespace cephalo::costmodels

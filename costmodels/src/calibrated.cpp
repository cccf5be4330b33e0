#include "cephalo/costmodels/calibrated.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

int dtype_class(Dtype d) { return (d == Dtype::FP16 || d == Dtype::BF16) ? 1 : 0; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string fmt(double x, int digits = 2) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << x;
  return s.str();
}

}  // namespace

ModelSpec profiled_spec(const LayerProfile& row) {
  ModelSpec m = ModelCatalog::builtin().get(row.model);
  // Cephalo's DeepSpeed ViT runs used 384×384 images (example_plan_gpt_2.7b.json: image_size
  // 384; the vit_g count in model_memory.json is 576 patches + class token with one class),
  // whatever the sequence key of the row says. The older vit_g / vit_e rows cannot have: at
  // 577 tokens they would run above the V100's and RTX 3090's fp16 peak, so they keep the
  // catalog's 224×224.
  if (m.family == "vit" && row.file_model.rfind("deepspeed", 0) == 0) m.image_size = 384;
  return m;
}

namespace {

using FamilyFactor = std::function<std::array<double, 2>(const std::string& family)>;

// Forward GEMM + attention FLOPs of one layer per sample.
double layer_flops(const ModelSpec& m, int seq) { return unit_flops(m, 1, seq, 1).forward; }

// Fit of one phase: rows of features (already divided by the target) against 1, weights per
// point, non-negative θ by an active set, ridge toward `prior` in relative units.
OpFeatures solve(const std::vector<OpFeatures>& x, const std::vector<double>& w,
                 const OpFeatures& prior, double ridge) {
  constexpr int K = static_cast<int>(kNumFeatures);
  std::vector<bool> active(kNumFeatures, true);
  OpFeatures theta = prior;
  for (int iter = 0; iter < 5; ++iter) {
    std::vector<int> cols;
    for (int k = 0; k < K; ++k)
      if (active[static_cast<std::size_t>(k)]) cols.push_back(k);
    const auto n = static_cast<Eigen::Index>(x.size());
    const auto p = static_cast<Eigen::Index>(cols.size());
    Eigen::MatrixXd A(n + p, p);
    Eigen::VectorXd y(n + p);
    for (Eigen::Index i = 0; i < n; ++i) {
      double wi = w[static_cast<std::size_t>(i)];
      for (Eigen::Index c = 0; c < p; ++c)
        A(i, c) = wi * x[static_cast<std::size_t>(i)]
                        [static_cast<std::size_t>(cols[static_cast<std::size_t>(c)])];
      y(i) = wi;
    }
    // Ridge rows: √λ·θ_k/prior_k ≈ √λ, so the penalty is on relative deviation.
    double total_w2 = 0;
    for (double wi : w) total_w2 += wi * wi;
    double s = std::sqrt(ridge * std::max(1.0, total_w2));
    for (Eigen::Index c = 0; c < p; ++c) {
      double pk = prior[static_cast<std::size_t>(cols[static_cast<std::size_t>(c)])];
      A.row(n + c).setZero();
      A(n + c, c) = pk > 0 ? s / pk : s;
      y(n + c) = pk > 0 ? s : 0;
    }
    Eigen::VectorXd sol = A.colPivHouseholderQr().solve(y);
    bool negative = false;
    theta.fill(0);
    for (Eigen::Index c = 0; c < p; ++c) {
      double v = sol(c);
      if (v < 0) {
        active[static_cast<std::size_t>(cols[static_cast<std::size_t>(c)])] = false;
        negative = true;
      } else {
        theta[static_cast<std::size_t>(cols[static_cast<std::size_t>(c)])] = v;
      }
    }
    if (!negative) break;
  }
  return theta;
}

struct Sample {
  PhaseFeatures x;
  double forward_s = 0, backward_s = 0;
  double weight = 1;
};

std::vector<Sample> samples_of(const LayerProfile& row) {
  const ModelSpec model = profiled_spec(row);
  const DeviceSpec& gpu = GpuCatalog::builtin().get(row.gpu);
  auto points = row_points(row);
  std::vector<Sample> out;
  for (const auto& p : points) {
    Sample s;
    s.x = unit_features(gpu, model, 1, row.seq, p.micro_batch, row.dtype);
    s.forward_s = p.forward_ms * 1e-3;
    s.backward_s = p.backward_ms * 1e-3;
    s.weight = 1.0 / std::sqrt(static_cast<double>(points.size()));  // each row counts alike
    out.push_back(s);
  }
  return out;
}

Theta fit_theta(const std::vector<const LayerProfile*>& rows, const Theta& prior, double ridge,
                const FamilyFactor& phi) {
  std::vector<OpFeatures> xf, xb;
  std::vector<double> w;
  for (const auto* r : rows) {
    auto factor = phi(ModelCatalog::builtin().get(r->model).family);
    for (const auto& s : samples_of(*r)) {
      OpFeatures f = s.x.forward, b = s.x.backward;
      for (auto& v : f) v /= s.forward_s / factor[0];
      for (auto& v : b) v /= s.backward_s / factor[1];
      xf.push_back(f);
      xb.push_back(b);
      w.push_back(s.weight);
    }
  }
  Theta t;
  t.rows = static_cast<int>(rows.size());
  if (rows.empty()) {
    t = prior;
    t.rows = 0;
    return t;
  }
  t.forward = solve(xf, w, prior.forward, ridge);
  t.backward = solve(xb, w, prior.backward, ridge);
  return t;
}

Theta roofline_prior() {
  Theta t;
  t.forward = Efficiency{}.coefficients();
  t.backward = Efficiency{0.55, 0.3, 0.6, 6}.coefficients();
  return t;
}

double predict_s(const OpFeatures& theta, const OpFeatures& x) {
  double t = 0;
  for (std::size_t k = 0; k < kNumFeatures; ++k) t += theta[k] * x[k];
  return t;
}

}  // namespace

std::vector<RowPoint> row_points(const LayerProfile& row) {
  std::vector<RowPoint> out;
  if (!row.micro_batches.empty()) {
    for (std::size_t i = 0; i < row.micro_batches.size(); ++i)
      out.push_back({row.micro_batches[i], row.forward_ms[i], row.backward_ms[i]});
  } else {
    for (int m : {1, 2, 4, 8}) {
      LayerTime t = ProfileTables::evaluate(row, m);
      out.push_back({m, t.forward_ms, t.backward_ms});
    }
  }
  return out;
}

std::vector<InconsistentRow> find_inconsistent_rows(const ProfileTables& tables) {
  std::vector<InconsistentRow> out;
  std::set<const LayerProfile*> flagged;
  auto flag = [&](const LayerProfile* r, std::string why) {
    if (flagged.insert(r).second) out.push_back({r, std::move(why)});
  };
  auto total_at = [](const LayerProfile& r, int m) {
    LayerTime t = ProfileTables::evaluate(r, m);
    return t.forward_ms + t.backward_ms;
  };
  // (a) Measured points that fall as the micro-batch grows (noise or throttling).
  for (const auto& r : tables.rows()) {
    for (std::size_t i = 1; i < r.micro_batches.size(); ++i) {
      for (const auto* series : {&r.forward_ms, &r.backward_ms}) {
        if ((*series)[i] < 0.85 * (*series)[i - 1]) {
          flag(&r, "measured time falls from " + fmt((*series)[i - 1]) +
                       " ms at m=" + std::to_string(r.micro_batches[i - 1]) + " to " +
                       fmt((*series)[i]) + " ms at m=" + std::to_string(r.micro_batches[i]));
          break;
        }
      }
    }
  }
  // (b) Implied efficiency of the layer's FLOPs above the effective peak (physically impossible).
  for (const auto& r : tables.rows()) {
    const ModelSpec m = profiled_spec(r);
    const DeviceSpec& g = GpuCatalog::builtin().get(r.gpu);
    double rate = layer_flops(m, r.seq) * 8 / (ProfileTables::evaluate(r, 8).forward_ms * 1e-3);
    if (rate > effective_peak(g, r.dtype))
      flag(&r, "forward implies " + fmt(rate / 1e12, 1) + " TFLOP/s, above the " +
                   fmt(effective_peak(g, r.dtype) / 1e12, 1) + " TFLOP/s peak");
  }
  // (c) Within one family, GPU, sequence and dtype: a model with ≥ 25% more FLOPs per layer that
  // is not slower. (Across families the implementations differ, e.g. Cephalo's GPT layers run
  // slower per FLOP than its LLaMA layers everywhere, so only same-family pairs contradict.)
  // The row whose FLOP rate is farther from the group's median is the suspect.
  std::map<std::tuple<std::string, std::string, int, Dtype>, std::vector<const LayerProfile*>>
      groups;
  for (const auto& r : tables.rows())
    groups[{ModelCatalog::builtin().get(r.model).family, r.gpu, r.seq, r.dtype}].push_back(&r);
  for (auto& [key, rows] : groups) {
    std::vector<double> log_rate;
    std::map<const LayerProfile*, double> rate;
    for (const auto* r : rows) {
      double x = std::log(layer_flops(profiled_spec(*r), r->seq) * 4 / total_at(*r, 4));
      rate[r] = x;
      log_rate.push_back(x);
    }
    double med = median(log_rate);
    for (const auto* a : rows)
      for (const auto* b : rows) {
        const ModelSpec ma = profiled_spec(*a);
        const ModelSpec mb = profiled_spec(*b);
        double fa = layer_flops(ma, a->seq), fb = layer_flops(mb, b->seq);
        if (fa >= 1.25 * fb && total_at(*a, 4) <= total_at(*b, 4)) {
          const LayerProfile* suspect = std::abs(rate[a] - med) >= std::abs(rate[b] - med) ? a : b;
          const LayerProfile* other = suspect == a ? b : a;
          flag(suspect, a->model + " (" + fmt(fa / 1e9, 1) +
                            " GFLOP/layer/sample) is not slower than " + b->model + " (" +
                            fmt(fb / 1e9, 1) + ") on " + a->gpu + ": " + fmt(total_at(*a, 4)) +
                            " vs " + fmt(total_at(*b, 4)) + " ms fwd+bwd at m=4; contradicts the " +
                            other->model + " row");
        }
      }
  }
  // (d) fp16 no faster than fp32 on a GPU whose fp16 peak is at least twice its fp32 peak.
  for (const auto& r : tables.rows()) {
    if (r.dtype != Dtype::FP16) continue;
    const DeviceSpec& g = GpuCatalog::builtin().get(r.gpu);
    if (effective_peak(g, Dtype::FP16) < 2 * effective_peak(g, Dtype::FP32)) continue;
    if (const auto* f32 = tables.find(r.model, r.gpu, r.seq, Dtype::FP32))
      if (total_at(r, 4) >= 0.95 * total_at(*f32, 4))
        flag(&r, "fp16 (" + fmt(total_at(r, 4)) + " ms) no faster than fp32 (" +
                     fmt(total_at(*f32, 4)) + " ms) at m=4 on a GPU with " +
                     fmt(effective_peak(g, Dtype::FP16) / effective_peak(g, Dtype::FP32), 0) +
                     "x the fp16 peak");
  }
  return out;
}

std::shared_ptr<CalibratedComputeModel> CalibratedComputeModel::fit(const ProfileTables& tables,
                                                                    const CalibrationOptions& opt) {
  auto model = std::make_shared<CalibratedComputeModel>();
  const CalibrationOptions& o = opt;
  model->median_of_gpus_ = o.unseen_median_of_gpus;
  std::set<const LayerProfile*> bad;
  if (o.drop_inconsistent) {
    model->dropped_ = find_inconsistent_rows(tables);
    for (const auto& i : model->dropped_) bad.insert(i.row);
  }
  std::map<int, std::vector<const LayerProfile*>> by_class;
  std::map<std::pair<std::string, int>, std::vector<const LayerProfile*>> by_gpu;
  for (const auto& r : tables.rows()) {
    if (bad.count(&r)) continue;
    if (std::find(o.exclude_gpus.begin(), o.exclude_gpus.end(), r.gpu) != o.exclude_gpus.end())
      continue;
    if (std::find(o.exclude_model_on_gpu.begin(), o.exclude_model_on_gpu.end(),
                  std::make_pair(r.model, r.gpu)) != o.exclude_model_on_gpu.end())
      continue;
    by_class[dtype_class(r.dtype)].push_back(&r);
    by_gpu[{r.gpu, dtype_class(r.dtype)}].push_back(&r);
  }
  // Alternate: θ given the family factors, then each family's factor as the geometric mean of
  // measured / predicted over its training rows.
  auto phi = [&](const std::string& family) -> std::array<double, 2> {
    auto it = model->family_.find(family);
    return it == model->family_.end() ? std::array<double, 2>{1, 1} : it->second;
  };
  for (int iter = 0; iter < 4; ++iter) {
    for (int c : {0, 1}) model->pooled_[c] = fit_theta(by_class[c], roofline_prior(), 1e-3, phi);
    for (auto& [key, rows] : by_gpu)
      model->per_gpu_[key] = fit_theta(rows, model->pooled_[key.second], o.ridge, phi);
    if (!o.family_factors) break;
    std::map<std::string, std::array<double, 3>> sums;  // log fwd, log bwd, count
    for (auto& [key, rows] : by_gpu)
      for (const auto* r : rows) {
        const Theta& t = model->per_gpu_[key];
        std::string fam = ModelCatalog::builtin().get(r->model).family;
        for (const auto& s : samples_of(*r)) {
          auto& acc = sums[fam];
          acc[0] += std::log(s.forward_s / predict_s(t.forward, s.x.forward));
          acc[1] += std::log(s.backward_s / predict_s(t.backward, s.x.backward));
          acc[2] += 1;
        }
      }
    // Normalised so the factors' geometric mean is 1 (θ absorbs the common scale).
    double mf = 0, mb = 0;
    for (auto& [fam, acc] : sums) {
      mf += acc[0] / acc[2] / static_cast<double>(sums.size());
      mb += acc[1] / acc[2] / static_cast<double>(sums.size());
    }
    for (auto& [fam, acc] : sums)
      model->family_[fam] = {std::exp(acc[0] / acc[2] - mf), std::exp(acc[1] / acc[2] - mb)};
  }
  // Per (GPU, dtype class, family): the residual factor of that family on that GPU, shrunk
  // toward 1 with a pseudo-count of rows, so one odd row cannot move it far.
  if (o.family_factors) {
    const double kappa = o.local_pseudo_rows;
    std::map<std::tuple<std::string, int, std::string>, std::array<double, 3>> sums;
    for (auto& [key, rows] : by_gpu)
      for (const auto* r : rows) {
        const Theta& t = model->per_gpu_[key];
        std::string fam = ModelCatalog::builtin().get(r->model).family;
        auto f = phi(fam);
        auto samples = samples_of(*r);
        double lf = 0, lb = 0;
        for (const auto& s : samples) {
          lf += std::log(s.forward_s / (f[0] * predict_s(t.forward, s.x.forward)));
          lb += std::log(s.backward_s / (f[1] * predict_s(t.backward, s.x.backward)));
        }
        auto& acc = sums[{key.first, key.second, fam}];
        acc[0] += lf / static_cast<double>(samples.size());
        acc[1] += lb / static_cast<double>(samples.size());
        acc[2] += 1;
      }
    for (auto& [key, acc] : sums)
      model->local_[key] = {std::exp(acc[0] / (acc[2] + kappa)),
                            std::exp(acc[1] / (acc[2] + kappa))};
  }
  return model;
}

std::shared_ptr<const CalibratedComputeModel> CalibratedComputeModel::builtin() {
  static const std::shared_ptr<const CalibratedComputeModel> m = fit(ProfileTables::builtin());
  return m;
}

const Theta& CalibratedComputeModel::theta(const std::string& gpu, Dtype dtype, bool* own) const {
  auto it = per_gpu_.find({gpu, dtype_class(dtype)});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end()) return it->second;
  return pooled_.at(dtype_class(dtype));
}

std::array<double, 2> CalibratedComputeModel::family_factor(const std::string& family) const {
  auto it = family_.find(family);
  return it == family_.end() ? std::array<double, 2>{1, 1} : it->second;
}

std::array<double, 2> CalibratedComputeModel::factor(const std::string& gpu, Dtype dtype,
                                                     const std::string& family) const {
  auto f = family_factor(family);
  auto it = local_.find({gpu, dtype_class(dtype), family});
  if (it != local_.end()) {
    f[0] *= it->second[0];
    f[1] *= it->second[1];
  }
  return f;
}

double CalibratedComputeModel::predict_seconds(const DeviceSpec& device, const std::string& family,
                                               Dtype dtype, const PhaseFeatures& x, bool backward,
                                               bool* own) const {
  auto it = per_gpu_.find({device.name, dtype_class(dtype)});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end() || !median_of_gpus_) {
    const Theta& t = theta(device.name, dtype);
    auto f = factor(device.name, dtype, family);
    return backward ? f[1] * predict_s(t.backward, x.backward)
                    : f[0] * predict_s(t.forward, x.forward);
  }
  // An unprofiled GPU: every profiled GPU's θ applied to this GPU's features; the median is
  // robust to GPUs that run far from their datasheet (power-capped T4/L4).
  std::vector<double> v;
  auto f = family_factor(family);
  for (const auto& [key, t] : per_gpu_)
    if (key.second == dtype_class(dtype))
      v.push_back(backward ? f[1] * predict_s(t.backward, x.backward)
                           : f[0] * predict_s(t.forward, x.forward));
  if (v.empty()) {
    const Theta& t = theta(device.name, dtype);
    return backward ? f[1] * predict_s(t.backward, x.backward)
                    : f[0] * predict_s(t.forward, x.forward);
  }
  return median(v);
}

double CalibratedComputeModel::layer_ms(const DeviceSpec& device, const ModelSpec& model, int seq,
                                        Dtype dtype, int micro_batch, bool backward) const {
  PhaseFeatures x = unit_features(device, model, 1, seq, micro_batch, dtype);
  return 1e3 * predict_seconds(device, model.family, dtype, x, backward);
}

ComputeEstimate CalibratedComputeModel::unit_time(const DeviceSpec& device, const Job& job,
                                                  int unit, ComputePhase phase,
                                                  int micro_batch) const {
  check_micro_batch(micro_batch);
  const Dtype dtype = job.precision.compute;
  PhaseFeatures x = unit_features(device, job.model, unit, job.sequence_length, micro_batch, dtype);
  bool own = false;
  double s =
      predict_seconds(device, job.model.family, dtype, x, phase == ComputePhase::Backward, &own);
  return {s, false, own ? "calibrated" : "calibrated (from specs)"};
}

ComputeEstimate CalibratedComputeModel::optimizer_time(const DeviceSpec& device, const Job& job,
                                                       double shard_parameters) const {
  return {adamw_seconds(device, job, shard_parameters), false, "calibrated"};
}

// ---------------------------------------------------------------------------------------------

namespace {

// Mean absolute percentage error of `predict` over a row's points (forward and backward
// separately; forward+backward together for rows published only as a sum).
template <typename Predict>
double row_ape(const LayerProfile& row, Predict predict) {
  const ModelSpec model = profiled_spec(row);
  const DeviceSpec& gpu = GpuCatalog::builtin().get(row.gpu);
  std::vector<double> errs;
  for (const auto& p : row_points(row)) {
    double f = predict(gpu, model, row.seq, row.dtype, p.micro_batch, false);
    double b = predict(gpu, model, row.seq, row.dtype, p.micro_batch, true);
    if (row.shape == ProfileShape::Combined || row.shape == ProfileShape::CombinedSlope) {
      double actual = p.forward_ms + p.backward_ms;
      errs.push_back(std::abs(f + b - actual) / actual);
    } else {
      errs.push_back(std::abs(f - p.forward_ms) / p.forward_ms);
      errs.push_back(std::abs(b - p.backward_ms) / p.backward_ms);
    }
  }
  return 100 * mean(errs);
}

GroupError summarize(const std::string& name, const std::vector<double>& apes) {
  return {name, static_cast<int>(apes.size()), mean(apes), median(apes)};
}

}  // namespace

ValidationReport validate_compute_models(const ProfileTables& tables) {
  ValidationReport rep;
  rep.inconsistent = find_inconsistent_rows(tables);
  std::set<const LayerProfile*> bad;
  for (const auto& i : rep.inconsistent) bad.insert(i.row);
  std::vector<const LayerProfile*> rows;
  std::set<std::string> gpus;
  for (const auto& r : tables.rows())
    if (!bad.count(&r)) {
      rows.push_back(&r);
      gpus.insert(r.gpu);
    }

  // Leave one GPU out: θ pooled over the other GPUs, applied from the held-out GPU's specs.
  std::vector<double> all_logo, gpu_means;
  for (const auto& gpu : gpus) {
    CalibrationOptions o;
    o.exclude_gpus = {gpu};
    auto model = CalibratedComputeModel::fit(tables, o);
    std::vector<double> apes;
    for (const auto* r : rows) {
      if (r->gpu != gpu) continue;
      double e = row_ape(*r, [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb,
                                 bool bwd) { return model->layer_ms(d, m, s, dt, mb, bwd); });
      apes.push_back(e);
      rep.logo_rows.push_back({r->model, r->gpu, r->seq, r->dtype, e});
      all_logo.push_back(e);
    }
    rep.leave_one_gpu_out.push_back(summarize(gpu, apes));
    gpu_means.push_back(rep.leave_one_gpu_out.back().mape);
  }
  rep.logo_median_over_gpus = median(gpu_means);
  rep.logo_overall = mean(all_logo);

  // Leave one model out on each GPU: the GPU's own θ fitted without that model's rows.
  std::vector<double> all_lomo, lomo_means;
  for (const auto& gpu : gpus) {
    std::set<std::string> models;
    for (const auto* r : rows)
      if (r->gpu == gpu) models.insert(r->model);
    std::vector<double> apes;
    for (const auto& held : models) {
      CalibrationOptions o;
      o.exclude_model_on_gpu = {{held, gpu}};
      auto model = CalibratedComputeModel::fit(tables, o);
      for (const auto* r : rows) {
        if (r->gpu != gpu || r->model != held) continue;
        double e = row_ape(*r, [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb,
                                   bool bwd) { return model->layer_ms(d, m, s, dt, mb, bwd); });
        apes.push_back(e);
        rep.lomo_rows.push_back({r->model, r->gpu, r->seq, r->dtype, e});
        all_lomo.push_back(e);
      }
    }
    rep.leave_one_model_out.push_back(summarize(gpu, apes));
    lomo_means.push_back(rep.leave_one_model_out.back().mape);
  }
  rep.lomo_median_over_gpus = median(lomo_means);
  rep.lomo_overall = mean(all_lomo);

  RooflineComputeModel roofline;
  std::vector<double> roof;
  for (const auto* r : rows)
    roof.push_back(row_ape(*r, [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb,
                                   bool bwd) {
      Job job;
      job.model = m;
      job.sequence_length = s;
      job.precision.compute = dt;
      return 1e3 *
             roofline.unit_time(d, job, 1, bwd ? ComputePhase::Backward : ComputePhase::Forward, mb)
                 .seconds;
    }));
  rep.roofline_overall = mean(roof);
  return rep;
}

}  // namespace cephalo::costmodels

// Fitting the calibrated compute model: θ per pipeline, GPU and generation, the power
// constants, the family, model and per-GPU factors (Eigen; costmodels/README.md).
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
#include "published_throughput.hpp"

#include "calibration_util.hpp"

namespace cephalo::costmodels {
using detail::at_fraction;
using detail::median;
using detail::predict_s;

namespace {

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
  PhaseFeatures x;  // at the datasheet peak (no sustained-rate fraction applied)
  double forward_s = 0, backward_s = 0;
  double weight = 1;
};

// A training row with its points' features, computed once per fit.
struct RowData {
  const LayerProfile* row = nullptr;
  std::string family;     // family key (per dtype class when family_per_dtype)
  std::string model_key;  // model key (likewise)
  int pipeline = 0;       // pipeline_class of its GPU and dtype
  const DeviceSpec* gpu = nullptr;
  std::vector<Sample> samples;
};

std::vector<Sample> samples_of(const LayerProfile& row, bool whole_stack, bool waves) {
  const ModelSpec model = profiled_spec(row);
  const DeviceSpec& gpu = GpuCatalog::builtin().get(row.gpu);
  auto points = row_points(row, whole_stack);
  std::vector<Sample> out;
  for (const auto& p : points) {
    Sample s;
    s.x =
        unit_features(gpu, model, 1, row.seq, p.micro_batch, row.dtype, row.implementation, waves);
    s.forward_s = p.forward_ms * 1e-3;
    s.backward_s = p.backward_ms * 1e-3;
    s.weight = 1.0 / std::sqrt(static_cast<double>(points.size()));  // each row counts alike
    out.push_back(s);
  }
  return out;
}

using Fraction = std::function<double(const RowData&)>;
using RowFactor = std::function<std::array<double, 2>(const RowData&)>;

Theta fit_theta(const std::vector<const RowData*>& rows, const Theta& prior, double ridge,
                const RowFactor& phi, const Fraction& fraction) {
  std::vector<OpFeatures> xf, xb;
  std::vector<double> w;
  for (const auto* r : rows) {
    auto factor = phi(*r);
    double q = fraction(*r);
    for (const auto& s : r->samples) {
      PhaseFeatures x = at_fraction(s.x, q);
      OpFeatures f = x.forward, b = x.backward;
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

// Normal equations of one GPU's points for one phase (features divided by the target and
// multiplied by the family factor, at the datasheet peak): A = Σ w² x xᵀ, b = Σ w² x, c = Σ w².
// Scaling the FLOP features by 1/q is D·A·D and D·b with D = diag(1/q, 1/q, 1, 1, 1), so a
// pooled fit under any power constant is a 5×5 solve.
struct Normal {
  Eigen::Matrix<double, kNumFeatures, kNumFeatures> A =
      Eigen::Matrix<double, kNumFeatures, kNumFeatures>::Zero();
  Eigen::Matrix<double, kNumFeatures, 1> b = Eigen::Matrix<double, kNumFeatures, 1>::Zero();
  double c = 0;
  void add(const OpFeatures& x, double w2) {
    Eigen::Map<const Eigen::Matrix<double, kNumFeatures, 1>> v(x.data());
    A += w2 * v * v.transpose();
    b += w2 * v;
    c += w2;
  }
  Normal scaled(double q) const {
    Eigen::Matrix<double, kNumFeatures, 1> d = Eigen::Matrix<double, kNumFeatures, 1>::Ones();
    d(0) = d(1) = 1 / q;
    Normal n;
    n.A = d.asDiagonal() * A * d.asDiagonal();
    n.b = d.asDiagonal() * b;
    n.c = c;
    return n;
  }
  double sse(const OpFeatures& t) const {
    Eigen::Map<const Eigen::Matrix<double, kNumFeatures, 1>> v(t.data());
    return std::max(0.0, v.dot(A * v) - 2 * v.dot(b) + c);
  }
};

// The weighted least-squares problem of `solve` from its normal equations (same ridge toward
// `prior`, same non-negativity by an active set).
OpFeatures solve_normal(const Normal& n, const OpFeatures& prior, double ridge) {
  constexpr int K = static_cast<int>(kNumFeatures);
  std::vector<bool> active(kNumFeatures, true);
  OpFeatures theta{};
  const double s2 = ridge * std::max(1.0, n.c);
  for (int iter = 0; iter < 5; ++iter) {
    std::vector<int> cols;
    for (int k = 0; k < K; ++k)
      if (active[static_cast<std::size_t>(k)]) cols.push_back(k);
    const auto p = static_cast<Eigen::Index>(cols.size());
    Eigen::MatrixXd A(p, p);
    Eigen::VectorXd y(p);
    for (Eigen::Index i = 0; i < p; ++i) {
      const int ci = cols[static_cast<std::size_t>(i)];
      for (Eigen::Index j = 0; j < p; ++j) A(i, j) = n.A(ci, cols[static_cast<std::size_t>(j)]);
      y(i) = n.b(ci);
      double pk = prior[static_cast<std::size_t>(ci)];
      A(i, i) += pk > 0 ? s2 / (pk * pk) : s2;
      y(i) += pk > 0 ? s2 / pk : 0;
    }
    Eigen::VectorXd sol = A.ldlt().solve(y);
    bool negative = false;
    theta.fill(0);
    for (Eigen::Index c = 0; c < p; ++c) {
      const auto ci = static_cast<std::size_t>(cols[static_cast<std::size_t>(c)]);
      if (sol(c) < 0) {
        active[ci] = false;
        negative = true;
      } else {
        theta[ci] = sol(c);
      }
    }
    if (!negative) break;
  }
  return theta;
}

Theta roofline_prior() {
  Theta t;
  t.forward = Efficiency{}.coefficients();
  t.backward = Efficiency{0.55, 0.3, 0.6, 6}.coefficients();
  return t;
}

}  // namespace

std::shared_ptr<CalibratedComputeModel> CalibratedComputeModel::fit(const ProfileTables& tables,
                                                                    const CalibrationOptions& opt) {
  auto model = std::make_shared<CalibratedComputeModel>();
  const CalibrationOptions& o = opt;
  model->median_of_gpus_ = o.unseen_median_of_gpus;
  model->waves_ = o.gemm_waves;
  model->family_per_dtype_ = o.family_per_dtype;
  model->factors_per_pipeline_ = o.factors_per_pipeline;
  model->power_exponent_ = o.power_exponent;
  std::set<const LayerProfile*> bad;
  if (o.drop_inconsistent) {
    model->dropped_ = find_inconsistent_rows(tables, o.whole_stack_test_model);
    for (const auto& i : model->dropped_) bad.insert(i.row);
  }
  std::vector<RowData> data;
  for (const auto& r : tables.rows()) {
    if (bad.count(&r)) continue;
    if (std::find(o.exclude_gpus.begin(), o.exclude_gpus.end(), r.gpu) != o.exclude_gpus.end())
      continue;
    if (std::find(o.exclude_model_on_gpu.begin(), o.exclude_model_on_gpu.end(),
                  std::make_pair(r.model, r.gpu)) != o.exclude_model_on_gpu.end())
      continue;
    if (std::find(o.exclude_models.begin(), o.exclude_models.end(), r.model) !=
        o.exclude_models.end())
      continue;
    RowData d;
    d.row = &r;
    d.gpu = &GpuCatalog::builtin().get(r.gpu);
    d.pipeline = pipeline_class(*d.gpu, r.dtype);
    const int fc = model->factor_class(*d.gpu, r.dtype);
    d.family = model->family_key(ModelCatalog::builtin().get(r.model).family, fc);
    d.model_key = model->family_key(r.model, fc);
    d.samples = samples_of(r, o.whole_stack_test_model, o.gemm_waves);
    data.push_back(std::move(d));
  }
  std::map<int, std::vector<const RowData*>> by_class;  // per pipeline
  std::map<std::pair<std::string, int>, std::vector<const RowData*>> by_gpu;
  for (const auto& d : data) {
    by_class[d.pipeline].push_back(&d);
    by_gpu[{d.row->gpu, d.pipeline}].push_back(&d);
  }
  // Alternate: θ given the factors, then each family's factor as the geometric mean of
  // measured / predicted over its training rows, then each model's shrunk residual factor.
  auto lookup = [](const std::map<std::string, std::array<double, 2>>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::array<double, 2>{1, 1} : it->second;
  };
  auto family_only = [&](const RowData& d) { return lookup(model->family_, d.family); };
  auto model_only = [&](const RowData& d) { return lookup(model->model_, d.model_key); };
  auto phi = [&](const RowData& d) -> std::array<double, 2> {
    auto f = family_only(d), g = model_only(d);
    return {f[0] * g[0], f[1] * g[1]};
  };
  auto fraction = [&](const RowData& d) { return model->sustained_fraction(*d.gpu, d.row->dtype); };
  // Mean over a row's samples of log(measured / predicted) for forward and backward, with θ `t`
  // and the factors `f` applied: the residual a per-model or per-family factor absorbs.
  auto mean_log_residual = [&](const RowData& d, const Theta& t,
                               const std::array<double, 2>& f) -> std::array<double, 2> {
    const double q = fraction(d);
    double lf = 0, lb = 0;
    for (const auto& smp : d.samples) {
      PhaseFeatures x = at_fraction(smp.x, q);
      lf += std::log(smp.forward_s / (f[0] * predict_s(t.forward, x.forward)));
      lb += std::log(smp.backward_s / (f[1] * predict_s(t.backward, x.backward)));
    }
    const double n = static_cast<double>(d.samples.size());
    return {lf / n, lb / n};
  };
  for (int iter = 0; iter < 4; ++iter) {
    for (int c : {0, 1}) {
      // The power constant of the pipeline, chosen by leave-one-GPU-out over the training GPUs
      // (never the GPU being validated): for each candidate (no cap among them), θ pooled over
      // all training GPUs but one predicts that one; the candidate with the least median over
      // GPUs of the RMS relative error wins. The median, as in the validation: with the mean,
      // the RTX 3090's two GPT rows (twice any other GPU's GPT rate) decide the tensor cap.
      if (o.power_limit && !by_class[c].empty()) {
        std::map<std::string, std::array<Normal, 2>> normals;  // per GPU: forward, backward
        for (const auto* r : by_class[c]) {
          auto factor = phi(*r);
          for (const auto& smp : r->samples) {
            OpFeatures f = smp.x.forward, b = smp.x.backward;
            for (auto& v : f) v /= smp.forward_s / factor[0];
            for (auto& v : b) v /= smp.backward_s / factor[1];
            auto& nn = normals[r->row->gpu];
            nn[0].add(f, smp.weight * smp.weight);
            nn[1].add(b, smp.weight * smp.weight);
          }
        }
        const Theta prior = roofline_prior();
        double best = -1, best_k = 0, best_iota = 0;
        // ι (CUDA-core pipeline only) on a grid searched jointly with k, smallest first.
        const std::vector<double> iotas = c == 0 && o.int32_shared_lanes
                                              ? std::vector<double>{0, 0.125, 0.25, 0.5, 1}
                                              : std::vector<double>{0};
        for (double iota : iotas)
          for (int step = -1; step <= 48; ++step) {
            const double k = step < 0 ? 0 : 0.25e-12 * std::pow(2.0, step / 6.0);  // W per FLOP/s
            model->watts_per_flops_[static_cast<std::size_t>(c)] = k;
            if (c == 0) model->int32_share_ = iota;
            std::map<std::string, std::array<Normal, 2>> at_k;
            std::array<Normal, 2> total;
            for (const auto& [gpu, nn] : normals) {
              double q = model->sustained_fraction(GpuCatalog::builtin().get(gpu),
                                                   c ? Dtype::FP16 : Dtype::FP32);
              auto& a = at_k[gpu];
              for (int ph : {0, 1}) {
                a[static_cast<std::size_t>(ph)] = nn[static_cast<std::size_t>(ph)].scaled(q);
                total[static_cast<std::size_t>(ph)].A += a[static_cast<std::size_t>(ph)].A;
                total[static_cast<std::size_t>(ph)].b += a[static_cast<std::size_t>(ph)].b;
                total[static_cast<std::size_t>(ph)].c += a[static_cast<std::size_t>(ph)].c;
              }
            }
            std::vector<double> rms;
            for (const auto& [gpu, a] : at_k) {
              double e2 = 0, n = 0;
              for (int ph : {0, 1}) {
                const auto i = static_cast<std::size_t>(ph);
                Normal rest = total[i];
                rest.A -= a[i].A;
                rest.b -= a[i].b;
                rest.c -= a[i].c;
                if (rest.c <= 0) continue;
                OpFeatures t = solve_normal(rest, ph ? prior.backward : prior.forward, 1e-3);
                e2 += a[i].sse(t);
                n += a[i].c;
              }
              if (n > 0) rms.push_back(std::sqrt(e2 / n));
            }
            const double score = median(rms);
            // Beyond the k that caps every GPU the score is flat (θ absorbs the scale): the
            // smallest k within 0.1% of the best caps no more GPUs than the data ask for.
            if (best < 0 || score < best * (1 - 1e-3)) {
              best = score;
              best_k = k;
              best_iota = iota;
            } else if (score < best) {
              best = score;
            }
          }
        model->watts_per_flops_[static_cast<std::size_t>(c)] = best_k;
        if (c == 0) model->int32_share_ = best_iota;
      }
      model->pooled_[c] = fit_theta(by_class[c], roofline_prior(), 1e-3, phi, fraction);
    }
    for (auto& [key, rows] : by_gpu)
      model->per_gpu_[key] = fit_theta(rows, model->pooled_[key.second], o.ridge, phi, fraction);
    // Per architecture generation: θ pooled over the generation's training GPUs, shrunk toward
    // the pipeline's pooled θ; what an unprofiled GPU of that generation gets.
    if (o.per_generation) {
      std::map<std::pair<std::string, int>, std::vector<const RowData*>> by_gen;
      for (const auto& d : data) by_gen[{d.gpu->architecture, d.pipeline}].push_back(&d);
      model->per_generation_.clear();
      for (auto& [key, rows] : by_gen)
        model->per_generation_[key] =
            fit_theta(rows, model->pooled_[key.second], o.generation_ridge, phi, fraction);
    }
    if (!o.family_factors) break;
    std::map<std::string, std::array<double, 3>> sums;  // log fwd, log bwd, count
    for (auto& [key, rows] : by_gpu)
      for (const auto* r : rows) {
        const Theta& t = model->per_gpu_[key];
        double q = fraction(*r);
        auto g = model_only(*r);
        for (const auto& s : r->samples) {
          PhaseFeatures x = at_fraction(s.x, q);
          auto& acc = sums[r->family];
          acc[0] += std::log(s.forward_s / (g[0] * predict_s(t.forward, x.forward)));
          acc[1] += std::log(s.backward_s / (g[1] * predict_s(t.backward, x.backward)));
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
    // Per model: the residual over its rows on the training GPUs (each row counts once),
    // shrunk toward 1 with a pseudo-count of rows.
    if (o.model_pseudo_rows >= 0) {
      std::map<std::string, std::array<double, 3>> msums;
      for (auto& [key, rows] : by_gpu)
        for (const auto* r : rows) {
          const auto [lf, lb] = mean_log_residual(*r, model->per_gpu_[key], family_only(*r));
          auto& acc = msums[r->model_key];
          acc[0] += lf;
          acc[1] += lb;
          acc[2] += 1;
        }
      // Shrunk toward 1, then centred within each family (row-weighted geometric mean 1), so
      // the family factor describes the family's typical model and an unseen model gets it.
      std::map<std::string, std::array<double, 2>> logs;
      for (auto& [key, acc] : msums)
        logs[key] = {acc[0] / (acc[2] + o.model_pseudo_rows),
                     acc[1] / (acc[2] + o.model_pseudo_rows)};
      std::map<std::string, std::array<double, 3>> centre;  // per family: Σ log fwd, bwd, rows
      for (const auto& d : data) {
        auto& c = centre[d.family];
        c[0] += logs[d.model_key][0];
        c[1] += logs[d.model_key][1];
        c[2] += 1;
      }
      std::map<std::string, std::string> family_of;
      for (const auto& d : data) family_of[d.model_key] = d.family;
      for (auto& [key, l] : logs) {
        const auto& c = centre[family_of[key]];
        model->model_[key] = {std::exp(l[0] - c[0] / c[2]), std::exp(l[1] - c[1] / c[2])};
      }
    }
  }
  // Per (GPU, dtype class, family): the residual factor of that family on that GPU, shrunk
  // toward 1 with a pseudo-count of rows, so one odd row cannot move it far.
  if (o.family_factors) {
    const double kappa = o.local_pseudo_rows;
    std::map<std::tuple<std::string, int, std::string>, std::array<double, 3>> sums;
    for (auto& [key, rows] : by_gpu)
      for (const auto* r : rows) {
        const auto [lf, lb] = mean_log_residual(*r, model->per_gpu_[key], phi(*r));
        auto& acc = sums[{key.first, key.second, r->family}];
        acc[0] += lf;
        acc[1] += lb;
        acc[2] += 1;
      }
    for (auto& [key, acc] : sums)
      model->local_[key] = {std::exp(acc[0] / (acc[2] + kappa)),
                            std::exp(acc[1] / (acc[2] + kappa))};
  }
  // Lookup tables for prediction, by plain names and dtype class (no keys built per call).
  for (const auto& d : data) {
    const std::string& family = ModelCatalog::builtin().get(d.row->model).family;
    for (int dc : {0, 1}) {
      const Dtype probe = dc ? Dtype::FP16 : Dtype::FP32;
      const auto i = static_cast<std::size_t>(dc);
      // The pipeline a factor of class dc belongs to on this GPU (local_ is keyed by pipeline).
      const int pipe = o.factors_per_pipeline ? dc : pipeline_class(*d.gpu, probe);
      if (auto f = model->family_.find(model->family_key(family, dc)); f != model->family_.end())
        model->family_by_name_[family].f[i] = f->second;
      if (auto m = model->model_.find(model->family_key(d.row->model, dc));
          m != model->model_.end())
        model->model_by_name_[d.row->model].f[i] = m->second;
      if (auto l = model->local_.find({d.row->gpu, pipe, model->family_key(family, dc)});
          l != model->local_.end())
        model->local_by_name_[d.row->gpu][family].f[i] = l->second;
    }
  }
  if (o.published_stacks) model->fit_published_stacks(o);
  return model;
}

}  // namespace cephalo::costmodels

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
#include "cephalo/costmodels/published_throughput.hpp"

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

int profiled_layers(const LayerProfile& row, bool whole_stack_test_model) {
  if (whole_stack_test_model && row.file_model == "deepspeedgpt_test")
    return ModelCatalog::builtin().get(row.model).num_layers;
  return 1;
}

namespace {

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

// The FLOP features (GEMM, attention) at a sustained fraction of the datasheet peak.
PhaseFeatures at_fraction(PhaseFeatures x, double fraction) {
  for (auto* f : {&x.forward, &x.backward}) {
    (*f)[0] /= fraction;
    (*f)[1] /= fraction;
  }
  return x;
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

double predict_s(const OpFeatures& theta, const OpFeatures& x) {
  double t = 0;
  for (std::size_t k = 0; k < kNumFeatures; ++k) t += theta[k] * x[k];
  return t;
}

}  // namespace

std::vector<RowPoint> row_points(const LayerProfile& row, bool whole_stack_test_model) {
  const double n = profiled_layers(row, whole_stack_test_model);
  std::vector<RowPoint> out = raw_points(row);
  for (auto& p : out) {
    p.forward_ms /= n;
    p.backward_ms /= n;
  }
  return out;
}

std::vector<RowPoint> raw_points(const LayerProfile& row) {
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

std::vector<InconsistentRow> find_inconsistent_rows(const ProfileTables& tables,
                                                    bool whole_stack_test_model) {
  std::vector<InconsistentRow> out;
  std::set<const LayerProfile*> flagged;
  auto flag = [&](const LayerProfile* r, std::string why) {
    if (flagged.insert(r).second) out.push_back({r, std::move(why)});
  };
  auto total_at = [&](const LayerProfile& r, int m) {
    LayerTime t = ProfileTables::evaluate(r, m);
    return (t.forward_ms + t.backward_ms) / profiled_layers(r, whole_stack_test_model);
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
    double rate = layer_flops(m, r.seq) * profiled_layers(r, whole_stack_test_model) * 8 /
                  (ProfileTables::evaluate(r, 8).forward_ms * 1e-3);
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
  model->waves_ = o.gemm_waves;
  model->family_per_dtype_ = o.family_per_dtype;
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
    d.pipeline = pipeline_class(GpuCatalog::builtin().get(r.gpu), r.dtype);
    d.family = model->family_key(ModelCatalog::builtin().get(r.model).family, r.dtype);
    d.model_key = model->family_key(r.model, r.dtype);
    d.gpu = &GpuCatalog::builtin().get(r.gpu);
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
        double best = -1, best_k = 0;
        for (int step = -1; step <= 48; ++step) {
          const double k = step < 0 ? 0 : 0.25e-12 * std::pow(2.0, step / 6.0);  // W per FLOP/s
          model->watts_per_flops_[static_cast<std::size_t>(c)] = k;
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
          } else if (score < best) {
            best = score;
          }
        }
        model->watts_per_flops_[static_cast<std::size_t>(c)] = best_k;
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
      if (auto f = model->family_.find(model->family_key(family, probe)); f != model->family_.end())
        model->family_by_name_[family].f[i] = f->second;
      if (auto m = model->model_.find(model->family_key(d.row->model, probe));
          m != model->model_.end())
        model->model_by_name_[d.row->model].f[i] = m->second;
      if (auto l = model->local_.find(
              {d.row->gpu, pipeline_class(*d.gpu, probe), model->family_key(family, probe)});
          l != model->local_.end())
        model->local_by_name_[d.row->gpu][family].f[i] = l->second;
    }
  }
  // The factor of each published software stack: the geometric mean over its points of
  // measured / predicted iteration time, with every factor above fixed (so after the lookup tables)
  // (one scalar per implementation label, tensor-core points only; communication, a few per cent of
  // these iterations, is absorbed). Only the published sources' own points are used.
  //
  // With published_attention_weight, the stack's flash-attention FLOPs also get their own weight
  // β (its attention kernel's rate relative to its GEMMs'): the predicted time is linear in β,
  // T(β) = T_rest + β·T_attention, read off two evaluations (β = 1, 2); β is the grid value in
  // [0.25, 8] (steps of 2^(1/8)) with the least squared log error, the factor then the geometric
  // mean of measured / T(β). The points span sequence 512-8192 (attention 1-16 % of the FLOPs).
  if (o.published_stacks) {
    struct Obs {
      double measured, rest, attention;
    };
    std::map<int, std::vector<Obs>> by_stack;
    for (const auto& pt : builtin_published_throughput()) {
      const DeviceSpec& gpu = GpuCatalog::builtin().get(pt.gpu);
      if (pipeline_class(gpu, pt.job.precision.compute) != 1) continue;
      if (std::find(o.exclude_gpus.begin(), o.exclude_gpus.end(), pt.gpu) != o.exclude_gpus.end())
        continue;
      const int key = stack_key(pt.job.implementation);
      const double t1 = published_compute_seconds(*model, pt);
      double t2 = t1;
      if (o.published_attention_weight) {
        model->stack_attention_[key] = 2.0;
        t2 = published_compute_seconds(*model, pt);
        model->stack_attention_.erase(key);
      }
      by_stack[key].push_back({pt.measured_iteration_s(), 2 * t1 - t2, t2 - t1});
    }
    for (const auto& entry : by_stack) {
      // Named, not a structured binding: clang before 16 cannot capture a binding in a lambda.
      const int key = entry.first;
      const auto& obs = entry.second;
      auto fit_at = [&](double beta, double* factor) {
        double sum = 0, sq = 0;
        for (const auto& ob : obs) sum += std::log(ob.measured / (ob.rest + beta * ob.attention));
        const double mu = sum / static_cast<double>(obs.size());
        for (const auto& ob : obs) {
          const double e = std::log(ob.measured / (ob.rest + beta * ob.attention)) - mu;
          sq += e * e;
        }
        *factor = std::exp(mu);
        return sq;
      };
      double best_beta = 1, best_factor = 1;
      double best = fit_at(1.0, &best_factor);
      if (o.published_attention_weight)
        for (int i = -16; i <= 24; ++i) {
          const double beta = std::pow(2.0, i / 8.0);
          double f = 1;
          const double sq = fit_at(beta, &f);
          if (sq < best) {
            best = sq;
            best_beta = beta;
            best_factor = f;
          }
        }
      model->stack_[key] = {best_factor, static_cast<int>(obs.size())};
      if (best_beta != 1.0) model->stack_attention_[key] = best_beta;
    }
  }
  return model;
}

int pipeline_class(const DeviceSpec& device, Dtype dtype) {
  return dtype_class(dtype) && effective_peak(device, dtype) > device.peak_fp32 ? 1 : 0;
}

std::string CalibratedComputeModel::family_key(const std::string& family, Dtype dtype) const {
  return family_per_dtype_ ? family + (dtype_class(dtype) ? "/16" : "/32") : family;
}

double CalibratedComputeModel::sustained_fraction(const DeviceSpec& device, Dtype dtype) const {
  double k = watts_per_flops_[static_cast<std::size_t>(pipeline_class(device, dtype))];
  if (!(k > 0) || !(device.tdp_watts > 0)) return 1;
  const double r = device.tdp_watts / (k * effective_peak(device, dtype));
  if (r >= 1) return 1;
  return power_exponent_ == 1.0 / 3.0 ? std::cbrt(r) : std::pow(r, power_exponent_);
}

std::shared_ptr<const CalibratedComputeModel> CalibratedComputeModel::builtin() {
  static const std::shared_ptr<const CalibratedComputeModel> m = fit(ProfileTables::builtin());
  return m;
}

const Theta& CalibratedComputeModel::theta(const DeviceSpec& device, Dtype dtype, bool* own) const {
  const int c = pipeline_class(device, dtype);
  auto it = per_gpu_.find({device.name, c});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end()) return it->second;
  if (auto g = per_generation_.find({device.architecture, c}); g != per_generation_.end())
    return g->second;
  return pooled_.at(c);
}

std::array<double, 2> CalibratedComputeModel::family_factor(const std::string& family,
                                                            Dtype dtype) const {
  auto it = family_by_name_.find(family);
  return it == family_by_name_.end() ? std::array<double, 2>{1, 1}
                                     : it->second.f[static_cast<std::size_t>(dtype_class(dtype))];
}

std::array<double, 2> CalibratedComputeModel::factor(const DeviceSpec& device, Dtype dtype,
                                                     const std::string& family,
                                                     const std::string& model_name) const {
  const auto dc = static_cast<std::size_t>(dtype_class(dtype));
  auto f = family_factor(family, dtype);
  auto times = [&](const std::array<double, 2>& g) {
    f[0] *= g[0];
    f[1] *= g[1];
  };
  if (auto m = model_by_name_.find(model_name); m != model_by_name_.end()) times(m->second.f[dc]);
  if (auto g = local_by_name_.find(device.name); g != local_by_name_.end())
    if (auto l = g->second.find(family); l != g->second.end()) times(l->second.f[dc]);
  return f;
}

double CalibratedComputeModel::predict_seconds(const DeviceSpec& device, const std::string& stack,
                                               const std::string& model_name, Dtype dtype,
                                               const PhaseFeatures& x_peak, bool backward,
                                               bool* own) const {
  const int c = pipeline_class(device, dtype);
  const PhaseFeatures x = at_fraction(x_peak, sustained_fraction(device, dtype));
  const auto f = factor(device, dtype, stack, model_name);
  auto eval = [&](const Theta& t) {
    return backward ? f[1] * predict_s(t.backward, x.backward)
                    : f[0] * predict_s(t.forward, x.forward);
  };
  auto it = per_gpu_.find({device.name, c});
  if (own) *own = it != per_gpu_.end();
  if (it != per_gpu_.end()) return eval(it->second);
  if (auto g = per_generation_.find({device.architecture, c}); g != per_generation_.end())
    return eval(g->second);
  if (!median_of_gpus_) return eval(pooled_.at(c));
  // An unprofiled GPU: every profiled GPU's θ applied to this GPU's features; the median is
  // robust to GPUs that run far from their datasheet.
  std::vector<double> v;
  for (const auto& [key, t] : per_gpu_)
    if (key.second == c) v.push_back(eval(t));
  return v.empty() ? eval(pooled_.at(c)) : median(v);
}

double CalibratedComputeModel::layer_ms(const DeviceSpec& device, const ModelSpec& model, int seq,
                                        Dtype dtype, int micro_batch, bool backward,
                                        const Implementation& impl) const {
  PhaseFeatures x = unit_features(device, model, 1, seq, micro_batch, dtype, impl, waves_);
  return 1e3 * predict_seconds(device, model.family, model.name, dtype, x, backward);
}

double CalibratedComputeModel::stack_factor(const Implementation& impl, int pipeline) const {
  if (pipeline != 1) return 1;
  auto it = stack_.find(stack_key(impl));
  return it == stack_.end() ? 1.0 : it->second.first;
}

double CalibratedComputeModel::stack_attention_weight(const Implementation& impl,
                                                      int pipeline) const {
  if (pipeline != 1 || stack_attention_.empty()) return 1;
  auto it = stack_attention_.find(stack_key(impl));
  return it == stack_attention_.end() ? 1.0 : it->second;
}

int CalibratedComputeModel::stack_points(const Implementation& impl) const {
  auto it = stack_.find(stack_key(impl));
  return it == stack_.end() ? 0 : it->second.second;
}

std::pair<std::string, std::string> CalibratedComputeModel::job_stack(const Job& job) {
  // Eager, unfused layers of a family are what the Cephalo source ran for that family (its
  // DeepSpeed-style GPT, BERT and ViT layers): that source's factors, with the model's own
  // when it was profiled. Any other stack is priced by its op list with the factors of the
  // reference stack, the source's Hugging Face LLaMA layers; a GPT-shaped model no longer
  // inherits the DeepSpeed GPT layers' 2-3x slowdown.
  const Implementation& impl = job.implementation;
  if (impl.attention == AttentionKernel::Eager && !impl.fused_elementwise)
    return {job.model.family, job.model.name};
  return {kReferenceStack, ""};
}

ComputeEstimate CalibratedComputeModel::unit_time(const DeviceSpec& device, const Job& job,
                                                  int unit, ComputePhase phase,
                                                  int micro_batch) const {
  check_micro_batch(micro_batch);
  const Dtype dtype = job.precision.compute;
  const int pipeline = pipeline_class(device, dtype);
  PhaseFeatures x = unit_features(device, job.model, unit, job.sequence_length, micro_batch, dtype,
                                  job.implementation, waves_,
                                  stack_attention_weight(job.implementation, pipeline));
  bool own = false;
  const auto [stack, model_name] = job_stack(job);
  double s =
      predict_seconds(device, stack, model_name, dtype, x, phase == ComputePhase::Backward, &own) *
      stack_factor(job.implementation, pipeline);
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
double row_ape(const LayerProfile& row, Predict predict, bool whole_stack) {
  const ModelSpec model = profiled_spec(row);
  const DeviceSpec& gpu = GpuCatalog::builtin().get(row.gpu);
  std::vector<double> errs;
  for (const auto& p : row_points(row, whole_stack)) {
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

ValidationReport validate_compute_models(const ProfileTables& tables,
                                         const CalibrationOptions& base) {
  ValidationReport rep;
  rep.inconsistent = find_inconsistent_rows(tables, base.whole_stack_test_model);
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
  // A row's error under a model fitted without it (the protocols differ only in what is left out).
  auto held_out_ape = [&](const CalibratedComputeModel& fitted, const LayerProfile& r) {
    return row_ape(
        r,
        [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb, bool bwd) {
          return fitted.layer_ms(d, m, s, dt, mb, bwd, r.implementation);
        },
        base.whole_stack_test_model);
  };
  for (const auto& gpu : gpus) {
    CalibrationOptions o = base;
    o.exclude_gpus = {gpu};
    auto model = CalibratedComputeModel::fit(tables, o);
    std::vector<double> apes;
    for (const auto* r : rows) {
      if (r->gpu != gpu) continue;
      double e = held_out_ape(*model, *r);
      apes.push_back(e);
      rep.logo_rows.push_back({r->model, r->gpu, r->seq, r->dtype, e});
      all_logo.push_back(e);
    }
    rep.leave_one_gpu_out.push_back(summarize(gpu, apes));
    gpu_means.push_back(rep.leave_one_gpu_out.back().mape);
  }
  rep.logo_median_over_gpus = median(gpu_means);
  rep.logo_overall = mean(all_logo);

  // Leave one generation out: every GPU of the generation held out at once.
  {
    std::map<std::string, std::vector<std::string>> gens;
    for (const auto& gpu : gpus) gens[GpuCatalog::builtin().get(gpu).architecture].push_back(gpu);
    std::vector<double> all, means;
    for (const auto& [gen, members] : gens) {
      CalibrationOptions o = base;
      o.exclude_gpus = members;
      auto model = CalibratedComputeModel::fit(tables, o);
      std::vector<double> apes;
      for (const auto* r : rows) {
        if (std::find(members.begin(), members.end(), r->gpu) == members.end()) continue;
        double e = held_out_ape(*model, *r);
        apes.push_back(e);
        all.push_back(e);
      }
      rep.leave_one_generation_out.push_back(summarize(gen, apes));
      means.push_back(rep.leave_one_generation_out.back().mape);
    }
    rep.logeno_median_over_generations = median(means);
    rep.logeno_overall = mean(all);
  }

  // Leave one model out on each GPU: the GPU's own θ fitted without that model's rows.
  std::vector<double> all_lomo, lomo_means;
  for (const auto& gpu : gpus) {
    std::set<std::string> models;
    for (const auto* r : rows)
      if (r->gpu == gpu) models.insert(r->model);
    std::vector<double> apes;
    for (const auto& held : models) {
      CalibrationOptions o = base;
      o.exclude_model_on_gpu = {{held, gpu}};
      auto model = CalibratedComputeModel::fit(tables, o);
      for (const auto* r : rows) {
        if (r->gpu != gpu || r->model != held) continue;
        double e = held_out_ape(*model, *r);
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

  // Leave one model out everywhere: a model none of whose rows (on any GPU) is seen, so only
  // its architecture, family and the GPUs' θ predict it.
  {
    std::set<std::string> models;
    for (const auto* r : rows) models.insert(r->model);
    std::map<std::string, std::vector<double>> per_gpu;
    std::vector<double> all;
    for (const auto& held : models) {
      CalibrationOptions o = base;
      o.exclude_models = {held};
      auto model = CalibratedComputeModel::fit(tables, o);
      for (const auto* r : rows) {
        if (r->model != held) continue;
        double e = held_out_ape(*model, *r);
        per_gpu[r->gpu].push_back(e);
        all.push_back(e);
      }
    }
    std::vector<double> means;
    for (const auto& [gpu, apes] : per_gpu) {
      rep.unseen_model.push_back(summarize(gpu, apes));
      means.push_back(rep.unseen_model.back().mape);
    }
    rep.unseen_model_median_over_gpus = median(means);
    rep.unseen_model_overall = mean(all);
  }

  RooflineComputeModel roofline;
  std::vector<double> roof;
  for (const auto* r : rows)
    roof.push_back(row_ape(
        *r,
        [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb, bool bwd) {
          Job job;
          job.model = m;
          job.sequence_length = s;
          job.precision.compute = dt;
          job.implementation = r->implementation;
          return 1e3 *
                 roofline
                     .unit_time(d, job, 1, bwd ? ComputePhase::Backward : ComputePhase::Forward, mb)
                     .seconds;
        },
        base.whole_stack_test_model));
  rep.roofline_overall = mean(roof);
  return rep;
}

}  // namespace cephalo::costmodels

// Validation of the calibrated compute model over the shipped profiles: leave one GPU, one
// generation, one model (per GPU and everywhere) out, and the uncalibrated roofline.
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "calibration_util.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::costmodels {
using detail::mean;
using detail::median;

namespace {

// A row's errors under `predict`: the mean absolute percentage error over its points (forward
// and backward separately; forward+backward together for rows published only as a sum), and
// the mean signed error of each phase (the sum's for those rows).
struct RowErrors {
  double ape = 0, forward = 0, backward = 0;
};
template <typename Predict>
RowErrors row_errors(const LayerProfile& row, Predict predict, bool whole_stack) {
  const ModelSpec model = profiled_spec(row);
  const DeviceSpec& gpu = GpuCatalog::builtin().get(row.gpu);
  std::vector<double> errs, fwd, bwd;
  for (const auto& p : row_points(row, whole_stack)) {
    double f = predict(gpu, model, row.seq, row.dtype, p.micro_batch, false);
    double b = predict(gpu, model, row.seq, row.dtype, p.micro_batch, true);
    if (row.shape == ProfileShape::Combined || row.shape == ProfileShape::CombinedSlope) {
      double actual = p.forward_ms + p.backward_ms;
      const double e = (f + b - actual) / actual;
      errs.push_back(std::abs(e));
      fwd.push_back(e);
      bwd.push_back(e);
    } else {
      fwd.push_back((f - p.forward_ms) / p.forward_ms);
      bwd.push_back((b - p.backward_ms) / p.backward_ms);
      errs.push_back(std::abs(fwd.back()));
      errs.push_back(std::abs(bwd.back()));
    }
  }
  return {100 * mean(errs), 100 * mean(fwd), 100 * mean(bwd)};
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
  auto held_out = [&](const CalibratedComputeModel& fitted, const LayerProfile& r) {
    return row_errors(
        r,
        [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb, bool bwd) {
          return fitted.layer_ms(d, m, s, dt, mb, bwd, r.implementation);
        },
        base.whole_stack_test_model);
  };
  // Scores the rows `held` selects under `fitted`: each row's error into `apes` and `all`, and
  // into `record` when given.
  auto score = [&](const CalibratedComputeModel& fitted,
                   const std::function<bool(const LayerProfile&)>& held, std::vector<double>& apes,
                   std::vector<double>& all, std::vector<RowError>* record) {
    for (const auto* r : rows) {
      if (!held(*r)) continue;
      const RowErrors e = held_out(fitted, *r);
      apes.push_back(e.ape);
      all.push_back(e.ape);
      if (record)
        record->push_back({r->model, r->gpu, r->seq, r->dtype, e.ape, e.forward, e.backward});
    }
  };
  for (const auto& gpu : gpus) {
    CalibrationOptions o = base;
    o.exclude_gpus = {gpu};
    auto model = CalibratedComputeModel::fit(tables, o);
    std::vector<double> apes;
    score(
        *model, [&](const LayerProfile& r) { return r.gpu == gpu; }, apes, all_logo,
        &rep.logo_rows);
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
      const std::vector<std::string>& held = members;  // named: a lambda cannot capture a binding
      score(
          *model,
          [&](const LayerProfile& r) {
            return std::find(held.begin(), held.end(), r.gpu) != held.end();
          },
          apes, all, nullptr);
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
      score(
          *model, [&](const LayerProfile& r) { return r.gpu == gpu && r.model == held; }, apes,
          all_lomo, &rep.lomo_rows);
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
        double e = held_out(*model, *r).ape;
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
    roof.push_back(
        row_errors(
            *r,
            [&](const DeviceSpec& d, const ModelSpec& m, int s, Dtype dt, int mb, bool bwd) {
              Job job;
              job.model = m;
              job.sequence_length = s;
              job.precision.compute = dt;
              job.implementation = r->implementation;
              return 1e3 * roofline
                               .unit_time(d, job, 1,
                                          bwd ? ComputePhase::Backward : ComputePhase::Forward, mb)
                               .seconds;
            },
            base.whole_stack_test_model)
            .ape);
  rep.roofline_overall = mean(roof);
  return rep;
}

DtypeClassError by_dtype_class(const std::vector<RowError>& rows, bool fp32) {
  std::map<std::string, std::vector<const RowError*>> per_gpu;
  std::vector<double> all;
  for (const auto& r : rows)
    if ((r.dtype == Dtype::FP32) == fp32) {
      per_gpu[r.gpu].push_back(&r);
      all.push_back(r.ape);
    }
  DtypeClassError out;
  std::vector<double> mapes;
  for (const auto& [gpu, members] : per_gpu) {
    DtypeClassGpuError g;
    g.gpu = gpu;
    g.rows = static_cast<int>(members.size());
    std::vector<double> apes, fwd, bwd;
    const RowError* worst = nullptr;
    for (const RowError* r : members) {
      apes.push_back(r->ape);
      fwd.push_back(r->forward_error);
      bwd.push_back(r->backward_error);
      if (!worst || r->ape > worst->ape) worst = r;
    }
    g.mape = mean(apes);
    g.forward_bias = median(fwd);
    g.backward_bias = median(bwd);
    g.worst = worst->model + " s" + std::to_string(worst->seq);
    g.worst_ape = worst->ape;
    g.worst_forward = worst->forward_error;
    g.worst_backward = worst->backward_error;
    mapes.push_back(g.mape);
    out.per_gpu.push_back(std::move(g));
  }
  out.median_over_gpus = median(mapes);
  out.overall = mean(all);
  out.rows = static_cast<int>(all.size());
  return out;
}

namespace {

Json group_json(const std::vector<GroupError>& groups) {
  Json out = Json::array();
  for (const auto& g : groups)
    out.push_back({{"gpu", g.name},
                   {"rows", g.rows},
                   {"mape_pct", g.mape},
                   {"median_ape_pct", g.median_ape}});
  return out;
}

}  // namespace

Json to_json(const ValidationReport& rep) {
  Json rows = Json::array();
  for (const auto& r : rep.logo_rows)
    rows.push_back({{"model", r.model},
                    {"gpu", r.gpu},
                    {"seq", r.seq},
                    {"dtype", to_string(r.dtype)},
                    {"ape_pct", r.ape},
                    {"forward_error_pct", r.forward_error},
                    {"backward_error_pct", r.backward_error}});
  Json inconsistent = Json::array();
  for (const auto& i : rep.inconsistent)
    inconsistent.push_back({{"model", i.row->file_model},
                            {"gpu", i.row->file_gpu},
                            {"seq", i.row->seq},
                            {"dtype", to_string(i.row->dtype)},
                            {"reason", i.reason}});
  return {{"leave_one_gpu_out", group_json(rep.leave_one_gpu_out)},
          {"logo_median_over_gpus_pct", rep.logo_median_over_gpus},
          {"logo_overall_pct", rep.logo_overall},
          {"leave_one_model_out", group_json(rep.leave_one_model_out)},
          {"lomo_median_over_gpus_pct", rep.lomo_median_over_gpus},
          {"lomo_overall_pct", rep.lomo_overall},
          {"roofline_overall_pct", rep.roofline_overall},
          {"logo_rows", rows},
          {"inconsistent_rows", inconsistent}};
}

std::string render_validation(const ValidationReport& rep) {
  TextTable t({"held-out GPU", "rows", "LOGO MAPE %", "LOGO median %"});
  for (const auto& g : rep.leave_one_gpu_out)
    t.add_row({g.name, std::to_string(g.rows), fixed(g.mape, 1), fixed(g.median_ape, 1)});
  std::ostringstream out;
  out << "leave-one-GPU-out (calibrated model fitted without the GPU)\n"
      << t.render() << "\nmedian over GPUs " << fixed(rep.logo_median_over_gpus, 1)
      << " % (target 15 %), "
      << "all rows " << fixed(rep.logo_overall, 1) << " %; leave-one-model-out median "
      << fixed(rep.lomo_median_over_gpus, 1) << " % (target 8 %); uncalibrated roofline "
      << fixed(rep.roofline_overall, 1) << " %; " << rep.inconsistent.size()
      << " inconsistent rows left out\n";
  return out.str();
}

}  // namespace cephalo::costmodels

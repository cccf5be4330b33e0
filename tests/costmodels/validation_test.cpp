// Accuracy of the cost models against the published Cephalo profiles: prints the report that
// costmodels/README.md quotes, and fails when the numbers regress past the recorded ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "kernel_validation.hpp"
#include "published_throughput.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {

void print_groups(const std::string& title, const std::vector<GroupError>& groups) {
  TextTable t({"gpu", "rows", "MAPE %", "median APE %"});
  for (const auto& g : groups)
    t.add_row({g.name, std::to_string(g.rows), fixed(g.mape, 1), fixed(g.median_ape, 1)});
  std::cout << title << "\n" << t.render() << "\n";
}

// One protocol's rows of one dtype class, as "10.7% over 12 GPUs, all rows 14.6% (240 rows)".
std::string by_dtype(const std::vector<RowError>& rows, bool fp32) {
  const DtypeClassError c = by_dtype_class(rows, fp32);
  return fixed(c.median_over_gpus, 1) + "% over " + std::to_string(c.per_gpu.size()) +
         " GPUs, all rows " + fixed(c.overall, 1) + "% (" + std::to_string(c.rows) + " rows)";
}

std::string signed_fixed(double v, int decimals) {
  return (v >= 0 ? "+" : "") + fixed(v, decimals);
}

// Per GPU, which way its held-out rows of a dtype class are off (signed: predicted − measured,
// > 0 too slow) and its worst row: where the per-layer targets are lost.
void print_signed(const std::string& title, const DtypeClassError& c) {
  TextTable t({"gpu", "rows", "MAPE %", "median fwd %", "median bwd %", "worst row", "APE %",
               "fwd %", "bwd %"});
  for (const auto& g : c.per_gpu)
    t.add_row({g.gpu, std::to_string(g.rows), fixed(g.mape, 1), signed_fixed(g.forward_bias, 1),
               signed_fixed(g.backward_bias, 1), g.worst, fixed(g.worst_ape, 1),
               signed_fixed(g.worst_forward, 1), signed_fixed(g.worst_backward, 1)});
  std::cout << title << "\n" << t.render() << "\n";
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The report leaves out exactly find_inconsistent_rows' rows; rule (a) (a measured time that
// falls by more than 15 % as the micro-batch grows) and rule (d) (fp16 no faster than fp32 on a
// GPU with at least twice the fp16 peak) are re-derived here from each row's own numbers, in
// both directions: every row breaking them is flagged, and every row flagged for them breaks
// them. Rules (b) and (c) need the FLOP model; their rows must name what they contradict.
void expect_inconsistent_rows_are_the_detectors(const ValidationReport& rep,
                                                const ProfileTables& tables) {
  const auto detected = find_inconsistent_rows(tables);
  ASSERT_EQ(rep.inconsistent.size(), detected.size());
  std::map<const LayerProfile*, std::string> flagged;
  for (std::size_t i = 0; i < detected.size(); ++i) {
    EXPECT_EQ(rep.inconsistent[i].row, detected[i].row) << i;
    flagged[detected[i].row] = detected[i].reason;
  }
  EXPECT_FALSE(flagged.empty());
  auto total_at4 = [](const LayerProfile& r) {
    const LayerTime t = ProfileTables::evaluate(r, 4);
    return t.forward_ms + t.backward_ms;  // same layers on both sides of a comparison
  };
  for (const auto& r : tables.rows()) {
    bool falls = false;
    for (std::size_t i = 1; i < r.micro_batches.size(); ++i)
      falls = falls || r.forward_ms[i] < 0.85 * r.forward_ms[i - 1] ||
              r.backward_ms[i] < 0.85 * r.backward_ms[i - 1];
    bool fp16_slow = false;
    if (r.dtype == Dtype::FP16) {
      const DeviceSpec& g = GpuCatalog::builtin().get(r.gpu);
      const auto* f32 = tables.find(r.model, r.gpu, r.seq, Dtype::FP32);
      fp16_slow = f32 && effective_peak(g, Dtype::FP16) >= 2 * effective_peak(g, Dtype::FP32) &&
                  total_at4(r) >= 0.95 * total_at4(*f32);
    }
    const std::string label = r.file_model + " / " + r.file_gpu + " / seq " +
                              std::to_string(r.seq) + " / " + to_string(r.dtype);
    const auto it = flagged.find(&r);
    if (falls || fp16_slow) {
      EXPECT_NE(it, flagged.end()) << label << " breaks rule (a) or (d) but is kept";
      continue;
    }
    if (it == flagged.end()) continue;
    const std::string& why = it->second;
    const bool a_or_d = why.starts_with("measured time falls") || why.starts_with("fp16 (");
    EXPECT_FALSE(a_or_d) << label << " is flagged for a rule it does not break: " << why;
    const bool b = why.find("TFLOP/s peak") != std::string::npos;
    const bool c = why.find("is not slower than") != std::string::npos &&
                   why.find("contradicts the") != std::string::npos;
    EXPECT_TRUE(b || c) << label << ": " << why;
  }
}

}  // namespace

TEST(ComputeValidation, LeaveOneGpuOutAndLeaveOneModelOut) {
  const ValidationReport rep = validate_compute_models(ProfileTables::builtin());

  std::cout << "\nRows left out as inconsistent (" << rep.inconsistent.size() << "):\n";
  for (const auto& i : rep.inconsistent)
    std::cout << "  " << i.row->file_model << " / " << i.row->file_gpu << " / seq " << i.row->seq
              << " / " << to_string(i.row->dtype) << ": " << i.reason << "\n";
  std::cout << "\n";
  print_groups("Leave-one-GPU-out (calibrated, θ pooled over the other GPUs, applied from specs)",
               rep.leave_one_gpu_out);
  print_groups("Leave-one-model-out (calibrated, the GPU's own θ without the model)",
               rep.leave_one_model_out);
  print_groups("Unseen model (left out on every GPU: architecture and family only)",
               rep.unseen_model);
  print_groups("Leave-one-generation-out (every GPU of the generation held out)",
               rep.leave_one_generation_out);
  const DtypeClassError logo16 = by_dtype_class(rep.logo_rows, false);
  const DtypeClassError logo32 = by_dtype_class(rep.logo_rows, true);
  print_signed("Leave-one-GPU-out, fp16/bf16 rows: signed error (predicted - measured)", logo16);
  print_signed("Leave-one-GPU-out, fp32 rows: signed error (predicted - measured)", logo32);
  auto builtin = CalibratedComputeModel::builtin();
  std::cout << "leave-one-GPU-out:   median over GPUs " << fixed(rep.logo_median_over_gpus, 1)
            << "%, all rows " << fixed(rep.logo_overall, 1) << "% (target 12%)\n"
            << "leave-one-model-out: median over GPUs " << fixed(rep.lomo_median_over_gpus, 1)
            << "%, all rows " << fixed(rep.lomo_overall, 1) << "% (target 8%)\n"
            << "unseen model:        median over GPUs "
            << fixed(rep.unseen_model_median_over_gpus, 1) << "%, all rows "
            << fixed(rep.unseen_model_overall, 1) << "%\n"
            << "leave-one-generation-out: median over generations "
            << fixed(rep.logeno_median_over_generations, 1) << "%, all rows "
            << fixed(rep.logeno_overall, 1) << "%\n"
            << "  by dtype, leave-one-GPU-out: fp32 " << by_dtype(rep.logo_rows, true)
            << "; fp16/bf16 " << by_dtype(rep.logo_rows, false) << "\n"
            << "  by dtype, leave-one-model-out: fp32 " << by_dtype(rep.lomo_rows, true)
            << "; fp16/bf16 " << by_dtype(rep.lomo_rows, false) << "\n"
            << "uncalibrated roofline, all rows: " << fixed(rep.roofline_overall, 1) << "%\n"
            << "published stack (flash, fused) factor, tensor pipeline: "
            << fixed(builtin->stack_factor({}, 1), 3) << " on " << builtin->stack_points({})
            << " points, flash-attention weight "
            << fixed(builtin->stack_attention_weight({}, 1), 2) << "\n"
            << "power constants (all rows): fp32 pipeline "
            << fixed(builtin->watts_per_flops(0) * 1e12, 2) << " W per TFLOP/s, tensor pipeline "
            << fixed(builtin->watts_per_flops(1) * 1e12, 2) << " W per TFLOP/s\n"
            << "integer share of FP32 issue on shared lanes (all rows, fp32 pipeline): iota "
            << fixed(builtin->int32_share(), 3) << "\n";

  // Every profiled GPU is held out once, and every row is predicted.
  EXPECT_GE(rep.leave_one_gpu_out.size(), 12u);
  EXPECT_GT(rep.logo_rows.size(), 200u);
  EXPECT_EQ(rep.logo_rows.size(), rep.lomo_rows.size());
  // Calibration must beat the datasheet roofline on unseen GPUs.
  EXPECT_LT(rep.logo_overall, rep.roofline_overall);
  EXPECT_EQ(rep.unseen_model.size(), rep.leave_one_gpu_out.size());
  // Regression guards at the recorded numbers (+1 point): see costmodels/README.md.
  // Guards: the recorded numbers (costmodels/README.md, 2026-12-01 night, factors per
  // pipeline) + 1 point.
  EXPECT_LE(rep.logo_median_over_gpus, 11.7);
  EXPECT_LE(rep.lomo_median_over_gpus, 8.8);
  EXPECT_LE(rep.unseen_model_median_over_gpus, 11.0);
  EXPECT_LE(rep.logeno_median_over_generations, 17.6);
  // By dtype class, leave-one-GPU-out (recorded 2026-12-07: fp32 9.4 %, fp16/bf16 14.0 %).
  EXPECT_LE(logo32.median_over_gpus, 10.4);
  EXPECT_LE(logo16.median_over_gpus, 15.0);
  // A row's signed errors are means of the same points its APE takes absolute values of, so
  // their mean cannot exceed it; a row published as a sum has one error for both phases.
  for (const auto& r : rep.logo_rows) {
    EXPECT_LE(std::abs(r.forward_error + r.backward_error) / 2, r.ape + 1e-9)
        << r.model << " " << r.gpu << " " << r.seq;
    EXPECT_TRUE(std::isfinite(r.forward_error) && std::isfinite(r.backward_error));
  }
  // The rows left out are exactly the detector's, each for a rule its reason states; the count
  // (printed above) is whatever the published data holds, not a number to pin.
  expect_inconsistent_rows_are_the_detectors(rep, ProfileTables::builtin());
  // The detector finds the contradictions the issue names (a larger GPT faster than a smaller).
  bool gpt_pair = std::any_of(rep.inconsistent.begin(), rep.inconsistent.end(), [](const auto& i) {
    return i.reason.find("gpt-2.7b") != std::string::npos &&
           i.reason.find("gpt-1.3b") != std::string::npos;
  });
  EXPECT_TRUE(gpt_pair);
}

TEST(MemoryValidation, AgainstPublishedComputeMemory) {
  const MemoryValidation v = validate_memory_model(MemoryProfiles::builtin());
  TextTable t({"cluster", "model", "dtype", "m", "published GiB", "predicted GiB", "APE %"});
  for (std::size_t i = 0; i < v.rows.size(); ++i) {
    const auto& r = v.rows[i];
    t.add_row({r.cluster, r.file_model, to_string(r.dtype), std::to_string(r.micro_batch),
               fixed(r.published_gib, 3), fixed(r.closed_form_gib, 3),
               fixed(100 * std::abs(r.closed_form_gib - r.published_gib) / r.published_gib, 1)});
  }
  std::cout << "\n"
            << t.render() << "memory, closed forms (what predict_memory uses): median APE "
            << fixed(v.closed_form_median_ape, 1) << "% over " << v.rows.size()
            << " points (target 10%)\n"
            << "memory, 4 constants fitted in-sample: median APE "
            << fixed(v.in_sample_median_ape, 1)
            << "%; fitted leave-one-model-out: " << fixed(v.median_ape, 1) << "%\n";
  EXPECT_GT(v.rows.size(), 200u);
  // Recorded 23.3% (costmodels/README.md). It was 20.9% before the working set followed the
  // backend's layer tensor by tensor and added its backward's input-gradient temporaries. The
  // ViT rows move (their working set is a layer's; GPT, LLaMA, Mistral and BERT rows are mostly
  // ruled by the LM head's logits): median signed error per model and dtype from -3..+20% to
  // +7..+38% over the published points, measured on PyTorch, which frees saved activations
  // during the backward instead of holding them to its end as the backend does.
  EXPECT_LE(v.closed_form_median_ape, 24.0);
}

// The published end-to-end points, compute only (every unit's forward, recompute when the
// point checkpoints, backward, and the optimizer: exposed communication is ≤ 0.5 % of these
// iterations in the simulator), with the published stack's factor fitted on all points
// (in-sample) and without the GPU type's points (and, for A100-40GB, without its Cephalo
// profile rows too: the GPU is then predicted from its generation and datasheet).
TEST(PublishedThroughput, ComputeOnlyInSampleAndHeldOutByGpu) {
  const auto& points = builtin_published_throughput();
  ASSERT_EQ(points.size(), 23u);
  auto all = CalibratedComputeModel::builtin();
  TextTable t({"point", "ckpt", "measured tok/s/GPU", "in-sample %", "GPU held out %"});
  std::map<std::string, std::shared_ptr<CalibratedComputeModel>> held;
  std::vector<double> in_err, out_err;
  for (const auto& p : points) {
    if (!held.count(p.gpu)) {
      CalibrationOptions o;
      o.exclude_gpus = {p.gpu};
      held[p.gpu] = CalibratedComputeModel::fit(ProfileTables::builtin(), o);
    }
    auto err = [&](const ComputeModel& m) {
      return 100 * (p.measured_iteration_s() / published_compute_seconds(m, p) - 1);
    };
    const double a = err(*all), b = err(*held[p.gpu]);
    in_err.push_back(std::abs(a));
    out_err.push_back(std::abs(b));
    t.add_row({p.id, p.checkpointing.is_full() ? "full" : "off", fixed(p.tokens_per_s_per_gpu, 0),
               fixed(a, 1), fixed(b, 1)});
  }
  std::cout << "\nPublished throughput, compute only (error of simulated tokens/s per GPU)\n"
            << t.render() << "MAPE in-sample " << fixed(mean(in_err), 1) << "%, GPU type held out "
            << fixed(mean(out_err), 1) << "%\n";
  // Guards: recorded 3.7 % and 5.0 % (2026-12-01 night, factors per pipeline) + 1 point.
  EXPECT_LE(mean(in_err), 4.7);
  EXPECT_LE(mean(out_err), 6.0);
}

// The never-fitted check set (H100, scenarios/validation/published-throughput), compute only,
// each point with its published activation-checkpointing setting (recompute only when it
// checkpoints: the end-to-end simulation cannot say "off" before the plan key exists). Also the
// model without the flash-attention weight (β = 1), to show what that weight does out of sample.
// Reported, no guard tighter than "finite and below 100 %": nothing here was fitted on these.
TEST(PublishedThroughput, HopperCheckSetComputeOnly) {
  const auto points =
      load_published_throughput(std::filesystem::path(CEPHALO_SOURCE_DIR) /
                                "scenarios/validation/published-throughput/mosaicml-h100.json");
  auto all = CalibratedComputeModel::builtin();
  CalibrationOptions no_beta;
  no_beta.published_attention_weight = false;
  auto flat = CalibratedComputeModel::fit(ProfileTables::builtin(), no_beta);
  // GEMM waves over the SMs (off by default), refitted with them, out of sample.
  CalibrationOptions with_waves;
  with_waves.gemm_waves = true;
  auto waves = CalibratedComputeModel::fit(ProfileTables::builtin(), with_waves);
  TextTable t(
      {"point", "ckpt", "measured tok/s/GPU", "error %", "error, β = 1 %", "error, waves %"});
  std::vector<double> err, err_flat, err_waves, sim, meas;
  for (const auto& p : points) {
    auto e = [&](const ComputeModel& m) {
      return 100 * (p.measured_iteration_s() / published_compute_seconds(m, p) - 1);
    };
    const double a = e(*all), b = e(*flat), c = e(*waves);
    err.push_back(std::abs(a));
    err_flat.push_back(std::abs(b));
    err_waves.push_back(std::abs(c));
    sim.push_back(p.tokens_per_s_per_gpu * (1 + a / 100));
    meas.push_back(p.tokens_per_s_per_gpu);
    t.add_row({p.id, p.checkpointing.is_full() ? "full" : "off", fixed(p.tokens_per_s_per_gpu, 0),
               fixed(a, 1), fixed(b, 1), fixed(c, 1)});
  }
  int conc = 0, disc = 0;
  for (std::size_t i = 0; i < sim.size(); ++i)
    for (std::size_t j = i + 1; j < sim.size(); ++j)
      ((sim[i] - sim[j]) * (meas[i] - meas[j]) > 0 ? conc : disc)++;
  const double tau = static_cast<double>(conc - disc) / (conc + disc);
  std::cout << "\nHopper check set, compute only, published checkpointing (never fitted)\n"
            << t.render() << "MAPE " << fixed(mean(err), 1)
            << "% (beta = 1: " << fixed(mean(err_flat), 1)
            << "%; with GEMM waves: " << fixed(mean(err_waves), 1) << "%), Kendall tau "
            << fixed(tau, 2) << " over " << points.size() << " points\n";
  EXPECT_EQ(points.size(), 52u);
  // Guard at the recorded value (6.4 %, 2026-12-02, Kendall tau 0.97) + 1 point, as the other
  // guards of this file: the set is never fitted, so a regression of the compute model shows here.
  EXPECT_LE(mean(err), 7.4);
}

// The NeuSight kernel set: per op class, each kernel priced from its FLOPs and bytes with θ
// per class, in-sample (per GPU), leave-one-GPU-out and leave-one-generation-out; GEMM waves
// over the SMs on and off.
TEST(KernelValidation, PerOpErrorsOnTheNeuSightKernels) {
  const auto set = load_kernel_set(std::filesystem::path(CEPHALO_SOURCE_DIR) /
                                   "scenarios/calibration/neusight-kernels");
  ASSERT_GT(set.rows.size(), 10000u);
  const std::vector<std::string> protocols = {"in-sample", "leave-one-GPU-out",
                                              "leave-one-generation-out"};
  std::map<bool, KernelReport> reps;
  for (bool waves : {false, true}) reps[waves] = validate_kernels(set, waves);
  TextTable t({"op", "rows", "in-sample %", "LOGO %", "LOGenO %", "LOGO, waves %"});
  for (const auto& [op, n] : reps[false].rows) {
    const auto& m = reps[false].mape.at(op);
    t.add_row({op, std::to_string(n), fixed(m.at(protocols[0]), 1), fixed(m.at(protocols[1]), 1),
               fixed(m.at(protocols[2]), 1), fixed(reps[true].mape.at(op).at(protocols[1]), 1)});
  }
  TextTable g({"gpu", "in-sample %", "LOGO %", "LOGenO %"});
  for (const auto& d : set.devices)
    g.add_row({d.name, fixed(reps[false].mape_by_gpu.at(protocols[0]).at(d.name), 1),
               fixed(reps[false].mape_by_gpu.at(protocols[1]).at(d.name), 1),
               fixed(reps[false].mape_by_gpu.at(protocols[2]).at(d.name), 1)});
  std::cout << "\nNeuSight kernels (fp32, eager), MAPE per op\n"
            << t.render() << "\n"
            << g.render() << "\n";
  // Guard: the mean over ops of the leave-one-GPU-out MAPE, recorded 24.0 % (2026-12-01) + 1.
  double logo = 0;
  for (const auto& [op, m] : reps[false].mape) logo += m.at(protocols[1]);
  logo /= static_cast<double>(reps[false].mape.size());
  std::cout << "mean over ops, leave-one-GPU-out: " << fixed(logo, 1) << "%\n";
  EXPECT_LE(logo, 25.0);
}

// The same kernels priced by the layer model, eager (what `cephalo predict layer --attention
// eager --fused-elementwise false` prices a layer's ops with), never fitted on them.
TEST(KernelValidation, TheLayerModelPricesEagerFp32Kernels) {
  const auto set = load_kernel_set(std::filesystem::path(CEPHALO_SOURCE_DIR) /
                                   "scenarios/calibration/neusight-kernels");
  const auto rep = price_kernels_with_layer_model(set, *CalibratedComputeModel::builtin());
  std::vector<std::string> header = {"gpu (as catalog)"};
  for (const auto& [op, m] : rep.mape_by_op) header.push_back(op + " %");
  header.push_back("all %");
  TextTable t(header);
  for (const auto& [gpu, ops] : rep.mape_by_gpu_op) {
    std::vector<std::string> row = {gpu + " (" + rep.catalog_gpu.at(gpu) + ")"};
    for (const auto& [op, m] : rep.mape_by_op) row.push_back(fixed(ops.at(op), 1));
    row.push_back(fixed(rep.mape_by_gpu.at(gpu), 1));
    t.add_row(row);
  }
  std::vector<std::string> all = {"all GPUs"}, sign = {"median signed error"};
  for (const auto& [op, m] : rep.mape_by_op) {
    all.push_back(fixed(m, 1));
    sign.push_back(fixed(rep.median_signed_by_op.at(op), 1));
  }
  all.push_back(fixed(rep.mape, 1));
  sign.push_back("");
  t.add_row(all);
  t.add_row(sign);
  std::string skipped;
  for (const auto& g : rep.skipped_gpus) skipped += (skipped.empty() ? "" : ", ") + g;
  std::cout << "\nNeuSight kernels priced by the layer model, eager (fp32, never fitted on "
               "them), MAPE %\n"
            << t.render() << "skipped (no catalog GPU): " << (skipped.empty() ? "none" : skipped)
            << "\nlayer model on eager fp32 kernels: MAPE " << fixed(rep.mape, 1) << "% over "
            << rep.rows << " kernels\n";
  EXPECT_EQ(rep.catalog_gpu.size(), 4u);
  EXPECT_EQ(rep.rows, 4 * 7 * 300);
  // Guard: recorded 48.9 % (2026-12-02; far from the 12 % target, costmodels/README.md) + 1.
  EXPECT_LE(rep.mape, 49.9);
}

// Which published profile rows a calibration can trust (find_inconsistent_rows), and how a
// row is read: its architecture as measured, the layers its times cover, its points.
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "calibration_util.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
using detail::fmt;
using detail::median;

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
}  // namespace cephalo::costmodels

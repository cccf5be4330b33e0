#include "cephalo/costmodels/layer_ops.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

// The classes in print order. The attention core is every op of the attention itself (flash's
// one kernel; eager's scores, softmax and context); norms are the layer norms (fused, the
// residual add they absorb); elementwise the rest of the memory-bound ops (activation,
// unfused residual adds, a compiled stack's rotary positions).
constexpr std::array<const char*, 4> kClasses = {"GEMMs", "attention core", "elementwise", "norms"};

std::size_t class_of(const OpCost& op) {
  switch (op.op_class) {
    case OpClass::Gemm:
      return 0;
    case OpClass::Attention:
    case OpClass::FusedAttention:
      return 1;
    case OpClass::Memory:
      break;
  }
  if (std::strcmp(op.name, "softmax") == 0) return 1;
  if (std::strncmp(op.name, "norm", 4) == 0) return 3;
  return 2;
}

// An op at the GPU's datasheet roofline: max(FLOPs at the effective peak, bytes at the memory
// bandwidth); a memory-bound op by its bytes alone. No instruction mix (flash attention's
// mma.sync fraction, its exponentials) and no launch overhead: what those cost is part of the
// price the ratio measures.
double datasheet_seconds(const DeviceSpec& device, const OpCost& op, Dtype dtype, bool backward) {
  const double flops = op.op_class == OpClass::Memory ? 0
                       : backward                     ? op.backward_flops
                                                      : op.forward_flops;
  const double bytes = backward ? op.backward_bytes : op.forward_bytes;
  return std::max(flops / effective_peak(device, dtype), bytes / device.memory_bandwidth);
}

double ratio(double priced, double roofline) { return roofline > 0 ? priced / roofline : 0; }
double share(double part, double whole) { return whole > 0 ? part / whole : 0; }

}  // namespace

LayerOpsPrediction predict_layer_ops(const LayerQuery& q, const QueryOrigin& origin) {
  LayerOpsPrediction out;
  out.layer = predict_layer(q, origin);
  if (out.layer.source.rfind("calibrated", 0) != 0)
    throw ValidationError(origin.file, origin.field(origin.flags ? "compute_model" : "source"),
                          q.source + " (priced by " + out.layer.source + ")",
                          "a compute model that prices this layer with the calibrated model "
                          "(calibrated, or auto where no profile row covers it): only it "
                          "prices each op");
  const LayerJob lj = layer_job(q, origin);
  const Job& job = lj.job;
  const auto ops = unit_ops(job.model, 1, job.sequence_length, q.micro_batch, job.precision.compute,
                            job.implementation);
  const auto& model = *CalibratedComputeModel::builtin();
  const auto fwd = model.unit_op_seconds(*lj.gpu, job, 1, ComputePhase::Forward, q.micro_batch);
  const auto bwd = model.unit_op_seconds(*lj.gpu, job, 1, ComputePhase::Backward, q.micro_batch);
  out.classes.resize(kClasses.size());
  for (std::size_t c = 0; c < kClasses.size(); ++c) out.classes[c].name = kClasses[c];
  for (std::size_t i = 0; i < ops.size(); ++i) {
    LayerOpClass& c = out.classes[class_of(ops[i])];
    c.ops.emplace_back(ops[i].name);
    c.forward_s += fwd[i];
    c.backward_s += bwd[i];
    c.roofline_forward_s += datasheet_seconds(*lj.gpu, ops[i], job.precision.compute, false);
    c.roofline_backward_s += datasheet_seconds(*lj.gpu, ops[i], job.precision.compute, true);
  }
  std::erase_if(out.classes, [](const LayerOpClass& c) { return c.ops.empty(); });
  return out;
}

Json to_json(const LayerOpsPrediction& p) {
  Json j = to_json(p.layer);
  Json classes = Json::array();
  for (const auto& c : p.classes)
    classes.push_back({{"name", c.name},
                       {"ops", c.ops},
                       {"forward_ms", c.forward_s * 1e3},
                       {"backward_ms", c.backward_s * 1e3},
                       {"roofline_forward_ms", c.roofline_forward_s * 1e3},
                       {"roofline_backward_ms", c.roofline_backward_s * 1e3},
                       {"forward_ratio", ratio(c.forward_s, c.roofline_forward_s)},
                       {"backward_ratio", ratio(c.backward_s, c.roofline_backward_s)},
                       {"forward_share", share(c.forward_s, p.layer.forward_s)},
                       {"backward_share", share(c.backward_s, p.layer.backward_s)}});
  j["op_classes"] = classes;
  return j;
}

std::string render_text(const LayerOpsPrediction& p) {
  std::string out = render_text(p.layer);
  TextTable t({"op class", "forward ms", "backward ms", "roofline fwd ms", "roofline bwd ms",
               "x fwd", "x bwd", "share fwd", "share bwd", "ops"});
  t.set_align(9, TextTable::Align::Left);
  double roof_f = 0, roof_b = 0;
  auto percent = [](double v) { return fixed(100 * v, 1) + " %"; };
  for (const auto& c : p.classes) {
    std::string names;
    for (const auto& n : c.ops) names += (names.empty() ? "" : ", ") + n;
    t.add_row({c.name, fixed(c.forward_s * 1e3, 3), fixed(c.backward_s * 1e3, 3),
               fixed(c.roofline_forward_s * 1e3, 3), fixed(c.roofline_backward_s * 1e3, 3),
               fixed(ratio(c.forward_s, c.roofline_forward_s), 2),
               fixed(ratio(c.backward_s, c.roofline_backward_s), 2),
               percent(share(c.forward_s, p.layer.forward_s)),
               percent(share(c.backward_s, p.layer.backward_s)), names});
    roof_f += c.roofline_forward_s;
    roof_b += c.roofline_backward_s;
  }
  // The layer's own priced time, which the rows add up to (the model is linear in the ops).
  t.add_row({"layer", fixed(p.layer.forward_s * 1e3, 3), fixed(p.layer.backward_s * 1e3, 3),
             fixed(roof_f * 1e3, 3), fixed(roof_b * 1e3, 3),
             fixed(ratio(p.layer.forward_s, roof_f), 2),
             fixed(ratio(p.layer.backward_s, roof_b), 2), percent(1), percent(1), ""});
  out +=
      "\nper op class (x: priced / the datasheet roofline, max(FLOPs / peak, bytes / "
      "bandwidth) per op):\n";
  out += t.render();
  return out;
}

}  // namespace cephalo::costmodels

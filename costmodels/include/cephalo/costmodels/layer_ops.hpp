#pragma once
// `cephalo predict layer --ops`: a layer's priced time split by op class (GEMMs, attention
// core, elementwise, norms), each against the GPU's datasheet roofline. The prices are the
// calibrated model's own (CalibratedComputeModel::unit_op_seconds), so the classes add up to
// the layer's priced time; the roofline is each op's max(FLOPs / peak, bytes / bandwidth).
#include <string>
#include <vector>

#include "cephalo/costmodels/prediction_records.hpp"

namespace cephalo::costmodels {

struct LayerOpClass {
  std::string name;              // "GEMMs", "attention core", "elementwise", "norms"
  std::vector<std::string> ops;  // the unit_ops names in it, in their order
  double forward_s = 0, backward_s = 0;
  double roofline_forward_s = 0, roofline_backward_s = 0;  // datasheet peaks, no overhead
};

struct LayerOpsPrediction {
  LayerPrediction layer;  // predict_layer's record: the totals the classes add up to
  std::vector<LayerOpClass> classes;
};

// ValidationError naming the compute model (its flag, or the keyword `source`) when the layer
// is not priced by the calibrated model (a profile row or the roofline has no per-op prices
// of the same model); predict_layer's errors otherwise.
LayerOpsPrediction predict_layer_ops(const LayerQuery& query, const QueryOrigin& origin = {});
// predict_layer's record with "op_classes": one object per class (ms, ratio to the roofline,
// share of the layer's forward / backward).
Json to_json(const LayerOpsPrediction& p);
// predict_layer's table, then one row per class and the layer's total.
std::string render_text(const LayerOpsPrediction& p);

}  // namespace cephalo::costmodels

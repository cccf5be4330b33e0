#pragma once
// Closed forms for a transformer's parameters, FLOPs and activation sizes, per FSDP unit.
// Units: 0 = embedding (token + position, plus patch projection for ViT), 1..L = layers,
// L+1 = head (final norm + LM/classifier head, whose weight is the embedding when tied).
#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

enum class UnitKind { Embedding, Layer, Head };

int num_units(const ModelSpec& model);                 // layers + 2
UnitKind unit_kind(const ModelSpec& model, int unit);

double layer_parameters(const ModelSpec& model);
double embedding_parameters(const ModelSpec& model);
double head_parameters(const ModelSpec& model);        // excludes a tied weight
double unit_parameters(const ModelSpec& model, int unit);
double total_parameters(const ModelSpec& model);

// Floating-point operations of one unit for `micro_batch` samples of `seq` tokens
// (multiply-add = 2 FLOPs). Backward is the gradient pass only (no recompute).
struct UnitFlops {
  double forward = 0;
  double backward = 0;
};
UnitFlops unit_flops(const ModelSpec& model, int unit, int seq, int micro_batch);

// Bytes of the activation at a unit's input boundary (what layered accumulation keeps per
// micro-batch), and the peak working set of running one unit's forward+backward.
double boundary_activation_bytes(const ModelSpec& model, int seq, int micro_batch, Dtype dtype);
double unit_working_bytes(const ModelSpec& model, int unit, int seq, int micro_batch, Dtype dtype);

}  // namespace cephalo::costmodels

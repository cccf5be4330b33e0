#include "cephalo/core/schedule.hpp"

#include <algorithm>

#include "cephalo/core/dtype.hpp"

namespace cephalo::schedule {

bool recomputes(const ActivationCheckpointing& checkpointing, int unit, int num_units) {
  if (unit == num_units - 1) return true;
  if (unit == 0) return checkpointing.kind != ActivationCheckpointing::Kind::None;
  return checkpointing.checkpoints_layer(unit);
}

bool keeps_only_input(const ActivationCheckpointing& checkpointing, int layer) {
  return checkpointing.checkpoints_layer(layer);
}

int checkpointed_layers(const ActivationCheckpointing& checkpointing, int num_layers) {
  int n = 0;
  for (int l = 1; l <= num_layers; ++l) n += keeps_only_input(checkpointing, l) ? 1 : 0;
  return n;
}

int rounds(Accumulation accumulation, int max_micro_batches) {
  if (accumulation == Accumulation::Layered) return 1;
  return std::max(1, max_micro_batches);
}

bool reduces_in_round(Accumulation accumulation, int round, int rounds) {
  return accumulation != Accumulation::NoSync || round == rounds - 1;
}

UnitCollectives unit_collectives(Accumulation accumulation, int rounds) {
  UnitCollectives c;
  for (int k = 0; k < rounds; ++k) {
    ++c.forward_gathers;
    ++c.backward_gathers;
    if (reduces_in_round(accumulation, k, rounds)) ++c.reduce_scatters;
  }
  return c;
}

ShardingCollectives sharding_collectives(const Sharding& sharding) {
  ShardingCollectives c;
  // One group holds the whole state: nothing to reduce across.
  c.cross_group_all_reduces =
      sharding.kind == Sharding::Kind::Hybrid && sharding.groups.size() > 1 ? 1 : 0;
  return c;
}

double state_bytes_per_parameter(const Precision& precision) {
  // AdamW's first and second moments are kept in fp32 whatever the parameter dtype.
  return bytes_per_element(precision.params) + bytes_per_element(precision.reduce) +
         2.0 * bytes_per_element(Dtype::FP32);
}

std::optional<std::string> offload_conflict(Offload offload,
                                            const ActivationCheckpointing& checkpointing) {
  if (offload != Offload::Host || checkpointing.is_full()) return std::nullopt;
  return "offload host needs activation checkpointing full (offload moves the checkpointed "
         "layer inputs to host memory between forward and recompute; layers without "
         "checkpointing keep their activations on the device), not " +
         to_string(checkpointing);
}

}  // namespace cephalo::schedule

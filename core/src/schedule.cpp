#include "cephalo/core/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cephalo/core/dtype.hpp"

namespace cephalo::schedule {

bool recomputes(const ActivationCheckpointing& checkpointing, int unit, int num_units) {
  if (unit == num_units - 1) return true;
  if (unit == 0)
    return checkpointing.kind != ActivationCheckpointing::Kind::None &&
           !checkpointing.recomputes_attention_core();
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

bool recomputes_attention_core(const ActivationCheckpointing& checkpointing, int unit,
                               int num_units) {
  return checkpointing.recomputes_attention_core() && unit >= 1 && unit < num_units - 1;
}

bool has_recompute_op(const ActivationCheckpointing& checkpointing, int unit, int num_units) {
  return recomputes(checkpointing, unit, num_units) ||
         recomputes_attention_core(checkpointing, unit, num_units);
}

std::optional<std::string> attention_core_refusal(const ModelSpec& model,
                                                  const ActivationCheckpointing& checkpointing) {
  if (!checkpointing.recomputes_attention_core() || model.heads >= 1) return std::nullopt;
  return "a model whose layers have an attention core to recompute (model \"" + model.name +
         "\" has " + std::to_string(model.heads) +
         " attention heads); use \"full\", \"none\" or {\"every\": k}";
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
      sharding.kind == ShardingKind::Hybrid && sharding.groups.size() > 1 ? 1 : 0;
  return c;
}

GatherRules gather_rules(Framework framework, bool prefetch) {
  GatherRules r;
  if (!prefetch) {
    r.forward_lookahead = r.backward_lookahead = 1;
    return r;
  }
  switch (framework) {
    case Framework::FSDP2:
    case Framework::FSDP1:
    case Framework::DDP:
      break;
    case Framework::DeepSpeedZero3:
      // DeepSpeed's defaults: stage3_prefetch_bucket_size, stage3_max_live_parameters.
      r.prefetch_bucket_elements = 5e7;
      r.max_live_elements = 1e9;
      break;
  }
  return r;
}

std::vector<int> gather_gates(const GatherRules& rules, std::span<const GatherPhase> phases) {
  const int n = static_cast<int>(phases.size());
  std::vector<int> gates(static_cast<std::size_t>(n), -1);
  if (rules.prefetch_bucket_elements <= 0) {
    int floor = -1;
    for (int q = 0; q < n; ++q) {
      const auto& ph = phases[static_cast<std::size_t>(q)];
      const int lookahead = ph.backward ? rules.backward_lookahead : rules.forward_lookahead;
      // A shorter lookahead after a longer one must not issue a gather before an earlier one.
      floor = std::max(floor, q - std::max(1, lookahead));
      gates[static_cast<std::size_t>(q)] = floor;
    }
    return gates;
  }
  auto elements = [&](int q) { return phases[static_cast<std::size_t>(q)].elements; };
  int frontier = -1;  // the furthest phase issued
  double alive = 0;   // elements of phases j..frontier, gathered or in flight
  for (int j = 0; j < n; ++j) {
    if (j > 0) alive -= elements(j - 1);  // released when its compute was done
    if (frontier < j) {
      frontier = j;
      gates[static_cast<std::size_t>(j)] = j - 1;
      alive += elements(j);
    }
    const double budget = std::min(rules.prefetch_bucket_elements, rules.max_live_elements - alive);
    double issued = 0;
    while (frontier + 1 < n && issued < budget) {
      ++frontier;
      gates[static_cast<std::size_t>(frontier)] = j - 1;
      issued += elements(frontier);
      alive += elements(frontier);
    }
  }
  return gates;
}

int most_live_gathers(const GatherRules& rules, double phase_elements, int phases) {
  if (phases <= 0) return 0;
  // The lookahead rules keep the computing phase and the next lookahead − 1 live: no walk (the
  // memory model asks for this on every prediction).
  if (rules.prefetch_bucket_elements <= 0)
    return std::min(phases, std::max({1, rules.forward_lookahead, rules.backward_lookahead}));
  // A round's forward phases, then its backward ones.
  std::vector<GatherPhase> uniform(static_cast<std::size_t>(phases), GatherPhase{phase_elements});
  for (int q = phases / 2; q < phases; ++q) uniform[static_cast<std::size_t>(q)].backward = true;
  const std::vector<int> gates = gather_gates(rules, uniform);
  // While phase j computes, phases j.. whose gate is before j are gathered or in flight; the
  // gates never decrease, so the last such phase only moves forward.
  int most = 1, last = 0;
  for (int j = 0; j < phases; ++j) {
    last = std::max(last, j);
    while (last + 1 < phases && gates[static_cast<std::size_t>(last + 1)] < j) ++last;
    most = std::max(most, last - j + 1);
  }
  return most;
}

std::string describe_schedule(Framework framework, bool prefetch) {
  const GatherRules r = gather_rules(framework, prefetch);
  std::ostringstream o;
  if (r.prefetch_bucket_elements > 0)
    o << "gathers ahead up to a " << r.prefetch_bucket_elements
      << "-element prefetch bucket (at most " << r.max_live_elements << " live)";
  else if (r.forward_lookahead == 1 && r.backward_lookahead == 1)
    o << "gathers each unit when it is next";
  else if (r.forward_lookahead == r.backward_lookahead)
    o << "gathers " << r.forward_lookahead - 1 << " unit" << (r.forward_lookahead > 2 ? "s" : "")
      << " ahead";
  else
    o << "gathers " << r.forward_lookahead - 1 << " / " << r.backward_lookahead - 1
      << " units ahead (forward / backward)";
  if (replicates_state(framework)) o << "; one replica of the state per rank";
  return o.str();
}

bool replicates_state(Framework framework) { return framework == Framework::DDP; }

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

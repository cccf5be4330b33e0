#pragma once
// A tiny scenario built in code for hand-computed graph and simulator tests: `ranks` identical
// devices in one PCIe node, a GPT-like model with `layers` layers.
#include "../support/scenario_builders.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::testing {

inline Scenario tiny_scenario(int ranks = 2, int layers = 2, int global_batch = 8,
                              double memory_bytes = 16e9) {
  Scenario s;
  s.name = "tiny";
  s.cluster.name = "tiny";
  DeviceSlot slot;
  slot.type = "tiny-gpu";
  slot.spec.name = "TinyGPU";
  slot.spec.memory_bytes = memory_bytes;
  slot.spec.memory_bandwidth = 500e9;
  slot.spec.peak_fp32 = 20e12;
  slot.spec.peak_fp16 = 80e12;
  slot.spec.pcie_generation = 4;
  slot.spec.pcie_lanes = 16;
  s.cluster.nodes.push_back(test_support::uniform_node(
      "node0", LinkSpec{"pcie", 16e9, 5e-6}, LinkSpec{"ethernet", 3.125e9, 10e-6}, slot, ranks));
  s.job.model = test_support::gpt_model("tiny-gpt", layers, 256, 4, 1024, 1000, 128);
  s.job.model_name = s.job.model.name;
  s.job.sequence_length = 128;
  s.job.global_batch = global_batch;
  return s;
}

// An even plan: every rank gets global_batch/ranks samples as `micro_batches` micro-batches.
inline Plan tiny_plan(const Scenario& s, int micro_batches,
                      Accumulation acc = Accumulation::Layered, bool prefetch = true,
                      Offload offload = Offload::None) {
  return test_support::even_plan(s, micro_batches, acc, prefetch, offload);
}

}  // namespace cephalo::testing

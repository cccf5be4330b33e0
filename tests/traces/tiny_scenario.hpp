#pragma once
// A tiny scenario built in code for hand-computed graph and simulator tests: `ranks` identical
// devices in one PCIe node, a GPT-like model with `layers` layers.
#include <string>

#include "cephalo/core/plan.hpp"

namespace cephalo::testing {

inline Scenario tiny_scenario(int ranks = 2, int layers = 2, int global_batch = 8,
                              double memory_bytes = 16e9) {
  Scenario s;
  s.name = "tiny";
  s.cluster.name = "tiny";
  Node node;
  node.name = "node0";
  node.intra_link = LinkSpec{"pcie", 16e9, 5e-6};
  node.nic = LinkSpec{"ethernet", 3.125e9, 10e-6};
  for (int r = 0; r < ranks; ++r) {
    DeviceSlot slot;
    slot.type = "tiny-gpu";
    slot.spec.name = "TinyGPU";
    slot.spec.memory_bytes = memory_bytes;
    slot.spec.memory_bandwidth = 500e9;
    slot.spec.peak_fp32 = 20e12;
    slot.spec.peak_fp16 = 80e12;
    slot.spec.pcie_generation = 4;
    slot.spec.pcie_lanes = 16;
    node.devices.push_back(slot);
  }
  s.cluster.nodes.push_back(node);
  ModelSpec& m = s.job.model;
  m.name = "tiny-gpt";
  m.num_layers = layers;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 1024;
  m.vocab_size = 1000;
  m.max_positions = 128;
  s.job.model_name = m.name;
  s.job.sequence_length = 128;
  s.job.global_batch = global_batch;
  return s;
}

// An even plan: every rank gets global_batch/ranks samples as `micro_batches` micro-batches.
inline Plan tiny_plan(const Scenario& s, int micro_batches,
                      Accumulation acc = Accumulation::Layered, bool prefetch = true,
                      Offload offload = Offload::None) {
  Plan p;
  p.scenario = s.name;
  p.accumulation = acc;
  p.prefetch = prefetch;
  p.offload = offload;
  const int ranks = s.cluster.num_ranks();
  for (int r = 0; r < ranks; ++r) {
    PlanRank pr;
    pr.rank = r;
    pr.node = 0;
    pr.gpu = s.cluster.nodes[0].devices[r].type;
    pr.batch = s.job.global_batch / ranks;
    pr.micro_batches = micro_batches;
    pr.micro_batch = (pr.batch + micro_batches - 1) / micro_batches;
    pr.state_share = 1.0 / ranks;
    p.ranks.push_back(pr);
  }
  return p;
}

}  // namespace cephalo::testing

#pragma once
// Scenarios and plans built in code, shared by the tests and the benchmarks (bench/ includes
// this header too): a GPT-style model, a node of identical devices, an even plan.
#include <string>
#include <utility>

#include "cephalo/core/plan.hpp"

namespace cephalo::test_support {

// A GPT decoder (learned positions, LayerNorm, GELU, tied head; no grouped-query attention).
inline ModelSpec gpt_model(std::string name, int layers, int hidden, int heads, int ffn_hidden,
                           int vocab, int max_positions) {
  ModelSpec m;
  m.name = std::move(name);
  m.num_layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = ffn_hidden;
  m.vocab_size = vocab;
  m.max_positions = max_positions;
  return m;
}

// A node of `count` copies of `slot` behind one intra-node link and one NIC.
inline Node uniform_node(std::string name, const LinkSpec& intra, const LinkSpec& nic,
                         const DeviceSlot& slot, int count) {
  Node node;
  node.name = std::move(name);
  node.intra_link = intra;
  node.nic = nic;
  for (int g = 0; g < count; ++g) node.devices.push_back(slot);
  return node;
}

// An even plan: every rank gets global_batch/ranks samples as `micro_batches` micro-batches
// and an equal share of the state; ranks are numbered node-major, as the cluster lists them.
inline Plan even_plan(const Scenario& s, int micro_batches,
                      Accumulation acc = Accumulation::Layered, bool prefetch = true,
                      Offload offload = Offload::None) {
  Plan p;
  p.scenario = s.name;
  p.accumulation = acc;
  p.prefetch = prefetch;
  p.offload = offload;
  const int ranks = s.cluster.num_ranks();
  int rank = 0;
  for (std::size_t n = 0; n < s.cluster.nodes.size(); ++n)
    for (const DeviceSlot& slot : s.cluster.nodes[n].devices) {
      PlanRank pr;
      pr.rank = rank++;
      pr.node = static_cast<int>(n);
      pr.gpu = slot.type;
      pr.batch = s.job.global_batch / ranks;
      pr.micro_batches = micro_batches;
      pr.micro_batch = (pr.batch + micro_batches - 1) / micro_batches;
      pr.state_share = 1.0 / ranks;
      p.ranks.push_back(pr);
    }
  return p;
}

}  // namespace cephalo::test_support

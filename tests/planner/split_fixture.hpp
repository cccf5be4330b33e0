#pragma once
// The scenario the 3D-split tests price: nodes of one GPU type each on NVLink with InfiniBand
// NICs (200 Gbit/s unless a node says; a second GPU type in every node if asked), running a small
// GPT in fp16 compute (fp32 parameters, fp16 gradient reduction).
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/split_estimate.hpp"

namespace cephalo::test_support {

struct SplitNode {
  std::string gpu;
  int count = 1;
  int nics = 4;  // nic_bandwidth each
  std::string nic_bandwidth = "200Gbit/s";
};

// Every node also holds `also_count` GPUs of `also_gpu` after its own (two types in a node).
inline Scenario split_scenario(const std::vector<SplitNode>& nodes, int layers, int global_batch,
                               int hidden, int heads, int sequence = 1024,
                               const std::string& also_gpu = "", int also_count = 0) {
  Json node_list = Json::array();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Json gpus = {{{"type", nodes[i].gpu}, {"count", nodes[i].count}}};
    if (also_count > 0) gpus.push_back({{"type", also_gpu}, {"count", also_count}});
    node_list.push_back(
        {{"name", "n" + std::to_string(i)},
         {"gpus", gpus},
         {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
         {"nic",
          {{"kind", "infiniband"},
           {"count", nodes[i].nics},
           {"bandwidth", nodes[i].nic_bandwidth},
           {"latency", "5us"}}}});
  }
  const Json doc = {
      {"name", "split-test"},
      {"cluster", {{"name", "test"}, {"nodes", node_list}}},
      {"job",
       {{"name", "split-test"},
        {"model",
         {{"name", "gpt-test"},
          {"family", "gpt"},
          {"layers", layers},
          {"hidden", hidden},
          {"heads", heads},
          {"ffn_hidden", 4 * hidden},
          {"vocab_size", 32000},
          {"max_positions", std::max(2048, sequence)},
          {"activation", "gelu"},
          {"norm", "layernorm"}}},
        {"sequence_length", sequence},
        {"global_batch", global_batch},
        {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp16"}}}}}};
  JsonReader reader(doc, "split-test.json");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

// Nodes of A100-80GB and L4 (per node: a100 then l4 GPUs) on PCIe 4.0, one Ethernet NIC of
// `gbit` Gbit/s each; a GPT of `layers` layers (hidden 1024, 16 heads), sequence 1024.
inline Scenario mixed_cluster(const std::vector<std::pair<int, int>>& nodes, int gbit, int layers,
                              int batch, bool tied) {
  Json list = Json::array();
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    Json gpus = Json::array();
    if (nodes[n].first > 0) gpus.push_back({{"type", "A100-80GB"}, {"count", nodes[n].first}});
    if (nodes[n].second > 0) gpus.push_back({{"type", "L4"}, {"count", nodes[n].second}});
    list.push_back({{"name", "node-" + std::to_string(n)},
                    {"gpus", gpus},
                    {"intra_link", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
                    {"nic",
                     {{"kind", "ethernet"},
                      {"count", 1},
                      {"bandwidth", std::to_string(gbit) + "Gbit/s"},
                      {"latency", "15us"}}}});
  }
  const Json doc = {
      {"name", "agreement-test"},
      {"cluster", {{"name", "mixed"}, {"nodes", list}}},
      {"job",
       {{"name", "agreement-test"},
        {"model",
         {{"name", "gpt-agreement"},
          {"family", "gpt"},
          {"layers", layers},
          {"hidden", 1024},
          {"heads", 16},
          {"ffn_hidden", 4096},
          {"vocab_size", 32000},
          {"max_positions", 2048},
          {"activation", "gelu"},
          {"norm", "layernorm"},
          {"tied_embeddings", tied}}},
        {"sequence_length", 1024},
        {"global_batch", batch},
        {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp16"}}}}}};
  JsonReader reader(doc, "agreement-test.json");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

// Every composition of `total` into `parts` parts, each a positive multiple of `unit`.
inline void compositions(int total, int parts, int unit, std::vector<int>& cur,
                         const std::function<void(const std::vector<int>&)>& f) {
  if (parts == 1) {
    if (total >= unit && total % unit == 0) {
      cur.push_back(total);
      f(cur);
      cur.pop_back();
    }
    return;
  }
  for (int c = unit; c <= total - unit * (parts - 1); c += unit) {
    cur.push_back(c);
    compositions(total - c, parts - 1, unit, cur, f);
    cur.pop_back();
  }
}

// Stage i's chunks from per-stage layer counts (multiples of v): virtual stage c·p + i holds
// counts[i] / v layers, the virtual stages tiling 0..L−1 in order.
inline void lay_out_chunks(std::vector<PipelineStage>& stages, const std::vector<int>& counts,
                           int v) {
  const int p = static_cast<int>(stages.size());
  int pos = 0;
  for (int c = 0; c < v; ++c)
    for (int i = 0; i < p; ++i) {
      const int q = counts[static_cast<std::size_t>(i)] / v;
      stages[static_cast<std::size_t>(i)].chunks.push_back({pos, pos + q});
      pos += q;
    }
}

// The split's stages: per stage its ranks and T, its chunks from per-stage layer counts
// (lay_out_chunks).
inline void place_stages(ModelSplit& split, const std::vector<std::vector<int>>& ranks,
                         const std::vector<int>& tp, const std::vector<int>& counts, int v) {
  split.stages.assign(ranks.size(), PipelineStage{});
  lay_out_chunks(split.stages, counts, v);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    split.stages[i].ranks = ranks[i];
    split.stages[i].tensor_parallel = tp[i];
  }
}

// The plan a priced candidate is written as (split_plan.cpp's replay_candidate): the even plan
// with the estimate's samples, sub-steps and shares (planner::apply_allocation) and the
// checkpointing.
inline Plan plan_of(const Scenario& s, const ModelSplit& split, const planner::SplitEstimate& e,
                    const ActivationCheckpointing& ck) {
  Plan plan = even_split_plan(s, split, "<test>");
  planner::apply_allocation(plan, e.allocation);
  plan.activation_checkpointing = ck;
  return plan;
}

}  // namespace cephalo::test_support

#pragma once
// A scenario the planner tests build in memory: the given nodes (cluster JSON) running a catalog
// model with fp32 parameters, fp16 compute and fp32 gradient reduction.
#include <string>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::test_support {

// Nodes "n0" and "n1", each 2 A100-80GB on NVLink, joined by 100 Gbit/s Ethernet.
inline Json two_a100_nodes() {
  Json node = {{"gpus", Json::array({{{"type", "A100-80GB"}, {"count", 2}}})},
               {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "3us"}}},
               {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}};
  Json nodes = Json::array();
  for (const char* name : {"n0", "n1"}) {
    node["name"] = name;
    nodes.push_back(node);
  }
  return nodes;
}

inline Scenario inline_scenario(const std::string& name, const std::string& cluster,
                                const Json& nodes, const std::string& model, int seq, int batch,
                                const std::string& origin) {
  const Json doc = {
      {"name", name},
      {"cluster", {{"name", cluster}, {"nodes", nodes}}},
      {"job",
       {{"name", name},
        {"model", model},
        {"sequence_length", seq},
        {"global_batch", batch},
        {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp32"}}}}}};
  JsonReader reader(doc, origin);
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

}  // namespace cephalo::test_support

#pragma once
// A scenario the planner tests build in memory: the given nodes (cluster JSON) running a catalog
// model with fp32 parameters, fp16 compute and fp32 gradient reduction.
#include <string>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::test_support {

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

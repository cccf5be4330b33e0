#include "cephalo/costmodels/model_description.hpp"

#include <filesystem>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

HfModel find_model_or_config(const std::string& name_or_file) {
  if (auto m = ModelCatalog::builtin().find(name_or_file)) {
    HfModel catalog;
    catalog.spec = *m;
    return catalog;
  }
  // Neither a catalog name nor something that looks like a file: a mistyped name gets the
  // catalog's close names, not "no such file".
  const std::filesystem::path p = name_or_file;
  if (!std::filesystem::exists(p) && p.extension() != ".json" && !p.has_parent_path())
    ModelCatalog::builtin().get(name_or_file);  // throws NotFoundError
  return load_hf_config(p);
}

Json model_summary(const ModelSpec& model) {
  Json j = to_json(model);
  j["parameters_per_layer"] = layer_parameters(model);
  j["total_parameters"] = total_parameters(model);
  return j;
}

Json model_description(const HfModel& model) {
  Json j = model_summary(model.spec);
  j["embedding_parameters"] = embedding_parameters(model.spec);
  j["head_parameters"] = head_parameters(model.spec);
  if (!model.model_type.empty()) {
    j["hf_model_type"] = model.model_type;
    j["notes"] = model.notes;
  }
  return j;
}

}  // namespace cephalo::costmodels

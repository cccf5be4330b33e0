#pragma once
// Named GPUs and models. The data lives in scenarios/catalog/{gpus,models}.json (shipped with
// the project and compiled in as a default path); aliases let the names used by the published
// Cephalo profiles ("l4", "a6000", "deepspeedgpt_2.7b", ...) resolve to catalog entries.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

// Folder holding the shipped data (scenarios/); overridable with CEPHALO_DATA_DIR.
std::filesystem::path data_dir();

// What both catalogs share: specs by name or alias (any case), suggestions when not found.
template <typename Spec>
class NamedCatalog {
 public:
  std::optional<Spec> find(const std::string& name) const;  // name or alias, any case
  const Spec& get(const std::string& name) const;           // NotFoundError with suggestions
  const std::vector<Spec>& all() const { return specs_; }
  std::vector<std::string> names() const;  // canonical names and aliases

 protected:
  explicit NamedCatalog(const char* what) : what_(what) {}
  std::vector<Spec> specs_;
  std::map<std::string, std::size_t> index_;  // lower-case name or alias -> spec

 private:
  const char* what_;  // what a spec is, for the not-found error ("GPU", "model")
};
extern template class NamedCatalog<DeviceSpec>;
extern template class NamedCatalog<ModelSpec>;

class GpuCatalog : public NamedCatalog<DeviceSpec> {
 public:
  GpuCatalog() : NamedCatalog("GPU") {}
  static GpuCatalog load(const std::filesystem::path& file);
  static const GpuCatalog& builtin();  // data_dir()/catalog/gpus.json, loaded once
};

class ModelCatalog : public NamedCatalog<ModelSpec> {
 public:
  ModelCatalog() : NamedCatalog("model") {}
  static ModelCatalog load(const std::filesystem::path& file);
  static const ModelCatalog& builtin();  // data_dir()/catalog/models.json
};

// SpecLookup over the two catalogs, for core's scenario loader.
class CatalogLookup : public SpecLookup {
 public:
  CatalogLookup(const GpuCatalog& gpus, const ModelCatalog& models)
      : gpus_(gpus), models_(models) {}
  static const CatalogLookup& builtin();
  std::optional<DeviceSpec> find_device(const std::string& name) const override;
  std::vector<std::string> device_names() const override;
  std::optional<ModelSpec> find_model(const std::string& name) const override;
  std::vector<std::string> model_names() const override;

 private:
  const GpuCatalog& gpus_;
  const ModelCatalog& models_;
};

// Loads a scenario resolving names against the built-in catalogs.
Scenario load_scenario(const std::filesystem::path& file);

}  // namespace cephalo::costmodels

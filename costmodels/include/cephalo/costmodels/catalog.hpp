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

class GpuCatalog {
 public:
  static GpuCatalog load(const std::filesystem::path& file);
  static const GpuCatalog& builtin();  // data_dir()/catalog/gpus.json, loaded once

  std::optional<DeviceSpec> find(const std::string& name) const;  // name or alias, any case
  const DeviceSpec& get(const std::string& name) const;           // NotFoundError with suggestions
  const std::vector<DeviceSpec>& all() const { return devices_; }
  std::vector<std::string> names() const;  // canonical names and aliases

 private:
  std::vector<DeviceSpec> devices_;
  std::map<std::string, std::size_t> index_;  // lower-case name or alias -> device
};

class ModelCatalog {
 public:
  static ModelCatalog load(const std::filesystem::path& file);
  static const ModelCatalog& builtin();  // data_dir()/catalog/models.json

  std::optional<ModelSpec> find(const std::string& name) const;
  const ModelSpec& get(const std::string& name) const;
  const std::vector<ModelSpec>& all() const { return models_; }
  std::vector<std::string> names() const;

 private:
  std::vector<ModelSpec> models_;
  std::map<std::string, std::size_t> index_;
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

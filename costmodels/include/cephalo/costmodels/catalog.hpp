#pragma once
// Named GPUs and models. The data lives in scenarios/catalog/{gpus,models}.json (shipped with
// the project and compiled in as a default path); aliases let the names used by the published
// Cephalo profiles ("l4", "a6000", "deepspeedgpt_2.7b", ...) resolve to catalog entries.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

// Folder holding the shipped data (scenarios/); overridable with CEPHALO_DATA_DIR, which must
// name a folder holding catalog/gpus.json (else ValidationError at "environment",
// CEPHALO_DATA_DIR, naming its value and what it is).
std::filesystem::path data_dir();

// A catalog's entries as the start-up cache keeps them (fit_cache.cpp, costmodels/README.md
// "Start-up cache"): each entry's canonical name, JSON path and JSON text (the parsed entry,
// dumped), and the lower-case names and aliases that find it. Parsing the two catalog files
// whole was a quarter of a warm start; from this only the entries a command uses are parsed.
struct CatalogIndex {
  std::vector<std::string> name, where, text;
  std::vector<std::pair<std::string, std::size_t>> keys;  // lower-case name or alias -> entry
};

// What both catalogs share: specs by name or alias (any case), suggestions when not found.
// The file is read and its names and aliases indexed when the catalog is loaded; an entry
// becomes a spec on first use (a scenario names a few of the catalog's entries, and every
// command start used to convert them all, the model catalog's Hugging Face configs read
// included). `load` converts every entry at once, so a user's catalog file is checked
// whole; `builtin()` converts on demand (tests convert all of the shipped ones).
// Safe to query from several threads.
template <typename Spec>
class NamedCatalog {
 public:
  std::optional<Spec> find(const std::string& name) const;  // name or alias, any case
  const Spec& get(const std::string& name) const;           // NotFoundError with suggestions
  const std::vector<Spec>& all() const;                     // every entry, in file order
  std::size_t size() const;                                 // how many entries
  std::vector<std::string> names() const;                   // canonical names and aliases
  CatalogIndex index() const;                               // what the start-up cache keeps

 protected:
  explicit NamedCatalog(const char* what) : what_(what) {}
  // Reads `file`'s array `list_key`: each entry's "name" and "aliases" indexed (each once in
  // the catalog), the entry kept to be converted by `convert` when first asked for.
  using Convert = std::function<Spec(JsonReader&)>;
  void read(const std::filesystem::path& file, const char* list_key, Convert convert);
  // The same catalog from what index() kept of `file` when its bytes were the ones read now
  // (the start-up cache's key covers them): the file counts as read (note_input_file).
  void adopt(const std::filesystem::path& file, CatalogIndex index, Convert convert);

 private:
  struct Entries;  // catalog.cpp: the parsed file, its index and the converted specs
  const Spec& converted(std::size_t i) const;
  std::shared_ptr<const Entries> entries_;
  const char* what_;  // what a spec is, for the not-found error ("GPU", "model")
};
extern template class NamedCatalog<DeviceSpec>;
extern template class NamedCatalog<ModelSpec>;

class GpuCatalog : public NamedCatalog<DeviceSpec> {
 public:
  GpuCatalog() : NamedCatalog("GPU") {}
  static GpuCatalog load(const std::filesystem::path& file);         // every entry converted
  static GpuCatalog read_lazily(const std::filesystem::path& file);  // each on first use
  static const GpuCatalog& builtin();  // data_dir()/catalog/gpus.json, read once, lazily
};

class ModelCatalog : public NamedCatalog<ModelSpec> {
 public:
  ModelCatalog() : NamedCatalog("model") {}
  static ModelCatalog load(const std::filesystem::path& file);         // every entry converted
  static ModelCatalog read_lazily(const std::filesystem::path& file);  // each on first use
  static const ModelCatalog& builtin();  // data_dir()/catalog/models.json, read once, lazily
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

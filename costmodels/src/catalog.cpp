#include "cephalo/costmodels/catalog.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "cephalo/core/error.hpp"
#include "cephalo/core/hf_config.hpp"

namespace cephalo::costmodels {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

template <typename Spec, typename Parse>
void load_entries(const std::filesystem::path& file, const char* list_key, Parse parse,
                  std::vector<Spec>& out, std::map<std::string, std::size_t>& index) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  root.allow({"_comment"});
  for (auto& entry : root.child(list_key).elements()) {
    std::vector<std::string> aliases;
    if (auto a = entry.optional_child("aliases"))
      for (auto& alias : a->elements()) aliases.push_back(alias.as_string());
    Spec spec = parse(entry);
    std::size_t position = out.size();
    for (const auto& name : [&] {
           auto all = aliases;
           all.push_back(spec.name);
           return all;
         }()) {
      auto [it, inserted] = index.emplace(lower(name), position);
      if (!inserted && it->second != position)
        entry.fail_value("name or alias \"" + name + "\" used twice", "unique names and aliases");
    }
    out.push_back(std::move(spec));
  }
  root.finish();
}

}  // namespace

template <typename Spec>
std::optional<Spec> NamedCatalog<Spec>::find(const std::string& name) const {
  auto it = index_.find(lower(name));
  if (it == index_.end()) return std::nullopt;
  return specs_[it->second];
}

template <typename Spec>
const Spec& NamedCatalog<Spec>::get(const std::string& name) const {
  auto it = index_.find(lower(name));
  if (it == index_.end()) throw NotFoundError(what_, name, names());
  return specs_[it->second];
}

template <typename Spec>
std::vector<std::string> NamedCatalog<Spec>::names() const {
  std::vector<std::string> out;
  for (const auto& d : specs_) out.push_back(d.name);
  for (const auto& entry : index_)
    if (lower(specs_[entry.second].name) != entry.first) out.push_back(entry.first);
  return out;
}

template class NamedCatalog<DeviceSpec>;
template class NamedCatalog<ModelSpec>;

std::filesystem::path data_dir() {
  if (const char* env = std::getenv("CEPHALO_DATA_DIR"); env && *env) return env;
  return CEPHALO_DEFAULT_DATA_DIR;
}

GpuCatalog GpuCatalog::load(const std::filesystem::path& file) {
  GpuCatalog catalog;
  load_entries<DeviceSpec>(
      file, "devices",
      [](JsonReader& r) {
        DeviceSpec spec = parse_device_spec(r);
        // What the op-level compute model needs of every catalog GPU (an inline spec may
        // omit them: it is then priced without waves, clock or generation).
        if (spec.kind == "gpu") {
          auto missing = [&](const char* key, const char* expected) {
            throw ValidationError(r.file(), r.where() + "." + key, "nothing (missing)",
                                  std::string(expected) + " for GPU \"" + spec.name + "\"");
          };
          if (spec.architecture.empty())
            missing("architecture", "one of pascal, volta, turing, ampere, ada, hopper, blackwell");
          if (spec.sm_count <= 0) missing("sm_count", "the number of SMs");
          if (spec.boost_clock_hz <= 0) missing("boost_clock_mhz", "the boost clock in MHz");
          if (spec.l2_bytes <= 0) missing("l2_cache", "the L2 cache size, e.g. \"40MiB\"");
          if (spec.tdp_watts <= 0) missing("tdp_watts", "the board power limit in W");
        }
        return spec;
      },
      catalog.specs_, catalog.index_);
  return catalog;
}

const GpuCatalog& GpuCatalog::builtin() {
  static const GpuCatalog catalog = load(data_dir() / "catalog" / "gpus.json");
  return catalog;
}

ModelCatalog ModelCatalog::load(const std::filesystem::path& file) {
  ModelCatalog catalog;
  load_entries<ModelSpec>(
      file, "models",
      [&](JsonReader& r) {
        if (!r.has("hf_config")) return parse_model_spec(r);
        // An entry that is a shipped Hugging Face config (relative to the catalog file), so
        // the two cannot drift: the config's architecture under the catalog's name.
        ModelSpec spec =
            load_hf_config_named_by(r.child("hf_config"), file.parent_path(), "the catalog file");
        spec.name = r.string("name");
        if (auto a = r.optional_child("aliases"))
          for (auto& alias : a->elements()) spec.aliases.push_back(alias.as_string());
        spec.source = r.string_or("source", spec.source);
        r.finish();
        return spec;
      },
      catalog.specs_, catalog.index_);
  return catalog;
}

const ModelCatalog& ModelCatalog::builtin() {
  static const ModelCatalog catalog = load(data_dir() / "catalog" / "models.json");
  return catalog;
}

const CatalogLookup& CatalogLookup::builtin() {
  static const CatalogLookup lookup(GpuCatalog::builtin(), ModelCatalog::builtin());
  return lookup;
}

std::optional<DeviceSpec> CatalogLookup::find_device(const std::string& name) const {
  return gpus_.find(name);
}
std::vector<std::string> CatalogLookup::device_names() const { return gpus_.names(); }
std::optional<ModelSpec> CatalogLookup::find_model(const std::string& name) const {
  return models_.find(name);
}
std::vector<std::string> CatalogLookup::model_names() const { return models_.names(); }

Scenario load_scenario(const std::filesystem::path& file) {
  return cephalo::load_scenario(file, CatalogLookup::builtin());
}

}  // namespace cephalo::costmodels

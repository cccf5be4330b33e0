#include "cephalo/costmodels/catalog.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "cephalo/core/error.hpp"
#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/output_file.hpp"
#include "fit_cache.hpp"

namespace cephalo::costmodels {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

template <typename Spec>
struct NamedCatalog<Spec>::Entries {
  std::string file;
  Json doc;                                  // the whole file, as parsed (read)
  std::vector<const Json*> json;             // each entry, in file order (read)
  std::vector<std::string> text;             // each entry's JSON text (adopt)
  std::vector<std::string> where;            // each entry's JSON path
  std::vector<std::string> name;             // each entry's canonical name
  std::map<std::string, std::size_t> index;  // lower-case name or alias -> entry
  Convert convert;
  // Converted on first use; sized once at load, so a returned reference stays valid.
  std::unique_ptr<std::once_flag[]> once;
  mutable std::vector<std::optional<Spec>> spec;
  mutable std::once_flag all_once;
  mutable std::vector<Spec> all;
  std::size_t size() const { return name.size(); }
};

template <typename Spec>
void NamedCatalog<Spec>::read(const std::filesystem::path& file, const char* list_key,
                              Convert convert) {
  auto e = std::make_shared<Entries>();
  e->file = file.string();
  e->doc = read_json_file(file);
  e->convert = std::move(convert);
  JsonReader root(e->doc, e->file);
  root.allow({"_comment"});
  for (auto& entry : root.child(list_key).elements()) {
    const std::size_t position = e->json.size();
    std::vector<std::string> names;
    if (auto a = entry.optional_child("aliases"))
      for (auto& alias : a->elements()) names.push_back(alias.as_string());
    names.push_back(entry.string("name"));
    for (const auto& name : names) {
      auto [it, inserted] = e->index.emplace(lower(name), position);
      if (!inserted && it->second != position)
        entry.fail_value("name or alias \"" + name + "\" used twice", "unique names and aliases");
    }
    e->json.push_back(&entry.value());
    e->where.push_back(entry.path());
    e->name.push_back(names.back());
  }
  root.finish();
  e->once = std::make_unique<std::once_flag[]>(e->size());
  e->spec.resize(e->size());
  entries_ = std::move(e);
}

template <typename Spec>
void NamedCatalog<Spec>::adopt(const std::filesystem::path& file, CatalogIndex index,
                               Convert convert) {
  auto e = std::make_shared<Entries>();
  e->file = file.string();
  e->text = std::move(index.text);
  e->where = std::move(index.where);
  e->name = std::move(index.name);
  for (auto& [key, at] : index.keys) e->index.emplace(std::move(key), at);
  e->convert = std::move(convert);
  e->once = std::make_unique<std::once_flag[]>(e->size());
  e->spec.resize(e->size());
  note_input_file(file);  // as read_json_file would: outputs may not overwrite it
  entries_ = std::move(e);
}

template <typename Spec>
CatalogIndex NamedCatalog<Spec>::index() const {
  CatalogIndex out;
  if (!entries_) return out;
  const Entries& e = *entries_;
  out.name = e.name;
  out.where = e.where;
  out.text = e.text;
  if (out.text.empty())
    for (const Json* j : e.json) out.text.push_back(j->dump());
  for (const auto& [key, at] : e.index) out.keys.emplace_back(key, at);
  return out;
}

template <typename Spec>
const Spec& NamedCatalog<Spec>::converted(std::size_t i) const {
  const Entries& e = *entries_;
  std::call_once(e.once[i], [&] {
    // An adopted entry is parsed here, the first time it is used.
    const Json parsed = e.json.empty() ? parse_json_text(e.text[i], e.file) : Json();
    JsonReader r(e.json.empty() ? parsed : *e.json[i], e.file, e.where[i]);
    // The aliases were read into the index; read here too, so finish() counts them as known.
    if (auto a = r.optional_child("aliases"))
      for (auto& alias : a->elements()) (void)alias.as_string();
    e.spec[i] = e.convert(r);
  });
  return *e.spec[i];
}

template <typename Spec>
std::optional<Spec> NamedCatalog<Spec>::find(const std::string& name) const {
  if (!entries_) return std::nullopt;
  auto it = entries_->index.find(lower(name));
  if (it == entries_->index.end()) return std::nullopt;
  return converted(it->second);
}

template <typename Spec>
const Spec& NamedCatalog<Spec>::get(const std::string& name) const {
  if (entries_) {
    auto it = entries_->index.find(lower(name));
    if (it != entries_->index.end()) return converted(it->second);
  }
  throw NotFoundError(what_, name, names());
}

template <typename Spec>
const std::vector<Spec>& NamedCatalog<Spec>::all() const {
  static const std::vector<Spec> none;
  if (!entries_) return none;
  std::call_once(entries_->all_once, [&] {
    std::vector<Spec> out;
    out.reserve(entries_->size());
    for (std::size_t i = 0; i < entries_->size(); ++i) out.push_back(converted(i));
    entries_->all = std::move(out);
  });
  return entries_->all;
}

template <typename Spec>
std::size_t NamedCatalog<Spec>::size() const {
  return entries_ ? entries_->size() : 0;
}

template <typename Spec>
std::vector<std::string> NamedCatalog<Spec>::names() const {
  std::vector<std::string> out;
  if (!entries_) return out;
  for (const auto& n : entries_->name) out.push_back(n);
  for (const auto& entry : entries_->index)
    if (lower(entries_->name[entry.second]) != entry.first) out.push_back(entry.first);
  return out;
}

template class NamedCatalog<DeviceSpec>;
template class NamedCatalog<ModelSpec>;

std::filesystem::path data_dir() {
  const char* env = std::getenv("CEPHALO_DATA_DIR");
  if (env == nullptr || *env == 0) return CEPHALO_DEFAULT_DATA_DIR;
  // A folder the catalog is not in is the variable's fault: said so, rather than "no such file"
  // at a path the user never typed (a file given as the folder, a typo, a folder of another kind).
  const std::filesystem::path dir = env;
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir / "catalog" / "gpus.json", ec)) return dir;
  std::string shown;
  for (const unsigned char c : std::string_view(env).substr(0, 200))
    shown += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  const auto status = std::filesystem::status(dir, ec);
  const std::string what = !std::filesystem::exists(status) ? "no such folder"
                           : !std::filesystem::is_directory(status)
                               ? "not a folder"
                               : "a folder without catalog/gpus.json";
  throw ValidationError("environment", "CEPHALO_DATA_DIR", "\"" + shown + "\" (" + what + ")",
                        "the data folder (catalog/gpus.json, catalog/models.json, calibration/), "
                        "as the project's scenarios/ is; unset, the built-in " +
                            std::string(CEPHALO_DEFAULT_DATA_DIR));
}

GpuCatalog GpuCatalog::load(const std::filesystem::path& file) {
  GpuCatalog catalog = read_lazily(file);
  (void)catalog.all();
  return catalog;
}

namespace {

// What the op-level compute model needs of every catalog GPU (an inline spec may omit them: it
// is then priced without waves, clock or generation).
DeviceSpec convert_device(JsonReader& r) {
  DeviceSpec spec = parse_device_spec(r);
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
}

// A model entry of the catalog `file`.
std::function<ModelSpec(JsonReader&)> convert_model(const std::filesystem::path& file) {
  return [file](JsonReader& r) {
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
  };
}

}  // namespace

GpuCatalog GpuCatalog::read_lazily(const std::filesystem::path& file) {
  GpuCatalog catalog;
  catalog.read(file, "devices", convert_device);
  return catalog;
}

// The built-in catalogs come from the start-up cache's entry when it holds one made from these
// very bytes (its key covers them), else from the file.
const GpuCatalog& GpuCatalog::builtin() {
  static const GpuCatalog catalog = [] {
    const auto file = data_dir() / "catalog" / "gpus.json";
    auto cached = fit_cache::cached_catalog(fit_cache::BuiltinCatalog::Gpus);
    if (!cached) return read_lazily(file);
    GpuCatalog c;
    c.adopt(file, std::move(*cached), convert_device);
    return c;
  }();
  return catalog;
}

ModelCatalog ModelCatalog::load(const std::filesystem::path& file) {
  ModelCatalog catalog = read_lazily(file);
  (void)catalog.all();
  return catalog;
}

ModelCatalog ModelCatalog::read_lazily(const std::filesystem::path& file) {
  ModelCatalog catalog;
  catalog.read(file, "models", convert_model(file));
  return catalog;
}

const ModelCatalog& ModelCatalog::builtin() {
  static const ModelCatalog catalog = [] {
    const auto file = data_dir() / "catalog" / "models.json";
    auto cached = fit_cache::cached_catalog(fit_cache::BuiltinCatalog::Models);
    if (!cached) return read_lazily(file);
    ModelCatalog c;
    c.adopt(file, std::move(*cached), convert_model(file));
    return c;
  }();
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

#include "cephalo/costmodels/model_description.hpp"

#include <filesystem>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
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

namespace {
// "$1.25", or "-" without a price.
std::string price(double p) {
  if (p < 0) return "-";
  std::string text = "$";
  text += fixed(p, 2);
  return text;
}
}  // namespace

Json gpu_catalog_record(const GpuCatalog& catalog) {
  Json out = Json::array();
  for (const auto& d : catalog.all()) out.push_back(to_json(d));
  return out;
}

Json model_catalog_record(const ModelCatalog& catalog) {
  Json out = Json::array();
  for (const auto& m : catalog.all()) out.push_back(model_summary(m));
  return out;
}

std::string render_gpu_catalog(const GpuCatalog& catalog) {
  TextTable table(
      {"gpu", "kind", "memory", "mem bw", "fp32", "fp16", "bf16", "pcie", "nvlink", "$/h"});
  for (const auto& d : catalog.all())
    table.add_row({d.name, d.kind, format_bytes(d.memory_bytes),
                   format_bandwidth(d.memory_bandwidth), format_flop_rate(d.peak_fp32),
                   d.peak_fp16 > 0 ? format_flop_rate(d.peak_fp16) : "-",
                   d.peak_bf16 > 0 ? format_flop_rate(d.peak_bf16) : "-",
                   "gen" + std::to_string(d.pcie_generation) + " x" + std::to_string(d.pcie_lanes),
                   d.nvlink_bandwidth > 0 ? format_bandwidth(d.nvlink_bandwidth) : "-",
                   price(d.price_per_hour)});
  return table.render();
}

std::string render_model_catalog(const ModelCatalog& catalog) {
  TextTable table({"model", "family", "layers", "hidden", "heads", "ffn", "vocab", "params/layer",
                   "total params"});
  for (const auto& m : catalog.all())
    table.add_row({m.name, m.family, std::to_string(m.num_layers), std::to_string(m.hidden),
                   std::to_string(m.heads), std::to_string(m.ffn_hidden),
                   std::to_string(m.vocab_size), fixed(layer_parameters(m) / 1e6, 2) + "M",
                   fixed(total_parameters(m) / 1e9, 3) + "B"});
  return table.render();
}

std::string render_model_description(const HfModel& hf) {
  const ModelSpec& m = hf.spec;
  std::ostringstream out;
  auto count = [](double p) { return fixed(p, 0); };
  out << "model " << m.name << (hf.model_type.empty() ? " (catalog)" : "") << "\n"
      << "  " << m.source << "\n"
      << "  family " << m.family << ", " << m.num_layers << " layers, hidden " << m.hidden << ", "
      << m.heads << " heads"
      << (m.kv_heads != m.heads ? " (" + std::to_string(m.kv_heads) + " key/value)" : "")
      << ", MLP " << m.ffn_hidden << " " << m.activation << ", " << m.norm
      << (m.norm == "layernorm" && !m.norm_bias ? " without shift" : "") << "\n"
      << "  biases: q/k/v " << (m.qkv_bias ? "yes" : "no") << ", attention output "
      << (m.out_bias ? "yes" : "no") << ", MLP " << (m.mlp_bias ? "yes" : "no") << "; positions: "
      << (m.max_positions > 0
              ? std::to_string(m.max_positions) + " learned" +
                    (m.position_offset > 0 ? " (" + std::to_string(max_sequence(m)) + " usable)"
                                           : std::string())
              : "none stored")
      << "; head: " << (m.tied_embeddings ? "tied" : "untied") << "\n";
  TextTable table({"unit", "parameters"});
  table.add_row({"embedding", count(embedding_parameters(m))});
  table.add_row({"each layer (x" + std::to_string(m.num_layers) + ")", count(layer_parameters(m))});
  table.add_row({"head", count(head_parameters(m))});
  table.add_row({"total", count(total_parameters(m))});
  out << table.render();
  for (const auto& n : hf.notes) out << "  note: " << n << "\n";
  return out.str();
}

Json scenario_description(const Scenario& s) {
  Json j = to_json(s);
  j["model_parameters"] = total_parameters(s.job.model);
  j["schedule"] = schedule::describe_schedule(s.job.implementation.framework);
  j["warnings"] = prediction_warnings(s);
  // The text's notes too: the record is what `describe --json` and Python's describe() give.
  j["notes"] = cluster_notes(s.cluster);
  return j;
}

std::string render_scenario_description(const Scenario& s, const std::string& file) {
  std::ostringstream out;
  out << "scenario " << s.name << " (" << file << ")\n"
      << "  job: " << s.job.model_name << " (" << fixed(total_parameters(s.job.model) / 1e9, 2)
      << "B parameters), sequence " << s.job.sequence_length << ", global batch "
      << s.job.global_batch << ", compute " << to_string(s.job.precision.compute) << "\n"
      << "  implementation: " << to_string(s.job.implementation)
      << stack_label(s.job.implementation) << "\n"
      << "  schedule: " << schedule::describe_schedule(s.job.implementation.framework) << " ("
      << to_string(s.job.implementation.framework) << ")\n"
      << "  cluster: " << s.cluster.name << ", " << s.cluster.nodes.size() << " node(s), "
      << s.cluster.num_ranks() << " device(s)"
      << (s.cluster.emulated() ? " [EMULATED slowdown on some ranks]" : "") << "\n\n";
  TextTable table(
      {"rank", "node", "gpu", "memory", "peak (compute dtype)", "intra link", "nic", "slowdown"});
  for (const auto& r : s.cluster.ranks()) {
    const auto& node = s.cluster.nodes[r.node];
    table.add_row({std::to_string(r.rank), node.name, r.slot->spec.name,
                   format_bytes(r.slot->spec.memory_bytes),
                   format_flop_rate(r.slot->spec.peak_flops(s.job.precision.compute)),
                   node.intra_link.kind + " " + format_bandwidth(node.intra_link.bandwidth),
                   node.nic_count > 0 ? std::to_string(node.nic_count) + " x " +
                                            format_link_rate(node.nic.bandwidth / node.nic_count)
                                      : format_link_rate(node.nic.bandwidth) + " (node total)",
                   r.slot->slowdown == 1.0 ? "-" : fixed(r.slot->slowdown, 2) + " (emulated)"});
  }
  out << table.render();
  for (const auto& n : cluster_notes(s.cluster)) out << "note: " << n << "\n";
  for (const auto& w : prediction_warnings(s)) out << "warning: " << w << "\n";
  return out.str();
}

Description describe(const std::string& what, const std::string& model, const std::string& source) {
  const bool word = what == "gpus" || what == "models" || what == "model";
  const std::filesystem::path path = what;
  if (!word && !path.has_parent_path() && !path.has_extension() && !std::filesystem::exists(path))
    throw ValidationError(source, "what", "\"" + what + "\"",
                          "gpus, models, model (then a catalog name or a config.json) or a "
                          "scenario file; no file of that name exists here");
  if (what != "model" && !model.empty())
    throw ValidationError(source, "model", "\"" + model + "\" after " + what,
                          "a second argument only after `model` (describe model "
                          "NAME_OR_CONFIG_JSON): `" +
                              (word ? what : std::string("SCENARIO")) +
                              "` reads no other, and would have dropped it unread");
  if (what == "gpus") {
    const auto& catalog = GpuCatalog::builtin();
    return {gpu_catalog_record(catalog), render_gpu_catalog(catalog)};
  }
  if (what == "models") {
    const auto& catalog = ModelCatalog::builtin();
    return {model_catalog_record(catalog), render_model_catalog(catalog)};
  }
  if (what == "model") {
    if (model.empty())
      throw ValidationError(source, "model", "",
                            "a catalog model name or a Hugging Face config.json after `model`");
    const HfModel hf = find_model_or_config(model);
    return {model_description(hf), render_model_description(hf)};
  }
  const Scenario s = load_scenario(what);
  return {scenario_description(s), render_scenario_description(s, what)};
}

}  // namespace cephalo::costmodels

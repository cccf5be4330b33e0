// `cephalo describe gpus | models | model NAME_OR_CONFIG_JSON | SCENARIO_FILE [--json]`
#include <iostream>

#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_description.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

std::string price(double p) { return p < 0 ? "-" : "$" + fixed(p, 2); }

void describe_gpus(bool json) {
  const auto& catalog = costmodels::GpuCatalog::builtin();
  if (json) {
    Json out = Json::array();
    for (const auto& d : catalog.all()) out.push_back(to_json(d));
    std::cout << out.dump(2) << "\n";
    return;
  }
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
  std::cout << table.render();
}

void describe_models(bool json) {
  const auto& catalog = costmodels::ModelCatalog::builtin();
  if (json) {
    Json out = Json::array();
    for (const auto& m : catalog.all()) out.push_back(costmodels::model_summary(m));
    std::cout << out.dump(2) << "\n";
    return;
  }
  TextTable table({"model", "family", "layers", "hidden", "heads", "ffn", "vocab", "params/layer",
                   "total params"});
  for (const auto& m : catalog.all())
    table.add_row({m.name, m.family, std::to_string(m.num_layers), std::to_string(m.hidden),
                   std::to_string(m.heads), std::to_string(m.ffn_hidden),
                   std::to_string(m.vocab_size),
                   fixed(costmodels::layer_parameters(m) / 1e6, 2) + "M",
                   fixed(costmodels::total_parameters(m) / 1e9, 3) + "B"});
  std::cout << table.render();
}

// One model: a catalog name or a Hugging Face config.json, with its parameter counts by unit
// and what was read from the config but not priced.
void describe_model(const std::string& what, bool json) {
  const HfModel hf = costmodels::find_model_or_config(what);
  const ModelSpec& m = hf.spec;
  if (json) {
    std::cout << costmodels::model_description(hf).dump(2) << "\n";
    return;
  }
  auto count = [](double p) { return fixed(p, 0); };
  std::cout << "model " << m.name << (hf.model_type.empty() ? " (catalog)" : "") << "\n"
            << "  " << m.source << "\n"
            << "  family " << m.family << ", " << m.num_layers << " layers, hidden " << m.hidden
            << ", " << m.heads << " heads"
            << (m.kv_heads != m.heads ? " (" + std::to_string(m.kv_heads) + " key/value)" : "")
            << ", MLP " << m.ffn_hidden << " " << m.activation << ", " << m.norm
            << (m.norm == "layernorm" && !m.norm_bias ? " without shift" : "") << "\n"
            << "  biases: q/k/v " << (m.qkv_bias ? "yes" : "no") << ", attention output "
            << (m.out_bias ? "yes" : "no") << ", MLP " << (m.mlp_bias ? "yes" : "no")
            << "; positions: "
            << (m.max_positions > 0 ? std::to_string(m.max_positions) + " learned" +
                                          (m.position_offset > 0
                                               ? " (" + std::to_string(max_sequence(m)) + " usable)"
                                               : std::string())
                                    : "none stored")
            << "; head: " << (m.tied_embeddings ? "tied" : "untied") << "\n";
  TextTable table({"unit", "parameters"});
  table.add_row({"embedding", count(costmodels::embedding_parameters(m))});
  table.add_row({"each layer (x" + std::to_string(m.num_layers) + ")",
                 count(costmodels::layer_parameters(m))});
  table.add_row({"head", count(costmodels::head_parameters(m))});
  table.add_row({"total", count(costmodels::total_parameters(m))});
  std::cout << table.render();
  for (const auto& n : hf.notes) std::cout << "  note: " << n << "\n";
}

void describe_scenario(const std::string& file, bool json) {
  Scenario s = costmodels::load_scenario(file);
  if (json) {
    Json j = to_json(s);
    j["model_parameters"] = costmodels::total_parameters(s.job.model);
    j["schedule"] = schedule::describe_schedule(s.job.implementation.framework);
    j["warnings"] = costmodels::prediction_warnings(s);
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "scenario " << s.name << " (" << file << ")\n"
            << "  job: " << s.job.model_name << " ("
            << fixed(costmodels::total_parameters(s.job.model) / 1e9, 2)
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
  std::cout << table.render();
  for (const auto& n : cluster_notes(s.cluster)) std::cout << "note: " << n << "\n";
  for (const auto& w : costmodels::prediction_warnings(s)) std::cout << "warning: " << w << "\n";
}

}  // namespace

void add_describe_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("describe", "Describe the GPU catalog, the model catalog or a scenario");
  static std::string what, model;
  static bool json = false;
  cmd->add_option("what", what, "gpus | models | model | SCENARIO_FILE")->required();
  cmd->add_option("model", model, "with `model`: a catalog name or a Hugging Face config.json");
  cmd->add_flag("--json", json, "Print the same record as JSON");
  cmd->callback([] {
    if (what == "gpus")
      describe_gpus(json);
    else if (what == "models")
      describe_models(json);
    else if (what == "model") {
      if (model.empty())
        throw CLI::ValidationError("describe model", "needs a NAME or CONFIG_JSON");
      describe_model(model, json);
    } else
      describe_scenario(what, json);
  });
}

}  // namespace cephalo::cli

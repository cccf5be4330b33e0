// `cephalo describe gpus | models | model NAME_OR_CONFIG_JSON | SCENARIO_FILE [--json]`
#include <iostream>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_description.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

void describe_gpus(bool json) {
  const auto& catalog = costmodels::GpuCatalog::builtin();
  if (json)
    std::cout << costmodels::gpu_catalog_record(catalog).dump(2) << "\n";
  else
    std::cout << costmodels::render_gpu_catalog(catalog);
}

void describe_models(bool json) {
  const auto& catalog = costmodels::ModelCatalog::builtin();
  if (json)
    std::cout << costmodels::model_catalog_record(catalog).dump(2) << "\n";
  else
    std::cout << costmodels::render_model_catalog(catalog);
}

// One model: a catalog name or a Hugging Face config.json, with its parameter counts by unit
// and what was read from the config but not priced.
void describe_model(const std::string& what, bool json) {
  const HfModel hf = costmodels::find_model_or_config(what);
  if (json)
    std::cout << costmodels::model_description(hf).dump(2) << "\n";
  else
    std::cout << costmodels::render_model_description(hf);
}

void describe_scenario(const std::string& file, bool json) {
  const Scenario s = costmodels::load_scenario(file);
  if (json)
    std::cout << costmodels::scenario_description(s).dump(2) << "\n";
  else
    std::cout << costmodels::render_scenario_description(s, file);
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

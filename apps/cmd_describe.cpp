// `cephalo describe gpus | models | model NAME_OR_CONFIG_JSON | SCENARIO_FILE [--json]`: the
// record and the text are costmodels::describe's (model_description.hpp), as Python's.
#include <iostream>

#include "cephalo/costmodels/model_description.hpp"
#include "commands.hpp"

namespace cephalo::cli {

void add_describe_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("describe", "Describe the GPU catalog, the model catalog or a scenario");
  static std::string what, model;
  static bool json = false;
  cmd->add_option("what", what, "gpus | models | model | SCENARIO_FILE")->required();
  cmd->add_option("model", model, "with `model`: a catalog name or a Hugging Face config.json");
  cmd->add_flag("--json", json, "Print the same record as JSON");
  cmd->callback([] {
    // A model name the catalog lacks is a bad argument, as `predict layer --model` refuses it
    // (the library's NotFoundError would exit 1 as if a file were invalid).
    if (what == "model" && !model.empty()) {
      std::string checked = model;
      if (const std::string why = catalog_model_or_config()(checked); !why.empty())
        throw CLI::ValidationError("model", why);
    }
    const costmodels::Description d = costmodels::describe(what, model, kCommandLine);
    print_json_or_text(
        json, [&] { return d.record; }, [&] { return d.text; });
  });
}

}  // namespace cephalo::cli

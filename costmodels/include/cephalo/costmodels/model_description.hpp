#pragma once
// The record of `cephalo describe model NAME_OR_CONFIG_JSON` (and `describe models`): a model's
// architecture with its parameter counts by unit, built once for the CLI and the Python module.
#include <string>

#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/catalog.hpp"

namespace cephalo::costmodels {

// A catalog model (by name or alias) or, when no catalog entry has that name, a Hugging Face
// config.json (model_type and notes filled in). A name that is neither (no such file, no
// `.json`, no folder) is a NotFoundError listing close catalog names; else load_hf_config's
// errors.
HfModel find_model_or_config(const std::string& name_or_file);

// The architecture (to_json) with its per-layer and total parameter counts: a `describe models`
// row.
Json model_summary(const ModelSpec& model);

// The catalogs as `cephalo describe gpus --json` and `describe models --json` print them: an
// array with every GPU's datasheet record (to_json), every model's model_summary.
Json gpu_catalog_record(const GpuCatalog& catalog);
Json model_catalog_record(const ModelCatalog& catalog);

// model_summary plus the embedding and head counts and, for a config, its model_type and the
// notes on what was read but not priced.
Json model_description(const HfModel& model);

// What `cephalo describe` prints as text (the records above are its --json): the GPU and model
// catalogs as tables, one model with its parameters by unit and the config's notes, and a
// scenario (job, implementation, cluster, a row per rank, the cluster's notes), whose record is
// the scenario's JSON with the model's parameter count, the framework's schedule and the
// warnings every prediction for it carries.
std::string render_gpu_catalog(const GpuCatalog& catalog);
std::string render_model_catalog(const ModelCatalog& catalog);
std::string render_model_description(const HfModel& model);
Json scenario_description(const Scenario& scenario);
std::string render_scenario_description(const Scenario& scenario, const std::string& file);

// What `cephalo describe WHAT [MODEL]` answers, as its record (`--json`) and its text: WHAT is
// "gpus", "models", "model" (MODEL then a catalog name or a config.json) or a scenario file.
// "model" without MODEL, MODEL after any other WHAT (it would be dropped unread), and a WHAT that
// is none of the words nor a path (no folder, no extension, no such file: a mistyped word, not
// a missing scenario) are ValidationErrors at `source` (the caller's, as core/error.hpp's file)
// naming `model` / `what`.
struct Description {
  Json record;
  std::string text;
};
Description describe(const std::string& what, const std::string& model, const std::string& source);

}  // namespace cephalo::costmodels

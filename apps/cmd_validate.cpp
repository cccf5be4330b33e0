// `cephalo validate FILE... [--scenario S]`: checks scenarios, clusters, jobs, plans and
// catalogs; one line per file, non-zero exit when any is invalid.
#include <iostream>

#include "cephalo/core/hf_config.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/sweep.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

// Returns a short description of what the file is; throws on any problem.
std::string validate_one(const std::string& file, const std::optional<Scenario>& scenario) {
  Json j = read_json_file(file);
  JsonReader r(j, file);
  const auto& lookup = costmodels::CatalogLookup::builtin();
  if (!j.is_object())
    r.fail(
        "a JSON object (scenario, cluster, job, plan, catalog, sweep spec or Hugging Face config)");
  if (j.contains("ranks")) {
    Plan plan = parse_plan(r);
    if (scenario) {
      traces::check_plan_for(plan, *scenario, file);
    }
    return "plan, " + std::to_string(plan.ranks.size()) + " ranks" +
           (scenario ? ", matches scenario " + scenario->name : "");
  }
  // A sweep spec also has a "job": recognised by its pool first, and read as `sweep` reads it.
  if (j.contains("pool")) {
    const auto spec = planner::load_sweep_spec(file);
    return "sweep spec " + spec.name + ", " + std::to_string(spec.pool.size()) + " GPU types";
  }
  if (j.contains("model_type")) {
    const auto hf = load_hf_config(file);
    return "Hugging Face config, model_type " + hf.model_type;
  }
  if (j.contains("cluster") || j.contains("job")) {
    Scenario s = parse_scenario(r, lookup, std::filesystem::path(file).parent_path());
    // What every command does next: read the calibration files it lists, with the same code.
    costmodels::make_cost_models(s);
    return "scenario " + s.name + ", " + std::to_string(s.cluster.num_ranks()) + " devices, " +
           s.job.model_name;
  }
  if (j.contains("nodes")) {
    Cluster c = parse_cluster(r, lookup);
    return "cluster " + c.name + ", " + std::to_string(c.num_ranks()) + " devices";
  }
  if (j.contains("model") || j.contains("global_batch")) {
    Job job = parse_job(r, lookup);
    return "job " + job.model_name;
  }
  if (j.contains("devices")) {
    auto catalog = costmodels::GpuCatalog::load(file);
    return "GPU catalog, " + std::to_string(catalog.all().size()) + " devices";
  }
  if (j.contains("models")) {
    auto catalog = costmodels::ModelCatalog::load(file);
    return "model catalog, " + std::to_string(catalog.all().size()) + " models";
  }
  r.fail(
      "a scenario (\"cluster\", \"job\"), cluster (\"nodes\"), job (\"model\"), plan "
      "(\"ranks\"), catalog (\"devices\", \"models\"), sweep spec (\"pool\") or Hugging "
      "Face config (\"model_type\")");
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("validate", "Check scenario, cluster, job, plan and catalog files");
  static std::vector<std::string> files;
  static std::string scenario_file;
  cmd->add_option("files", files, "Files to check")->required();
  cmd->add_option("--scenario", scenario_file, "Also check plans against this scenario");
  cmd->callback([] {
    std::optional<Scenario> scenario;
    if (!scenario_file.empty()) scenario = costmodels::load_scenario(scenario_file);
    int invalid = 0, unreadable = 0;
    for (const auto& file : files) {
      try {
        std::string what = validate_one(file, scenario);
        std::cout << file << ": ok (" << what << ")\n";
      } catch (const Error& e) {
        // Unreadable (a FIFO, a folder, missing) is exit 5 as in every command; invalid wins.
        ++(dynamic_cast<const IoError*>(&e) ? unreadable : invalid);
        std::string message = e.what();
        // Messages of ValidationError already start with the file name.
        if (message.rfind(file, 0) != 0) message = file + ": " + message;
        std::cout << message << "\n";
      }
    }
    if (invalid + unreadable)
      throw CLI::RuntimeError(std::to_string(invalid + unreadable) + " of " +
                                  std::to_string(files.size()) + " file(s) " +
                                  (invalid ? "invalid" : "unreadable"),
                              invalid ? kInvalidInput : kIo);
  });
}

}  // namespace cephalo::cli

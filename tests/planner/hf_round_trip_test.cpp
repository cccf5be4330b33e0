// A catalog model and the Hugging Face config.json of the same architecture plan and simulate
// identically (core/hf_config.hpp; scenarios/models/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

using namespace cephalo;

namespace {
const std::filesystem::path kSource = CEPHALO_SOURCE_DIR;

std::string simulated(const std::filesystem::path& scenario_file) {
  Scenario s = costmodels::load_scenario(scenario_file);
  planner::PlannerOptions options;
  options.strategy = "optimal";
  options.compute_source = "roofline";
  planner::PlanResult planned = planner::make_plan(s, options);
  auto models = costmodels::make_cost_models(s, "roofline");
  auto graph = traces::build_training_graph(planned.plan, s);
  sim::SimOptions sim_options;
  sim_options.record_ops = true;
  auto result = sim::simulate(graph, s, planned.plan, *models.compute, *models.comm, sim_options);
  return to_json(planned.plan).dump() + "\n" + traces::render_json(result.report);
}
}  // namespace

TEST(HfRoundTrip, CatalogModelAndItsConfigSimulateIdentically) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cephalo-hf-round-trip-" +
                    std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const std::string config = (kSource / "scenarios/models/meta-llama-3-8b.json").string();
  const std::string cluster = (kSource / "scenarios/clusters/modern-mix.json").string();
  auto scenario = [&](const std::string& name, const std::string& model) {
    std::ofstream(dir / name) << R"({"name": "round-trip", "cluster": ")" << cluster
                              << R"(", "job": {"model": )" << model
                              << R"(, "sequence_length": 2048, "global_batch": 32}})";
    return dir / name;
  };
  const std::string from_catalog = simulated(scenario("catalog.json", R"("llama3-8b")"));
  const std::string from_config =
      simulated(scenario("config.json", R"({"hf_config": ")" + config + R"("})"));
  std::filesystem::remove_all(dir);
  EXPECT_GT(from_catalog.size(), 1000u);
  EXPECT_EQ(from_catalog, from_config);
}

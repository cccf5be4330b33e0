// Plan reader: load_plan, then validate_plan_for against a shipped 2-rank scenario (the check
// every command runs before using a plan).
#include "cephalo/core/plan.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cephalo::Scenario scenario = cephalo::costmodels::load_scenario(
      std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios" / "cpu-2rank.json");
  return cephalo::fuzz::read_bytes(data, size, "plan.json", [](const auto& file) {
    const cephalo::Plan plan = cephalo::load_plan(file);
    cephalo::validate_plan_for(plan, scenario, file.string());
  });
}

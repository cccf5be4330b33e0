#pragma once
// What-if sweeps over cluster mixes (`cephalo sweep --spec F`).
//
// Spec (JSON, unknown keys rejected; see planner/README.md):
//   {"name": "...",
//    "pool": [{"gpu": "a100x80", "max_count": 8, "min_count": 0, "step": 1,
//              "price_per_hour": 5.07,            // optional: overrides the catalog price
//              "gpus_per_node": 8, "intra_link": {...}}, ...],   // optional: per type
//    "node": {"gpus_per_node": 4, "intra_link": {...}, "nic": {...}},  // default node shape
//    "job": "jobs/llama-7b-s2048.json" | {inline job},
//    "strategy": "optimal",                        // any planner strategy
//    "constraints": {"max_cost_per_hour": 40, "min_samples_per_s": 0}}
// Every combination of counts (each type from min_count to max_count by step, not all zero,
// no more GPUs than the global batch) within the budget is planned with the strategy and
// simulated. A type's GPUs fill nodes of its own (homogeneous nodes), so links follow the
// node shape. The Pareto frontier is over (lower $/hour, higher simulated samples/s) among
// the mixes that fit and meet the constraints.
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::planner {

struct PoolEntry {
  std::string gpu;  // catalog name or alias, as written
  DeviceSpec spec;  // resolved
  int min_count = 0;
  int max_count = 0;
  int step = 1;
  double price_per_hour = -1;  // resolved: override or catalog; < 0 unknown
  int gpus_per_node = 0;       // 0: the spec's node shape
  Json intra_link;             // null: the spec's node shape
};

struct SweepSpec {
  std::string name;
  std::filesystem::path file;
  std::vector<PoolEntry> pool;
  int gpus_per_node = 8;
  Json intra_link;  // link JSON as a cluster file writes it
  Json nic;
  Json job;  // inline job object (a file reference is read and inlined)
  std::string strategy = "optimal";
  double max_cost_per_hour = -1;  // < 0: no budget
  double min_samples_per_s = 0;
};

SweepSpec load_sweep_spec(const std::filesystem::path& file);

struct SweepRow {
  std::vector<int> counts;  // per pool entry
  std::string mix;          // "2x A100-80GB + 4x L4"
  int gpus = 0;
  double cost_per_hour = 0;
  bool feasible = false;  // planned, and the simulator found no OOM
  bool meets_constraints = false;
  double samples_per_s = 0;  // simulated
  double predicted_samples_per_s = 0;
  double samples_per_dollar = 0;
  bool pareto = false;
  double planning_s = 0;
  std::string error;  // why it is infeasible
};

std::vector<std::vector<int>> enumerate_mixes(const SweepSpec& spec);
// The scenario of one mix (exposed for tests).
Scenario mix_scenario(const SweepSpec& spec, const std::vector<int>& counts);
SweepRow evaluate_mix(const SweepSpec& spec, const std::vector<int>& counts);
void mark_pareto(std::vector<SweepRow>& rows);

// Runs the sweep. Under MPI with more than one rank the mixes are dealt round-robin and the
// rows gathered on rank 0 (other ranks return an empty vector). Progress on stderr.
std::vector<SweepRow> run_sweep(const SweepSpec& spec, bool progress);

std::string sweep_csv(const std::vector<SweepRow>& rows);
Json sweep_json(const SweepSpec& spec, const std::vector<SweepRow>& rows);
std::string sweep_table(const std::vector<SweepRow>& rows);

}  // namespace cephalo::planner

#pragma once
// What-if sweeps over cluster mixes (`cephalo sweep --spec F`).
//
// Spec (JSON, unknown keys rejected; every key documented in scenarios/README.md, "Sweep spec
// keys"):
//   {"name": "...",
//    "pool": [{"gpu": "a100x80", "max_count": 8, "min_count": 0, "step": 1,
//              "price_per_hour": 5.07,            // optional: overrides the catalog price
//              "gpus_per_node": 8, "intra_link": {...}}, ...],   // optional: per type
//    "node": {"gpus_per_node": 4, "intra_link": {...}, "nic": {...}},  // default node shape
//                                        (intra_link optional: each GPU type's PCIe)
//    "job": "jobs/llama-7b-s2048.json" | {inline job},
//    "strategy": "optimal",                        // any planner strategy
//    "sharding": "full" | "hybrid" | "auto",       // optional (default full): groups of nodes
//    "constraints": {"max_cost_per_hour": 40, "min_samples_per_s": 0}}
// Every combination of counts (each type from min_count to max_count by step, not all zero,
// no more GPUs than the global batch) within the budget is planned with the strategy and
// simulated. A type's GPUs fill nodes of its own (homogeneous nodes), so links follow the
// node shape. The Pareto frontier is over (lower $/hour, higher simulated samples/s) among
// the mixes that fit and meet the constraints.
#include <cstdint>
#include <filesystem>
#include <functional>
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
  // "full" | "hybrid" | "auto" (PlannerOptions::sharding); empty: full, or the replicas of a
  // framework that replicates the state (DDP)
  std::string sharding;
  double max_cost_per_hour = -1;  // < 0: no budget
  double min_samples_per_s = 0;
};

SweepSpec load_sweep_spec(const std::filesystem::path& file);
// `--stack`: every mix's job priced with this stack calibration, in place of the job's own.
void set_stack(SweepSpec& spec, const std::filesystem::path& file);

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
  double tokens_per_dollar = 0;  // samples_per_dollar × the job's sequence length
  bool pareto = false;
  double planning_s = 0;
  std::string error;  // why it is infeasible
};

// The size of a sweep's space, counted before anything is enumerated or planned.
struct MixCount {
  // Closed form: Π over pool entries of the counts each can take, minus the all-zero mix
  // (an upper bound: before the budget and the global-batch filters). Saturates at 2^64 − 1.
  std::uint64_t unfiltered = 0;
  // Mixes that pass the filters, counted exactly up to `limit`; `limit + 1` means "more".
  std::uint64_t mixes = 0;
};
// Counts with a walk that visits only mixes that pass the filters (prices ≥ 0 and counts ≥ 0
// make cost and GPU total monotone, so a partial mix that is already over cannot be
// completed), stopping after limit + 1: O(pool size × limit) whatever the pool allows.
MixCount count_mixes(const SweepSpec& spec, std::uint64_t limit);

// Default of `cephalo sweep --max-mixes`: each mix is planned and simulated (~50 ms for a
// few GPUs), so a few thousand is minutes of work.
constexpr std::uint64_t kDefaultMaxMixes = 5000;

// Every mix that passes the filters (each type from min_count to max_count by step, not all
// zero, no more GPUs than the global batch, within the budget), the first pool entry varying
// fastest. Counts first and throws ValidationError (file, "$.pool", the count, the bound)
// when there are more than `max_mixes`, before building any.
std::vector<std::vector<int>> enumerate_mixes(const SweepSpec& spec,
                                              std::uint64_t max_mixes = kDefaultMaxMixes);
// The scenario of one mix (exposed for tests).
Scenario mix_scenario(const SweepSpec& spec, const std::vector<int>& counts);
SweepRow evaluate_mix(const SweepSpec& spec, const std::vector<int>& counts);
void mark_pareto(std::vector<SweepRow>& rows);

// The sweep as a pure function: rows[i] evaluates mixes[i] (in this process, in order);
// `progress`, when given, is called after each row. No Pareto marks (mark_pareto does that
// once all rows of the sweep are in, e.g. after they were gathered from several processes).
using SweepProgress = std::function<void(std::size_t done, std::size_t total, const SweepRow&)>;
std::vector<SweepRow> evaluate_mixes(const SweepSpec& spec,
                                     const std::vector<std::vector<int>>& mixes,
                                     const SweepProgress& progress = {});

// Rows to and from JSON with their index in the sweep, so rows evaluated elsewhere (another
// MPI rank) can be put back in place: rows_to_json({rows}, {their indices}) and
// place_rows(json, all_rows).
Json rows_to_json(const std::vector<SweepRow>& rows, const std::vector<std::size_t>& indices);
void place_rows(const Json& rows, std::vector<SweepRow>& all);

// A sweep spec file as `cephalo sweep` and Python read it: loaded, `stack_file` (a `cephalo
// calibrate stack` file, "" for none) applied to its job, and its mixes enumerated within
// `max_mixes` (enumerate_mixes refuses a larger space before building it).
struct SweepInput {
  SweepSpec spec;
  std::vector<std::vector<int>> mixes;
};
SweepInput load_sweep(const std::filesystem::path& spec_file, const std::string& stack_file,
                      std::uint64_t max_mixes = kDefaultMaxMixes);

// A sweep shared out over `size` processes: process `rank` evaluates mixes rank, rank + size, ...
// and `gather` brings every process's text (rows_to_json) to process 0, in any order. The
// planner stays free of MPI (DESIGN §3: the backend owns it): `cephalo sweep` passes the MPI
// gather of backend::MpiRuntime; the default is one process, whose gather is its own text.
struct SweepShare {
  int rank = 0;
  int size = 1;
  std::function<std::vector<std::string>(const std::string&)> gather;
};
// This process's mixes under the share-out: indices rank, rank + size, ... below `mixes`.
std::vector<std::size_t> dealt_mixes(std::size_t mixes, int rank, int size);
// Every row of the sweep in mix order, Pareto-marked, on process 0; empty on the others.
std::vector<SweepRow> run_sweep(const SweepInput& input, const SweepShare& share = {},
                                const SweepProgress& progress = {});

std::string sweep_csv(const std::vector<SweepRow>& rows);
Json sweep_json(const SweepSpec& spec, const std::vector<SweepRow>& rows);
// The rows written to `file` as `cephalo sweep -o` writes them (atomically,
// core/output_file.hpp): CSV (sweep_csv) for a name ending in ".csv", else the JSON record.
void write_sweep_file(const std::string& file, const SweepSpec& spec,
                      const std::vector<SweepRow>& rows);
// The table `cephalo sweep` prints. Rows are sorted by `sort` (best first, infeasible mixes
// last, ties in sweep order): "tokens-per-dollar" (the default: what a mix returns for its
// price), "throughput" (simulated samples/s), "cost" ($/hour, cheapest first) or "mix" (the
// sweep's order). The default columns fit 100 characters (mix names and notes are clipped);
// `wide` adds the planner's estimate, samples per dollar and planning time, and keeps names and
// notes whole.
struct SweepTableOptions {
  std::string sort = "tokens-per-dollar";
  bool wide = false;
};
const std::vector<std::string>& sweep_sort_keys();
std::string sweep_table(const std::vector<SweepRow>& rows, const SweepTableOptions& options = {});
// The lines `cephalo sweep` prints around the table, each ending in a newline: before the work
// ("sweep NAME: N mixes, strategy S, K MPI ranks"), after each mix process `rank` of
// `processes` evaluated ("sweep [rank R] 3/12: MIX: 12.30 samples/s" or "infeasible"; no rank
// for one process), and the legend under the table.
std::string render_sweep_start(const SweepInput& input, int processes);
std::string render_sweep_progress(std::size_t done, std::size_t total, const SweepRow& row,
                                  int rank, int processes);
std::string render_sweep_legend(const SweepSpec& spec);

}  // namespace cephalo::planner

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
//    "networks": [{"name": "25G", "nic": {...}, "price_per_node_hour": 0.4}, ...],
//                                        // optional, instead of node.nic: the network swept
//    "job": "jobs/llama-7b-s2048.json" | {inline job},
//    "parallelism": "fsdp" | "3d" | "auto",        // optional: the plan families (a filter)
//    "strategy": "optimal",                        // optional: fixes FSDP plans of a strategy
//    "sharding": "full" | "hybrid" | "auto" | ..., // optional (default searched)
//    "constraints": {"max_cost_per_hour": 40, "min_samples_per_s": 0}}
// Every combination of counts (each type from min_count to max_count by step, not all zero,
// no more GPUs than the global batch), on every network option, within the budget is planned
// as `cephalo plan` plans a scenario (planner::answer_plan: both families, FSDP's schedule
// search, the faster in simulation; the split search bounded to kSweepSplitFinalists replays)
// and simulated. A type's GPUs fill nodes of its own (homogeneous nodes), so links follow the
// node shape. The Pareto frontier is over (lower $/hour, higher simulated samples/s) among
// the rows that fit and meet the constraints.
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

// One option of the network every node of a mix uses, with its price on top of the GPUs'.
struct SweepNetwork {
  std::string name;                // as the spec names it; node.nic alone: its bandwidth
  Json nic;                        // the node's NIC, as a cluster file writes it
  double price_per_gpu_hour = 0;   // USD per GPU-hour of the mix
  double price_per_node_hour = 0;  // USD per node-hour of the mix
};

// The split search of a sweep's rows, bounded: `cephalo plan` searches up to 64 pipeline
// stages and replays the estimate's best 8 splits; a sweep plans hundreds of rows, so each
// searches up to kSweepSplitMaxStages stages and replays the best kSweepSplitFinalists (both
// stated in the JSON record and the first line on stderr). A spec's "split_search" key
// ({"finalists": N, "max_pipeline_stages": M}, the record's own spelling) sets either; 8 and
// 64 give each row `cephalo plan`'s search. Measured on
// scenarios/sweeps/gpt2.7b-mixes (60 mixes): the same ten best rows by tokens per dollar as
// the unbounded search, in 16 s of CPU instead of 37 s (planner/README.md, "Sweeps").
constexpr int kSweepSplitFinalists = 2;
constexpr int kSweepSplitMaxStages = 4;

struct SweepSpec {
  std::string name;
  std::filesystem::path file;
  std::vector<PoolEntry> pool;
  int gpus_per_node = 8;
  Json intra_link;                     // link JSON as a cluster file writes it
  std::vector<SweepNetwork> networks;  // at least one: "networks", or node.nic alone
  Json job;                            // inline job object (a file reference is read and inlined)
  // Each as `cephalo plan`'s flag of that name (PlanRequest): empty or absent leaves it open.
  std::string parallelism;                      // fsdp | 3d | auto
  std::string strategy;                         // a planner strategy: fixes FSDP plans
  std::string sharding;                         // full | hybrid | auto (| optimizer | none: splits)
  int split_finalists = kSweepSplitFinalists;   // "split_search": {"finalists"}
  int split_max_stages = kSweepSplitMaxStages;  // "split_search": {"max_pipeline_stages"}
  double max_cost_per_hour = -1;                // < 0: no budget
  double min_samples_per_s = 0;
};

SweepSpec load_sweep_spec(const std::filesystem::path& file);
// `--stack`: every mix's job priced with this stack calibration, in place of the job's own.
void set_stack(SweepSpec& spec, const std::filesystem::path& file);

struct SweepRow {
  std::vector<int> counts;  // per pool entry
  std::string mix;          // "2x A100-80GB + 4x L4"
  int network = 0;          // index in SweepSpec::networks
  std::string network_name;
  int gpus = 0;
  int nodes = 0;
  double cost_per_hour = 0;  // the GPUs' and the network's
  std::string family;        // the chosen plan's: "fsdp" or "3d" (empty when none was made)
  std::string plan;          // the chosen plan in a few words (plan_summary's first line)
  bool feasible = false;     // planned, and the simulator found no OOM
  bool meets_constraints = false;
  double samples_per_s = 0;  // simulated
  double tokens_per_s = 0;   // simulated: samples_per_s × the job's sequence length
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
// The scenario of one mix on network option `network` (exposed for tests).
Scenario mix_scenario(const SweepSpec& spec, const std::vector<int>& counts, int network = 0);
// One row: the mix on that network planned as `cephalo plan` plans (answer_plan with the
// spec's parallelism, strategy and sharding) and simulated.
SweepRow evaluate_mix(const SweepSpec& spec, const std::vector<int>& counts, int network = 0);
// The nodes a mix fills (each type in nodes of its own) and its price per hour on a network.
int mix_nodes(const SweepSpec& spec, const std::vector<int>& counts);
double mix_cost_per_hour(const SweepSpec& spec, const std::vector<int>& counts, int network);

// One row to plan: a mix on one network option.
struct SweepPoint {
  std::vector<int> counts;
  int network = 0;
  bool operator==(const SweepPoint&) const = default;
};
// Every mix on every network option whose price with that network stays within the budget,
// the network varying fastest.
std::vector<SweepPoint> sweep_points(const SweepSpec& spec,
                                     const std::vector<std::vector<int>>& mixes);
void mark_pareto(std::vector<SweepRow>& rows);

// The sweep as a pure function: rows[i] evaluates mixes[i] (in this process, in order);
// `progress`, when given, is called after each row. No Pareto marks (mark_pareto does that
// once all rows of the sweep are in, e.g. after they were gathered from several processes).
using SweepProgress = std::function<void(std::size_t done, std::size_t total, const SweepRow&)>;
std::vector<SweepRow> evaluate_mixes(const SweepSpec& spec, const std::vector<SweepPoint>& points,
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
  std::vector<SweepPoint> points;  // sweep_points(spec, mixes): the rows to plan
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
// This process's rows under the share-out: indices rank, rank + size, ... below `mixes`.
std::vector<std::size_t> dealt_mixes(std::size_t mixes, int rank, int size);
// Every row of the sweep in point order, Pareto-marked, on process 0; empty on the others.
std::vector<SweepRow> run_sweep(const SweepInput& input, const SweepShare& share = {},
                                const SweepProgress& progress = {});

std::string sweep_csv(const std::vector<SweepRow>& rows);
Json sweep_json(const SweepSpec& spec, const std::vector<SweepRow>& rows);
// The rows written to `file` as `cephalo sweep -o` writes them (atomically,
// core/output_file.hpp): CSV (sweep_csv) for a name ending in ".csv", the JSON record for
// ".json" (either in any case); any other name is refused by check_sweep_file_name.
void write_sweep_file(const std::string& file, const SweepSpec& spec,
                      const std::vector<SweepRow>& rows);
// ValidationError at `source` naming `option` and `file` unless the name ends in .csv or .json
// (any case): the name picks the format, so any other is refused before the sweep runs rather
// than written as JSON under a name that says otherwise.
void check_sweep_file_name(const std::string& file, const std::string& source,
                           const std::string& option);
// The table `cephalo sweep` prints. Rows are sorted by `sort` (best first, infeasible mixes
// last, ties in sweep order): "tokens-per-dollar" (the default: what a mix returns for its
// price), "throughput" (simulated samples/s), "cost" ($/hour, cheapest first) or "mix" (the
// sweep's order). Mixes and networks are always whole (they tell the rows apart); the note
// column is there when a row has a note, clipped so that the default columns fit 100
// characters when the mixes do; `wide` adds the planner's estimate, samples per dollar and
// planning time, and keeps notes whole.
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

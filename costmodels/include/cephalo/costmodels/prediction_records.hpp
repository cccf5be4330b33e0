#pragma once
// The records of `cephalo predict layer | memory | collective`: each query is checked, priced
// and turned into its JSON record here, once, so that the CLI (apps/cmd_predict.cpp) and the
// Python module (python/src/module.cpp) only convert their arguments and print.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/memory_model.hpp"

namespace cephalo::costmodels {

// Where a query's values came from, for the errors: the command line (each field named by its
// flag, "--micro-batch") or a Python call (by its keyword, "micro_batch").
struct QueryOrigin {
  std::string file = "command line";
  bool flags = true;
  std::string field(const std::string& name) const;  // "micro_batch" -> "--micro-batch"
};

// ---- layer: per-layer forward / backward / recompute time of a catalog model on a GPU ----

struct LayerQuery {
  std::string gpu;    // catalog name or alias
  std::string model;  // catalog name or alias, or a Hugging Face config.json
  int seq = 0;
  std::string dtype;  // "": a config's torch_dtype, else fp16
  int micro_batch = 0;
  std::string source = "auto";  // make_cost_models' compute source
  // The software stack priced (scenarios/README.md, job "implementation"): checked here, with
  // the allowed values in the error.
  std::string attention = "flash";  // flash | eager
  bool fused_elementwise = true;
  bool compiled = false;
  std::string framework = "fsdp2";  // fsdp2 | fsdp1 | deepspeed_zero3 | ddp
  std::string flash_kernel;         // "": flash-attn; flash-attn | cudnn, only with flash
};

// The GPU and the one-layer job a query prices (its checks: see predict_layer).
struct LayerJob {
  const DeviceSpec* gpu = nullptr;  // the catalog's entry
  Job job;
};
LayerJob layer_job(const LayerQuery& query, const QueryOrigin& origin = {});

struct LayerPrediction {
  std::string gpu, model, dtype, source;
  int seq = 0;
  int micro_batch = 0;
  double forward_s = 0, backward_s = 0, recompute_s = 0;
  bool extrapolated = false;
  std::string detail;             // the profile row used, for a profile source ("" otherwise)
  Implementation implementation;  // the stack priced
  // Notes on what the price does and does not describe (e.g. a profile row measured on
  // another stack than the one asked for); printed by the CLI, in the record as "notes".
  std::vector<std::string> notes;
  std::vector<std::string> warnings;  // precision_warnings of the GPU and dtype
};

// The implementation a query asks for; ValidationError naming the field and the allowed values
// for an unknown attention kernel, flash kernel or framework, a flash kernel with eager
// attention (core's flash_kernel_applies, the job key's rule), or compiled with
// fused_elementwise false.
Implementation query_implementation(const LayerQuery& query, const QueryOrigin& origin = {});
// ValidationError (file and field from `origin`) for a bad sequence, micro-batch, dtype or
// implementation;
// NotFoundError for an unknown GPU, model or source.
LayerPrediction predict_layer(const LayerQuery& query, const QueryOrigin& origin = {});
Json to_json(const LayerPrediction& p);
// The record as `cephalo predict layer` prints it: a table, the implementation, the profile row
// and the notes (the warnings are the caller's, for stderr).
std::string render_text(const LayerPrediction& p);

// ---- memory: a plan's per-rank memory, term by term ----

// Every rank's breakdown. The caller has checked the plan against the scenario
// (validate_plan_for, and traces::check_groups_hold_state for hybrid groups).
std::vector<MemoryBreakdown> predict_plan_memory(const Scenario& scenario, const Plan& plan);
Json memory_record(const Scenario& scenario, const std::string& plan_label,
                   const std::vector<MemoryBreakdown>& ranks);
// The table of `cephalo predict memory` (GiB), titled with the plan and the scenario: one row per
// run of consecutive ranks whose rows print alike, labelled with its rank range (a 100k-rank plan
// is a few rows, not pages of equal ones), or one per rank when `per_rank`.
std::string render_memory_table(const Scenario& scenario, const std::string& plan_label,
                                const std::vector<MemoryBreakdown>& ranks, bool per_rank = false);

// ---- collective: time and bandwidth of one collective on a scenario's cluster ----

struct CollectiveQuery {
  std::string kind;                           // all-gather, reduce-scatter, all-reduce, broadcast
  std::string bytes;                          // total size: bytes, or with a unit ("64MiB")
  std::optional<std::vector<double>> ranks;   // participants (default: every rank)
  std::optional<std::vector<double>> shares;  // per participant, summing to 1 (default: even)
  std::string uneven = "auto";                // auto | grouped | padded
  std::string sweep;  // measured collective sweep to calibrate with ("": none)
};

struct CollectivePrediction {
  std::string scenario;
  CollectiveRequest request;
  CollectiveEstimate estimate;
  std::string calibration;  // the sweep file, or "defaults"
};

CollectivePrediction predict_collective(const Scenario& scenario, const CollectiveQuery& query,
                                        const QueryOrigin& origin = {});
Json to_json(const CollectivePrediction& p);
std::string render_text(const CollectivePrediction& p);  // `cephalo predict collective`

}  // namespace cephalo::costmodels

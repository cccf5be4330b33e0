#pragma once
// One call that gives the simulator and the planner the models for a scenario.
//
//   auto models = cephalo::costmodels::make_cost_models(scenario);        // "auto"
//   double t = models.compute->unit_time(spec, scenario.job, unit, ComputePhase::Forward,
//   4).seconds; auto c = models.comm->collective(scenario.cluster, request); auto mem =
//   cephalo::costmodels::predict_memory(scenario, plan, rank);  // memory_model.hpp
//
// Sources:
//   "profile"    measured per-layer tables (shipped Cephalo profiles + any profile files the
//                scenario lists under "calibration"); units a profile does not cover (embedding,
//                head) and GPUs without a row fall back to the calibrated model, and the
//                estimate's `source` says so. InfeasibleError when the job's (model, GPU, seq,
//                dtype) has no profile at all on some GPU of the cluster.
//   "calibrated" the roofline op breakdown with efficiencies fitted to the shipped profiles
//                (per GPU and dtype where the GPU was profiled, pooled from specs otherwise)
//   "roofline"   datasheet peaks with default efficiencies
//   "auto"       per call: profile where one exists for (model, GPU, seq, dtype), else
//                calibrated, else roofline
// The comm model is the α-β model, calibrated from any collective sweep the scenario lists.
// A job with a stack calibration (Implementation::stack) gets both models multiplied by its
// factors: compute and optimizer times, collective times (copies are left as they are).
#include <memory>
#include <optional>
#include <string>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/compute_model.hpp"
#include "cephalo/costmodels/memory_model.hpp"

namespace cephalo::costmodels {

struct CostModels {
  std::shared_ptr<const ComputeModel> compute;
  std::shared_ptr<const CommModel> comm;
};

CostModels make_cost_models(const Scenario& scenario, const std::string& source = "auto");

// A calibration file as make_cost_models reads it (a layer profile in either format, a
// collective sweep, a memory profile), checked by the same loaders: a short description
// ("layer profile", "collective sweep, 24 points", "memory profile"), or nullopt when the file
// is none of them. `cephalo validate` recognises what `profile -o` writes with it.
std::optional<std::string> check_calibration_file(const std::filesystem::path& file);

// The scenario's comm model alone (the α-β model calibrated from the collective sweeps and the
// profiles' copies its calibration lists): make_cost_models(...).comm without the compute
// tables. The graph builder decides uneven variants with it.
std::shared_ptr<const CommModel> make_comm_model(const Scenario& scenario);

// One line per GPU type of the cluster that computes the job's dtype on a slower pipeline than
// the dtype asks for (a V100 asked for bf16 has no bf16 tensor cores: priced at its fp32 rate;
// a Pascal GPU's fp16 runs on its fp32 pipeline), naming the GPU, the dtype, the rate priced
// and the dtype that would run faster. Empty when every GPU runs the dtype as asked.
std::vector<std::string> precision_warnings(const Cluster& cluster, const Job& job);

// What every prediction for the scenario should carry in its record and print on stderr: the
// precision warnings, then the notes of the job's stack calibration (core's stack_notes).
std::vector<std::string> prediction_warnings(const Scenario& scenario);

// The accepted source names, for CLI help and errors.
const std::vector<std::string>& compute_sources();

}  // namespace cephalo::costmodels

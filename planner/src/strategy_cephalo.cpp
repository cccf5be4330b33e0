// `cephalo`: the published optimizer (cephalo_optimizer.hpp) bound to a scenario through the
// shipped profiles and memory curves.
#include <cmath>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "cephalo/planner/strategies.hpp"
#include "plan_support.hpp"
#include "strategy_functions.hpp"
#include "strategy_inputs.hpp"

namespace cephalo::planner {

CephaloInputs build_cephalo_inputs(const Scenario& s, const PlannerOptions& opt,
                                   std::string* note) {
  const auto& tables = costmodels::ProfileTables::builtin();
  const auto& memories = costmodels::MemoryProfiles::builtin();
  const Job& job = s.job;
  CephaloInputs in;
  in.global_batch = job.global_batch;
  std::ostringstream rows;
  for (const auto& d : s.cluster.ranks()) {
    const auto* row = tables.find_for(job.model.name, d.slot->spec.name, job.sequence_length,
                                      job.precision.compute);
    if (!row) {
      throw InfeasibleError(
          "cephalo: the published optimizer plans only from measured profiles, and there is no "
          "profile of " +
          job.model.name + " on " + d.slot->spec.name + " at sequence " +
          std::to_string(job.sequence_length) + " in " + to_string(job.precision.compute) +
          " (rank " + std::to_string(d.rank) +
          "); use --strategy optimal, which works from the calibrated cost models");
    }
    CephaloGpu g;
    g.name = row->file_gpu;
    g.capacity_gb = cephalo_published_capacity_gb(row->file_gpu);
    if (g.capacity_gb < 0) g.capacity_gb = d.slot->spec.memory_bytes / kGiB;
    g.forward_slope = row->forward.slope_ms;
    g.forward_intercept = row->forward.intercept_ms;
    g.backward_slope = row->backward.slope_ms;
    g.backward_intercept = row->backward.intercept_ms;
    // Measured points are used where they run 1..K without gaps (the published format).
    bool contiguous = !row->micro_batches.empty();
    for (std::size_t k = 0; k < row->micro_batches.size(); ++k)
      contiguous = contiguous && row->micro_batches[k] == static_cast<int>(k) + 1;
    if (contiguous) {
      g.forward_ms = row->forward_ms;
      g.backward_ms = row->backward_ms;
    }
    if (d.slot->slowdown != 1.0) {
      for (double* v :
           {&g.forward_slope, &g.forward_intercept, &g.backward_slope, &g.backward_intercept})
        *v *= d.slot->slowdown;
      for (auto& v : g.forward_ms) v *= d.slot->slowdown;
      for (auto& v : g.backward_ms) v *= d.slot->slowdown;
    }
    rows << (d.rank ? ", " : "") << row->file_gpu << " (" << to_string(row->shape) << ")";
    in.gpus.push_back(std::move(g));
  }
  std::vector<std::string> clusters;
  if (!opt.cephalo_memory_cluster.empty()) {
    clusters.push_back(opt.cephalo_memory_cluster);
  } else {
    clusters = {"paper", "paper_4gpu", "aws-16gpu", "aws-8gpu", "aws-8v100-8a10g", "trpro"};
  }
  const costmodels::MemoryCurve* curve = nullptr;
  std::string used;
  for (const auto& c : clusters) {
    Dtype dt = job.precision.compute == Dtype::BF16 ? Dtype::FP16 : job.precision.compute;
    curve = memories.find(c, job.model.name, dt);
    if (curve) {
      used = c;
      break;
    }
  }
  if (!curve) {
    std::string list;
    for (const auto& c : clusters) list += (list.empty() ? "" : ", ") + c;
    throw InfeasibleError(
        "cephalo: the published optimizer needs a profiled memory curve and "
        "model_memory.json has none for " +
        job.model.name + " in " + to_string(job.precision.compute) + " on the clusters " + list +
        "; use --strategy optimal");
  }
  in.compute_memory_gb = curve->compute_gib;
  in.parameters = curve->parameters;
  if (note) *note = "profiles: " + rows.str() + "; memory curve of cluster '" + used + "'";
  return in;
}

namespace detail {

PlanResult plan_cephalo(const Scenario& s, const costmodels::CostModels&,
                        const PlannerOptions& opt) {
  PlanResult res;
  CephaloOptions co;
  co.share_objective = opt.cephalo_share;
  co.published_share_memory = opt.cephalo_published_share_memory;
  const auto in = build_cephalo_inputs(s, opt, &res.note);
  const auto sol = solve_cephalo(in, co);
  res.plan = empty_plan(s, "cephalo");
  apply_solution(res.plan, sol);
  // Normalise shares that are equal up to rounding to exactly equal (even collectives).
  bool equal = true;
  for (const auto& r : res.plan.ranks)
    equal = equal && std::abs(r.state_share - res.plan.ranks[0].state_share) < 1e-12;
  if (equal)
    for (auto& r : res.plan.ranks) r.state_share = 1.0 / res.plan.ranks.size();
  res.note += "; published model: " + fixed(sol.iteration_layer_ms, 1) + " ms per layer, memory " +
              fixed(sol.memory_gb, 2) + " / " + fixed(sol.memory_cap_gb, 2) + " GB";
  return res;
}

}  // namespace detail
}  // namespace cephalo::planner

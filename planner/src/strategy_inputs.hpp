#pragma once
// The solvers' inputs built from a scenario, as the `optimal` and `cephalo` strategies build
// them: private to the planner (make_plan is the public way in), declared here for the
// strategies, the planner's tests and bench/planner_bench.cpp, which time the solvers alone.
#include <string>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"
#include "cephalo/planner/strategies.hpp"
#include "optimal_solver.hpp"

namespace cephalo::planner {

// Builds the `optimal` model of a scenario for one offload
// mode, activation checkpointing (compute with its recomputes, memory with its kept
// activations), accumulation (standard and no_sync repeat collectives every micro-batch round:
// a round takes at least its collectives) and, when > 0, a fixed micro-batch size.
OptimalProblem build_optimal_problem(const Scenario& scenario, const costmodels::CostModels& models,
                                     Offload offload, int max_micro_batch = 512,
                                     const ActivationCheckpointing& checkpointing = {},
                                     Accumulation accumulation = Accumulation::Layered,
                                     int fixed_micro_batch = 0);

// The published optimizer's inputs for a scenario (profiles, memory curve, capacities).
CephaloInputs build_cephalo_inputs(const Scenario& scenario, const PlannerOptions& options,
                                   std::string* note = nullptr);

}  // namespace cephalo::planner

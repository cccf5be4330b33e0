#pragma once
// The planner's entry point: a Scenario in, a Plan out, by one of the strategies of one table
// (`strategies()`; dispatch and `strategy_names()` both read it, so a strategy is one row and
// one file, src/strategy_<name>.cpp):
//
//   even          stock FSDP: equal batches (remainder spread), equal shares, micro-batches as
//                 memory requires
//   proportional  batches in proportion to compute speed, equal shares
//   cephalo       the published optimizer (cephalo_optimizer.hpp) on the shipped profiles
//   optimal       our exact optimizer (src/optimal_solver.hpp) on the project's cost models
//   search        simulate the best candidates of `optimal` and their neighbours (and the
//                 other strategies' plans), return the best simulated plan
//
// Every plan comes with the same per-rank prediction (plan_result.hpp); `search` adds the
// simulated time.
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"
#include "cephalo/planner/plan_result.hpp"

namespace cephalo::planner {

// One strategy: its name on the command line, one line for help texts, and the function.
// `plan` gets the cost models make_plan built; it may throw InfeasibleError.
struct Strategy {
  std::string_view name;
  std::string_view description;
  PlanResult (*plan)(const Scenario& scenario, const costmodels::CostModels& models,
                     const PlannerOptions& options);
  // Empty when the strategy chooses `--activation-checkpointing auto` jointly with its batches
  // and shares; else why it cannot (make_plan then refuses `auto`).
  std::string_view cannot_choose_checkpointing = {};
  // Empty when the strategy honours `--offload host`; else why it cannot (make_plan then
  // refuses `host` instead of returning a plan without offload).
  std::string_view cannot_offload = {};
};

// The ranges of the planner's integer options, for `cephalo plan`'s flags and the Python
// module's keywords alike (make_plan refuses anything outside them: check_planner_options).
inline constexpr int kMaxSearchNeighbours = 100000;
inline constexpr int kMaxPlannerMicroBatch = 1 << 24;
// ValidationError ("planner options", the option's name) for an option out of its range.
void check_planner_options(const PlannerOptions& options);

const std::vector<Strategy>& strategies();         // in the order above
const std::vector<std::string>& strategy_names();  // the names of strategies(), same order

// The row of strategies() named `name`; NotFoundError listing the names when there is none.
const Strategy& strategy_named(const std::string& name);

// Runs options.strategy (NotFoundError for an unknown name), predicts, times it. A strategy that
// cannot choose the checkpointing refuses options.choose_checkpointing (ValidationError at
// "activation_checkpointing").
PlanResult make_plan(const Scenario& scenario, const PlannerOptions& options);

// Before any search: InfeasibleError when no plan of the job can respect the plan bounds
// (core/plan.hpp: kMaxScheduledUnitPasses, kMaxMicroBatchesPerRank) with micro-batches of at
// most the fixed micro_batch or max_micro_batch, so a huge global batch is refused at once
// (exit 3) instead of planned and then refused by the plan reader. make_plan calls it.
void require_schedulable_batch(const Scenario& scenario, const PlannerOptions& options);

// The schedule dimensions `options` leaves open, as make_plan resolves them: optimal searches
// accumulation, checkpointing and sharding ("auto"); the other strategies take layered, full
// checkpointing and full sharding; a group size alone means hybrid sharding.
PlannerOptions resolve_open_choices(const PlannerOptions& options);

// Refuses, before any search, a schedule that cannot hold whatever the plan (ValidationError
// naming the option as the CLI spells it, `--micro-batch`, or as Python does, `micro_batch`,
// per options.spelling): host offload with checkpointing other than full, a micro-batch larger
// than any rank's batch can be, a group size with full sharding or larger than the node count,
// `auto` checkpointing with a strategy that cannot choose it.
void check_schedule_options(const Scenario& scenario, const PlannerOptions& options);

// The schedule options given as text, as `cephalo plan` and `cephalo.plan()` take them (empty:
// left open): accumulation "layered" | "standard" | "no_sync", activation checkpointing
// "full" | "none" | "every:K" | "auto". ValidationError (spelt per options.options_source).
void set_schedule_text(PlannerOptions& options, const std::string& accumulation,
                       const std::string& activation_checkpointing);

// `cephalo`'s share split as text ("min_params" | "min_util"), as `cephalo plan
// --cephalo-shares` and `cephalo.plan(cephalo_shares=...)` take it. ValidationError otherwise.
void set_cephalo_shares_text(PlannerOptions& options, const std::string& objective);

// A plan for the scenario's devices (rank, node, GPU type) with every allocation field zero
// and the default schedule (layered, no offload, prefetch): what every strategy fills in.
Plan empty_plan(const Scenario& scenario, const std::string& strategy);

}  // namespace cephalo::planner

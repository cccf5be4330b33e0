// The table of strategies: dispatch and strategy_names() both read it, so adding a strategy
// is one row here and one file src/strategy_<name>.cpp.
#include "cephalo/planner/strategies.hpp"

#include "cephalo/core/error.hpp"
#include "cephalo/planner/sharding_choice.hpp"
#include "plan_support.hpp"
#include "strategy_functions.hpp"

namespace cephalo::planner {

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> table = {
      {"even",
       "stock FSDP: equal batches, equal shares, micro-batches as memory requires",
       detail::plan_even,
       {},
       "stock FSDP keeps activations on the device; use --strategy optimal to plan with host "
       "offload (or --offload none)"},
      {"proportional",
       "batches in proportion to compute speed, equal shares",
       detail::plan_proportional,
       {},
       "its batches and micro-batches are sized without host offload; use --strategy optimal "
       "to plan with it (or --offload none)"},
      {"cephalo", "the published Cephalo optimizer on the shipped profiles", detail::plan_cephalo,
       "the published optimizer's profiles and memory curves time full recompute, so it cannot "
       "weigh other checkpointings; fix one (full, none or every:K: the plan is then checked "
       "against memory) or use --strategy optimal, search, even or proportional",
       "the published optimizer's memory curves were measured without host offload; use "
       "--strategy optimal to plan with it (or --offload none)"},
      {"optimal", "exact optimizer on the project's cost models, checked on the simulator",
       detail::plan_optimal},
      {"search", "simulator in the loop over the other strategies' plans and their neighbours",
       detail::plan_search},
  };
  return table;
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& s : strategies()) out.emplace_back(s.name);
    return out;
  }();
  return names;
}

const Strategy& strategy_named(const std::string& name) {
  for (const auto& row : strategies())
    if (row.name == name) return row;
  throw NotFoundError("strategy", name, strategy_names());
}

void check_planner_options(const PlannerOptions& opt) {
  auto in_range = [](const char* name, int value, int lo, int hi) {
    if (value < lo || value > hi)
      throw ValidationError("planner options", name, std::to_string(value),
                            "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  };
  in_range("max_micro_batch", opt.max_micro_batch, 1, kMaxPlannerMicroBatch);
  in_range("search_neighbours", opt.search_neighbours, 1, kMaxSearchNeighbours);
  in_range("micro_batch", opt.micro_batch, 0, kMaxPlannerMicroBatch);  // 0: the strategy chooses
  in_range("group_nodes", opt.group_nodes, 0, kMaxDevices);            // 0: the default
}

PlanResult make_plan(const Scenario& s, const PlannerOptions& opt) {
  const auto start = detail::Clock::now();
  check_planner_options(opt);
  const Strategy& strategy = strategy_named(opt.strategy);
  if (opt.choose_checkpointing && !strategy.cannot_choose_checkpointing.empty())
    throw ValidationError("planner options", "activation_checkpointing", "auto",
                          "with strategy " + std::string(strategy.name) + ": " +
                              std::string(strategy.cannot_choose_checkpointing));
  if (opt.offload == "host" && !strategy.cannot_offload.empty())
    throw ValidationError("planner options", "offload", "host",
                          "with strategy " + std::string(strategy.name) + ": " +
                              std::string(strategy.cannot_offload));
  const auto models = costmodels::make_cost_models(s, opt.compute_source);
  PlanResult res = strategy.plan(s, models, opt);
  // The strategies choose `auto` checkpointing themselves, jointly with batches and shares;
  // what is left here is the user's fixed micro-batch and the memory check of fixed choices.
  PlannerOptions after = opt;
  after.choose_checkpointing = false;
  detail::honour_schedule_options(s, res.plan, after);
  if (opt.sharding != "full") choose_sharding(s, models, opt, res);
  predict(s, models, res);
  res.planning_s = detail::seconds_since(start);
  return res;
}

}  // namespace cephalo::planner

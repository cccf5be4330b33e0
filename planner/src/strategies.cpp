// The table of strategies: dispatch and strategy_names() both read it, so adding a strategy
// is one row here and one file src/strategy_<name>.cpp.
#include "cephalo/planner/strategies.hpp"

#include <algorithm>
#include <memory>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "comm_memo.hpp"
#include "plan_support.hpp"
#include "replay_outcome.hpp"
#include "sharding_choice.hpp"
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
       "weigh other checkpointings; fix one (full, none, selective or every:K: the plan is then "
       "checked against memory) or use --strategy optimal, search, even or proportional",
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

std::string spell_option(const std::string& options_source, std::string name) {
  if (options_source != kOptionsFromCommandLine) return name;
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

namespace {

std::string spelt(const PlannerOptions& opt, std::string name) {
  return spell_option(opt.options_source, std::move(name));
}

}  // namespace

void check_schedule_options(const Scenario& s, const PlannerOptions& opt) {
  const std::string& src = opt.options_source;
  const std::string& scenario = opt.scenario_label.empty() ? s.name : opt.scenario_label;
  const Strategy& strategy = strategy_named(opt.strategy);
  if (opt.choose_checkpointing && !strategy.cannot_choose_checkpointing.empty())
    throw ValidationError(src, spelt(opt, "activation_checkpointing"), "auto",
                          "with " + spelt(opt, "strategy") + " " + std::string(strategy.name) +
                              ": " + std::string(strategy.cannot_choose_checkpointing));
  if (opt.offload != "none" && opt.offload != "host" && opt.offload != "auto")
    throw ValidationError(src, spelt(opt, "offload"), opt.offload, "none, host or auto");
  if (opt.offload == "host" && opt.activation_checkpointing &&
      !opt.activation_checkpointing->is_full())
    throw ValidationError(src, spelt(opt, "offload"), "host",
                          "offload none or auto with " + spelt(opt, "activation_checkpointing") +
                              " " + to_string(*opt.activation_checkpointing) +
                              ": host offload moves the checkpointed layer inputs, so it needs "
                              "activation checkpointing full");
  const int n = s.cluster.num_ranks();
  const int largest_batch = s.job.global_batch - (n - 1);  // every other rank holds one sample
  if (opt.micro_batch < 0 || (opt.micro_batch > 0 && opt.micro_batch > std::max(1, largest_batch)))
    throw ValidationError(src, spelt(opt, "micro_batch"), std::to_string(opt.micro_batch),
                          "1 to " + std::to_string(std::max(1, largest_batch)) +
                              ": the largest batch a rank can get (" + scenario +
                              ": global batch " + std::to_string(s.job.global_batch) + " over " +
                              std::to_string(n) + " devices, each at least one sample)");
  if (opt.sharding != "" && opt.sharding != "full" && opt.sharding != "hybrid" &&
      opt.sharding != "auto")
    throw ValidationError(src, spelt(opt, "sharding"), opt.sharding, "full, hybrid or auto");
  if (schedule::replicates_state(s.job.implementation.framework) &&
      (opt.sharding == "full" || opt.sharding == "hybrid" || opt.group_nodes > 0))
    throw ValidationError(src, spelt(opt, opt.group_nodes > 0 ? "group_size" : "sharding"),
                          opt.group_nodes > 0 ? std::to_string(opt.group_nodes) : opt.sharding,
                          "no sharding option for framework " +
                              to_string(s.job.implementation.framework) +
                              ": it keeps a full replica of the training state on every rank, "
                              "one group per rank");
  if (opt.group_nodes < 0)
    throw ValidationError(src, spelt(opt, "group_size"), std::to_string(opt.group_nodes),
                          "a positive number of nodes per sharding group");
  if ((opt.sharding.empty() || opt.sharding == "full") && opt.group_nodes > 0)
    throw ValidationError(
        src, spelt(opt, "group_size"), std::to_string(opt.group_nodes),
        spelt(opt, "sharding") + " hybrid or auto with it (full sharding has no groups)");
  // Groups are runs of whole consecutive nodes (the last may hold fewer); more nodes per group
  // than the cluster has is a bad value for this scenario, not an infeasible plan.
  const int nodes = static_cast<int>(s.cluster.nodes.size());
  if (opt.group_nodes > nodes)
    throw ValidationError(src, spelt(opt, "group_size"), std::to_string(opt.group_nodes),
                          "nodes per sharding group, 1 to " + std::to_string(nodes) + " (" +
                              scenario + " has " + std::to_string(nodes) + " node" +
                              (nodes == 1 ? "" : "s") + ")");
}

void set_schedule_text(PlannerOptions& opt, const std::string& accumulation,
                       const std::string& checkpointing) {
  if (!accumulation.empty()) {
    if (accumulation == "layered")
      opt.accumulation = Accumulation::Layered;
    else if (accumulation == "standard")
      opt.accumulation = Accumulation::Standard;
    else if (accumulation == "no_sync")
      opt.accumulation = Accumulation::NoSync;
    else
      throw ValidationError(opt.options_source, spelt(opt, "accumulation"), accumulation,
                            "layered, standard or no_sync");
  }
  if (checkpointing == "auto") {
    opt.choose_checkpointing = true;
  } else if (!checkpointing.empty()) {
    // The plan file's parser knows every value but `auto` and no source: the refusal is the
    // caller's (a flag's: a bad command line), with `auto` among the values allowed.
    try {
      opt.activation_checkpointing =
          parse_activation_checkpointing(checkpointing, spelt(opt, "activation_checkpointing"));
    } catch (const ValidationError& e) {
      throw ValidationError(opt.options_source, e.json_path(), e.value(),
                            e.expected() + " or auto");
    }
  }
}

void set_cephalo_shares_text(PlannerOptions& opt, const std::string& objective) {
  if (objective == "min_params")
    opt.cephalo_share = ShareObjective::MinParams;
  else if (objective == "min_util")
    opt.cephalo_share = ShareObjective::MinUtil;
  else
    throw ValidationError(opt.options_source, spelt(opt, "cephalo_shares"), objective,
                          "min_params or min_util");
}

PlannerOptions resolve_open_choices(const PlannerOptions& opt) {
  PlannerOptions out = opt;
  const bool optimal = opt.strategy == "optimal";
  if (out.sharding.empty()) out.sharding = optimal ? "auto" : "full";
  if (optimal) {
    if (!out.accumulation) out.choose_accumulation = true;
    if (!out.activation_checkpointing) out.choose_checkpointing = true;
  }
  return out;
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

void require_schedulable_batch(const Scenario& s, const PlannerOptions& opt) {
  // Every rank's micro-batch is at most this, so the iteration has at least ⌈B / it⌉
  // micro-batches, each a pass over every unit (layers, embedding, head).
  const long long largest = opt.micro_batch > 0 ? opt.micro_batch : opt.max_micro_batch;
  const long long batch = s.job.global_batch;
  const long long ranks = std::max(1, s.cluster.num_ranks());
  const long long units = s.job.model.num_layers + 2;
  const long long micro_batches = (batch + largest - 1) / largest;
  const std::string bound = opt.micro_batch > 0
                                ? spelt(opt, "micro_batch") + " " + std::to_string(opt.micro_batch)
                                : "max_micro_batch " + std::to_string(largest);
  if (micro_batches * units > kMaxScheduledUnitPasses)
    throw InfeasibleError(
        "global batch " + std::to_string(batch) + " needs at least " +
        std::to_string(micro_batches * units) + " unit passes per iteration (" +
        std::to_string(micro_batches) + " micro-batches of at most " + std::to_string(largest) +
        " samples, " + bound + ", x " + std::to_string(units) + " units), more than the " +
        std::to_string(kMaxScheduledUnitPasses) +
        " a plan may schedule (core/plan.hpp): no plan of this job can be simulated or run");
  const long long per_rank = (batch + ranks * largest - 1) / (ranks * largest);
  if (per_rank > kMaxMicroBatchesPerRank)
    throw InfeasibleError(
        "global batch " + std::to_string(batch) + " over " + std::to_string(ranks) +
        " ranks needs at least " + std::to_string(per_rank) + " micro-batches of at most " +
        std::to_string(largest) + " samples (" + bound + ") on some rank, more than the " +
        std::to_string(kMaxMicroBatchesPerRank) + " a rank may run");
}

PlanResult make_plan(const Scenario& s, const PlannerOptions& opt) {
  const auto start = detail::Clock::now();
  check_planner_options(opt);
  const Strategy& strategy = strategy_named(opt.strategy);
  check_schedule_options(s, opt);
  if (opt.offload == "host" && !strategy.cannot_offload.empty())
    throw ValidationError(opt.options_source, spelt(opt, "offload"), "host",
                          "with " + spelt(opt, "strategy") + " " + std::string(strategy.name) +
                              ": " + std::string(strategy.cannot_offload));
  const PlannerOptions open = resolve_open_choices(opt);
  require_schedulable_batch(s, open);
  // Every candidate's replays and models price their collectives through one memo (the same
  // collectives recur across candidates; comm_memo.hpp).
  auto models = costmodels::make_cost_models(s, open.compute_source);
  models.comm = std::make_shared<detail::CommMemo>(models.comm, s.cluster);
  PlanResult res = strategy.plan(s, models, open);
  // The strategies choose `auto` checkpointing themselves, jointly with batches and shares;
  // what is left here is the user's fixed micro-batch and the memory check of fixed choices.
  PlannerOptions after = open;
  after.choose_checkpointing = false;
  detail::honour_schedule_options(s, res.plan, after);
  ReplayCache replays;
  // A replicating framework (DDP) has one layout, which the sharding choice makes.
  if (open.sharding != "full" || schedule::replicates_state(s.job.implementation.framework)) {
    choose_sharding(s, models, open, res, &replays);
    // optimal weighs even's and proportional's plans before the sharding is chosen; their
    // own groupings can simulate faster than its plan's, so they are weighed again after, and
    // optimal never simulates slower than either on the same flags.
    if (std::string_view(strategy.name) == "optimal") {
      double best = replays.outcome(res.plan, s, models).iteration_s;
      for (const char* name : {"even", "proportional"}) {
        PlanResult alt;
        try {
          alt = strategy_named(name).plan(s, models, open);
          detail::honour_schedule_options(s, alt.plan, after);
          choose_sharding(s, models, open, alt, &replays);
        } catch (const InfeasibleError&) {
          continue;
        }
        const SimOutcome o = replays.outcome(alt.plan, s, models);
        if (o.oom || o.iteration_s >= best) continue;
        best = o.iteration_s;
        alt.plan.strategy = "optimal";
        alt.note = std::string("the ") + name + " plan (equal shares) with its own sharding " +
                   "simulates faster than the model's (" + alt.note + ")";
        res = std::move(alt);
      }
    }
  }
  predict(s, models, res);
  // The answer is the simulator's: whatever the strategy ranked its candidates by, the returned
  // plan is replayed (sim/'s class replay) and that time is the prediction, the number
  // `cephalo simulate` of the written plan reports.
  const SimOutcome replay = replays.outcome(res.plan, s, models);
  res.predicted_iteration_s = replay.iteration_s;
  res.simulated_iteration_s = replay.iteration_s;
  res.rate = traces::throughput(s, res.plan, res.predicted_iteration_s);
  res.simulated_oom = replay.oom;
  res.simulated_oom_detail = replay.oom_detail;
  if (replay.oom) {
    if (!res.note.empty()) res.note += "; ";
    res.note += "the simulator finds this plan out of memory (" + replay.oom_detail + ")";
  }
  res.warnings = costmodels::prediction_warnings(s);
  res.plan.predicted["iteration_time_s"] = res.predicted_iteration_s;
  res.plan.predicted["samples_per_s"] = s.job.global_batch / res.predicted_iteration_s;
  res.plan.predicted["model_iteration_time_s"] = res.model_iteration_s;
  res.plan.predicted["model"] =
      "simulator replay of this plan; planner model: max(comm, max compute) + optimizer step";
  res.planning_s = detail::seconds_since(start);
  return res;
}

}  // namespace cephalo::planner

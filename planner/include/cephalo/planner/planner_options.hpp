#pragma once
// What a planner is asked besides the scenario: PlannerOptions (the FSDP strategies' options,
// which the CLI's flags and Python's keywords fill) and how an option is spelt in messages. Its
// own header so that the split search (split_search.hpp), which plan_result.hpp includes, can
// name options as their source spells them.
#include <optional>
#include <string>

#include "cephalo/core/plan.hpp"
#include "cephalo/planner/cephalo_optimizer.hpp"

namespace cephalo::planner {

// PlannerOptions::options_source of the CLI: errors then spell options as flags (`--micro-batch`)
// and the CLI exits 2 (a bad command line).
inline constexpr const char* kOptionsFromCommandLine = "command line";
// An option as its source spells it: `--micro-batch` from kOptionsFromCommandLine, `micro_batch`
// (keyword arguments) from any other.
std::string spell_option(const std::string& options_source, std::string name);

struct PlannerOptions {
  // Who gave these options, the ValidationError's source: kOptionsFromCommandLine, or any
  // other label (Python: "arguments"), whose options are spelt as keyword arguments.
  std::string options_source = "arguments";
  // The scenario as the caller named it (its file), for messages; empty: the scenario's name.
  std::string scenario_label;
  std::string strategy = "optimal";
  std::string compute_source = "auto";  // costmodels::make_cost_models source
  // optimal / search: "none", "host" or "auto" (solve both, keep the faster)
  std::string offload = "auto";
  // Largest micro-batch the optimal model tabulates (bounds the table-building cost).
  int max_micro_batch = 512;
  // optimal: replay the plan on the simulator and tighten the memory budget of a device type
  // the simulator finds over capacity, then solve again (at most 5 times).
  bool verify_with_simulator = true;
  // cephalo
  ShareObjective cephalo_share = ShareObjective::MinParams;
  bool cephalo_published_share_memory = true;
  std::string cephalo_memory_cluster;  // empty: paper, paper_4gpu, aws-16gpu, ... first found
  // search
  int search_neighbours = 24;  // simulated neighbour plans at most
  bool progress = false;       // progress lines on stderr
  // Schedule choices the user fixes (`cephalo plan --micro-batch --accumulation
  // --activation-checkpointing --sharding --group-size --offload`); every strategy honours
  // them and optimises the rest. What is left open, `optimal` searches (make_plan sets
  // choose_accumulation, choose_checkpointing and sharding "auto"); the other strategies take
  // layered accumulation, full checkpointing and full sharding.
  int micro_batch = 0;                       // 0: the strategy chooses
  std::optional<Accumulation> accumulation;  // unset: layered, or optimal searches all three
  bool choose_accumulation = false;          // optimal: solve and simulate each accumulation
  // Unset: full (the default schedule). choose_checkpointing (`auto`), decided by the strategy
  // jointly with its batches and shares: even / proportional take the least recompute (none,
  // every 2, full) with which every rank fits at its largest micro-batch; optimal solves its
  // model exactly for each and keeps the fastest in simulation (search: the best of its seeds
  // and neighbours); cephalo refuses it (strategies.hpp).
  std::optional<ActivationCheckpointing> activation_checkpointing;
  bool choose_checkpointing = false;
  // How the state is sharded (sharding_choice.hpp): "full", "hybrid" or "auto"; groups of
  // `group_nodes` consecutive nodes (0: hybrid takes 1, auto tries every size). Empty: left
  // open (optimal: auto; the others: full; with group_nodes given: hybrid).
  std::string sharding;
  int group_nodes = 0;
};

}  // namespace cephalo::planner

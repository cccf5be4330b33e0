#include "cephalo/planner/plan_request.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/strategies.hpp"
#include "plan_subsets.hpp"
#include "sharding_choice.hpp"
#include "split_plan.hpp"

namespace cephalo::planner {
namespace {

std::string spelt(const PlanRequest& r, const char* name) {
  return spell_option(r.options.options_source, name);
}

// One option the families read differently: its keyword name, the family that reads it ("fsdp"
// or "3d"), its value as text, and whether the value alone says it was set.
struct FamilyOption {
  const char* name;
  const char* family;
  std::string value;
  bool set_by_value;
  std::string hint = {};  // what the other family reads instead
  // Whether giving it fixes the family a request with parallelism left open plans (`--progress`
  // is read by FSDP plans only, but asks for no plan of theirs).
  bool fixes_family = true;
};

std::vector<FamilyOption> family_options(const PlanRequest& r) {
  const PlannerOptions& o = r.options;
  const auto count = [](int v) { return std::to_string(v); };
  return {
      // FSDP plans: the strategies and their schedule.
      {"strategy", "fsdp", o.strategy, false},
      {"offload", "fsdp", o.offload, false},
      {"cephalo_shares", "fsdp", r.cephalo_shares, false},
      {"cephalo_corrected_share_memory", "fsdp", "true", r.cephalo_corrected_share_memory},
      {"search_neighbours", "fsdp", count(o.search_neighbours), false},
      {"max_micro_batch", "fsdp", count(o.max_micro_batch), false},
      {"verify_with_simulator", "fsdp", o.verify_with_simulator ? "true" : "false", false},
      {"micro_batch", "fsdp", count(o.micro_batch), o.micro_batch > 0,
       "; a split's micro-batch count is " + spelt(r, "micro_batches")},
      {"accumulation", "fsdp", r.accumulation, !r.accumulation.empty()},
      {"group_size", "fsdp", count(o.group_nodes), o.group_nodes > 0},
      {"progress", "fsdp", "true", false, {}, false},
      // Splits: the dimensions the search fixes.
      {"tensor_parallel", "3d", count(r.tensor_parallel), r.tensor_parallel > 0},
      {"pipeline_stages", "3d", count(r.pipeline_stages), r.pipeline_stages > 0},
      {"micro_batches", "3d", count(r.micro_batches), r.micro_batches > 0},
      {"pipeline_schedule", "3d", r.pipeline_schedule, !r.pipeline_schedule.empty()},
      {"sequence_parallel", "3d", "true", r.sequence_parallel},
  };
}

bool is_given(const PlanRequest& r, const FamilyOption& f) {
  return f.set_by_value ||
         std::find(r.given.begin(), r.given.end(), std::string(f.name)) != r.given.end();
}

// The family a request that leaves parallelism open plans: the one its options fix (`--strategy`
// or `every:K` checkpointing fix FSDP plans, `--tensor-parallel` or optimizer sharding a split),
// else both (auto: the faster wins) when they fix neither or some of each. One space by
// default; an option only ever narrows it, never is dropped.
std::string open_parallelism(const PlanRequest& r) {
  bool fsdp = r.activation_checkpointing.rfind("every:", 0) == 0;
  bool split = r.sharding == "optimizer" || r.sharding == "none";
  for (const FamilyOption& f : family_options(r))
    if (f.fixes_family && is_given(r, f)) (std::string(f.family) == "3d" ? split : fsdp) = true;
  return fsdp == split ? "auto" : fsdp ? "fsdp" : "3d";
}

PlanRequest with_family(PlanRequest r) {
  if (r.parallelism.empty()) r.parallelism = open_parallelism(r);
  return r;
}

}  // namespace

void check_request(const PlanRequest& request) {
  const PlanRequest r = with_family(request);
  const std::string& source = r.options.options_source;
  if (r.parallelism != "fsdp" && r.parallelism != "3d" && r.parallelism != "auto")
    throw ValidationError(source, spelt(r, "parallelism"), r.parallelism, "fsdp, 3d or auto");
  const bool command_line = source == kOptionsFromCommandLine;
  // Options of FSDP plans that only some strategies read (the published optimizer's share
  // objective and memory curve, which `search` seeds with too; the search's neighbour budget;
  // optimal's replay check): given to another strategy they would be dropped unread.
  if (r.parallelism != "3d") {
    const std::vector<std::pair<FamilyOption, std::vector<std::string>>> by_strategy = {
        {{"cephalo_shares", "fsdp", r.cephalo_shares, false}, {"cephalo", "search"}},
        {{"cephalo_corrected_share_memory", "fsdp", "true", r.cephalo_corrected_share_memory},
         {"cephalo", "search"}},
        {{"search_neighbours", "fsdp", std::to_string(r.options.search_neighbours), false},
         {"search"}},
        {{"verify_with_simulator", "fsdp", r.options.verify_with_simulator ? "true" : "false",
          false},
         {"optimal", "search"}},
    };
    const std::string& strategy = r.options.strategy;
    for (const auto& [f, readers] : by_strategy) {
      if (!is_given(r, f) || std::find(readers.begin(), readers.end(), strategy) != readers.end())
        continue;
      std::string names;
      for (const std::string& s : readers)
        names += (names.empty() ? "" : " or ") + spelt(r, "strategy") + " " + s;
      throw ValidationError(source, spelt(r, f.name), f.value,
                            names + " (strategy " + strategy +
                                " does not read it: it would be ignored); leave it out");
    }
  }
  if (r.parallelism == "auto") return;  // each family reads its own options
  for (const FamilyOption& f : family_options(r)) {
    if (!is_given(r, f) || r.parallelism == f.family) continue;
    const std::string family =
        std::string(f.family) == "3d" ? "tensor x pipeline x data parallel splits" : "FSDP plans";
    throw ValidationError(source, spelt(r, f.name), f.value,
                          "no " + std::string(command_line ? "flag" : "argument") + " of " +
                              family + " with " + spelt(r, "parallelism") + " " + r.parallelism +
                              " (it would be ignored): use " + spelt(r, "parallelism") + " " +
                              f.family + " or auto, or leave it out" + f.hint);
  }
}

PlannerOptions fsdp_options(const PlanRequest& r) {
  PlannerOptions opt = r.options;
  if (!r.sharding.empty()) {
    if (r.sharding != "full" && r.sharding != "hybrid" && r.sharding != "auto")
      throw ValidationError(
          opt.options_source, spelt(r, "sharding"), r.sharding,
          "full, hybrid or auto (optimizer and none need " + spelt(r, "parallelism") + " 3d)");
    opt.sharding = r.sharding;
  }
  set_cephalo_shares_text(opt, r.cephalo_shares);
  opt.cephalo_published_share_memory = !r.cephalo_corrected_share_memory;
  set_schedule_text(opt, r.accumulation, r.activation_checkpointing);
  return opt;
}

SplitSearchOptions split_options(const PlanRequest& r) {
  SplitSearchOptions o;
  const std::string& source = r.options.options_source;
  o.options_source = source;
  // A long search says how far it got on stderr (the command line's; Python stays silent).
  if (source == kOptionsFromCommandLine)
    o.progress = [](const std::string& line) { std::cerr << line << std::endl; };
  if (r.tensor_parallel > 0) o.tensor_parallel = r.tensor_parallel;
  if (r.pipeline_stages > 0) o.pipeline_stages = r.pipeline_stages;
  if (r.micro_batches > 0) o.micro_batches = r.micro_batches;
  if (!r.pipeline_schedule.empty())
    o.schedule = pipeline::parse_pipeline_schedule(r.pipeline_schedule, source,
                                                   spelt(r, "pipeline_schedule"));
  if (r.sequence_parallel) o.sequence_parallel = true;
  if (r.split_finalists > 0) o.finalists = r.split_finalists;
  if (r.split_max_stages > 0) o.max_pipeline_stages = r.split_max_stages;
  if (r.split_ceiling_s > 0) o.ceiling = r.split_ceiling_s;
  if (!r.sharding.empty() && r.sharding != "auto") {
    o.sharding = parse_sharding_kind(r.sharding);
    if (!o.sharding)
      throw ValidationError(source, spelt(r, "sharding"), r.sharding,
                            "full, hybrid, optimizer, none or auto");
  }
  // A split recomputes every layer, each layer's attention core (selective) or none (or
  // leaves full or none to the search); the FSDP plans' every:K has no counterpart.
  const std::string& checkpointing = r.activation_checkpointing;
  if (const auto c = parse_checkpointing_word(checkpointing)) {
    o.checkpointing = c->kind;
  } else if (!checkpointing.empty() && checkpointing != "auto") {
    throw ValidationError(
        source, spelt(r, "activation_checkpointing"), checkpointing,
        checkpointing_words_text(", ") + " or auto with " + spelt(r, "parallelism") + " 3d");
  }
  return o;
}

namespace {

// The answer over every GPU given: the family the request fixes, or both and the faster.
// `split_estimate_s`: the estimate of the best split the search found (infinity: none searched
// or none found), whichever family answers.
PlanResult answer_all(const Scenario& scenario, const PlanRequest& r, double& split_estimate_s) {
  split_estimate_s = std::numeric_limits<double>::infinity();
  if (r.parallelism == "fsdp") return make_plan(scenario, fsdp_options(r));
  const auto models = costmodels::make_cost_models(scenario, r.options.compute_source);
  if (r.parallelism == "3d") {
    PlanResult split = plan_split(scenario, split_options(r), models);
    split_estimate_s = split.split->search.estimate.iteration_s;
    return split;
  }
  // Either family may have no plan here (FSDP needs a sample per device; a split, layers and
  // memory for its stages): choose_family weighs what both produced.
  std::optional<PlanResult> fsdp, split;
  std::string fsdp_refusal, split_refusal, split_ceiling;
  try {
    fsdp = make_plan(scenario, fsdp_options(r));
  } catch (const InfeasibleError& e) {
    fsdp_refusal = e.what();
  }
  try {
    split = plan_split(scenario, split_options(r), models);
    split_estimate_s = split->split->search.estimate.iteration_s;
  } catch (const SplitCeilingReached& e) {
    split_refusal = split_ceiling = e.what();
  } catch (const InfeasibleError& e) {
    split_refusal = e.what();
  }
  const FamilyChoice choice =
      choose_family(scenario, fsdp, fsdp_refusal, split, split_refusal, models);
  PlanResult answer = std::move(choice.fsdp ? *fsdp : *split);
  answer.why = choice.why;
  answer.split_ceiling = std::move(split_ceiling);
  return answer;
}

}  // namespace

PlanResult answer_plan(const Scenario& scenario, const PlanRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const auto timed = [&start](PlanResult a) {
    a.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return a;
  };
  check_request(request);
  const PlanRequest r = with_family(request);
  double split_estimate_s = 0;
  PlanResult answer = answer_all(scenario, r, split_estimate_s);
  // The baselines (even, proportional, cephalo) spread the work over every GPU by definition;
  // the searching strategies and the splits may leave the slowest nodes out.
  const std::string& strategy = r.options.strategy;
  if (r.use_all || !(r.parallelism == "3d" || strategy == "optimal" || strategy == "search"))
    return timed(std::move(answer));
  std::optional<PlanResult> faster =
      detail::weigh_subsets(scenario, r, answer, split_estimate_s, answer_plan);
  if (!faster) return timed(std::move(answer));
  // The faster plan is the answer: a plan of the nodes it uses, its "nodes" saying which
  // (core/plan_nodes.hpp), read back by every reader as the cluster it was planned on.
  PlanResult out = std::move(*faster);
  out.plan.nodes = answer.faster_without->used_nodes;
  out.faster_without = std::move(answer.faster_without);
  out.subsets = std::move(answer.subsets);
  return timed(std::move(out));
}

SplitEstimate estimate_split_request(const Scenario& scenario, const ModelSplit& split,
                                     const SplitEstimateRequest& r) {
  const auto refuse = [&](const char* name, const std::string& value, const std::string& expected) {
    throw ValidationError(r.options_source, spell_option(r.options_source, name), value, expected);
  };
  SplitOptions options;
  // A bare split recomputes nothing unless asked (read_split_plan sets a plan file's own).
  options.activation_checkpointing = ActivationCheckpointing{ActivationCheckpointing::Kind::None};
  if (!r.activation_checkpointing.empty()) {
    const auto c = parse_checkpointing_word(r.activation_checkpointing);
    if (!c)
      refuse("activation_checkpointing", r.activation_checkpointing,
             checkpointing_words_text(" or "));
    options.activation_checkpointing = *c;
  }
  if (r.dp_overlap != "none" && r.dp_overlap != "last-backward" && r.dp_overlap != "per-unit")
    refuse("dp_overlap", r.dp_overlap, "none, last-backward or per-unit");
  options.scatter_gather = r.scatter_gather;
  options.backward_at_forward_rate = r.backward_at_forward_rate;
  options.split_file = r.split_file;
  options.split_path = r.split_path;
  options.dp_overlap = r.dp_overlap == "last-backward" ? DpOverlap::LastBackward
                       : r.dp_overlap == "per-unit"    ? DpOverlap::PerUnit
                                                       : DpOverlap::None;
  if (!r.allocation.empty()) {
    options.replica_batches = ReplicaBatches::Given;
    options.allocation = r.allocation;
  }
  return estimate_split(scenario, split, options,
                        costmodels::make_cost_models(scenario, r.compute_model));
}

Scenario scenario_for_split_file(const Scenario& scenario, const std::string& file) {
  const Json doc = read_json_file(file);
  if (!doc.contains("ranks") && !doc.contains("rank_classes")) return scenario;
  return scenario_for_plan(scenario, load_plan(file, &scenario), file);
}

void read_split_plan(SplitEstimateRequest& r) {
  const Json doc = read_json_file(r.split_file);
  if (!doc.contains("ranks") && !doc.contains("rank_classes")) {
    if (r.activation_checkpointing.empty())
      r.activation_checkpointing =
          to_string(ActivationCheckpointing{ActivationCheckpointing::Kind::None});
    return;
  }
  const Plan plan = load_plan(r.split_file);
  ReplicaAllocation& a = r.allocation;
  a.micro_batch.resize(plan.ranks.size());
  a.state_share.resize(plan.ranks.size());
  a.sub_steps.resize(plan.ranks.size());
  const int m = plan.model_split.micro_batches;
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    const PlanRank& pr = plan.ranks[i];
    // A rank's share of every micro-batch and the sub-steps it runs it in (load_plan checked
    // that they divide).
    a.micro_batch[i] = pr.share_per_micro_batch(m);
    a.sub_steps[i] = pr.sub_steps(m);
    a.state_share[i] = pr.state_share;
  }
  const ActivationCheckpointing& c = plan.activation_checkpointing;
  // A period other than 1 has no split counterpart; the others are spelt as the option is
  // (every:1 is full).
  if (c.kind == ActivationCheckpointing::Kind::Every && !c.is_full())
    throw ValidationError(r.split_file, "activation_checkpointing", to_string(c),
                          checkpointing_words_text(" or ", true) +
                              ": the split estimate does not price checkpointing every k-th "
                              "layer (simulate replays it)");
  const std::string own = to_string(c.is_full() ? ActivationCheckpointing{} : c);
  if (r.activation_checkpointing.empty()) {
    r.activation_checkpointing = own;
  } else if (r.activation_checkpointing != own) {
    throw ValidationError(
        r.options_source, spell_option(r.options_source, "activation_checkpointing"),
        r.activation_checkpointing,
        "the plan's own \"" + own + "\" (" + r.split_file +
            " at activation_checkpointing), or the option left out: a plan's checkpointing is "
            "part of the plan");
  }
}

std::string render_split_summary(const SplitEstimate& e) {
  return "iteration " + format_seconds(e.iteration_s) + " (schedule " +
         format_seconds(e.makespan_s) + ", p2p " + format_seconds(e.p2p_s) + " per transfer)\n";
}

}  // namespace cephalo::planner

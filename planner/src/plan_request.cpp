#include "cephalo/planner/plan_request.hpp"

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/strategies.hpp"

namespace cephalo::planner {
namespace {

std::string spelt(const PlanRequest& r, const char* name) {
  return spell_option(r.options.options_source, name);
}

}  // namespace

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
  if (r.tensor_parallel > 0) o.tensor_parallel = r.tensor_parallel;
  if (r.pipeline_stages > 0) o.pipeline_stages = r.pipeline_stages;
  if (r.micro_batches > 0) o.micro_batches = r.micro_batches;
  if (!r.pipeline_schedule.empty())
    o.schedule = pipeline::parse_pipeline_schedule(r.pipeline_schedule, source,
                                                   spelt(r, "pipeline_schedule"));
  if (r.sequence_parallel) o.sequence_parallel = true;
  if (!r.sharding.empty() && r.sharding != "auto") {
    o.sharding = parse_stage_sharding(r.sharding);
    if (!o.sharding)
      throw ValidationError(source, spelt(r, "sharding"), r.sharding,
                            "full, hybrid, optimizer, none or auto");
  }
  // The FSDP schedule's options mean nothing to a split (its micro-batches are counted by
  // micro_batches, not sized).
  const bool fixed_micro_batch = r.options.micro_batch > 0;
  if (r.parallelism == "3d" && (fixed_micro_batch || !r.accumulation.empty()))
    throw ValidationError(
        source, spelt(r, fixed_micro_batch ? "micro_batch" : "accumulation"),
        fixed_micro_batch ? std::to_string(r.options.micro_batch) : r.accumulation,
        "no FSDP schedule " + std::string(source == kOptionsFromCommandLine ? "flag" : "argument") +
            " with " + spelt(r, "parallelism") + " 3d (a split's micro-batch count is " +
            spelt(r, "micro_batches") + ")");
  // A split recomputes every layer or none (or leaves it to the search); the FSDP plans'
  // every:K has no counterpart.
  const std::string& checkpointing = r.activation_checkpointing;
  if (checkpointing == "full" || checkpointing == "none")
    o.recompute = checkpointing == "full";
  else if (!checkpointing.empty() && checkpointing != "auto")
    throw ValidationError(source, spelt(r, "activation_checkpointing"), checkpointing,
                          "full, none or auto with " + spelt(r, "parallelism") + " 3d");
  return o;
}

PlanAnswer answer_plan(const Scenario& scenario, const PlanRequest& r) {
  if (r.parallelism != "fsdp" && r.parallelism != "3d" && r.parallelism != "auto")
    throw ValidationError(r.options.options_source, spelt(r, "parallelism"), r.parallelism,
                          "fsdp, 3d or auto");
  PlanAnswer answer;
  if (r.parallelism == "fsdp") {
    answer.fsdp = make_plan(scenario, fsdp_options(r));
    return answer;
  }
  const auto models = costmodels::make_cost_models(scenario, r.options.compute_source);
  if (r.parallelism == "3d") {
    answer.split = plan_split(scenario, split_options(r), models);
    return answer;
  }
  answer.fsdp = make_plan(scenario, fsdp_options(r));
  std::string split_refusal;
  try {
    answer.split = plan_split(scenario, split_options(r), models);
  } catch (const InfeasibleError& e) {
    split_refusal = e.what();
  }
  const FamilyChoice choice =
      choose_family(scenario, *answer.fsdp, answer.split, split_refusal, models);
  answer.why = choice.why;
  if (choice.fsdp)
    answer.split.reset();
  else
    answer.fsdp.reset();
  return answer;
}

SplitEstimate estimate_split_request(const Scenario& scenario, const ModelSplit& split,
                                     const SplitEstimateRequest& r) {
  const auto refuse = [&](const char* name, const std::string& value, const char* expected) {
    throw ValidationError(r.options_source, spell_option(r.options_source, name), value, expected);
  };
  SplitOptions options;
  const std::string& checkpointing = r.activation_checkpointing;
  if (checkpointing != "none" && checkpointing != "full" && checkpointing != "selective")
    refuse("activation_checkpointing", checkpointing, "none, full or selective");
  if (r.dp_overlap != "none" && r.dp_overlap != "last-backward")
    refuse("dp_overlap", r.dp_overlap, "none or last-backward");
  options.activation_checkpointing.kind =
      checkpointing == "full"        ? ActivationCheckpointing::Kind::Full
      : checkpointing == "selective" ? ActivationCheckpointing::Kind::Selective
                                     : ActivationCheckpointing::Kind::None;
  options.scatter_gather = r.scatter_gather;
  options.dp_overlap = r.dp_overlap == "last-backward" ? DpOverlap::LastBackward : DpOverlap::None;
  return estimate_split(scenario, split, options,
                        costmodels::make_cost_models(scenario, r.compute_model));
}

std::string render_split_summary(const SplitEstimate& e) {
  return "iteration " + format_seconds(e.iteration_s) + " (schedule " +
         format_seconds(e.makespan_s) + ", p2p " + format_seconds(e.p2p_s) + " per transfer)\n";
}

Json plan_answer_record(const PlanAnswer& answer) {
  return answer.fsdp ? plan_record(*answer.fsdp) : plan_record(*answer.split);
}

}  // namespace cephalo::planner

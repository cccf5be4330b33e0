// One plan replayed on the simulator; see replay_outcome.hpp.
#include "replay_outcome.hpp"

#include <cstring>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/sim/class_replay.hpp"

namespace cephalo::planner {

SimOutcome replay_outcome(const Plan& plan, const Scenario& s,
                          const costmodels::CostModels& models) {
  // A strategy sizes batches over full sharding; under a replicating framework (DDP) each of
  // its candidates runs as what the framework can run, one replica per rank.
  if (schedule::replicates_state(s.job.implementation.framework) && !plan.sharding.hybrid() &&
      !plan.has_split()) {
    Plan replicas = plan;
    replicas.sharding = replica_sharding(static_cast<int>(plan.ranks.size()));
    for (auto& r : replicas.ranks) r.state_share = 1.0;
    return replay_outcome(replicas, s, models);
  }
  // A candidate past the plan bounds (micro-batches as small as memory forces) is one the plan
  // reader would refuse: infeasible here, never a plan the planner chose and then refused. The
  // reader's bound: per rank for a split plan, per class of alike ranks for an FSDP plan
  // (core/plan.hpp; 1M ranks of one class are 34 passes, not 34M).
  const std::int64_t passes =
      plan.has_split() ? full_unit_passes(plan, s) : class_unit_passes(plan, s);
  if (passes > kMaxScheduledUnitPasses)
    throw InfeasibleError("the micro-batches that fit need " + std::to_string(passes) +
                          " unit passes per iteration, more than the " +
                          std::to_string(kMaxScheduledUnitPasses) +
                          " a plan may schedule (core/plan.hpp): lower the global batch");
  traces::check_plan_for(plan, s, "<planner>");
  // One representative per class of identical ranks where that applies (equal to the full
  // replay; sim/class_replay.hpp), so candidate replays of 100k-rank plans stay cheap.
  const auto result = sim::simulate_plan(plan, s, *models.compute, *models.comm);
  SimOutcome out;
  out.iteration_s = result.report.iteration_time_s;
  out.samples_per_s = result.report.samples_per_s;
  out.oom = result.report.oom;
  for (const auto& r : result.report.ranks) {
    out.peak_bytes.push_back(r.peak_memory_bytes);
    out.capacity_bytes.push_back(r.capacity_bytes);
  }
  if (result.report.oom_detail) {
    const auto& d = *result.report.oom_detail;
    out.oom_rank = d.rank;
    out.oom_detail = "rank " + std::to_string(d.rank) + ", op " + d.op_name + ", " +
                     format_bytes(d.bytes) + " > " + format_bytes(d.capacity_bytes);
  }
  return out;
}

namespace {

// Every field of a plan the replay reads, as bytes (the scenario and strategy names and the
// prediction are not read).
std::string replay_key(const Plan& plan) {
  std::string key;
  auto put = [&key](const auto& v) {
    char bytes[sizeof(v)];
    std::memcpy(bytes, &v, sizeof(v));
    key.append(bytes, sizeof(v));
  };
  key.reserve(32 + plan.ranks.size() * 20);
  put(static_cast<int>(plan.accumulation));
  put(static_cast<int>(plan.activation_checkpointing.kind));
  put(plan.activation_checkpointing.every);
  put(static_cast<int>(plan.offload));
  put(plan.prefetch);
  put(static_cast<int>(plan.uneven_collective));
  put(static_cast<int>(plan.sharding.kind));
  for (const auto& g : plan.sharding.groups) {
    put(static_cast<int>(g.size()));
    for (int r : g) put(r);
  }
  if (plan.has_split()) key += to_json(plan.model_split).dump();
  for (const auto& r : plan.ranks) {
    put(r.batch);
    put(r.micro_batch);
    put(r.micro_batches);
    put(r.state_share);
  }
  return key;
}

}  // namespace

const SimOutcome& ReplayCache::outcome(const Plan& plan, const Scenario& scenario,
                                       const costmodels::CostModels& models) {
  std::string key = replay_key(plan);
  auto it = done_.find(key);
  if (it != done_.end()) {
    ++hits_;
    return it->second;
  }
  return done_.emplace(std::move(key), replay_outcome(plan, scenario, models)).first->second;
}

}  // namespace cephalo::planner

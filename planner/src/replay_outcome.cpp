// One plan replayed on the simulator; see replay_outcome.hpp.
#include "replay_outcome.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/sim/class_replay.hpp"

namespace cephalo::planner {

SimOutcome replay_outcome(const Plan& plan, const Scenario& s, const costmodels::CostModels& models,
                          int most_replayed_ranks) {
  // A strategy sizes batches over full sharding; under a replicating framework (DDP) each of
  // its candidates runs as what the framework can run, one replica per rank.
  if (schedule::replicates_state(s.job.implementation.framework) && !plan.sharding.hybrid() &&
      !plan.has_split()) {
    Plan replicas = plan;
    replicas.sharding = replica_sharding(static_cast<int>(plan.ranks.size()));
    for (auto& r : replicas.ranks) r.state_share = 1.0;
    return replay_outcome(replicas, s, models, most_replayed_ranks);
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
  // replay; sim/class_replay.hpp), so candidate replays of 100k-rank plans stay cheap. The
  // planner reads the time, the verdict and the peaks, never the report's per-rank rows.
  sim::SimOptions options;
  options.rank_rows = false;
  options.most_replayed_ranks = most_replayed_ranks;
  auto result = sim::simulate_plan(plan, s, *models.compute, *models.comm, options);
  SimOutcome out;
  out.iteration_s = result.report.iteration_time_s;
  out.samples_per_s = result.report.samples_per_s;
  out.oom = result.report.oom;
  out.peak_bytes = std::move(result.peak_bytes);
  out.capacity_bytes = std::move(result.capacity_bytes);
  if (result.report.oom_detail) {
    const auto& d = *result.report.oom_detail;
    out.oom_rank = d.rank;
    out.oom_detail = "rank " + std::to_string(d.rank) + ", op " + d.op_name + ", " +
                     format_bytes(d.bytes) + " > " + format_bytes(d.capacity_bytes);
  }
  return out;
}

namespace {

// The accumulation as the replay sees it: with at most one micro-batch on every rank that has
// samples, every accumulation runs one round that reduces (schedule::rounds,
// schedule::reduces_in_round) with the same micro-batch on the device (the memory model), so
// the replays are one (the default search's schedule candidates differ in it alone at 100k
// ranks of one micro-batch each: a third of them would be replayed again).
Accumulation replayed_accumulation(const Plan& plan) {
  for (const auto& r : plan.ranks)
    if (r.batch > 0 && r.micro_batches > 1) return plan.accumulation;
  return Accumulation::Layered;
}

// Every field of a plan the replay reads, as bytes (the scenario and strategy names and the
// prediction are not read). Runs of equal rank rows and of consecutive ranks in a group are
// written once with their length, so the key grows with the plan's classes, not its ranks (a
// 100k-rank plan's rows written out were 2 MB, compared byte by byte on every lookup).
std::string replay_key(const Plan& plan) {
  std::string key;
  auto put = [&key](const auto& v) {
    char bytes[sizeof(v)];
    std::memcpy(bytes, &v, sizeof(v));
    key.append(bytes, sizeof(v));
  };
  put(static_cast<int>(replayed_accumulation(plan)));
  put(static_cast<int>(plan.activation_checkpointing.kind));
  put(plan.activation_checkpointing.every);
  put(static_cast<int>(plan.offload));
  put(plan.prefetch);
  put(static_cast<int>(plan.uneven_collective));
  put(static_cast<int>(plan.sharding.kind));
  put(plan.sharding.groups.size());
  for (const auto& g : plan.sharding.groups) {
    // The group as runs of consecutive ranks: (first rank, length) each, their count first.
    std::vector<std::pair<int, int>> runs;
    for (int r : g) {
      if (!runs.empty() && runs.back().first + runs.back().second == r)
        ++runs.back().second;
      else
        runs.emplace_back(r, 1);
    }
    put(runs.size());
    for (const auto& [first, length] : runs) {
      put(first);
      put(length);
    }
  }
  if (plan.has_split()) key += to_json(plan.model_split).dump();
  // The rows as runs of equal rows: (length, row) each; the lengths sum to the rank count.
  put(plan.ranks.size());
  const auto same_row = [](const PlanRank& a, const PlanRank& b) {
    return a.batch == b.batch && a.micro_batch == b.micro_batch &&
           a.micro_batches == b.micro_batches &&
           std::memcmp(&a.state_share, &b.state_share, sizeof(double)) == 0;
  };
  for (std::size_t i = 0; i < plan.ranks.size();) {
    std::size_t j = i + 1;
    while (j < plan.ranks.size() && same_row(plan.ranks[i], plan.ranks[j])) ++j;
    const auto& r = plan.ranks[i];
    put(j - i);
    put(r.batch);
    put(r.micro_batch);
    put(r.micro_batches);
    put(r.state_share);
    i = j;
  }
  return key;
}

}  // namespace

const SimOutcome& ReplayCache::outcome(const Plan& plan, const Scenario& scenario,
                                       const costmodels::CostModels& models,
                                       int most_replayed_ranks) {
  std::string key = replay_key(plan);
  auto it = done_.find(key);
  if (it != done_.end()) {
    ++hits_;
    return it->second;
  }
  return done_.emplace(std::move(key), replay_outcome(plan, scenario, models, most_replayed_ranks))
      .first->second;
}

}  // namespace cephalo::planner

// `search`: simulator-in-the-loop refinement of the other strategies' plans (see search.hpp).
#include "search.hpp"

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "strategy_functions.hpp"

namespace cephalo::planner {
namespace {

// A plan's identity for de-duplication.
std::string key_of(const Plan& p) {
  std::ostringstream k;
  k << to_string(p.offload) << '|' << to_string(p.uneven_collective) << '|'
    << to_string(p.activation_checkpointing) << '|' << to_string(p.accumulation);
  for (const auto& r : p.ranks)
    k << '|' << r.batch << ',' << r.micro_batch << ',' << r.micro_batches << ','
      << static_cast<long long>(r.state_share * 1e12);
  return k.str();
}

// Fixes a rank's micro-batching after its batch changed: keep the micro-batch size when the
// memory model allows it, else the largest that fits (none: the neighbour is dropped).
bool refit_micro_batches(const Scenario& s, Plan& plan, int rank) {
  auto& r = plan.ranks[rank];
  for (int m = std::min(r.micro_batch, r.batch); m >= 1; --m) {
    r.micro_batch = m;
    r.micro_batches = (r.batch + m - 1) / m;
    const auto mem = costmodels::predict_memory(s, plan, rank);
    if (mem.total <= mem.usable) return true;
  }
  return false;
}

std::vector<Plan> neighbours(const Scenario& s, const Plan& base, const PlanResult& predicted,
                             int limit) {
  std::vector<Plan> out;
  const int n = static_cast<int>(base.ranks.size());
  // The other uneven-collective variant and the other offload mode.
  if (!base.even_shares()) {
    Plan p = base;
    p.uneven_collective = base.uneven_collective == UnevenCollective::Grouped
                              ? UnevenCollective::Padded
                              : UnevenCollective::Grouped;
    out.push_back(p);
  }
  // Move one sample from the ranks predicted slowest to the others (slowest first).
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return predicted.ranks[a].compute_s > predicted.ranks[b].compute_s;
  });
  for (int a = 0; a < n && static_cast<int>(out.size()) < limit; ++a) {
    const int from = order[a];
    if (base.ranks[from].batch <= 1) continue;
    for (int b = n - 1; b > a && static_cast<int>(out.size()) < limit; --b) {
      const int to = order[b];
      Plan p = base;
      --p.ranks[from].batch;
      ++p.ranks[to].batch;
      if (!refit_micro_batches(s, p, from) || !refit_micro_batches(s, p, to)) continue;
      out.push_back(std::move(p));
    }
  }
  // One micro-batch more on each rank that runs several samples (less activation memory).
  for (int i = 0; i < n && static_cast<int>(out.size()) < limit; ++i) {
    const auto& r = base.ranks[i];
    if (r.micro_batch <= 1) continue;
    Plan p = base;
    p.ranks[i].micro_batches = r.micro_batches + 1;
    p.ranks[i].micro_batch = (r.batch + p.ranks[i].micro_batches - 1) / p.ranks[i].micro_batches;
    p.ranks[i].micro_batches = (r.batch + p.ranks[i].micro_batch - 1) / p.ranks[i].micro_batch;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

PlanResult search_plan(const Scenario& s, const costmodels::CostModels& models,
                       const PlannerOptions& options) {
  std::vector<PlanResult> seeds;
  std::string first_error;
  // The seeds: the other strategies' plans, each with the shared prediction.
  using StrategyFunction =
      PlanResult (*)(const Scenario&, const costmodels::CostModels&, const PlannerOptions&);
  auto add_seed = [&](StrategyFunction plan, const std::string& strategy, PlannerOptions o) {
    o.strategy = strategy;
    try {
      seeds.push_back(plan(s, models, o));
      predict(s, models, seeds.back());
    } catch (const InfeasibleError& e) {
      if (first_error.empty()) first_error = e.what();
    }
  };
  for (const std::string offload : {"none", "host"}) {
    PlannerOptions o = options;
    o.offload = offload;
    add_seed(detail::plan_optimal, "optimal", o);
  }
  add_seed(detail::plan_cephalo, "cephalo", options);
  add_seed(detail::plan_proportional, "proportional", options);
  add_seed(detail::plan_even, "even", options);
  if (seeds.empty()) throw InfeasibleError("search: no strategy found a plan: " + first_error);

  std::set<std::string> seen;
  PlanResult best;
  double best_time = -1;
  int simulated = 0;
  auto consider = [&](const Plan& plan, const PlanResult* predicted) -> bool {
    if (!seen.insert(key_of(plan)).second) return false;
    SimOutcome o;
    try {
      o = replay_outcome(plan, s, models);
    } catch (const ValidationError&) {
      return false;  // a neighbour that breaks an invariant
    }
    ++simulated;
    if (options.progress)
      std::cerr << "search: candidate " << simulated << " (" << plan.strategy << ", offload "
                << to_string(plan.offload) << "): "
                << (o.oom ? "out of memory: " + o.oom_detail : format_seconds(o.iteration_s))
                << "\n";
    if (o.oom) return false;
    if (best_time < 0 || o.iteration_s < best_time) {
      best_time = o.iteration_s;
      if (predicted) {
        best = *predicted;
      } else {
        best = PlanResult{};
      }
      best.plan = plan;
      best.simulated_iteration_s = o.iteration_s;
      return true;
    }
    return false;
  };
  for (const auto& seed : seeds) consider(seed.plan, &seed);
  if (best_time < 0) {
    throw InfeasibleError(
        "search: the simulator finds every candidate plan out of memory; the memory model and "
        "the simulator disagree or the scenario is at the edge of fitting: " +
        first_error);
  }
  // Hill-climb over neighbours of the best simulated plan.
  const int budget = std::max(0, options.search_neighbours);
  int spent = 0;
  bool improved = true;
  while (improved && spent < budget) {
    improved = false;
    PlanResult current = best;
    predict(s, models, current);
    for (auto& p : neighbours(s, current.plan, current, budget - spent)) {
      ++spent;
      p.strategy = "search";
      if (consider(p, nullptr)) improved = true;
      if (spent >= budget) break;
    }
  }
  const std::string origin = best.plan.strategy;
  best.plan.strategy = "search";
  best.simulated_candidates = simulated;
  best.note = "best simulated plan came from " + origin + "; " + std::to_string(simulated) +
              " plans simulated";
  return best;
}

namespace detail {

PlanResult plan_search(const Scenario& s, const costmodels::CostModels& models,
                       const PlannerOptions& options) {
  return search_plan(s, models, options);
}

}  // namespace detail
}  // namespace cephalo::planner

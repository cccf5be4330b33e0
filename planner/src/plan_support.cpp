// What the strategies share; see plan_support.hpp.
#include "plan_support.hpp"

#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::planner::detail {

using costmodels::ComputePhase;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ComputeTable::unit(int u, int m, bool forward_only) {
  double t = 0;
  for (auto phase : {ComputePhase::Forward, ComputePhase::Recompute, ComputePhase::Backward}) {
    if (forward_only && phase != ComputePhase::Forward) continue;
    t += model_.unit_time(spec_, job_, u, phase, m).seconds;
  }
  return t * slowdown_;
}

void ComputeTable::ensure(int m) {
  while (static_cast<int>(total_.size()) <= m) {
    const int k = static_cast<int>(total_.size());
    if (k == 0) {
      total_.push_back(0);
      layer_.push_back(0);
      forward_.push_back(0);
      continue;
    }
    const int last = costmodels::num_units(job_.model) - 1;
    const double l = unit(1, k);
    layer_.push_back(l);
    total_.push_back(unit(0, k) + job_.model.num_layers * l + unit(last, k));
    forward_.push_back(unit(0, k, true) + job_.model.num_layers * unit(1, k, true) +
                       unit(last, k, true));
  }
}

ScenarioModel::ScenarioModel(const Scenario& s, const costmodels::CostModels& m)
    : scenario(&s), devices(s.cluster.ranks()), models(&m) {}

ComputeTable& ScenarioModel::table(const RankDevice& d) {
  auto key = std::make_pair(d.slot->spec.name, d.slot->slowdown);
  auto it = tables.find(key);
  if (it == tables.end())
    it = tables
             .emplace(key, std::make_unique<ComputeTable>(*models->compute, scenario->job,
                                                          d.slot->spec, d.slot->slowdown))
             .first;
  return *it->second;
}

double terms_total(const Job& job, const costmodels::RankMemoryInputs& in) {
  double total = 0;
  for (const auto& t : costmodels::memory_terms(job, in)) total += t.bytes;
  return total;
}

costmodels::RankMemoryInputs memory_inputs(int world_size, Offload offload, double share,
                                           std::vector<int> sizes) {
  costmodels::RankMemoryInputs in;
  in.state_share = share;
  in.micro_batch_sizes = std::move(sizes);
  in.accumulation = Accumulation::Layered;
  in.offload = offload;
  in.prefetch = true;
  in.world_size = world_size;
  return in;
}

double usable_bytes(const DeviceSpec& spec) {
  return spec.memory_bytes * costmodels::MemoryConstants{}.usable_fraction;
}

double plannable_bytes(const DeviceSpec& spec) { return usable_bytes(spec) - kPlanHeadroomBytes; }

namespace {

// Largest micro-batch ≤ limit whose memory (share, b = m·count…) fits: used by even and
// proportional to split their batches "as memory requires".
int largest_fitting_micro_batch(const Job& job, int world_size, int batch, double share,
                                double usable) {
  for (int m = batch; m >= 1; --m) {
    const int n = (batch + m - 1) / m;
    std::vector<int> sizes(n, m);
    sizes.back() = batch - (n - 1) * m;
    if (terms_total(job, memory_inputs(world_size, Offload::None, share, sizes)) <= usable)
      return m;
  }
  return 0;
}

}  // namespace

Plan empty_plan(const Scenario& s, const std::string& strategy) {
  Plan plan;
  plan.scenario = s.name;
  plan.strategy = strategy;
  plan.accumulation = Accumulation::Layered;
  plan.offload = Offload::None;
  plan.prefetch = true;
  for (const auto& d : s.cluster.ranks()) {
    PlanRank r;
    r.rank = d.rank;
    r.node = d.node;
    r.gpu = d.slot->type;
    plan.ranks.push_back(r);
  }
  return plan;
}

void check_batch(const Scenario& s, const std::string& who) {
  const int n = s.cluster.num_ranks();
  if (s.job.global_batch < n) {
    throw InfeasibleError(who + ": global batch " + std::to_string(s.job.global_batch) +
                          " is smaller than the number of devices (" + std::to_string(n) +
                          "); every device needs at least one sample: raise the global batch to " +
                          std::to_string(n) + " or use fewer devices");
  }
}

void fill_equal_shares(const Scenario& s, Plan& plan, const std::string& who) {
  const int n = static_cast<int>(plan.ranks.size());
  const auto devices = s.cluster.ranks();
  // The answer depends only on (usable bytes, batch): ranks of one device type with the same
  // batch are evaluated once (a 100k-GPU plan has a handful of such pairs).
  std::map<std::pair<double, int>, int> fitting;
  for (auto& r : plan.ranks) {
    r.state_share = 1.0 / n;
    const double usable = plannable_bytes(devices[r.rank].slot->spec);
    auto [it, fresh] = fitting.emplace(std::make_pair(usable, r.batch), 0);
    if (fresh) it->second = largest_fitting_micro_batch(s.job, n, r.batch, r.state_share, usable);
    const int m = it->second;
    if (m == 0) {
      const double need = terms_total(s.job, memory_inputs(n, Offload::None, r.state_share, {1}));
      std::ostringstream msg;
      msg << who << ": rank " << r.rank << " (" << devices[r.rank].slot->spec.name
          << ") cannot hold an equal share of the training state plus one sample: needs "
          << format_bytes(need) << ", " << format_bytes(usable) << " usable (shortfall "
          << format_bytes(need - usable)
          << "); uneven shares (`cephalo`, `optimal`) or larger devices would fit it";
      throw InfeasibleError(msg.str());
    }
    r.micro_batch = m;
    r.micro_batches = (r.batch + m - 1) / m;
  }
}

void set_rank(PlanRank& r, int batch, int micro_batch, int micro_batches, double share) {
  r.batch = batch;
  r.micro_batch = micro_batch;
  r.micro_batches = micro_batches;
  r.state_share = share;
}

void apply_solution(Plan& plan, const OptimalSolution& sol) {
  for (std::size_t i = 0; i < sol.ranks.size(); ++i) {
    const auto& c = sol.ranks[i];
    set_rank(plan.ranks[i], c.batch, c.micro_batch, c.micro_batches, c.share);
  }
}

void apply_solution(Plan& plan, const CephaloSolution& sol) {
  for (std::size_t i = 0; i < sol.batch.size(); ++i)
    set_rank(plan.ranks[i], sol.batch[i], sol.micro_batch[i], sol.micro_batches[i], sol.shares[i]);
}

}  // namespace cephalo::planner::detail

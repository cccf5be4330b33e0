// What the strategies share; see plan_support.hpp.
#include "plan_support.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

namespace cephalo::planner::detail {

using costmodels::ComputePhase;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ComputeTable::unit(int u, int m, bool forward_only, bool recompute) {
  double t = 0;
  for (auto phase : {ComputePhase::Forward, ComputePhase::Recompute, ComputePhase::Backward}) {
    if (forward_only && phase != ComputePhase::Forward) continue;
    if (!recompute && phase == ComputePhase::Recompute) continue;
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
    const int layers = job_.model.num_layers;
    // Layers are identical: checkpointed ones pay F + RC + B, the others F + B; the embedding
    // and the head as the schedule says (schedule::recomputes, what the graph runs).
    const int units = last + 1;
    const int checkpointed = schedule::checkpointed_layers(checkpointing_, layers);
    const double l = unit(1, k);
    double all_layers = layers * l, per_layer = l;
    if (checkpointed < layers) {
      // Selective recompute: the others rerun their attention core (the replay's rule).
      double kept = unit(1, k, false, false);
      if (checkpointing_.recomputes_attention_core())
        kept += model_.unit_time(spec_, job_, 1, ComputePhase::Recompute, k).seconds *
                costmodels::attention_core_recompute_factor(
                    costmodels::layer_attention_core_share(spec_, job_, k), 1) *
                slowdown_;
      all_layers = checkpointed * l + (layers - checkpointed) * kept;
      per_layer = all_layers / layers;
    }
    const bool embedding_rc = schedule::recomputes(checkpointing_, 0, units);
    const bool head_rc = schedule::recomputes(checkpointing_, last, units);
    layer_.push_back(per_layer);
    total_.push_back(unit(0, k, false, embedding_rc) + all_layers + unit(last, k, false, head_rc));
    forward_.push_back(unit(0, k, true) + job_.model.num_layers * unit(1, k, true) +
                       unit(last, k, true));
  }
}

ScenarioModel::ScenarioModel(const Scenario& s, const costmodels::CostModels& m,
                             ActivationCheckpointing c)
    : scenario(&s), devices(s.cluster.ranks()), models(&m), checkpointing(c) {}

ComputeTable& ScenarioModel::table(const RankDevice& d) {
  auto key = std::make_pair(d.slot->spec.name, d.slot->slowdown);
  auto it = tables.find(key);
  if (it == tables.end())
    it = tables
             .emplace(key,
                      std::make_unique<ComputeTable>(*models->compute, scenario->job, d.slot->spec,
                                                     d.slot->slowdown, checkpointing))
             .first;
  return *it->second;
}

double terms_total(const Job& job, const costmodels::RankMemoryInputs& in) {
  double total = 0;
  for (const auto& t : costmodels::memory_terms(job, in, costmodels::memory_constants()))
    total += t.bytes;
  return total;
}

costmodels::RankMemoryInputs memory_inputs(bool gpu_runtime, int world_size, Offload offload,
                                           double share, std::vector<int> sizes) {
  costmodels::RankMemoryInputs in;
  in.gpu_runtime = gpu_runtime;
  in.state_share = share;
  in.micro_batch_sizes = std::move(sizes);
  in.accumulation = Accumulation::Layered;
  in.offload = offload;
  in.prefetch = true;
  in.world_size = world_size;
  return in;
}

costmodels::RankMemoryInputs memory_inputs(const Plan& plan, const DeviceSpec& spec, int world_size,
                                           double share, std::vector<int> sizes) {
  costmodels::RankMemoryInputs in = memory_inputs(costmodels::runs_gpu_runtime(spec), world_size,
                                                  plan.offload, share, std::move(sizes));
  in.accumulation = plan.accumulation;
  in.activation_checkpointing = plan.activation_checkpointing;
  in.prefetch = plan.prefetch;
  return in;
}

std::vector<int> split_batch(int batch, int m) {
  const int n = (batch + m - 1) / m;
  std::vector<int> sizes(static_cast<std::size_t>(n), m);
  sizes.back() = batch - (n - 1) * m;
  return sizes;
}

double usable_bytes(const DeviceSpec& spec) {
  // The constants predict_memory judges by, built once (a MemoryConstants built per call, with
  // its string, was 4 % of the 100k default search: this runs per rank and candidate).
  return spec.memory_bytes * costmodels::memory_constants().usable_fraction;
}

double plannable_bytes(const DeviceSpec& spec) { return usable_bytes(spec) - kPlanHeadroomBytes; }

ActivationCheckpointing every_k(int k) {
  ActivationCheckpointing c;
  c.kind = ActivationCheckpointing::Kind::Every;
  c.every = k;
  return c;
}

std::vector<ActivationCheckpointing> checkpointing_candidates(int num_layers, int fitting_every) {
  ActivationCheckpointing none, selective, full;
  none.kind = ActivationCheckpointing::Kind::None;
  selective.kind = ActivationCheckpointing::Kind::Selective;
  // Selective recompute reruns only the attention core: less recompute than any every:k.
  std::vector<ActivationCheckpointing> out = {none, selective};
  // every:k checkpoints layers 1, 1+k, ...: k >= L all checkpoint layer 1 alone, so periods
  // above L add nothing; below 2 is full.
  std::vector<int> periods = {4, 3, 2};
  if (fitting_every > 4) periods.insert(periods.begin(), fitting_every);
  for (int k : periods)
    if (k >= 2 && k <= std::max(2, num_layers)) out.push_back(every_k(k));
  out.push_back(full);
  return out;
}

int first_rank_over(const Scenario& s, const Plan& plan, int micro_batch) {
  const auto& devices = s.cluster.ranks();
  const int n = static_cast<int>(plan.ranks.size());
  // The answer depends only on the rank's slot (RankDevice::slot_kind: its usable bytes and
  // runtime), batch and share: a 100k-GPU plan has a handful of such, in runs.
  RunMemo<std::tuple<int, int, double>, bool> fits;
  for (const auto& r : plan.ranks) {
    const RankDevice& d = devices[r.rank];
    const bool fit = fits.get({d.slot_kind, r.batch, r.state_share}, [&] {
      const auto& spec = d.slot->spec;
      const int m = std::max(1, std::min(micro_batch > 0 ? micro_batch : 1, r.batch));
      return terms_total(s.job, memory_inputs(plan, spec, n, r.state_share,
                                              split_batch(std::max(1, r.batch), m))) <=
             plannable_bytes(spec);
    });
    if (!fit) return r.rank;
  }
  return -1;
}

int largest_fitting_every(const Scenario& s, const Plan& plan, int micro_batch, int below) {
  const int layers = s.job.model.num_layers;
  const int top = below > 0 ? std::min(below - 1, layers) : layers;
  if (top < 2) return 0;
  Plan trial = plan;
  auto fits = [&](int k) {
    trial.activation_checkpointing = every_k(k);
    return first_rank_over(s, trial, micro_batch) < 0;
  };
  if (!fits(2)) return 0;
  // Memory grows with k (fewer layers checkpointed keep more activations), so the largest
  // fitting period is found by bisection: a handful of memory evaluations per device class.
  int lo = 2, hi = top;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

void set_even_batches(Plan& plan, int global_batch) {
  const int n = static_cast<int>(plan.ranks.size());
  for (int i = 0; i < n; ++i)
    plan.ranks[static_cast<std::size_t>(i)].batch =
        global_batch / n + (i < global_batch % n ? 1 : 0);
}

namespace {

// Largest micro-batch ≤ batch whose memory (share, the plan's schedule) fits: used by even and
// proportional to split their batches "as memory requires".
int largest_fitting_micro_batch(const Job& job, const Plan& plan, const DeviceSpec& spec,
                                int world_size, int batch, double share, double usable) {
  for (int m = batch; m >= 1; --m)
    if (terms_total(job, memory_inputs(plan, spec, world_size, share, split_batch(batch, m))) <=
        usable)
      return m;
  return 0;
}

// What would make `plan` fit, for the infeasibility message of rank `r` (on `spec`, `limit`
// bytes): the least change first — each single flag that alone makes every rank of the plan
// fit (first_rank_over, at micro-batches of min(micro, batch); micro 0: the strategy chooses,
// so one sample, the least memory), keeping the rest of the schedule: a smaller --micro-batch;
// more recompute (the largest period every:k, else full); another accumulation; host offload
// under full checkpointing. Else a schedule with micro-batches of one sample for the rank, else
// the largest batch that fits it.
std::string what_would_fit(const Scenario& s, const Plan& plan, int micro, const PlanRank& r,
                           const DeviceSpec& spec, double limit) {
  const Job& job = s.job;
  const int world_size = static_cast<int>(plan.ranks.size());
  auto fits = [&](const Plan& p, int m) { return first_rank_over(s, p, m) < 0; };
  auto rank_fits = [&](const Plan& p, int batch) {
    return terms_total(job, memory_inputs(p, spec, world_size, r.state_share,
                                          split_batch(batch, 1))) <= limit;
  };
  std::vector<std::string> single;
  for (int m = std::min(micro, r.batch) - 1; m >= 1; --m)
    if (fits(plan, m)) {
      single.push_back("--micro-batch " + std::to_string(m));
      break;
    }
  const ActivationCheckpointing& ck = plan.activation_checkpointing;
  if (!ck.is_full()) {
    // More recompute than now: the largest period below the current one (any period after
    // none) that fits, else full.
    const int below = ck.kind == ActivationCheckpointing::Kind::Every ? ck.every : 0;
    if (const int k = largest_fitting_every(s, plan, micro, below)) {
      single.push_back("--activation-checkpointing every:" + std::to_string(k));
    } else {
      Plan alt = plan;
      alt.activation_checkpointing = ActivationCheckpointing{};
      if (fits(alt, micro)) single.push_back("--activation-checkpointing full");
    }
  }
  for (Accumulation acc : {Accumulation::Standard, Accumulation::Layered, Accumulation::NoSync}) {
    if (acc == plan.accumulation) continue;
    Plan alt = plan;
    alt.accumulation = acc;
    if (fits(alt, micro)) single.push_back("--accumulation " + to_string(acc));
  }
  if (ck.is_full() && plan.offload == Offload::None) {
    Plan alt = plan;
    alt.offload = Offload::Host;
    if (fits(alt, micro)) single.push_back("--offload host");
  }
  if (!single.empty()) {
    std::string out = single.front();
    for (std::size_t k = 1; k < single.size(); ++k) out += ", or " + single[k];
    return out + (single.size() > 1 ? " (each alone)" : "");
  }
  for (Accumulation acc : {Accumulation::Standard, Accumulation::Layered, Accumulation::NoSync})
    for (const auto& c : checkpointing_candidates(job.model.num_layers)) {
      Plan alt = plan;
      alt.accumulation = acc;
      alt.activation_checkpointing = c;
      if (schedule::offload_conflict(alt.offload, c)) continue;
      if (rank_fits(alt, r.batch))
        return "--accumulation " + to_string(acc) + " --activation-checkpointing " + to_string(c) +
               " --micro-batch 1";
    }
  // Micro-batches of one sample need the least memory (layered keeps every sample's
  // checkpoints whatever the split).
  int fit = 0;
  for (int b = r.batch - 1; b >= 1 && fit == 0; b = b > 64 ? b * 3 / 4 : b - 1)
    if (rank_fits(plan, b)) fit = b;
  if (fit > 0)
    return "a batch of at most " + std::to_string(fit) + " samples on this rank (fewer samples, " +
           "or more devices)";
  return "nothing at this share: the share of the training state alone does not fit (uneven "
         "shares, `cephalo` or `optimal`, or larger devices)";
}

// `limit`: what the check allowed, the device's usable bytes or (the planners' own splits) that
// less kPlanHeadroomBytes, which the message then says.
std::string over_capacity(const std::string& who, const PlanRank& r, const DeviceSpec& spec,
                          const Plan& plan, double need, double limit, const std::string& fits) {
  std::ostringstream msg;
  const double usable = usable_bytes(spec);
  msg << who << ": rank " << r.rank << " (" << spec.name << ") needs " << format_bytes(need) << ", "
      << format_bytes(limit) << " usable";
  if (limit < usable)
    msg << " (" << format_bytes(usable) << " less the planners' " << format_bytes(usable - limit)
        << " headroom)";
  msg << ", with batch " << r.batch << " as " << r.micro_batches << " micro-batch(es) of "
      << r.micro_batch << ", " << to_string(plan.accumulation)
      << " accumulation, activation checkpointing " << to_string(plan.activation_checkpointing)
      << " and offload " << to_string(plan.offload) << ": shortfall "
      << static_cast<long long>(std::ceil(need - limit)) << " B (" << format_bytes(need - limit)
      << "); would fit: " << fits;
  return msg.str();
}

}  // namespace

void check_batch(const Scenario& s, const std::string& who) {
  const int n = s.cluster.num_ranks();
  if (s.job.global_batch < n) {
    throw InfeasibleError(who + ": global batch " + std::to_string(s.job.global_batch) +
                          " is smaller than the number of devices (" + std::to_string(n) +
                          "); every device needs at least one sample: raise the global batch to " +
                          std::to_string(n) + " or use fewer devices");
  }
}

std::vector<double> shares_by_free_memory(const std::vector<double>& free) {
  double total = 0;
  for (double f : free) total += f;
  const bool equal = std::all_of(free.begin(), free.end(), [&](double f) {
    return std::fabs(f - free.front()) <= 1e-9 * free.front();
  });
  std::vector<double> shares;
  double assigned = 0;
  for (std::size_t i = 0; i < free.size(); ++i) {
    double share = equal ? 1.0 / static_cast<double>(free.size()) : free[i] / total;
    if (i + 1 == free.size()) share = std::max(0.0, 1.0 - assigned);
    assigned += share;
    shares.push_back(share);
  }
  return shares;
}

void fill_equal_shares(const Scenario& s, Plan& plan, const std::string& who,
                       const PlannerOptions& opt) {
  const int n = static_cast<int>(plan.ranks.size());
  const auto& devices = s.cluster.ranks();
  for (auto& r : plan.ranks) r.state_share = 1.0 / n;
  std::vector<ActivationCheckpointing> choices = {plan.activation_checkpointing};
  if (opt.choose_checkpointing) {
    // The least recompute that fits: none, else selective (the attention core alone), else
    // the largest period k with which every rank fits (found only when selective does not),
    // else full.
    ActivationCheckpointing none, selective;
    none.kind = ActivationCheckpointing::Kind::None;
    selective.kind = ActivationCheckpointing::Kind::Selective;
    choices = {none, selective, ActivationCheckpointing{}};
  }
  for (std::size_t c = 0; c < choices.size(); ++c) {
    if (opt.choose_checkpointing && c == 2) {
      if (const int k = largest_fitting_every(s, plan, opt.micro_batch))
        choices.insert(choices.begin() + 2, every_k(k));
    }
    Plan trial = plan;
    trial.activation_checkpointing = choices[c];
    // The answer depends only on the rank's slot (RankDevice::slot_kind: its usable bytes and
    // runtime) and batch: a 100k-GPU plan has a handful of such, in runs.
    RunMemo<std::pair<int, int>, int> fitting;
    const PlanRank* failed = nullptr;
    for (auto& r : trial.ranks) {
      const RankDevice& d = devices[r.rank];
      const int m = fitting.get({d.slot_kind, r.batch}, [&] {
        const auto& spec = d.slot->spec;
        const double usable = plannable_bytes(spec);
        if (opt.micro_batch > 0) {
          const int fixed = std::min(opt.micro_batch, r.batch);
          const auto in = memory_inputs(trial, spec, n, r.state_share, split_batch(r.batch, fixed));
          return terms_total(s.job, in) <= usable ? fixed : 0;
        }
        return largest_fitting_micro_batch(s.job, trial, spec, n, r.batch, r.state_share, usable);
      });
      if (m == 0) {
        failed = &r;
        break;
      }
      r.micro_batch = m;
      r.micro_batches = (r.batch + m - 1) / m;
    }
    if (!failed) {
      plan = trial;
      return;
    }
    if (c + 1 < choices.size()) continue;  // more recompute may fit
    // What the rank needs at the least memory this plan allows: micro-batches of one sample
    // (layered: the checkpoints of every sample are kept anyway) or the fixed micro-batch.
    PlanRank tried = *failed;
    tried.micro_batch = opt.micro_batch > 0 ? std::min(opt.micro_batch, tried.batch) : 1;
    tried.micro_batches = (tried.batch + tried.micro_batch - 1) / tried.micro_batch;
    const auto& spec = devices[tried.rank].slot->spec;
    const double usable = plannable_bytes(spec);
    const double need =
        terms_total(s.job, memory_inputs(trial, spec, n, tried.state_share,
                                         split_batch(tried.batch, tried.micro_batch)));
    throw InfeasibleError(
        over_capacity(who + " (equal shares)", tried, spec, trial, need, usable,
                      what_would_fit(s, trial, opt.micro_batch, tried, spec, usable)));
  }
}

void apply_schedule_options(Plan& plan, const PlannerOptions& opt) {
  if (opt.accumulation) plan.accumulation = *opt.accumulation;
  if (opt.activation_checkpointing) plan.activation_checkpointing = *opt.activation_checkpointing;
  if (schedule::offload_conflict(plan.offload, plan.activation_checkpointing))
    throw InfeasibleError("--activation-checkpointing " + to_string(plan.activation_checkpointing) +
                          " with host offload: offload moves the checkpointed layer inputs, so it "
                          "needs --activation-checkpointing full (or --offload none)");
}

void honour_schedule_options(const Scenario& s, Plan& plan, const PlannerOptions& opt) {
  // `auto` checkpointing is the strategies' choice (make_plan passes it cleared).
  const bool fixed = opt.micro_batch > 0 || opt.accumulation || opt.activation_checkpointing;
  if (!fixed) return;
  if (opt.accumulation) plan.accumulation = *opt.accumulation;
  if (opt.activation_checkpointing) plan.activation_checkpointing = *opt.activation_checkpointing;
  if (opt.micro_batch > 0)
    for (auto& r : plan.ranks)
      if (r.batch > 0) {
        r.micro_batch = std::min(opt.micro_batch, r.batch);
        r.micro_batches = (r.batch + r.micro_batch - 1) / r.micro_batch;
      }
  const auto& devices = s.cluster.ranks();
  const int n = static_cast<int>(plan.ranks.size());
  auto first_over = [&](const Plan& p) -> int {
    for (const auto& r : p.ranks) {
      const auto& spec = devices[r.rank].slot->spec;
      if (costmodels::predict_memory(s.job, p, r, spec, n).total > usable_bytes(spec))
        return r.rank;
    }
    return -1;
  };
  const int over = first_over(plan);
  if (over < 0) return;
  const PlanRank& r = plan.ranks[static_cast<std::size_t>(over)];
  const auto& spec = devices[r.rank].slot->spec;
  const double need = costmodels::predict_memory(s.job, plan, r, spec, n).total;
  const double usable = usable_bytes(spec);
  throw InfeasibleError(over_capacity(plan.strategy, r, spec, plan, need, usable,
                                      what_would_fit(s, plan, opt.micro_batch, r, spec, usable)));
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

namespace cephalo::planner {

Plan empty_plan(const Scenario& s, const std::string& strategy) {
  Plan plan;
  plan.scenario = s.name;
  plan.strategy = strategy;
  plan.accumulation = Accumulation::Layered;
  plan.offload = Offload::None;
  plan.prefetch = true;
  // One row per rank, allocated once (at 100k ranks growing the vector copied every row ~17
  // times; `optimal` builds a plan per schedule candidate).
  plan.ranks.reserve(s.cluster.ranks().size());
  // The type name read once per slot kind (RankDevice::slot_kind): each rank's own slot is one
  // of 100k places at 100k ranks.
  std::vector<const std::string*> types;
  for (const auto& d : s.cluster.ranks()) {
    const auto kind = static_cast<std::size_t>(d.slot_kind);
    if (kind >= types.size()) types.resize(kind + 1, nullptr);
    if (!types[kind]) types[kind] = &d.slot->type;
    PlanRank r;
    r.rank = d.rank;
    r.node = d.node;
    r.gpu = *types[kind];
    plan.ranks.push_back(r);
  }
  return plan;
}

}  // namespace cephalo::planner

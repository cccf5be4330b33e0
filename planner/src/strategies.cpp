// Binding of the strategies to a Scenario and the project's cost models.
#include "cephalo/planner/strategies.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "cephalo/planner/search.hpp"

namespace cephalo::planner {
namespace {

using costmodels::ComputePhase;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Compute time of one micro-batch through every unit and phase on one device type, cached by
// micro-batch size (layers are identical, so one layer is evaluated and multiplied by L).
class ComputeTable {
 public:
  ComputeTable(const costmodels::ComputeModel& model, const Job& job, const DeviceSpec& spec,
               double slowdown)
      : model_(model), job_(job), spec_(spec), slowdown_(slowdown) {}

  double micro_batch(int m) {
    ensure(m);
    return total_[m];
  }
  double layer(int m) {
    ensure(m);
    return layer_[m];
  }
  // The forward phase alone of micro_batch(m).
  double forward(int m) {
    ensure(m);
    return forward_[m];
  }

 private:
  double unit(int u, int m, bool forward_only = false) {
    double t = 0;
    for (auto phase : {ComputePhase::Forward, ComputePhase::Recompute, ComputePhase::Backward}) {
      if (forward_only && phase != ComputePhase::Forward) continue;
      t += model_.unit_time(spec_, job_, u, phase, m).seconds;
    }
    return t * slowdown_;
  }
  void ensure(int m) {
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
  const costmodels::ComputeModel& model_;
  const Job& job_;
  const DeviceSpec& spec_;
  double slowdown_;
  std::vector<double> total_, layer_, forward_;
};

// Memory of a rank decomposed as the optimal model needs it:
//   total = fixed + w(m) + a·b + share·S, read off the memory model at a few points (the model is
//   linear in the share and in the batch and depends on the micro-batch through the working set).
struct MemoryShape {
  double fixed_plus_w1 = 0;
  std::vector<double> base;  // [m]: fixed + w(m) + a·m  (share 0, one micro-batch)
  double per_sample = 0;     // a
  double state = 0;          // S
};

double terms_total(const Job& job, const costmodels::RankMemoryInputs& in) {
  double total = 0;
  for (const auto& t : costmodels::memory_terms(job, in)) total += t.bytes;
  return total;
}

costmodels::RankMemoryInputs memory_inputs(const Scenario& s, Offload offload, double share,
                                           std::vector<int> sizes) {
  costmodels::RankMemoryInputs in;
  in.state_share = share;
  in.micro_batch_sizes = std::move(sizes);
  in.accumulation = Accumulation::Layered;
  in.offload = offload;
  in.prefetch = true;
  in.world_size = s.cluster.num_ranks();
  return in;
}

double usable_bytes(const DeviceSpec& spec) {
  return spec.memory_bytes * costmodels::MemoryConstants{}.usable_fraction;
}

// What the planners let a plan use: the usable capacity less a small headroom, so a plan at
// the exact edge of the memory model (the optimum often is) does not go over by rounding or
// by the simulator's allocation order.
constexpr double kPlanHeadroomBytes = 128.0 * 1024 * 1024;
double plannable_bytes(const DeviceSpec& spec) { return usable_bytes(spec) - kPlanHeadroomBytes; }

struct ScenarioModel {
  const Scenario* scenario = nullptr;
  std::vector<RankDevice> devices;
  std::map<std::pair<std::string, double>, std::unique_ptr<ComputeTable>> tables;
  const costmodels::CostModels* models = nullptr;

  ComputeTable& table(const RankDevice& d) {
    auto key = std::make_pair(d.slot->spec.name, d.slot->slowdown);
    auto it = tables.find(key);
    if (it == tables.end())
      it = tables
               .emplace(key, std::make_unique<ComputeTable>(*models->compute, scenario->job,
                                                            d.slot->spec, d.slot->slowdown))
               .first;
    return *it->second;
  }
};

// Largest micro-batch ≤ limit whose memory (share, b = m·count…) fits: used by even and
// proportional to split their batches "as memory requires".
int largest_fitting_micro_batch(const Scenario& s, int batch, double share, double usable) {
  for (int m = batch; m >= 1; --m) {
    const int n = (batch + m - 1) / m;
    std::vector<int> sizes(n, m);
    sizes.back() = batch - (n - 1) * m;
    if (terms_total(s.job, memory_inputs(s, Offload::None, share, sizes)) <= usable) return m;
  }
  return 0;
}

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

// Equal shares; micro-batch sizes from memory (stock FSDP gradient accumulation).
void fill_equal_shares(const Scenario& s, Plan& plan, const std::string& who) {
  const int n = static_cast<int>(plan.ranks.size());
  const auto devices = s.cluster.ranks();
  for (auto& r : plan.ranks) {
    r.state_share = 1.0 / n;
    const double usable = plannable_bytes(devices[r.rank].slot->spec);
    const int m = largest_fitting_micro_batch(s, r.batch, r.state_share, usable);
    if (m == 0) {
      const double need = terms_total(s.job, memory_inputs(s, Offload::None, r.state_share, {1}));
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

void check_batch(const Scenario& s, const std::string& who) {
  const int n = s.cluster.num_ranks();
  if (s.job.global_batch < n) {
    throw InfeasibleError(who + ": global batch " + std::to_string(s.job.global_batch) +
                          " is smaller than the number of devices (" + std::to_string(n) +
                          "); every device needs at least one sample: raise the global batch to " +
                          std::to_string(n) + " or use fewer devices");
  }
}

Plan plan_even(const Scenario& s) {
  check_batch(s, "even");
  Plan plan = empty_plan(s, "even");
  const int n = static_cast<int>(plan.ranks.size());
  const int B = s.job.global_batch;
  for (int i = 0; i < n; ++i) plan.ranks[i].batch = B / n + (i < B % n ? 1 : 0);
  fill_equal_shares(s, plan, "even");
  return plan;
}

Plan plan_proportional(const Scenario& s, ScenarioModel& sm) {
  check_batch(s, "proportional");
  Plan plan = empty_plan(s, "proportional");
  const int n = static_cast<int>(plan.ranks.size());
  const int B = s.job.global_batch;
  // Speed: samples per second at the even per-rank batch as one micro-batch (capped at 16).
  const int ref = std::clamp(B / n, 1, 16);
  std::vector<double> speed(n);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    speed[i] = ref / sm.table(sm.devices[i]).micro_batch(ref);
    total += speed[i];
  }
  // Largest remainder, at least one sample each.
  std::vector<int> b(n);
  std::vector<std::pair<double, int>> rest;
  int assigned = 0;
  for (int i = 0; i < n; ++i) {
    const double exact = 1 + (B - n) * speed[i] / total;
    b[i] = static_cast<int>(std::floor(exact));
    rest.emplace_back(exact - b[i], i);
    assigned += b[i];
  }
  std::sort(rest.begin(), rest.end(), [](auto& x, auto& y) { return x.first > y.first; });
  for (int k = 0; assigned < B; ++k, ++assigned) ++b[rest[k % n].second];
  for (int i = 0; i < n; ++i) plan.ranks[i].batch = b[i];
  fill_equal_shares(s, plan, "proportional");
  return plan;
}

}  // namespace

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"even", "proportional", "cephalo", "optimal",
                                                 "search"};
  return names;
}

bool PlanResult::fits() const {
  for (const auto& r : ranks)
    if (r.memory_bytes > r.usable_bytes) return false;
  return true;
}

OptimalProblem build_optimal_problem(const Scenario& s, const costmodels::CostModels& models,
                                     Offload offload, int max_micro_batch) {
  ScenarioModel sm;
  sm.scenario = &s;
  sm.devices = s.cluster.ranks();
  sm.models = &models;
  const int n = static_cast<int>(sm.devices.size());
  const int B = s.job.global_batch;
  OptimalProblem p;
  p.global_batch = B;
  // Memory shape (the same on every rank but for the usable capacity).
  const Job& job = s.job;
  const double at1 = terms_total(job, memory_inputs(s, offload, 0.0, {1}));
  const double at11 = terms_total(job, memory_inputs(s, offload, 0.0, {1, 1}));
  const double state = terms_total(job, memory_inputs(s, offload, 1.0, {1})) - at1;
  const double per_sample = at11 - at1;
  p.state_bytes = state;
  double largest_usable = 0;
  for (const auto& d : sm.devices)
    largest_usable = std::max(largest_usable, plannable_bytes(d.slot->spec));
  // Working set by micro-batch, up to what fits the largest device or the per-rank batch bound.
  const int limit = std::max(1, std::min({max_micro_batch, B - (n - 1)}));
  std::vector<double> working(1, 0.0);  // fixed + w(m)
  for (int m = 1; m <= limit; ++m) {
    const double base = terms_total(job, memory_inputs(s, offload, 0.0, {m}));
    const double fw = base - per_sample * m;
    if (m > 1 && base > largest_usable) break;
    working.push_back(fw);
  }
  const int mmax = static_cast<int>(working.size()) - 1;
  // Host offload: boundary activations leave over the rank's PCIe link while it computes; a
  // micro-batch takes the longer of its compute and its copies (d2h in forward, h2d back).
  const double boundary = costmodels::boundary_activation_bytes(job.model, job.sequence_length, 1,
                                                                job.precision.compute);
  for (const auto& d : sm.devices) {
    OptimalRankModel r;
    r.name = "rank " + std::to_string(d.rank) + " (" + d.slot->spec.name + ")";
    r.micro_batch_time.assign(mmax + 1, 0.0);
    r.forward_time.assign(mmax + 1, 0.0);
    r.working_bytes.assign(mmax + 1, 0.0);
    auto& table = sm.table(d);
    for (int m = 1; m <= mmax; ++m) {
      const double compute = table.micro_batch(m);
      double t = compute;
      if (offload == Offload::Host) {
        const double copies = 2.0 * (job.model.num_layers + 1) *
                              models.comm->copy_time(s.cluster, d.rank, boundary * m);
        t = std::max(t, copies);
      }
      r.micro_batch_time[m] = t;
      r.forward_time[m] = compute > 0 ? table.forward(m) * t / compute : 0.0;
      r.working_bytes[m] = working[m];
    }
    r.fixed_bytes = 0;  // folded into working_bytes
    r.bytes_per_sample = per_sample;
    r.usable_bytes = plannable_bytes(d.slot->spec);
    p.ranks.push_back(std::move(r));
  }
  // Optimizer step over the whole state on the slowest device (times σ in the model).
  const double params = costmodels::total_parameters(job.model);
  for (const auto& d : sm.devices)
    p.optimizer_seconds = std::max(
        p.optimizer_seconds,
        models.compute->optimizer_time(d.slot->spec, job, params).seconds * d.slot->slowdown);
  // Communication with shards padded to σ: every unit is all-gathered in forward and again in
  // backward and reduce-scattered once per iteration.
  if (n > 1) {
    const Cluster* cluster = &s.cluster;
    auto comm = models.comm;
    std::vector<std::pair<double, int>> unit_bytes;  // (parameters, how many units)
    const int units = costmodels::num_units(job.model);
    // What each unit's phases move (phase_parameters): a tied head brings the embedding along.
    unit_bytes.emplace_back(costmodels::phase_parameters(job.model, 0), 1);
    unit_bytes.emplace_back(costmodels::phase_parameters(job.model, 1), job.model.num_layers);
    unit_bytes.emplace_back(costmodels::phase_parameters(job.model, units - 1), 1);
    const double compute_bytes = bytes_per_element(job.precision.compute);
    const double reduce_bytes = bytes_per_element(job.precision.reduce);
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    auto cache = std::make_shared<std::map<double, double>>();
    auto raw = [=](double sigma) {
      auto it = cache->find(sigma);
      if (it != cache->end()) return it->second;
      double total = 0;
      for (const auto& [params_u, count] : unit_bytes) {
        if (params_u <= 0) continue;
        // One rank holds σ, the others share the rest: the padded variant then costs what
        // any plan with largest share σ pays with it (its cost depends only on the largest
        // shard), and the plan later runs whichever variant is cheaper.
        auto shards = [&](double bytes) {
          std::vector<double> v(n, sigma * bytes);
          if (sigma > 1.0 / n)
            for (int k = 1; k < n; ++k) v[k] = (1 - sigma) * bytes / (n - 1);
          return v;
        };
        costmodels::CollectiveRequest ag;
        ag.kind = costmodels::CollectiveKind::AllGather;
        ag.ranks = all;
        ag.uneven = UnevenCollective::Padded;
        ag.shard_bytes = shards(params_u * compute_bytes);
        costmodels::CollectiveRequest rs = ag;
        rs.kind = costmodels::CollectiveKind::ReduceScatter;
        rs.shard_bytes = shards(params_u * reduce_bytes);
        total += count * (2 * comm->collective(*cluster, ag).seconds +
                          comm->collective(*cluster, rs).seconds);
      }
      cache->emplace(sigma, total);
      return total;
    };
    // C must be nondecreasing in σ (the solver relies on it): never below the even cost.
    p.comm_seconds = [=](double sigma) {
      const double even = raw(1.0 / n);
      return sigma > 1.0 / n ? std::max(even, raw(sigma)) : even;
    };
  }
  return p;
}

CephaloInputs build_cephalo_inputs(const Scenario& s, const PlannerOptions& opt,
                                   std::string* note) {
  const auto& tables = costmodels::ProfileTables::builtin();
  const auto& memories = costmodels::MemoryProfiles::builtin();
  const Job& job = s.job;
  CephaloInputs in;
  in.global_batch = job.global_batch;
  std::ostringstream rows;
  for (const auto& d : s.cluster.ranks()) {
    const auto* row = tables.find_for(job.model.name, d.slot->spec.name, job.sequence_length,
                                      job.precision.compute);
    if (!row) {
      throw InfeasibleError(
          "cephalo: the published optimizer plans only from measured profiles, and there is no "
          "profile of " +
          job.model.name + " on " + d.slot->spec.name + " at sequence " +
          std::to_string(job.sequence_length) + " in " + to_string(job.precision.compute) +
          " (rank " + std::to_string(d.rank) +
          "); use --strategy optimal, which works from the calibrated cost models");
    }
    CephaloGpu g;
    g.name = row->file_gpu;
    g.capacity_gb = cephalo_published_capacity_gb(row->file_gpu);
    if (g.capacity_gb < 0) g.capacity_gb = d.slot->spec.memory_bytes / kGiB;
    g.forward_slope = row->forward.slope_ms;
    g.forward_intercept = row->forward.intercept_ms;
    g.backward_slope = row->backward.slope_ms;
    g.backward_intercept = row->backward.intercept_ms;
    // Measured points are used where they run 1..K without gaps (the published format).
    bool contiguous = !row->micro_batches.empty();
    for (std::size_t k = 0; k < row->micro_batches.size(); ++k)
      contiguous = contiguous && row->micro_batches[k] == static_cast<int>(k) + 1;
    if (contiguous) {
      g.forward_ms = row->forward_ms;
      g.backward_ms = row->backward_ms;
    }
    if (d.slot->slowdown != 1.0) {
      for (double* v :
           {&g.forward_slope, &g.forward_intercept, &g.backward_slope, &g.backward_intercept})
        *v *= d.slot->slowdown;
      for (auto& v : g.forward_ms) v *= d.slot->slowdown;
      for (auto& v : g.backward_ms) v *= d.slot->slowdown;
    }
    rows << (d.rank ? ", " : "") << row->file_gpu << " (" << to_string(row->shape) << ")";
    in.gpus.push_back(std::move(g));
  }
  std::vector<std::string> clusters;
  if (!opt.cephalo_memory_cluster.empty()) {
    clusters.push_back(opt.cephalo_memory_cluster);
  } else {
    clusters = {"paper", "paper_4gpu", "aws-16gpu", "aws-8gpu", "aws-8v100-8a10g", "trpro"};
  }
  const costmodels::MemoryCurve* curve = nullptr;
  std::string used;
  for (const auto& c : clusters) {
    Dtype dt = job.precision.compute == Dtype::BF16 ? Dtype::FP16 : job.precision.compute;
    curve = memories.find(c, job.model.name, dt);
    if (curve) {
      used = c;
      break;
    }
  }
  if (!curve) {
    std::string list;
    for (const auto& c : clusters) list += (list.empty() ? "" : ", ") + c;
    throw InfeasibleError(
        "cephalo: the published optimizer needs a profiled memory curve and "
        "model_memory.json has none for " +
        job.model.name + " in " + to_string(job.precision.compute) + " on the clusters " + list +
        "; use --strategy optimal");
  }
  in.compute_memory_gb = curve->compute_gib;
  in.parameters = curve->parameters;
  if (note) *note = "profiles: " + rows.str() + "; memory curve of cluster '" + used + "'";
  return in;
}

void predict(const Scenario& s, const costmodels::CostModels& models, PlanResult& res) {
  ScenarioModel sm;
  sm.scenario = &s;
  sm.devices = s.cluster.ranks();
  sm.models = &models;
  res.ranks.clear();
  double tau = 0, sigma = 0;
  const double params = costmodels::total_parameters(s.job.model);
  double opt = 0;
  for (const auto& r : res.plan.ranks) {
    const auto& d = sm.devices[r.rank];
    RankPrediction p;
    p.rank = r.rank;
    p.gpu = d.slot->spec.name;
    const auto mem = costmodels::predict_memory(s, res.plan, r.rank);
    p.memory_bytes = mem.total;
    p.usable_bytes = mem.usable;
    auto& table = sm.table(d);
    for (int size : r.micro_batch_sizes()) {
      p.compute_s += table.micro_batch(size);
      p.compute_per_layer_s += table.layer(size);
    }
    tau = std::max(tau, p.compute_s);
    sigma = std::max(sigma, r.state_share);
    opt = std::max(opt, models.compute->optimizer_time(d.slot->spec, s.job, params).seconds *
                            d.slot->slowdown * r.state_share);
    res.ranks.push_back(p);
  }
  // Communication as the plan will run it: even collectives, or its uneven variant.
  const int n = static_cast<int>(sm.devices.size());
  double comm = 0;
  if (n > 1) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    const auto& job = s.job;
    const int units = costmodels::num_units(job.model);
    for (int u = 0; u < units; ++u) {
      if (u > 1 && u < units - 1) continue;  // layers are identical: count unit 1 L times
      const double count = (u == 1) ? job.model.num_layers : 1;
      const double pu = costmodels::phase_parameters(job.model, u);  // tied head: + embedding
      if (pu <= 0) continue;
      costmodels::CollectiveRequest ag;
      ag.kind = costmodels::CollectiveKind::AllGather;
      ag.ranks = all;
      ag.uneven = res.plan.uneven_collective;
      costmodels::CollectiveRequest rs = ag;
      rs.kind = costmodels::CollectiveKind::ReduceScatter;
      for (const auto& r : res.plan.ranks) {
        ag.shard_bytes.push_back(r.state_share * pu * bytes_per_element(job.precision.compute));
        rs.shard_bytes.push_back(r.state_share * pu * bytes_per_element(job.precision.reduce));
      }
      comm += count * (2 * models.comm->collective(s.cluster, ag).seconds +
                       models.comm->collective(s.cluster, rs).seconds);
    }
  }
  res.predicted_comm_s = comm;
  res.predicted_optimizer_s = opt;
  res.predicted_iteration_s = std::max(comm, tau) + opt;
  res.plan.predicted = Json::object();
  res.plan.predicted["iteration_time_s"] = res.predicted_iteration_s;
  res.plan.predicted["samples_per_s"] = s.job.global_batch / res.predicted_iteration_s;
  res.plan.predicted["comm_s"] = comm;
  res.plan.predicted["optimizer_s"] = opt;
  res.plan.predicted["model"] = "planner: max(comm, max compute) + optimizer step";
}

namespace {

// How many staircase breakpoints of the optimal model are replayed on the simulator.
constexpr std::size_t kOptimalCandidates = 8;
// How many phase weights ρ (evenly spaced over the ranks' forward fractions) are solved.
constexpr int kPhaseWeights = 5;

PlanResult plan_optimal(const Scenario& s, const costmodels::CostModels& models,
                        const PlannerOptions& opt) {
  check_batch(s, "optimal");
  std::vector<Offload> modes;
  if (opt.offload == "none" || opt.offload == "auto") modes.push_back(Offload::None);
  if (opt.offload == "host" || opt.offload == "auto") modes.push_back(Offload::Host);
  if (modes.empty()) throw ValidationError("", "offload", opt.offload, "one of none, host, auto");
  PlanResult best;
  double best_score = 0;
  bool have = false;
  std::string first_error;
  for (Offload mode : modes) {
    OptimalSolution sol;
    PlanResult res;
    OptimalProblem problem = build_optimal_problem(s, models, mode, opt.max_micro_batch);
    // The simulator is the judge of memory: when it finds the plan over capacity (its
    // allocation order can peak above the memory model's sum), the device type that overflowed
    // loses the overshoot from its budget and the model is solved again.
    bool verified = false;
    double simulated = -1;
    std::string why;
    const auto devices = s.cluster.ranks();
    std::vector<OptimalSolution> candidates;
    for (int attempt = 0; attempt < 6 && !verified; ++attempt) {
      try {
        candidates = solve_optimal_candidates(problem);
        sol = candidates.front();
      } catch (const InfeasibleError& e) {
        why = e.what();
        break;
      }
      res.plan = empty_plan(s, "optimal");
      res.plan.offload = mode;
      for (std::size_t i = 0; i < sol.ranks.size(); ++i) {
        auto& r = res.plan.ranks[i];
        r.batch = sol.ranks[i].batch;
        r.micro_batch = sol.ranks[i].micro_batch;
        r.micro_batches = sol.ranks[i].micro_batches;
        r.state_share = sol.ranks[i].share;
      }
      if (!opt.verify_with_simulator) {
        verified = true;
        break;
      }
      const auto check = simulate_plan(s, models, res.plan);
      if (!check.oom) {
        verified = true;
        simulated = check.iteration_s;
        break;
      }
      std::map<std::string, double> overshoot;
      for (std::size_t i = 0; i < check.peak_bytes.size(); ++i) {
        const double over = check.peak_bytes[i] - check.capacity_bytes[i];
        if (over > 0) {
          auto& o = overshoot[devices[i].slot->spec.name];
          o = std::max(o, over);
        }
      }
      if (overshoot.empty()) overshoot[devices[check.oom_rank].slot->spec.name] = 0;
      for (std::size_t i = 0; i < problem.ranks.size(); ++i) {
        auto it = overshoot.find(devices[i].slot->spec.name);
        if (it != overshoot.end()) problem.ranks[i].usable_bytes -= it->second + kPlanHeadroomBytes;
      }
      why = "the simulator finds the plan out of memory (" + check.oom_detail + ")";
    }
    if (!verified) {
      if (first_error.empty())
        first_error = why.rfind("optimal:", 0) == 0
                          ? why
                          : "optimal (offload " + to_string(mode) + "): " + why;
      continue;
    }
    // Uneven shards: the model bounds them by the padded collective; run whichever variant
    // the comm model finds faster for the actual shares.
    auto pick_collective = [&](PlanResult& r) {
      if (r.plan.even_shares()) return;
      r.plan.uneven_collective = UnevenCollective::Grouped;
      predict(s, models, r);
      const double grouped = r.predicted_iteration_s;
      r.plan.uneven_collective = UnevenCollective::Padded;
      predict(s, models, r);
      const double padded = r.predicted_iteration_s;
      r.plan.uneven_collective =
          grouped <= padded ? UnevenCollective::Grouped : UnevenCollective::Padded;
    };
    pick_collective(res);
    predict(s, models, res);
    res.note = "model optimum " + format_seconds(sol.iteration_seconds) + " (" +
               std::to_string(sol.feasibility_checks) + " feasibility checks, " +
               std::to_string(sol.knapsack_runs) + " knapsack runs), offload " + to_string(mode);
    // Outside the model: the simulator synchronises every unit's forward and backward phases
    // separately (Σ of per-phase maxima ≥ the model's max of per-rank sums), so the model's
    // optimum is not always the fastest in simulation. The other breakpoints of the staircase
    // walk (each the model's best plan for its largest share) are replayed as well and the
    // fastest that fits is kept.
    if (opt.verify_with_simulator) {
      // The verified replay ran the plan's default (grouped) variant; replay again only if the
      // variant changed, and keep the verified one if the other does not fit.
      if (!res.plan.even_shares() && res.plan.uneven_collective != UnevenCollective::Grouped) {
        const auto own = simulate_plan(s, models, res.plan);
        if (own.oom) {
          res.plan.uneven_collective = UnevenCollective::Grouped;
          predict(s, models, res);
        } else {
          simulated = own.iteration_s;
        }
      }
      const std::size_t limit = std::min<std::size_t>(candidates.size(), kOptimalCandidates);
      for (std::size_t k = 1; k < limit; ++k) {
        PlanResult alt;
        alt.plan = res.plan;
        alt.plan.uneven_collective = UnevenCollective::Grouped;
        for (std::size_t i = 0; i < candidates[k].ranks.size(); ++i) {
          auto& r = alt.plan.ranks[i];
          r.batch = candidates[k].ranks[i].batch;
          r.micro_batch = candidates[k].ranks[i].micro_batch;
          r.micro_batches = candidates[k].ranks[i].micro_batches;
          r.state_share = candidates[k].ranks[i].share;
        }
        pick_collective(alt);
        const auto o = simulate_plan(s, models, alt.plan);
        if (o.oom || (simulated > 0 && o.iteration_s >= simulated)) continue;
        simulated = o.iteration_s;
        alt.note = "staircase breakpoint " + std::to_string(k) + " of " +
                   std::to_string(candidates.size()) + " (model " +
                   format_seconds(candidates[k].iteration_seconds) + ", optimum " +
                   format_seconds(sol.iteration_seconds) + "), offload " + to_string(mode);
        res = std::move(alt);
        predict(s, models, res);
      }
    }
    // Phase-weighted candidates: the simulator waits, unit by unit, for the slowest rank of
    // the forward phase and again of the backward phase, i.e. about max_i F_i + max_i K_i
    // rather than the model's max_i (F_i + K_i). Solving the model exactly with a
    // configuration's time max(F/ρ, K/(1 − ρ)) bounds F by ρτ and K by (1 − ρ)τ; the phase
    // optimum is the best of these over ρ, so a few ρ between the ranks' forward fractions give
    // candidates. The one with the smallest phase-synchronised time
    // max(C(σ), max F + max K) + O·σ is replayed, and kept if it simulates faster.
    if (opt.verify_with_simulator && !candidates.empty()) {
      auto phase_time = [&](const Plan& plan) {
        double f_max = 0, k_max = 0, sigma = 0;
        for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
          const auto& pr = plan.ranks[i];
          const auto& rm = problem.ranks[i];
          const double f = optimal_forward_time(rm, pr.batch, pr.micro_batch);
          f_max = std::max(f_max, f);
          k_max = std::max(k_max, optimal_compute_time(rm, pr.batch, pr.micro_batch) - f);
          sigma = std::max(sigma, pr.state_share);
        }
        const double c = problem.comm_seconds ? problem.comm_seconds(sigma) : 0.0;
        return std::max(c, f_max + k_max) + problem.optimizer_seconds * sigma;
      };
      double lo = 1, hi = 0;
      for (const auto& rm : problem.ranks) {
        if (rm.micro_batch_time.size() < 2 || rm.micro_batch_time[1] <= 0) continue;
        const double phi = rm.forward_time[1] / rm.micro_batch_time[1];
        lo = std::min(lo, phi);
        hi = std::max(hi, phi);
      }
      double best_phase = phase_time(res.plan);
      std::optional<PlanResult> pick;
      const int steps = hi - lo > 1e-9 ? kPhaseWeights : 1;
      for (int k = 0; k < steps && lo <= hi; ++k) {
        const double rho = steps == 1 ? lo : lo + (hi - lo) * k / (steps - 1);
        if (!(rho > 0 && rho < 1)) continue;
        OptimalProblem weighted = problem;
        for (auto& rm : weighted.ranks) rm.phase_weight = rho;
        OptimalSolution ws;
        try {
          ws = solve_optimal(weighted);
        } catch (const InfeasibleError&) {
          continue;
        }
        PlanResult alt;
        alt.plan = res.plan;
        alt.plan.uneven_collective = UnevenCollective::Grouped;
        for (std::size_t i = 0; i < ws.ranks.size(); ++i) {
          auto& r = alt.plan.ranks[i];
          r.batch = ws.ranks[i].batch;
          r.micro_batch = ws.ranks[i].micro_batch;
          r.micro_batches = ws.ranks[i].micro_batches;
          r.state_share = ws.ranks[i].share;
        }
        const double pt = phase_time(alt.plan);
        if (pt < best_phase) {
          best_phase = pt;
          alt.note = "phase weight " + fixed(rho, 3) + " (phase-synchronised model " +
                     format_seconds(pt) + "), offload " + to_string(mode);
          pick = std::move(alt);
        }
      }
      if (pick) {
        pick_collective(*pick);
        const auto o = simulate_plan(s, models, pick->plan);
        if (!o.oom && (simulated <= 0 || o.iteration_s < simulated)) {
          simulated = o.iteration_s;
          res = std::move(*pick);
          predict(s, models, res);
        }
      }
    }
    // The offload mode is a discrete choice outside the model (host copies share the PCIe
    // links with the collectives in the simulator): keep the mode that simulates faster.
    const double score = simulated > 0 ? simulated : res.predicted_iteration_s;
    if (!have || score < best_score) {
      best = std::move(res);
      best_score = score;
      have = true;
    }
  }
  if (!have) throw InfeasibleError(first_error);
  return best;
}

PlanResult plan_cephalo(const Scenario& s, const PlannerOptions& opt) {
  PlanResult res;
  CephaloOptions co;
  co.share_objective = opt.cephalo_share;
  co.published_share_memory = opt.cephalo_published_share_memory;
  const auto in = build_cephalo_inputs(s, opt, &res.note);
  const auto sol = solve_cephalo(in, co);
  res.plan = empty_plan(s, "cephalo");
  for (std::size_t i = 0; i < sol.batch.size(); ++i) {
    auto& r = res.plan.ranks[i];
    r.batch = sol.batch[i];
    r.micro_batch = sol.micro_batch[i];
    r.micro_batches = sol.micro_batches[i];
    r.state_share = sol.shares[i];
  }
  // Normalise shares that are equal up to rounding to exactly equal (even collectives).
  bool equal = true;
  for (const auto& r : res.plan.ranks)
    equal = equal && std::abs(r.state_share - res.plan.ranks[0].state_share) < 1e-12;
  if (equal)
    for (auto& r : res.plan.ranks) r.state_share = 1.0 / res.plan.ranks.size();
  res.note += "; published model: " + fixed(sol.iteration_layer_ms, 1) + " ms per layer, memory " +
              fixed(sol.memory_gb, 2) + " / " + fixed(sol.memory_cap_gb, 2) + " GB";
  return res;
}

}  // namespace

PlanResult make_plan(const Scenario& s, const PlannerOptions& opt) {
  const auto start = Clock::now();
  const auto& names = strategy_names();
  if (std::find(names.begin(), names.end(), opt.strategy) == names.end())
    throw NotFoundError("strategy", opt.strategy, names);
  const auto models = costmodels::make_cost_models(s, opt.compute_source);
  ScenarioModel sm;
  sm.scenario = &s;
  sm.devices = s.cluster.ranks();
  sm.models = &models;
  PlanResult res;
  if (opt.strategy == "even") {
    res.plan = plan_even(s);
  } else if (opt.strategy == "proportional") {
    res.plan = plan_proportional(s, sm);
  } else if (opt.strategy == "cephalo") {
    res = plan_cephalo(s, opt);
  } else if (opt.strategy == "optimal") {
    res = plan_optimal(s, models, opt);
  } else {
    res = search_plan(s, models, opt);
  }
  predict(s, models, res);
  res.planning_s = seconds_since(start);
  return res;
}

std::string render_table(const PlanResult& res) {
  TextTable t({"rank", "gpu", "batch", "micro-batches", "state share", "memory / usable",
               "compute/layer", "compute"});
  for (std::size_t i = 0; i < res.plan.ranks.size(); ++i) {
    const auto& r = res.plan.ranks[i];
    const auto& p = res.ranks[i];
    t.add_row({std::to_string(r.rank), p.gpu, std::to_string(r.batch),
               std::to_string(r.micro_batch) + " x " + std::to_string(r.micro_batches),
               fixed(r.state_share, 4),
               format_bytes(p.memory_bytes) + " / " + format_bytes(p.usable_bytes) +
                   (p.memory_bytes > p.usable_bytes ? " OOM" : ""),
               format_seconds(p.compute_per_layer_s), format_seconds(p.compute_s)});
  }
  std::ostringstream out;
  out << t.render();
  out << "strategy " << res.plan.strategy << ": predicted iteration "
      << format_seconds(res.predicted_iteration_s) << " ("
      << fixed(res.plan.global_batch() / res.predicted_iteration_s, 2) << " samples/s; comm "
      << format_seconds(res.predicted_comm_s) << ", optimizer step "
      << format_seconds(res.predicted_optimizer_s) << "), offload " << to_string(res.plan.offload)
      << (res.plan.even_shares()
              ? ", even shares"
              : ", uneven shares (" + to_string(res.plan.uneven_collective) + ")");
  if (res.simulated_iteration_s)
    out << "\nsimulated iteration " << format_seconds(*res.simulated_iteration_s) << " ("
        << fixed(res.plan.global_batch() / *res.simulated_iteration_s, 2) << " samples/s) best of "
        << res.simulated_candidates << " simulated candidates";
  out << "\nplanned in " << format_seconds(res.planning_s);
  if (!res.note.empty()) out << "; " << res.note;
  out << "\n";
  return out.str();
}

Json to_json(const PlanResult& res) {
  Json j;
  j["plan"] = cephalo::to_json(res.plan);
  Json ranks = Json::array();
  for (const auto& p : res.ranks)
    ranks.push_back({{"rank", p.rank},
                     {"gpu", p.gpu},
                     {"memory_bytes", p.memory_bytes},
                     {"usable_bytes", p.usable_bytes},
                     {"compute_s", p.compute_s},
                     {"compute_per_layer_s", p.compute_per_layer_s}});
  j["ranks"] = ranks;
  j["predicted_iteration_s"] = res.predicted_iteration_s;
  j["predicted_samples_per_s"] = res.plan.global_batch() / res.predicted_iteration_s;
  j["predicted_comm_s"] = res.predicted_comm_s;
  j["predicted_optimizer_s"] = res.predicted_optimizer_s;
  j["planning_s"] = res.planning_s;
  j["simulated_iteration_s"] =
      res.simulated_iteration_s ? Json(*res.simulated_iteration_s) : Json(nullptr);
  j["simulated_candidates"] = res.simulated_candidates;
  j["fits"] = res.fits();
  j["note"] = res.note;
  return j;
}

}  // namespace cephalo::planner

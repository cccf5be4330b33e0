// The `optimal` model of a scenario (OptimalProblem, optimal_solver.hpp) read off the cost
// models: per-rank compute and memory tables, the optimizer step, the padded communication.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/planner/strategies.hpp"
#include "plan_support.hpp"
#include "strategy_inputs.hpp"

namespace cephalo::planner {

using namespace detail;

OptimalProblem build_optimal_problem(const Scenario& s, const costmodels::CostModels& models,
                                     Offload offload, int max_micro_batch,
                                     const ActivationCheckpointing& checkpointing,
                                     Accumulation accumulation, int fixed_micro_batch) {
  ScenarioModel sm(s, models, checkpointing);
  max_micro_batch = std::max(max_micro_batch, fixed_micro_batch);
  const int n = static_cast<int>(sm.devices.size());
  const int B = s.job.global_batch;
  OptimalProblem p;
  p.global_batch = B;
  // Memory shape (the same on every rank of one runtime but for the usable capacity), under
  // the plan's checkpointing (layers not checkpointed keep their activations for every
  // sample). A CPU rank holds no CUDA / NCCL reserve and no allocator slack
  // (costmodels::runs_gpu_runtime), so its shape is its own; clusters have one or both.
  const Job& job = s.job;
  struct Shape {
    double state = 0, per_sample = 0;
    std::vector<double> working;  // [m] fixed + w(m), index 0 unused
  };
  // Ranks are read by slot kind (RankDevice::slot_kind): what depends on the slot alone is read
  // from the first rank of each kind (each rank's own slot is one of 100k places at 100k ranks,
  // and this problem is built a dozen times per planning call).
  std::vector<const RankDevice*> first_of_kind;
  for (const auto& d : sm.devices) {
    const auto k = static_cast<std::size_t>(d.slot_kind);
    if (k >= first_of_kind.size()) first_of_kind.resize(k + 1, nullptr);
    if (!first_of_kind[k]) first_of_kind[k] = &d;
  }
  double largest_usable = 0;
  for (const RankDevice* d : first_of_kind)
    if (d) largest_usable = std::max(largest_usable, plannable_bytes(d->slot->spec));
  const int limit = std::max(1, std::min({max_micro_batch, B - (n - 1)}));
  auto shape_of = [&](bool gpu_runtime) {
    auto inputs = [&](double share, std::vector<int> sizes) {
      auto in = memory_inputs(gpu_runtime, n, offload, share, std::move(sizes));
      in.activation_checkpointing = checkpointing;
      in.accumulation = accumulation;
      return in;
    };
    Shape sh;
    const double at1 = terms_total(job, inputs(0.0, {1}));
    const double at11 = terms_total(job, inputs(0.0, {1, 1}));
    sh.state = terms_total(job, inputs(1.0, {1})) - at1;
    sh.per_sample = at11 - at1;
    // Working set by micro-batch, up to what fits the largest device or the per-rank batch
    // bound.
    sh.working.assign(1, 0.0);
    for (int m = 1; m <= limit; ++m) {
      const double base = terms_total(job, inputs(0.0, {m}));
      if (m > 1 && base > largest_usable) break;
      sh.working.push_back(base - sh.per_sample * m);
    }
    return sh;
  };
  std::map<bool, Shape> shapes;
  for (const RankDevice* d : first_of_kind) {
    if (!d) continue;
    const bool gpu = costmodels::runs_gpu_runtime(d->slot->spec);
    if (!shapes.count(gpu)) shapes.emplace(gpu, shape_of(gpu));
  }
  // S is one number for the solver: the state's bytes differ between the runtimes only by the
  // allocator slack on the share-sized collective buffers, so a mixed cluster takes the larger
  // (a CPU rank's share room is then a few bytes conservative); exact on one runtime.
  for (const auto& [gpu, sh] : shapes) p.state_bytes = std::max(p.state_bytes, sh.state);
  // Communication with shards padded to σ: every unit is all-gathered in forward and again in
  // backward and reduce-scattered, once per iteration under layered accumulation; standard
  // repeats all three every round (micro-batch), no_sync the gathers (traces' add_phases).
  double round_comm = 0;  // what one round's collectives cost with even shares
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
    auto raw = [=](double sigma, bool reduce = true) {
      auto it = reduce ? cache->find(sigma) : cache->end();
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
        ag.training_state = true;
        ag.ranks = all;
        ag.uneven = UnevenCollective::Padded;
        ag.shard_bytes = shards(params_u * compute_bytes);
        costmodels::CollectiveRequest rs = ag;
        rs.kind = costmodels::CollectiveKind::ReduceScatter;
        rs.shard_bytes = shards(params_u * reduce_bytes);
        total += count * (2 * comm->collective(*cluster, ag).seconds +
                          (reduce ? comm->collective(*cluster, rs).seconds : 0.0));
      }
      if (reduce) cache->emplace(sigma, total);
      return total;
    };
    if (accumulation != Accumulation::Layered)
      round_comm = raw(1.0 / n, accumulation == Accumulation::Standard);
    // C must be nondecreasing in σ (the solver relies on it): never below the even cost.
    p.comm_seconds = [=](double sigma) {
      const double even = raw(1.0 / n, true);
      return sigma > 1.0 / n ? std::max(even, raw(sigma, true)) : even;
    };
  }
  // Host offload: boundary activations leave over the rank's PCIe link while it computes; a
  // micro-batch takes the longer of its compute and its copies (d2h in forward, h2d back).
  const double boundary = costmodels::boundary_activation_bytes(job.model, job.sequence_length, 1,
                                                                job.precision.compute);
  // One model per class of identical ranks (device type, slowdown): the tables depend on
  // nothing else, and a 100k-GPU cluster then holds a few of them, not 100k.
  std::map<std::pair<std::string, double>, int> class_of;
  for (const auto& d : sm.devices) {
    // A rank on a slot equal to the previous rank's is in its class (no key, no lookup).
    if (d.rank > 0 && sm.devices[static_cast<std::size_t>(d.rank - 1)].slot_kind == d.slot_kind) {
      p.rank_class.push_back(p.rank_class.back());
      continue;
    }
    const auto key = std::make_pair(d.slot->spec.name, d.slot->slowdown);
    auto [it, fresh] = class_of.emplace(key, static_cast<int>(p.ranks.size()));
    p.rank_class.push_back(it->second);
    if (!fresh) continue;
    const Shape& shape = shapes.at(costmodels::runs_gpu_runtime(d.slot->spec));
    const int mmax = static_cast<int>(shape.working.size()) - 1;
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
      // A round's collectives overlap its compute; the round lasts the longer of the two (the
      // model's C(σ) below then covers one round, a lower bound of the iteration's).
      t = std::max(t, round_comm);
      r.micro_batch_time[m] = t;
      r.forward_time[m] = compute > 0 ? table.forward(m) * t / compute : 0.0;
      r.working_bytes[m] = shape.working[m];
    }
    r.fixed_bytes = 0;  // folded into working_bytes
    r.bytes_per_sample = shape.per_sample;
    r.usable_bytes = plannable_bytes(d.slot->spec);
    r.fixed_micro_batch = fixed_micro_batch;
    p.ranks.push_back(std::move(r));
  }
  // The optimizer step as the simulator times it: every rank steps over its own shard once the
  // last reduce-scatter is done, so the iteration ends with max_i step_i(s_i). Per class the
  // step over the whole state less its launch cost (O_i); the launch cost O_0 once.
  const double params = costmodels::total_parameters(job.model);
  std::vector<char> priced(p.ranks.size(), 0);
  for (std::size_t i = 0; i < sm.devices.size(); ++i) {
    const auto& d = sm.devices[i];
    const auto c = static_cast<std::size_t>(p.rank_class[i]);
    if (priced[c]) continue;
    priced[c] = 1;
    const double launch =
        models.compute->optimizer_time(d.slot->spec, job, 0.0).seconds * d.slot->slowdown;
    const double whole =
        models.compute->optimizer_time(d.slot->spec, job, params).seconds * d.slot->slowdown;
    p.ranks[c].optimizer_seconds = std::max(0.0, whole - launch);
    p.optimizer_fixed_seconds = std::max(p.optimizer_fixed_seconds, launch);
    p.optimizer_seconds = std::max(p.optimizer_seconds, whole);
  }
  return p;
}

}  // namespace cephalo::planner

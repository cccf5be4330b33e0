#include "cephalo/costmodels/memory_model.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "memory_terms_tail.hpp"

namespace cephalo::costmodels {

double MemoryBreakdown::term(const std::string& name) const {
  for (const auto& t : terms)
    if (t.name == name) return t.bytes;
  return 0;
}

namespace {

// The largest set of parameters one phase gathers (a tied head brings the embedding).
double largest_phase_parameters(const ModelSpec& m) {
  double best = 0;
  for (int u = 0; u < num_units(m); ++u) best = std::max(best, phase_parameters(m, u));
  return best;
}

}  // namespace

namespace {

// The terms of one moment of the schedule; all_gradients: every unit's unsharded gradient is
// alive (no_sync's last micro-batch).
std::vector<MemoryTerm> schedule_terms(const Job& job, const RankMemoryInputs& in,
                                       const MemoryConstants& k, bool all_gradients) {
  if (in.micro_batch_sizes.empty())
    throw ValidationError("", "micro_batch_sizes", "[]", "at least one micro-batch");
  for (int mb : in.micro_batch_sizes)
    if (mb <= 0)
      throw ValidationError("", "micro_batch_sizes", std::to_string(mb), "micro-batch sizes >= 1");
  if (!(in.state_share >= 0 && in.state_share <= 1))
    throw ValidationError("", "state_share", std::to_string(in.state_share), "a share in [0, 1]");
  const ModelSpec& m = job.model;
  const Precision& p = job.precision;
  const double params = total_parameters(m);
  const double batch = std::accumulate(in.micro_batch_sizes.begin(), in.micro_batch_sizes.end(), 0);
  const int largest_mb =
      *std::max_element(in.micro_batch_sizes.begin(), in.micro_batch_sizes.end());
  const double boundary_per_sample =
      boundary_activation_bytes(m, job.sequence_length, 1, p.compute);
  const double boundaries = m.num_layers + 2.0;  // L+1 unit inputs + the activation gradient

  std::vector<MemoryTerm> t;
  t.push_back({"training_state", in.state_share * params * schedule::state_bytes_per_parameter(p)});
  const double unit = largest_phase_parameters(m);
  // The computing phase's gathered parameters and those its framework prefetches ahead of it
  // (schedule::gather_gates), over one round's phases.
  const int live = schedule::most_live_gathers(
      schedule::gather_rules(job.implementation.framework, in.prefetch), unit, 2 * num_units(m));
  t.push_back({"gathered_params", k.unit_scale * unit * bytes_per_element(p.compute) * live});
  double gradient_params = unit;
  if (all_gradients) {
    gradient_params = 0;
    for (int u = 0; u < num_units(m); ++u) gradient_params += phase_parameters(m, u);
  }
  t.push_back({"unit_gradient", k.unit_scale * gradient_params * bytes_per_element(p.reduce)});
  // Transient shards of the collectives: the reduce-scatter's received shard (reduce dtype),
  // and, when the master weights are not kept in the compute dtype, the gather's send shard
  // cast to it.
  const double cast = bytes_per_element(p.compute) != bytes_per_element(p.params)
                          ? bytes_per_element(p.compute)
                          : 0.0;
  t.push_back({"comm_buffers", in.state_share * unit * (bytes_per_element(p.reduce) + cast)});
  double activations = 0;
  if (in.offload == Offload::Host) {
    // The current layer's inputs, outputs and gradients for the micro-batches on the device.
    double on_device = in.accumulation == Accumulation::Layered ? batch : largest_mb;
    activations = 3.0 * on_device * boundary_per_sample;
  } else if (in.accumulation == Accumulation::Layered) {
    activations = boundaries * batch * boundary_per_sample;
  } else {
    activations = boundaries * largest_mb * boundary_per_sample;
  }
  t.push_back({"activations", k.activation_scale * activations});
  // Layers that are not checkpointed keep their forward's saved activations until their
  // backward: for every micro-batch under layered accumulation (all of them run a layer before
  // the next layer starts), for one micro-batch at a time otherwise.
  const ActivationCheckpointing& ck = in.activation_checkpointing;
  // Under selective recompute a layer keeps all of them but the attention core's, which its
  // Recompute op allocates again right before the backward (one micro-batch at a time).
  const bool core_recomputed = ck.recomputes_attention_core();
  auto kept_one = [&](int layer, int mb) {
    return unit_working_bytes(m, layer, job.sequence_length, mb, p.compute, job.implementation) -
           (core_recomputed ? attention_core_kept_bytes(m, job.sequence_length, mb) : 0.0);
  };
  auto kept_of = [&](int layer) {
    if (schedule::keeps_only_input(ck, layer)) return 0.0;
    if (in.accumulation != Accumulation::Layered) return kept_one(layer, largest_mb);
    double b = 0;
    for (int mb : in.micro_batch_sizes) b += kept_one(layer, mb);
    return b;
  };
  double kept = 0;
  for (int l = 1; l <= m.num_layers; ++l) kept += kept_of(l);
  // Listed only when some layer keeps its activations (the default schedule's terms, and every
  // table printing them, stay as they were).
  if (kept > 0) t.push_back({"kept_activations", k.activation_scale * kept});
  // The working set on top of those at the worst moment of the backward, which runs from the
  // head down: at unit u the kept activations of the layers below u are still alive, and u
  // adds its own working set (a kept layer's is already counted) and its input-gradient
  // temporaries. With every layer checkpointed this is the largest unit's working set.
  double working = 0, below = kept;
  for (int u = num_units(m) - 1; u >= 0; --u) {
    const bool layer = u >= 1 && u <= m.num_layers;
    const double own = layer ? kept_of(u) : 0.0;
    below -= own;
    const double unit_bytes =
        own > 0
            ? own + (core_recomputed ? attention_core_kept_bytes(m, job.sequence_length, largest_mb)
                                     : 0.0)
            : unit_working_bytes(m, u, job.sequence_length, largest_mb, p.compute,
                                 job.implementation);
    const double extra =
        unit_bytes +
        unit_backward_transient_bytes(m, u, job.sequence_length, largest_mb, p.compute) +
        (in.gpu_runtime
             ? eager_attention_bytes(m, u, job.sequence_length, largest_mb, job.implementation)
             : 0.0);
    working = std::max(working, (below > 0 ? below : 0.0) + extra);
  }
  t.push_back({"working_set", k.working_scale * (working - kept)});
  detail::append_runtime_terms(t, in.gpu_runtime, in.world_size, k);
  return t;
}

}  // namespace

std::vector<MemoryTerm> memory_terms(const Job& job, const RankMemoryInputs& in,
                                     const MemoryConstants& k) {
  if (in.accumulation != Accumulation::NoSync || in.micro_batch_sizes.size() <= 1) {
    RankMemoryInputs plain = in;
    if (plain.accumulation == Accumulation::NoSync) plain.accumulation = Accumulation::Standard;
    return schedule_terms(job, plain, k, false);
  }
  // no_sync runs standard's micro-batch-major rounds, but every unit's unsharded gradient
  // (each phase's buffer: a tied head's brings the embedding's again) lives from its first
  // backward to the last micro-batch's reduce-scatter. Its peak is the larger of the first
  // round's (standard: one unit's gradient at the largest micro-batch) and the last round's
  // (every gradient, at the last micro-batch's activations).
  RankMemoryInputs first = in, last = in;
  first.accumulation = last.accumulation = Accumulation::Standard;
  last.micro_batch_sizes = {in.micro_batch_sizes.back()};
  auto a = schedule_terms(job, first, k, false), b = schedule_terms(job, last, k, true);
  auto total = [](const std::vector<MemoryTerm>& t) {
    double s = 0;
    for (const auto& x : t) s += x.bytes;
    return s;
  };
  return total(a) >= total(b) ? a : b;
}

// A view's comparison with the literal is inlined (the string's went through an out-of-line
// compare and memcmp): the planner asks this of every rank's slot on every candidate.
bool runs_gpu_runtime(const DeviceSpec& spec) { return std::string_view(spec.kind) != "cpu"; }

double allocator_slack_fraction(bool gpu_runtime, const MemoryConstants& k) {
  return gpu_runtime ? k.fragmentation : 0.0;
}

double runtime_reserve_bytes(bool gpu_runtime, int world_size, const MemoryConstants& k) {
  if (!gpu_runtime) return 0;
  return k.cuda_context + (world_size > 1 ? k.nccl_reserve : 0.0);
}

MemoryBreakdown predict_memory(const Scenario& scenario, const Plan& plan, int rank) {
  return predict_memory(scenario, plan, rank, memory_constants());
}

MemoryBreakdown predict_memory(const Scenario& scenario, const Plan& plan, int rank,
                               const MemoryConstants& k) {
  // The plan's ranks are normally in rank order: look there first (constant time, so a caller
  // predicting every rank of a 100k-GPU plan is not quadratic).
  auto it = rank >= 0 && rank < static_cast<int>(plan.ranks.size()) &&
                    plan.ranks[static_cast<std::size_t>(rank)].rank == rank
                ? plan.ranks.begin() + rank
                : std::find_if(plan.ranks.begin(), plan.ranks.end(),
                               [&](const PlanRank& r) { return r.rank == rank; });
  if (it == plan.ranks.end())
    throw ValidationError("", "ranks", std::to_string(rank), "a rank present in the plan");
  // The rank's device without listing every rank of the cluster.
  const DeviceSlot* slot = nullptr;
  int world_size = 0;
  for (const auto& node : scenario.cluster.nodes) {
    const int here = static_cast<int>(node.devices.size());
    if (!slot && rank >= world_size && rank < world_size + here)
      slot = &node.devices[static_cast<std::size_t>(rank - world_size)];
    world_size += here;
  }
  if (!slot)
    throw ValidationError("", "ranks[" + std::to_string(rank) + "]", std::to_string(rank),
                          "a rank of the scenario's cluster");
  if (plan.has_split()) {
    MemoryBreakdown b;
    b.rank = rank;
    b.gpu = slot->spec.name;
    b.terms = split_memory_terms(scenario, plan, rank, k);
    for (const auto& term : b.terms) b.total += term.bytes;
    b.capacity = slot->spec.memory_bytes;
    b.usable = slot->spec.memory_bytes * k.usable_fraction;
    return b;
  }
  return predict_memory(scenario.job, plan, *it, slot->spec, world_size, k);
}

MemoryBreakdown predict_memory(const Job& job, const Plan& plan, const PlanRank& rank,
                               const DeviceSpec& spec, int world_size, const MemoryConstants& k) {
  // A split's ranks differ by stage, which the scenario's cluster places (the overload above).
  if (plan.has_split())
    throw std::logic_error("predict_memory(job, ...) of a split plan: pass the scenario");
  RankMemoryInputs in;
  in.state_share = rank.state_share;
  in.micro_batch_sizes = rank.micro_batch_sizes();
  in.accumulation = plan.accumulation;
  in.activation_checkpointing = plan.activation_checkpointing;
  in.offload = plan.offload;
  in.prefetch = plan.prefetch;
  in.world_size = world_size;
  in.gpu_runtime = runs_gpu_runtime(spec);
  MemoryBreakdown b;
  b.rank = rank.rank;
  b.gpu = spec.name;
  if (rank.batch == 0) in.micro_batch_sizes = {1};  // a rank with no samples still gathers units
  b.terms = memory_terms(job, in, k);
  if (rank.batch == 0)
    for (auto& term : b.terms)
      if (term.name == "activations" || term.name == "working_set" ||
          term.name == "kept_activations")
        term.bytes = 0;
  for (const auto& term : b.terms) b.total += term.bytes;
  b.capacity = spec.memory_bytes;
  b.usable = spec.memory_bytes * k.usable_fraction;
  return b;
}

double compute_memory_bytes(const Job& job, int micro_batch, const MemoryConstants& constants) {
  if (micro_batch <= 0)
    throw ValidationError("", "micro_batch", std::to_string(micro_batch), "a micro-batch >= 1");
  RankMemoryInputs in;
  in.micro_batch_sizes = {micro_batch};
  in.prefetch = true;
  // Compute memory is what comes on top of the sharded state: nothing that scales with the
  // rank's share (the training state, the collectives' shards) belongs to it.
  in.state_share = 0;
  double total = 0;
  for (const auto& t : memory_terms(job, in, constants))
    if (t.name != "training_state" && t.name != "cuda_context" && t.name != "nccl_reserve")
      total += t.bytes;
  return total;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The job a published curve was measured with: sequence 512, the curve's dtype for compute,
// fp32 master weights and reduction.
Job curve_job(const MemoryCurve& c, int seq) {
  Job job;
  job.model = ModelCatalog::builtin().get(c.model);
  job.sequence_length = seq;
  job.precision.compute = c.dtype;
  job.precision.params = Dtype::FP32;
  job.precision.reduce = Dtype::FP32;
  if (job.model.family == "vit") job.model.image_size = 384;  // as profiled (calibrated.hpp)
  return job;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

MemoryConstants fit_memory_constants(const MemoryProfiles& profiles,
                                     const std::string& exclude_model) {
  // Features of each point with unit scales and no fragmentation: the fit absorbs it.
  MemoryConstants unit;
  unit.fragmentation = 0;
  std::vector<std::array<double, 4>> x;
  std::vector<double> y;
  for (const auto& c : profiles.curves()) {
    if (c.model == exclude_model) continue;
    Job job = curve_job(c, 512);
    for (std::size_t i = 0; i < c.compute_gib.size(); ++i) {
      RankMemoryInputs in;
      in.micro_batch_sizes = {static_cast<int>(i) + 1};
      std::array<double, 4> f{0, 0, 0, 1.0 * kGiB};
      for (const auto& t : memory_terms(job, in, unit)) {
        if (t.name == "gathered_params" || t.name == "unit_gradient") f[0] += t.bytes;
        if (t.name == "activations") f[1] += t.bytes;
        if (t.name == "working_set") f[2] += t.bytes;
      }
      x.push_back(f);
      y.push_back(c.compute_gib[i] * kGiB);
    }
  }
  MemoryConstants k;
  k.fragmentation = 0;
  if (x.size() < 8) return k;
  Eigen::MatrixXd A(static_cast<Eigen::Index>(x.size()), 4);
  Eigen::VectorXd b(static_cast<Eigen::Index>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (std::size_t j = 0; j < 4; ++j)
      A(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = x[i][j] / y[i];
    b(static_cast<Eigen::Index>(i)) = 1;
  }
  Eigen::Vector4d theta = A.colPivHouseholderQr().solve(b);
  k.unit_scale = std::max(0.0, theta(0));
  k.activation_scale = std::max(0.0, theta(1));
  k.working_scale = std::max(0.0, theta(2));
  k.framework_buffers = std::max(0.0, theta(3)) * kGiB;
  k.source = "fitted to " + std::to_string(x.size()) + " published compute-memory points";
  return k;
}

const MemoryConstants& memory_constants() {
  static const MemoryConstants k;
  return k;
}

MemoryValidation validate_memory_model(const MemoryProfiles& profiles, int seq) {
  MemoryValidation v;
  const MemoryConstants all = fit_memory_constants(profiles);
  MemoryConstants closed;  // defaults: the closed forms as written
  std::map<std::string, MemoryConstants> without;
  std::vector<double> apes, closed_apes, in_sample_apes;
  for (const auto& c : profiles.curves()) {
    if (!without.count(c.model)) without[c.model] = fit_memory_constants(profiles, c.model);
    Job job = curve_job(c, seq);
    for (std::size_t i = 0; i < c.compute_gib.size(); ++i) {
      MemoryValidationRow r;
      r.cluster = c.cluster;
      r.model = c.model;
      r.file_model = c.file_model;
      r.dtype = c.dtype;
      r.micro_batch = static_cast<int>(i) + 1;
      r.published_gib = c.compute_gib[i];
      r.predicted_gib = compute_memory_bytes(job, r.micro_batch, without[c.model]) / kGiB;
      r.closed_form_gib = compute_memory_bytes(job, r.micro_batch, closed) / kGiB;
      r.in_sample_gib = compute_memory_bytes(job, r.micro_batch, all) / kGiB;
      apes.push_back(r.ape());
      closed_apes.push_back(100 * std::abs(r.closed_form_gib - r.published_gib) / r.published_gib);
      in_sample_apes.push_back(100 * std::abs(r.in_sample_gib - r.published_gib) / r.published_gib);
      v.rows.push_back(r);
    }
  }
  v.median_ape = median_of(apes);
  v.mean_ape = apes.empty() ? 0 : std::accumulate(apes.begin(), apes.end(), 0.0) / apes.size();
  v.closed_form_median_ape = median_of(closed_apes);
  v.in_sample_median_ape = median_of(in_sample_apes);
  return v;
}

}  // namespace cephalo::costmodels

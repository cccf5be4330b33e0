#include "cephalo/planner/split_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

namespace cephalo::planner {
namespace {

using costmodels::CollectiveKind;
using costmodels::CollectiveRequest;
using costmodels::ComputePhase;

double features_time(const costmodels::OpFeatures& x, const costmodels::OpFeatures& theta) {
  double t = 0;
  for (std::size_t i = 0; i < x.size(); ++i) t += x[i] * theta[i];
  return t;
}

CollectiveRequest even_request(CollectiveKind kind, std::vector<int> ranks, double bytes) {
  CollectiveRequest r;
  r.kind = kind;
  const double n = static_cast<double>(ranks.size());
  r.shard_bytes.assign(ranks.size(), bytes / n);
  r.ranks = std::move(ranks);
  return r;
}

// One point-to-point transfer of `bytes` from rank a to rank b (a two-rank broadcast: the
// comm model's latency plus bytes over the link between them).
CollectiveRequest p2p_request(int a, int b, double bytes) {
  CollectiveRequest r;
  r.kind = CollectiveKind::Broadcast;
  r.ranks = {a, b};
  r.shard_bytes = {bytes, 0};
  return r;
}

std::string gib(double bytes) { return format_bytes(bytes); }

// Transfers a boundary runs at once in 1F1B's steady state: an activation forward and a
// gradient backward (the simulator holds both directions of a NIC for either).
constexpr int kP2pDirections = 2;

Json memory_terms_json(const std::vector<costmodels::MemoryTerm>& terms) {
  Json j = Json::object();
  for (const auto& t : terms) j[t.name] = t.bytes;
  return j;
}

}  // namespace

double backward_work_ratio(const DeviceSpec& spec, const Job& job, int unit, int micro_batch) {
  const auto ops = costmodels::unit_ops(job.model, unit, job.sequence_length, micro_batch,
                                        job.precision.compute, job.implementation);
  const auto x = costmodels::ops_features(spec, ops, job.precision.compute);
  const auto theta = costmodels::Efficiency{}.coefficients();
  const double f = features_time(x.forward, theta);
  return f > 0 ? features_time(x.backward, theta) / f : 0;
}

// What SplitEstimator remembers between splits: every value here is the result of a call the
// estimate makes, keyed by all of that call's arguments that can change between splits of one
// scenario, so a remembered value is the value the call returns.
struct SplitEstimator::Impl {
  const Scenario& scenario;
  const costmodels::CostModels& models;

  // A unit's forward, backward and recompute per micro-batch on one GPU type. The calibrated
  // model's backward is fitted on profiled layers whose backward also carries a fixed per-call
  // cost (on the A100-40GB profiles: backward = 2.2-8 ms + 1.95-2.08 x forward, the constant
  // growing with the layer's parameters, the engine's per-parameter gradient work); linear in
  // its token features, that cost turns into a 2.4x ratio at the 4-16k tokens per micro-batch
  // of a Megatron run. Megatron's backward is the forward's GEMMs again as dgrad and wgrad (and
  // its fused kernels' backward), so it is priced at the forward's rate: the forward times the
  // op list's backward / forward work. A profile's measured backward is kept.
  struct UnitTimes {
    double forward = 0, backward = 0, recompute = 0;
    bool known = false;
  };
  struct DeviceKey {
    std::string gpu;
    int micro_batch = 0;
    bool backward_at_forward_rate = true;
    bool operator<(const DeviceKey& o) const {
      return std::tie(gpu, micro_batch, backward_at_forward_rate) <
             std::tie(o.gpu, o.micro_batch, o.backward_at_forward_rate);
    }
  };
  struct DeviceTimes {
    std::vector<UnitTimes> units;  // by unit, filled when first asked
    costmodels::LayerShare replicated;
    double attention_core = 0;
  };
  std::map<DeviceKey, DeviceTimes> device_times;

  struct RequestKey {
    CollectiveKind kind;
    std::vector<double> shard_bytes;
    std::vector<int> ranks;
    bool operator==(const RequestKey&) const = default;
  };
  struct RequestHash {
    std::size_t operator()(const RequestKey& k) const {
      std::size_t h = std::hash<int>()(static_cast<int>(k.kind));
      auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
      for (double b : k.shard_bytes) mix(std::hash<double>()(b));
      for (int r : k.ranks) mix(std::hash<int>()(r));
      return h;
    }
  };
  std::unordered_map<RequestKey, double, RequestHash> collectives;

  // What a stage's ranks (and its T) give whatever its layers: its first TP group, its DP
  // group 0, how the group and the stage lie on the first rank's node, the smallest usable
  // capacity, and the collectives priced over the TP group (which 0) or the DP group (1).
  struct StageRanks {
    std::vector<int> ranks;
    std::vector<int> tp, group;
    bool group_spans_nodes = false;
    int stage_on_first_node = 0, group_on_first_node = 0;
    double capacity = std::numeric_limits<double>::infinity();
    int capacity_rank = 0;
    std::map<std::pair<int, double>, double> times;  // by (which · 8 + kind, bytes)
  };
  // By (first rank, last rank, count, T); a bucket holds every rank list seen with those.
  std::map<std::tuple<int, int, std::size_t, int>, std::vector<std::unique_ptr<StageRanks>>>
      stage_ranks;

  StageRanks& ranks_of(const std::vector<int>& st_ranks, int T) {
    auto& bucket = stage_ranks[{st_ranks.front(), st_ranks.back(), st_ranks.size(), T}];
    for (auto& e : bucket)
      if (e->ranks == st_ranks) return *e;
    const auto& ranks = scenario.cluster.ranks();
    auto e = std::make_unique<StageRanks>();
    e->ranks = st_ranks;
    e->tp.assign(st_ranks.begin(), st_ranks.begin() + T);
    for (std::size_t i = 0; i < st_ranks.size(); i += static_cast<std::size_t>(T))
      e->group.push_back(st_ranks[i]);
    std::map<int, int> group_on_node, stage_on_node;
    for (int r : e->group) ++group_on_node[ranks[static_cast<std::size_t>(r)].node];
    for (int r : st_ranks) ++stage_on_node[ranks[static_cast<std::size_t>(r)].node];
    const int first_node = ranks[static_cast<std::size_t>(st_ranks.front())].node;
    e->group_spans_nodes = group_on_node.size() > 1;
    e->stage_on_first_node = stage_on_node[first_node];
    e->group_on_first_node = group_on_node[first_node];
    const double usable = costmodels::memory_constants().usable_fraction;
    for (int r : st_ranks) {
      const double cap = ranks[static_cast<std::size_t>(r)].slot->spec.memory_bytes * usable;
      if (cap < e->capacity) {
        e->capacity = cap;
        e->capacity_rank = r;
      }
    }
    bucket.push_back(std::move(e));
    return *bucket.back();
  }

  double stage_collective(StageRanks& st, int which, CollectiveKind kind, double bytes) {
    const auto key = std::make_pair(which * 8 + static_cast<int>(kind), bytes);
    auto it = st.times.find(key);
    if (it != st.times.end()) return it->second;
    const double t =
        models.comm
            ->collective(scenario.cluster, even_request(kind, which == 0 ? st.tp : st.group, bytes))
            .seconds;
    st.times.emplace(key, t);
    return t;
  }

  // Per (stages, micro-batches, schedule): each stage's order and its peak_in_flight.
  struct Orders {
    std::vector<std::vector<pipeline::Step>> orders;
    std::vector<int> peaks;
  };
  std::map<std::tuple<int, int, int, int>, Orders> orders;

  Impl(const Scenario& s, const costmodels::CostModels& m) : scenario(s), models(m) {}

  DeviceTimes& device(const DeviceSpec& spec, int b, const SplitOptions& options) {
    const DeviceKey key{spec.name, b, options.backward_at_forward_rate};
    auto it = device_times.find(key);
    if (it == device_times.end()) {
      it = device_times.emplace(key, DeviceTimes{}).first;
      it->second.units.resize(static_cast<std::size_t>(costmodels::num_units(scenario.job.model)));
      // costmodels' shares of a layer (tensor_parallel.hpp): the simulator reads the same.
      it->second.replicated = costmodels::layer_replicated_share(spec, scenario.job, b);
      it->second.attention_core =
          costmodels::layer_attention_core_share(spec, scenario.job, b).forward;
    }
    return it->second;
  }

  const UnitTimes& unit_times(DeviceTimes& d, const DeviceSpec& spec, int unit, int b,
                              const SplitOptions& options) {
    UnitTimes& u = d.units[static_cast<std::size_t>(unit)];
    if (u.known) return u;
    const Job& job = scenario.job;
    const auto fwd = models.compute->unit_time(spec, job, unit, ComputePhase::Forward, b);
    u.forward = fwd.seconds;
    u.recompute = models.compute->unit_time(spec, job, unit, ComputePhase::Recompute, b).seconds;
    if (options.backward_at_forward_rate && fwd.source.rfind("calibrated", 0) == 0)
      u.backward = fwd.seconds * backward_work_ratio(spec, job, unit, b);
    else
      u.backward = models.compute->unit_time(spec, job, unit, ComputePhase::Backward, b).seconds;
    u.known = true;
    return u;
  }

  double collective(const CollectiveRequest& r) {
    RequestKey key{r.kind, r.shard_bytes, r.ranks};
    auto it = collectives.find(key);
    if (it != collectives.end()) return it->second;
    const double t = models.comm->collective(scenario.cluster, r).seconds;
    collectives.emplace(std::move(key), t);
    return t;
  }

  const Orders& stage_orders(int p, int m, const pipeline::PipelineSchedule& schedule) {
    const auto key =
        std::make_tuple(p, m, static_cast<int>(schedule.kind), schedule.virtual_stages);
    auto it = orders.find(key);
    if (it != orders.end()) return it->second;
    Orders out;
    out.orders = pipeline::stage_orders(p, m, schedule);
    for (const auto& order : out.orders) out.peaks.push_back(pipeline::peak_in_flight(order));
    return orders.emplace(key, std::move(out)).first->second;
  }

  SplitEstimate estimate(const ModelSplit& split, const SplitOptions& options,
                         const EstimateLimits& limits);
};

SplitEstimator::SplitEstimator(const Scenario& scenario, const costmodels::CostModels& models)
    : impl_(std::make_unique<Impl>(scenario, models)) {}
SplitEstimator::~SplitEstimator() = default;

SplitEstimate SplitEstimator::estimate(const ModelSplit& split, const SplitOptions& options,
                                       const EstimateLimits& limits) {
  return impl_->estimate(split, options, limits);
}

SplitEstimate SplitEstimator::Impl::estimate(const ModelSplit& split, const SplitOptions& options,
                                             const EstimateLimits& limits) {
  const Cluster& cluster = scenario.cluster;
  const Job& job = scenario.job;
  const ModelSpec& model = job.model;
  const std::string file = scenario.file.string();
  check_model_split_for(split, scenario, file);
  const int world = cluster.num_ranks();
  // The split's own stages, not a copy of their rank lists (the search prices thousands).
  const std::vector<PipelineStage> one_stage = split.stages.empty()
                                                   ? resolved_stages(split, model.num_layers, world)
                                                   : std::vector<PipelineStage>{};
  const std::vector<PipelineStage>& stages = split.stages.empty() ? one_stage : split.stages;
  const int p = static_cast<int>(stages.size());
  const int m = split.micro_batches;
  const int V = split.schedule.virtual_stages;
  const int seq = costmodels::effective_sequence(model, job.sequence_length);
  const Dtype compute = job.precision.compute;
  const double e_c = bytes_per_element(compute);
  const double e_r = bytes_per_element(job.precision.reduce);
  const auto& ranks = cluster.ranks();
  const bool tied = model.tied_embeddings && model.vocab_size > 0;
  const double word_embedding = static_cast<double>(model.vocab_size) * model.hidden;

  SplitEstimate out;
  if (limits.describe) out.split = describe(split, world);
  out.stages.resize(static_cast<std::size_t>(p));
  // Per virtual stage k = c·p + s, one micro-batch's forward and backward.
  std::vector<pipeline::StageTimes> times(static_cast<std::size_t>(p * V));
  std::vector<StageRanks*> stage_facts(static_cast<std::size_t>(p));

  for (int s = 0; s < p; ++s) {
    const PipelineStage& st = stages[static_cast<std::size_t>(s)];
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    const int T = split.tensor_parallel_of(static_cast<std::size_t>(s));
    const int replicas = static_cast<int>(st.ranks.size()) / T;
    const long long per_micro = static_cast<long long>(m) * replicas;
    if (job.global_batch % per_micro != 0) {
      std::ostringstream v, x;
      v << "global batch " << job.global_batch << " over " << m << " micro-batches x " << replicas
        << " replicas";
      x << "a global batch divisible by micro_batches x replicas (" << per_micro << ")";
      throw ValidationError(file, "model_split.stages[" + std::to_string(s) + "]", v.str(),
                            x.str());
    }
    const int b = static_cast<int>(job.global_batch / per_micro);
    const DeviceSlot& slot = *ranks[static_cast<std::size_t>(st.ranks.front())].slot;
    for (int r : st.ranks) {
      const DeviceSpec& other = ranks[static_cast<std::size_t>(r)].slot->spec;
      if (&other != &slot.spec && other.name != slot.spec.name)
        throw ValidationError(file, "model_split.stages[" + std::to_string(s) + "].ranks",
                              std::to_string(r),
                              "ranks of one GPU type per stage (rank " +
                                  std::to_string(st.ranks.front()) + " is " + slot.spec.name + ")");
    }
    const DeviceSpec& spec = slot.spec;
    est.stage = s;
    est.gpu = spec.name;
    est.tensor_parallel = T;
    est.replicas = replicas;
    est.micro_batch = b;
    StageRanks& sr = ranks_of(st.ranks, T);
    stage_facts[static_cast<std::size_t>(s)] = &sr;

    DeviceTimes& dev = device(spec, b, options);
    const bool sp = split.sequence_parallel;
    est.replicated_forward = sp ? 0 : dev.replicated.forward;
    est.replicated_backward = sp ? 0 : dev.replicated.backward;
    // A TP rank's share of a layer's time, the simulator's rule (costmodels/tensor_parallel.hpp).
    const double split_f =
        costmodels::tensor_parallel_factor(model, 1, ComputePhase::Forward, T, sp, dev.replicated);
    const double split_b =
        costmodels::tensor_parallel_factor(model, 1, ComputePhase::Backward, T, sp, dev.replicated);

    // TP collectives of one layer, priced once (every layer has the same b·s·h).
    const double act_bytes = static_cast<double>(b) * seq * model.hidden * e_c;
    est.tp_bytes_per_collective = act_bytes;
    double reduce_s = 0;  // one all-reduce (or reduce-scatter + all-gather) of the activations
    if (T > 1) {
      if (split.sequence_parallel)
        reduce_s = stage_collective(sr, 0, CollectiveKind::ReduceScatter, act_bytes) +
                   stage_collective(sr, 0, CollectiveKind::AllGather, act_bytes);
      else
        reduce_s = stage_collective(sr, 0, CollectiveKind::AllReduce, act_bytes);
    }
    const int per_reduce = split.sequence_parallel ? 2 : 1;  // collective calls per reduction

    double params = 0;
    int layers = 0;
    for (int c = 0; c < static_cast<int>(st.chunks.size()); ++c) {
      const LayerRange range = st.chunks[static_cast<std::size_t>(c)];
      const int k = c * p + s;
      double f = 0, bw = 0, fc = 0, bc = 0, fcomm = 0, bcomm = 0;
      int f_calls = 0, b_calls = 0;
      for (int l = range.begin; l < range.end; ++l) {
        const int unit = l + 1;
        const UnitTimes& u = unit_times(dev, spec, unit, b, options);
        const double tf = u.forward, tb = u.backward;
        // Full recompute reruns the layer's forward (split like it); selective recompute only
        // its attention core, which the T ranks split by heads.
        const ActivationCheckpointing& ck = options.activation_checkpointing;
        const bool layer_recomputes = ck.checkpoints_layer(unit);
        const double tr = layer_recomputes                 ? u.recompute * split_f
                          : ck.recomputes_attention_core() ? u.recompute * dev.attention_core / T
                                                           : 0;
        fc += tf * split_f;
        bc += tb * split_b + tr;
        if (T > 1) {
          const int backward_reductions = layer_recomputes ? 4 : 2;
          fcomm += 2 * reduce_s;
          bcomm += backward_reductions * reduce_s;
          f_calls += 2 * per_reduce;
          b_calls += backward_reductions * per_reduce;
        }
        params += costmodels::layer_parameters(model) / T;
        ++layers;
      }
      if (k == 0) {  // the embedding: replicated lookup, one all-reduce of its output
        const UnitTimes& u = unit_times(dev, spec, 0, b, options);
        fc += u.forward;
        bc += u.backward;
        if (T > 1) {
          fcomm += reduce_s;
          f_calls += per_reduce;
        }
        params += costmodels::embedding_parameters(model) / T;
      }
      if (k == p * V - 1) {  // the head and loss: vocabulary-parallel, split by T
        const int head = model.num_layers + 1;
        const UnitTimes& u = unit_times(dev, spec, head, b, options);
        fc += u.forward / T;
        bc += u.backward / T;
        if (T > 1) {
          bcomm += reduce_s;
          b_calls += per_reduce;
        }
        params += costmodels::head_parameters(model) / T;
        // Megatron keeps a copy of the tied word embedding on the last stage for the head.
        if (tied && p > 1) params += word_embedding / T;
      }
      f = fc + fcomm;
      bw = bc + bcomm;
      times[static_cast<std::size_t>(k)] = {f, bw};
      est.forward_compute += fc;
      est.backward_compute += bc;
      est.tp_comm_forward += fcomm;
      est.tp_comm_backward += bcomm;
      est.tp_collectives_forward += f_calls;
      est.tp_collectives_backward += b_calls;
    }
    est.layers = layers;
    est.parameters_per_rank = params;
  }

  // P2P: the slowest boundary between adjacent virtual stages on different stages.
  if (p > 1) {
    // A node's NIC carries every pipeline boundary that crosses it at once (1F1B keeps each
    // boundary busy in its steady state), each of them one flow per sending rank on the node:
    // the simulator shares the NIC among them (a cross-node transfer holds both of its nodes'
    // NICs), so a transfer runs at the NIC's bandwidth over the node's concurrent flows.
    std::map<int, int> node_flows;
    const int boundaries = V > 1 ? p : p - 1;
    for (int a = 0; a < boundaries; ++a) {
      const int c = (a + 1) % p;
      const StageRanks& ra = *stage_facts[static_cast<std::size_t>(a)];
      const StageRanks& rc = *stage_facts[static_cast<std::size_t>(c)];
      const int na = ranks[static_cast<std::size_t>(ra.tp.front())].node;
      const int nc = ranks[static_cast<std::size_t>(rc.tp.front())].node;
      if (na == nc) continue;
      const int flows = kP2pDirections * std::max(1, ra.stage_on_first_node);
      node_flows[na] += flows;
      node_flows[nc] += flows;
    }
    for (int k = 0; k + 1 < p * V; ++k) {
      const int a = k % p, c = (k + 1) % p;
      const StageEstimate& from = out.stages[static_cast<std::size_t>(a)];
      const StageRanks& ra = *stage_facts[static_cast<std::size_t>(a)];
      StageRanks& rc = *stage_facts[static_cast<std::size_t>(c)];
      const double full = static_cast<double>(from.micro_batch) * seq * model.hidden * e_c;
      const int T = from.tensor_parallel;
      const bool scatter = options.scatter_gather && T > 1 &&
                           out.stages[static_cast<std::size_t>(c)].tensor_parallel == T;
      const double per_flow = scatter ? full / T : full;
      const int src = ra.tp.front(), dst = rc.tp.front();
      const int src_node = ranks[static_cast<std::size_t>(src)].node;
      double bytes = per_flow;
      if (src_node != ranks[static_cast<std::size_t>(dst)].node) {
        const int dst_node = ranks[static_cast<std::size_t>(dst)].node;
        bytes = per_flow * std::max({1, node_flows[src_node], node_flows[dst_node]});
      }
      double t = collective(p2p_request(src, dst, bytes));
      if (scatter) t += stage_collective(rc, 0, CollectiveKind::AllGather, full);
      out.p2p_s = std::max(out.p2p_s, t);
    }
  }

  // Everything of a stage that does not need the schedule's timing: the DP tail, the optimizer
  // step, memory. Then a lower bound on the iteration: a stage runs its steps one after another,
  // so its last backward ends no earlier than the sum of its steps (m · Σ over its virtual
  // stages of forward + backward), and it finishes its DP tail and optimizer step after that.
  const auto& constants = costmodels::memory_constants();
  const Orders& schedule_orders = stage_orders(p, m, split.schedule);
  const std::vector<int>& peak = schedule_orders.peaks;
  for (int s = 0; s < p; ++s) {
    const PipelineStage& st = stages[static_cast<std::size_t>(s)];
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    const int T = est.tensor_parallel, R = est.replicas;
    const DeviceSpec& spec = ranks[static_cast<std::size_t>(st.ranks.front())].slot->spec;

    // DP group 0 of the stage: the first rank of every TP group. The stage's T groups run
    // their collectives at once, so a group spanning nodes shares each NIC with the others.
    StageRanks& sr = *stage_facts[static_cast<std::size_t>(s)];
    const double sharing =
        sr.group_spans_nodes ? static_cast<double>(sr.stage_on_first_node) / sr.group_on_first_node
                             : 1.0;
    const double P = est.parameters_per_rank;
    double dp = 0;
    if (R > 1) {
      const double grad_bytes = P * e_r * sharing;
      if (split.sharding == StageSharding::None) {
        dp = stage_collective(sr, 1, CollectiveKind::AllReduce, grad_bytes);
      } else {
        dp = stage_collective(sr, 1, CollectiveKind::ReduceScatter, grad_bytes) +
             stage_collective(sr, 1, CollectiveKind::AllGather, P * e_c * sharing);
      }
    }
    if (tied && p > 1 && (s == 0 || s == p - 1)) {
      const int a = stage_facts.front()->tp.front(), c = stage_facts.back()->tp.front();
      const bool same_node =
          ranks[static_cast<std::size_t>(a)].node == ranks[static_cast<std::size_t>(c)].node;
      const double bytes = word_embedding / T * e_r * (same_node ? 1.0 : T);
      dp += collective(even_request(CollectiveKind::AllReduce, {a, c}, bytes));
    }
    est.dp_comm = dp;
    const double last_backward = times[static_cast<std::size_t>(s)].backward;
    est.dp_exposed =
        options.dp_overlap == DpOverlap::LastBackward ? std::max(0.0, dp - last_backward) : dp;
    const double shard = split.sharding == StageSharding::None ? P : P / R;
    est.optimizer_step = models.compute->optimizer_time(spec, job, shard).seconds;
    double steps = 0;
    for (int c = 0; c < V; ++c) {
      const auto& t = times[static_cast<std::size_t>(c * p + s)];
      steps += t.forward + t.backward;
    }
    out.lower_bound_s =
        std::max(out.lower_bound_s, m * steps + est.dp_exposed + est.optimizer_step);

    // Memory of the stage's rank with the least capacity: costmodels' terms of a split rank
    // (the ones predict_memory gives the written plan), from the split's own description.
    est.peak_in_flight = peak[static_cast<std::size_t>(s)];
    StageMemory& mem = est.memory;
    const int place = static_cast<int>(
        std::find(st.ranks.begin(), st.ranks.end(), sr.capacity_rank) - st.ranks.begin());
    costmodels::SplitRankMemoryInputs in;
    in.chunks = costmodels::stage_units(model, st, s, p);
    in.order = schedule_orders.orders[static_cast<std::size_t>(s)];
    in.tensor_parallel = T;
    in.tp_rank = place % T;
    in.sequence_parallel = split.sequence_parallel;
    in.head_holds_word_embedding = model.tied_embeddings && p > 1;
    in.micro_batch = est.micro_batch;
    in.sharding = split.sharding;
    // The plan the search writes shares each domain's state evenly (even_split_plan); hybrid
    // sharding holds a full copy over the domain's ranks on one node.
    int node_replicas = 0;
    const int node = ranks[static_cast<std::size_t>(sr.capacity_rank)].node;
    for (std::size_t i = static_cast<std::size_t>(place % T); i < st.ranks.size();
         i += static_cast<std::size_t>(T))
      node_replicas += ranks[static_cast<std::size_t>(st.ranks[i])].node == node ? 1 : 0;
    in.state_share =
        1.0 / (split.sharding == StageSharding::Hybrid ? std::max(1, node_replicas) : R);
    in.activation_checkpointing = options.activation_checkpointing;
    in.gpu_runtime = costmodels::runs_gpu_runtime(spec);
    in.world_size = world;
    if (split.is_default()) {
      // One stage, T = 1, full sharding: the plan is an FSDP plan, its memory the FSDP terms.
      Plan plan = even_split_plan(scenario, split, file);
      plan.activation_checkpointing = options.activation_checkpointing;
      mem.terms = costmodels::predict_memory(scenario, plan, sr.capacity_rank, constants).terms;
    } else {
      mem.terms = costmodels::split_rank_memory_terms(job, in, constants);
    }
    mem.total = 0;
    mem.activations = 0;
    for (const auto& term : mem.terms) {
      mem.total += term.bytes;
      if (term.name == "activations") mem.activations += term.bytes;
    }
    mem.capacity = sr.capacity;
    mem.rank = sr.capacity_rank;
    if (out.fits && mem.total > mem.capacity) {
      out.fits = false;
      std::ostringstream msg;
      msg << "stage " << s << " does not fit: rank " << mem.rank << " (" << spec.name << ") needs "
          << gib(mem.total) << " of " << gib(mem.capacity) << " (";
      bool first = true;
      for (const auto& term : mem.terms) {
        if (term.bytes <= 0) continue;
        msg << (first ? "" : ", ") << term.name << " " << gib(term.bytes);
        first = false;
      }
      msg << "; activations of " << est.peak_in_flight
          << (V > 1 ? " chunk passes" : " micro-batches") << " in flight)";
      out.refusal = msg.str();
    }
  }
  // The bound has a margin for rounding: the schedule sums the same step times in another order.
  if ((!out.fits && !limits.schedule_unfit) || out.lower_bound_s > limits.stop_above * (1 + 1e-9)) {
    out.complete = false;
    return out;
  }

  const pipeline::PipelineTiming timing =
      pipeline::pipeline_makespan(p, m, split.schedule, times, out.p2p_s);
  out.makespan_s = timing.makespan;
  out.bubble_fraction = timing.bubble_fraction();
  if (limits.describe) out.schedule = pipeline::describe(p, m, split.schedule, times, out.p2p_s);
  for (int s = 0; s < p; ++s) {
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    est.last_backward_end = timing.end[static_cast<std::size_t>(s)].back();
    est.busy = timing.busy[static_cast<std::size_t>(s)];
    est.bubble = timing.bubble[static_cast<std::size_t>(s)];
    est.finish = est.last_backward_end + est.dp_exposed + est.optimizer_step;
    out.iteration_s = std::max(out.iteration_s, est.finish);
  }
  return out;
}

SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options, const costmodels::CostModels& models) {
  return SplitEstimator(scenario, models).estimate(split, options);
}

SplitEstimate estimate_split(const Scenario& scenario, const ModelSplit& split,
                             const SplitOptions& options) {
  return estimate_split(scenario, split, options, costmodels::make_cost_models(scenario));
}

void require_fit(const SplitEstimate& estimate) {
  if (!estimate.fits) throw InfeasibleError(estimate.refusal);
}

Json to_json(const SplitEstimate& e) {
  Json stages = Json::array();
  for (const auto& s : e.stages) {
    stages.push_back({{"stage", s.stage},
                      {"gpu", s.gpu},
                      {"tensor_parallel", s.tensor_parallel},
                      {"replicas", s.replicas},
                      {"micro_batch", s.micro_batch},
                      {"layers", s.layers},
                      {"parameters_per_rank", s.parameters_per_rank},
                      {"replicated_forward_share", s.replicated_forward},
                      {"replicated_backward_share", s.replicated_backward},
                      {"forward_compute_s", s.forward_compute},
                      {"backward_compute_s", s.backward_compute},
                      {"tp_comm_forward_s", s.tp_comm_forward},
                      {"tp_comm_backward_s", s.tp_comm_backward},
                      {"tp_collectives_forward", s.tp_collectives_forward},
                      {"tp_collectives_backward", s.tp_collectives_backward},
                      {"tp_bytes_per_collective", s.tp_bytes_per_collective},
                      {"last_backward_end_s", s.last_backward_end},
                      {"busy_s", s.busy},
                      {"bubble_s", s.bubble},
                      {"dp_comm_s", s.dp_comm},
                      {"dp_exposed_s", s.dp_exposed},
                      {"optimizer_s", s.optimizer_step},
                      {"finish_s", s.finish},
                      {"peak_in_flight", s.peak_in_flight},
                      {"memory",
                       {{"rank", s.memory.rank},
                        {"terms", memory_terms_json(s.memory.terms)},
                        {"activations", s.memory.activations},
                        {"total", s.memory.total},
                        {"capacity", s.memory.capacity}}}});
  }
  return {{"iteration_s", e.iteration_s},
          {"makespan_s", e.makespan_s},
          {"p2p_s", e.p2p_s},
          {"bubble_fraction", e.bubble_fraction},
          {"split", e.split},
          {"schedule", e.schedule},
          {"fits", e.fits},
          {"refusal", e.refusal},
          {"stages", stages}};
}

}  // namespace cephalo::planner

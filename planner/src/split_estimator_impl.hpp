#pragma once
// Internal to the planner: SplitEstimator's remembered state and its per-stage steps, shared
// by split_estimate.cpp (the estimate of one split) and split_estimate_stage.cpp (a stage's
// replicas, passes, state and activations; the estimate's JSON).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/split_context.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

#include "cephalo/planner/split_estimate.hpp"

namespace cephalo::planner::split_detail {

using costmodels::CollectiveKind;
using costmodels::CollectiveRequest;
using costmodels::ComputePhase;

inline CollectiveRequest even_request(CollectiveKind kind, std::vector<int> ranks, double bytes) {
  CollectiveRequest r;
  r.kind = kind;
  const double n = static_cast<double>(ranks.size());
  r.shard_bytes.assign(ranks.size(), bytes / n);
  r.ranks = std::move(ranks);
  return r;
}

// One point-to-point transfer of `bytes` from rank a to rank b (a two-rank broadcast: the
// comm model's latency plus bytes over the link between them).
inline CollectiveRequest p2p_request(int a, int b, double bytes) {
  CollectiveRequest r;
  r.kind = CollectiveKind::Broadcast;
  r.ranks = {a, b};
  r.shard_bytes = {bytes, 0};
  return r;
}

// What a stage's replicas are whatever the split's samples and shares: each replica's GPU
// class (its TP group's type and emulated slowdown), its tightest rank and node, and the
// sharding groups. It follows from the stage's ranks and T alone, so it is worked out once per
// stage rank list (StageRanks) and read by every estimate of a split with that stage: the
// search prices the same stage under many splits, and building it is O(replicas).
struct ReplicaLayout {
  std::vector<const DeviceSpec*> classes;  // the stage's GPU types, first seen first
  // per class: the emulated slowdown its compute runs at (DeviceSlot::slowdown, the slowest of
  // a TP group's ranks: the group's collectives wait for it), a class being (type, slowdown)
  std::vector<double> class_slowdown;
  std::vector<int> class_type;        // per class: its index in SplitEstimator::Impl::types
  std::vector<std::size_t> class_of;  // per replica
  std::vector<double> capacity;       // usable bytes of its tightest rank
  std::vector<int> capacity_rank;
  std::vector<int> capacity_place;  // that rank's place in its TP group
  std::vector<int> node;            // of its first rank
  // Runs of alike replicas (the same class, tightest capacity and its place in the TP group:
  // the same memory at the same samples and share), consecutive, by where each ends: a
  // homogeneous fleet's stage is one run, so a step over the replicas that depends only on
  // these goes run by run.
  std::vector<std::size_t> run_end;
  // Sharding groups: the whole domain, and hybrid's replicas on each node (by node), the
  // latter on first need.
  std::vector<std::vector<std::size_t>> whole;
  std::optional<std::vector<std::vector<std::size_t>>> by_node;
  int first_node = 0;
  std::string gpu_names;
};

// A stage's data-parallel replicas as one estimate prices them: each replica's GPU type (its TP
// group's), samples per micro-batch, state share and smallest usable memory. What does not
// depend on the split's samples and shares is its stage's ReplicaLayout, viewed in place.
struct Replicas {
  std::span<const DeviceSpec* const> classes;
  std::span<const double> class_slowdown;
  std::span<const int> class_type;
  std::span<const std::size_t> class_of;  // per replica
  std::vector<int> size;                  // samples per micro-batch, per replica
  std::vector<int> sub;                   // sub-steps per micro-batch, per replica (divides size)
  std::vector<double> share;              // state share of its sharding group, per replica
  std::span<const double> capacity;
  std::span<const int> capacity_rank;
  std::span<const int> capacity_place;
  std::span<const int> node;
  std::span<const std::vector<std::size_t>> groups;  // sharding groups (hybrid: per node)
  std::span<const std::size_t> run_end;              // the layout's runs (or one per replica)
  std::vector<std::size_t> own_runs;                 // one per replica, when priced so
  int total = 0;                                     // the stage's samples per micro-batch
  int first_node = 0;
  bool uniform = true;      // one GPU type and equal sizes
  bool even_shares = true;  // every share 1 / the group's size, as even plans cut them
  std::string gpu_names;

  // Replicas j and k hold the same memory at the same samples and share: the same GPU type,
  // capacity and place of the tightest rank in the group (ReplicaMemory's key). Replicas come
  // in runs of alike ones, so a per-replica step reuses its predecessor's answer when alike.
  bool alike_memory(std::size_t j, std::size_t k) const {
    return class_of[j] == class_of[k] && capacity_place[j] == capacity_place[k] &&
           capacity[j] == capacity[k];
  }
  // Where each segment ends: the runs cut further wherever the samples, sub-steps or state
  // share change, so every replica of a segment has the same pass, memory and optimizer step.
  std::vector<std::size_t> segments() const {
    std::vector<std::size_t> out;
    std::size_t begin = 0;
    for (std::size_t end : run_end) {
      for (std::size_t j = begin + 1; j < end; ++j)
        if (size[j] != size[j - 1] || sub[j] != sub[j - 1] || share[j] != share[j - 1])
          out.push_back(j);
      out.push_back(end);
      begin = end;
    }
    return out;
  }
  bool unplaced() const {
    return std::any_of(size.begin(), size.end(), [](int b) { return b < 1; });
  }
  long long samples_on_first_node() const {
    long long n = 0;
    for (std::size_t j = 0; j < size.size(); ++j)
      if (node[j] == first_node) n += size[j];
    return n;
  }
};

// One unit of a stage's pass: its forward and backward (recompute and TP collectives
// included) for one micro-batch, and its parameters per TP rank.
struct UnitStep {
  double forward = 0, backward = 0, params = 0;
  // The head's output-layer weight gradient within `backward` (0 for the other units, and
  // unless the job defers it): what a deferred micro-batch leaves to the flush.
  double wgrad = 0;
  double own_params = -1;  // the unit's own, where `params` adds a tied weight (< 0: params)
  double layout_params() const { return own_params < 0 ? params : own_params; }
};

// One replica class's pass through a stage: per chunk one micro-batch's forward and backward
// (TP collectives included) on `spec` with `b` samples, and the stage's sums.
struct StagePass {
  std::vector<pipeline::StageTimes> chunks;
  std::vector<UnitStep> units;          // the stage's units, chunk after chunk, in forward order
  std::vector<std::size_t> chunk_ends;  // per chunk: the end of its units in `units`
  double forward_compute = 0, backward_compute = 0, tp_comm_forward = 0, tp_comm_backward = 0;
  int f_calls = 0, b_calls = 0, layers = 0;
  double params = 0, replicated_forward = 0, replicated_backward = 0, tp_bytes = 0;
  double total() const {
    return forward_compute + backward_compute + tp_comm_forward + tp_comm_backward;
  }
};

// A pass run as k sub-steps (DESIGN §4, "Ranks"): k times one sub-step's compute, TP comm and
// TP calls; its units stay one sub-step's (the DP tail follows the last sub-step's).
inline StagePass repeated(StagePass pass, int k) {
  if (k <= 1) return pass;
  for (auto& c : pass.chunks) {
    c.forward *= k;
    c.backward *= k;
    c.deferred_wgrad *= k;  // a deferred micro-batch defers each of its sub-steps' (the graph's)
  }
  pass.forward_compute *= k;
  pass.backward_compute *= k;
  pass.tp_comm_forward *= k;
  pass.tp_comm_backward *= k;
  pass.f_calls *= k;
  pass.b_calls *= k;
  return pass;
}

// Stages' chains of data-parallel collectives on the NICs of the nodes their DP groups span:
// each chain is `work` seconds of its collectives at full rate from `release` on, and runs at
// 1 / (the most chains on any of its nodes' NICs), the simulator's fluid rule for a link's
// flows (sim/README.md, "links are shared resources"). Returns when each chain ends; a chain
// that shares no NIC with another ends at release + work. `users`: per cluster node, zero on
// entry and again on return (the caller's, so a candidate allocates nothing).
struct NicChain {
  double release = 0, work = 0;
  const std::vector<int>* nodes = nullptr;
};

std::vector<double> shared_nic_ends(const std::vector<NicChain>& chains, std::vector<int>& users);

}  // namespace cephalo::planner::split_detail

namespace cephalo::planner {

struct SplitEstimator::Impl {
  using Replicas = split_detail::Replicas;
  using StagePass = split_detail::StagePass;
  using CollectiveKind = costmodels::CollectiveKind;
  using CollectiveRequest = costmodels::CollectiveRequest;
  using ComputePhase = costmodels::ComputePhase;
  const Scenario& scenario;
  const costmodels::CostModels& models;
  // The cluster's rank table, taken once: Cluster::ranks() checks every node on each call, and
  // the estimate asks per replica of every candidate (the scenario does not change meanwhile).
  const std::vector<RankDevice>& rank_table;
  // The cluster's rank → node table (rank_nodes) that check_model_split reads, taken once:
  // building it is O(ranks), and the search checks every split it prices.
  const std::vector<int> node_of_rank;

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
    costmodels::LayerShare attention_core;
    // The linear GEMMs' shares, under the job's TP communication overlap only.
    costmodels::LayerLinearShares linear;
    // The output layer's weight gradient's share of the head's backward, under the job's
    // deferred output-layer weight gradient only.
    double output_wgrad = 0;
  };
  std::map<DeviceKey, DeviceTimes> device_times;

  struct RequestKey {
    CollectiveKind kind;
    std::vector<double> shard_bytes;
    std::vector<int> ranks;
    UnevenCollective uneven = UnevenCollective::Auto;
    bool pieces = false;
    bool operator==(const RequestKey&) const = default;
  };
  struct RequestHash {
    std::size_t operator()(const RequestKey& k) const {
      std::size_t h = std::hash<int>()(static_cast<int>(k.kind) * 8 +
                                       static_cast<int>(k.uneven) * 2 + (k.pieces ? 1 : 0));
      auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
      for (double b : k.shard_bytes) mix(std::hash<double>()(b));
      for (int r : k.ranks) mix(std::hash<int>()(r));
      return h;
    }
  };
  std::unordered_map<RequestKey, double, RequestHash> collectives;
  // The uneven variant of a sharding group's gathers and reductions of one unit, by the
  // unit's all-gather over the group (kind AllGather, its shards' compute bytes).
  std::unordered_map<RequestKey, UnevenCollective, RequestHash> variants;

  // What a stage's ranks (and its T) give whatever its layers: its first TP group, its DP
  // group 0, how the group and the stage lie on the first rank's node, the smallest usable
  // capacity, and the collectives priced over the TP group (which 0) or the DP group (1).
  struct StageRanks {
    std::vector<int> ranks;
    std::vector<int> tp, group;
    bool group_spans_nodes = false;
    std::vector<int> group_nodes;  // the nodes of its DP group when it spans nodes, ascending
    int stage_on_first_node = 0, group_on_first_node = 0;
    double capacity = std::numeric_limits<double>::infinity();
    int capacity_rank = 0;
    std::map<std::pair<int, double>, double> times;  // by (which · 8 + kind, bytes)
    // What the stage's DP collectives cost under one sharding and one set of state shares:
    // the replicas' nodes and sharding groups follow from the ranks and the sharding, so these
    // are all a DP collective's price depends on besides its size. The search prices the same
    // stage under many splits (micro-batches, schedules, checkpointing), each pass over its
    // replicas O(replicas), so the prices are kept across estimates, found by an exact
    // comparison of the shares (O(replicas), no allocation).
    struct Layout {
      ShardingKind sharding = ShardingKind::Full;
      std::vector<double> share;                      // per replica, as Replicas::share
      std::optional<std::vector<std::size_t>> kinds;  // group_kinds, on first need
      // dp_collective by (kind, elements, bytes per element, variant elements, sharing)
      std::map<std::tuple<int, double, double, double, double>, double> collectives;
      // cross_reduction by (elements, bytes per element, sharing)
      std::map<std::tuple<double, double, double>, double> cross;
    };
    std::vector<std::unique_ptr<Layout>> layouts;           // the latest last, at most kMaxLayouts
    std::unique_ptr<split_detail::ReplicaLayout> replicas;  // on first need (replica_layout)
  };
  // Each layout holds a share per replica: a bound per stage caps the memory when shares by
  // speed differ from split to split. The 100k-GPU search asks up to 16 per stage rank list
  // (the shares by speed its micro-batch counts and checkpointing give); at 4, 50 of its 1,383
  // lookups missed a layout evicted before, each re-walking the stage's 100k replicas (group
  // kinds, collective keys). 16 x 100k shares is 12.8 MB per stage rank list at most.
  static constexpr std::size_t kMaxLayouts = 16;

  StageRanks::Layout& layout_of(StageRanks& sr, ShardingKind sharding,
                                const std::vector<double>& share) {
    for (auto& l : sr.layouts)
      if (l->sharding == sharding && l->share == share) return *l;
    if (sr.layouts.size() >= kMaxLayouts) sr.layouts.erase(sr.layouts.begin());
    auto l = std::make_unique<StageRanks::Layout>();
    l->sharding = sharding;
    l->share = share;
    sr.layouts.push_back(std::move(l));
    return *sr.layouts.back();
  }
  // By (first rank, last rank, count, T); a bucket holds every rank list seen with those.
  std::map<std::tuple<int, int, std::size_t, int>, std::vector<std::unique_ptr<StageRanks>>>
      stage_ranks;

  StageRanks& ranks_of(const std::vector<int>& st_ranks, int T) {
    auto& bucket = stage_ranks[{st_ranks.front(), st_ranks.back(), st_ranks.size(), T}];
    for (auto& e : bucket)
      if (e->ranks == st_ranks) return *e;
    const auto& ranks = rank_table;
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
    if (e->group_spans_nodes)
      for (const auto& [node, count] : group_on_node) e->group_nodes.push_back(node);
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
    // The DP group's collectives (which 1) move the training state; the TP group's activations.
    CollectiveRequest r = split_detail::even_request(kind, which == 0 ? st.tp : st.group, bytes);
    r.training_state = which != 0;
    const double t = models.comm->collective(scenario.cluster, r).seconds;
    st.times.emplace(key, t);
    return t;
  }

  // Per (stages, micro-batches, schedule): each stage's order and its peak_in_flight.
  struct Orders {
    std::vector<std::vector<pipeline::Step>> orders;
    std::vector<int> peaks;
  };
  std::map<std::tuple<int, int, int, int>, Orders> orders;

  // The memory terms of one rank of a stage at b samples per micro-batch and state share x
  // (of its sharding group), by costmodels::split_rank_memory_terms: what predict_memory gives
  // that rank of the plan the split is written as. A one-stage T = 1 fully sharded split is an
  // FSDP plan: the FSDP terms. Remembered per (TP position, runtime, b, x) for one stage.
  class ReplicaMemory {
   public:
    ReplicaMemory(const Impl& impl, const ModelSplit& split, int T,
                  const std::vector<std::vector<int>>& units, std::span<const pipeline::Step> order,
                  const SplitOptions& options, const std::string& file);
    // Of replica j's tightest rank (Replicas::capacity_rank) at b samples and share x.
    // `b` samples per micro-batch run as `sub` sub-steps of b / sub (sub divides b).
    const std::vector<costmodels::MemoryTerm>& terms(const Replicas& rep, std::size_t j, int b,
                                                     int sub, double share);
    double total(const Replicas& rep, std::size_t j, int b, int sub, double share);

   private:
    const Impl& impl_;
    const ModelSplit& split_;
    int T_;
    const std::vector<std::vector<int>>& units_;
    std::span<const pipeline::Step> order_;
    const SplitOptions& options_;
    const std::string& file_;
    // Asked per replica of every candidate, so nothing here may cost O(ranks): a replica's
    // key is its tightest rank's place in its TP group or, for the one-stage FSDP case, its GPU
    // type (ranks of one type share the FSDP memory: the even plan's rows differ only by
    // device), both read off Replicas; whether the type runs the GPU runtime is the
    // estimator's, per type; the even plan is built once, on first use.
    std::optional<Plan> fsdp_plan_;
    std::map<std::tuple<int, bool, int, int, double>, std::vector<costmodels::MemoryTerm>> known_;
  };

  // Per rank, its GPU type (by name) as an index into `types` and its usable bytes, and per type
  // whether it runs the GPU runtime (costmodels::runs_gpu_runtime): read once, as the estimate
  // asks per replica (and a device slot per rank is a cache miss at 100k ranks).
  std::vector<int> rank_type;
  std::vector<const DeviceSpec*> types;
  std::vector<char> type_gpu_runtime;
  std::vector<double> rank_usable;    // per rank: its device's usable bytes
  std::vector<double> rank_slowdown;  // per rank: its slot's emulated slowdown (1: real hardware)

  // Whether a stage's replicas go run by run (ReplicaLayout::run_end) or one at a time: the
  // same answers, the latter kept for the tests that compare the two.
  bool by_runs = true;

  // Per cluster node: its sim::node_link_classes number, worked out on first use.
  std::vector<int> node_link;

  // Per cluster node: chains on its NICs while shared_nic_ends runs (zero between calls).
  std::vector<int> nic_users;

  Impl(const Scenario& s, const costmodels::CostModels& m)
      : scenario(s),
        models(m),
        rank_table(s.cluster.ranks()),
        node_of_rank(rank_nodes(s.cluster)),
        nic_users(s.cluster.nodes.size(), 0) {
    rank_type.reserve(rank_table.size());
    rank_usable.reserve(rank_table.size());
    std::size_t last = 0;  // a run of one type compares once per rank
    for (const RankDevice& d : rank_table) {
      const DeviceSpec& spec = d.slot->spec;
      if (types.empty() || types[last]->name != spec.name) {
        const auto it = std::find_if(types.begin(), types.end(),
                                     [&](const DeviceSpec* t) { return t->name == spec.name; });
        last = static_cast<std::size_t>(it - types.begin());
        if (it == types.end()) {
          types.push_back(&spec);
          type_gpu_runtime.push_back(costmodels::runs_gpu_runtime(spec) ? 1 : 0);
        }
      }
      rank_type.push_back(static_cast<int>(last));
      rank_usable.push_back(spec.memory_bytes * costmodels::memory_constants().usable_fraction);
      rank_slowdown.push_back(d.slot->slowdown);
    }
  }

  DeviceTimes& device(const DeviceSpec& spec, int b, const SplitOptions& options) {
    const DeviceKey key{spec.name, b, options.backward_at_forward_rate};
    auto it = device_times.find(key);
    if (it == device_times.end()) {
      it = device_times.emplace(key, DeviceTimes{}).first;
      it->second.units.resize(static_cast<std::size_t>(costmodels::num_units(scenario.job.model)));
      // costmodels' shares of a layer (tensor_parallel.hpp): the simulator reads the same.
      it->second.replicated = costmodels::layer_replicated_share(spec, scenario.job, b);
      it->second.attention_core = costmodels::layer_attention_core_share(spec, scenario.job, b);
      if (scenario.job.implementation.tp_comm_overlap)
        it->second.linear = costmodels::layer_linear_shares(spec, scenario.job, b);
      if (scenario.job.implementation.defer_embedding_wgrad_compute)
        it->second.output_wgrad = costmodels::output_weight_gradient_share(spec, scenario.job, b);
    }
    return it->second;
  }

  // One layer's TP collectives per micro-batch (the graph's: 2 calls forward, 2 backward and
  // 2 more when the recompute reruns the layer; `reduce_s` one call's all-reduce or gather +
  // scatter): each exposed, or under the job's TP communication overlap with sequence
  // parallelism only what the layer's GEMMs do not hide (costmodels::tp_overlap_exposed_seconds,
  // the replay's rule).
  struct LayerTpComm {
    double forward = 0, backward = 0;
  };
  LayerTpComm layer_tp_comm(const DeviceTimes& dev, const UnitTimes& u, int T,
                            bool sequence_parallel, bool reruns, double reduce_s, double gather_s,
                            double scatter_s) const {
    if (T <= 1) return {};
    if (!sequence_parallel || !scenario.job.implementation.tp_comm_overlap)
      return {2 * reduce_s, (reruns ? 4 : 2) * reduce_s};
    const auto exposed = [&](ComputePhase phase, double layer_s) {
      return costmodels::tp_overlap_exposed_seconds(dev.linear, phase, layer_s, T, gather_s,
                                                    scatter_s);
    };
    return {exposed(ComputePhase::Forward, u.forward),
            exposed(ComputePhase::Backward, u.backward) +
                (reruns ? exposed(ComputePhase::Recompute, u.recompute) : 0)};
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
    RequestKey key{r.kind, r.shard_bytes, r.ranks, r.uneven, !r.pieces.empty()};
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
  double layer_step_floor(const std::vector<int>& tp_group, int b, const SplitOptions& options);
  double tail_floor_per_parameter(const std::vector<int>& dp_group, const SplitOptions& options);
  // `slowdown`: the replica class's emulated slowdown, which the simulator multiplies every
  // compute op by (TP collectives are not slowed).
  StagePass stage_pass(const ModelSplit& split, const PipelineStage& st, int s, int T,
                       StageRanks& sr, const DeviceSpec& spec, double slowdown, int b,
                       const SplitOptions& options);
  // A stage's data-parallel gather or reduction of `elements` per TP rank (`element_bytes`
  // each, `sharing` times its bytes where the stage's T groups share the NICs) as its graph
  // runs it: over the DP group (no sharding, or one group of even shares), else in every
  // sharding group at once (the slowest group's), an uneven group in the variant the graph
  // picks for the unit (on its `variant_elements`, < 0: `elements`). Hybrid sharding's cross-group
  // reduction: `cross_reduction`.
  // `kinds`: group_kinds(sr, rep), each kind's first group (alike groups price alike, so the
  // slowest kind's price is the slowest group's).
  double dp_collective(StageRanks& sr, const split_detail::Replicas& rep,
                       std::span<const std::size_t> kinds, ShardingKind sharding,
                       CollectiveKind kind, double elements, double element_bytes, double sharing,
                       double variant_elements = -1);
  // The stage's sharding groups by kind for the comm model (sim::node_link_classes' rule: the
  // members' GPU types, node offsets from the group's first node and node link classes, in
  // group order, and their state shares): per kind its first group, ascending. A group whose
  // leads are out of rank order is a kind of its own. O(replicas), once per stage of an
  // estimate, so that a collective is priced once per kind, not once per group (12,800 node
  // groups in a 100k-GPU hybrid stage).
  std::vector<std::size_t> group_kinds(const StageRanks& sr, const split_detail::Replicas& rep);
  // Hybrid sharding's all-reduce across its groups of a unit's gradient, piece by piece over
  // the owners of each slice (as traces' ShardLayout cuts it); 0 with one group.
  double cross_reduction(const StageRanks& sr, const split_detail::Replicas& rep, double elements,
                         double element_bytes, double sharing);
  // The stage's ReplicaLayout, worked out on the first estimate that asks (its errors name
  // `file` and stage s, and none is kept when it throws).
  // `ranks_at`: the key blamed for a tensor-parallel group of unlike GPUs.
  split_detail::ReplicaLayout& replica_layout(StageRanks& sr, const PipelineStage& st, int T,
                                              const std::string& file, const std::string& ranks_at);
  void resolve_replicas(Replicas& rep, StageRanks& sr, const ModelSplit& split,
                        const PipelineStage& st, int s, int T, const SplitOptions& options,
                        const std::string& file);
  // ReplicaBatches::BySpeed: rep.size, rep.sub and rep.share, each replica's samples of every
  // micro-batch (balance_samples over its pass times, within what its memory holds at share 0),
  // its sub-steps (one while the share fits in one step; else, when `sub_steps`, the fewest that
  // fit, then with its state share) and, when `sharded`, its state share (by free memory).
  // `pass_of(class, b, k)`: the class's pass of b samples in k sub-steps.
  void deal_by_speed(Replicas& rep, ReplicaMemory& memory_of, bool sub_steps, bool sharded,
                     const std::function<const StagePass&(std::size_t, int, int)>& pass_of);
};

}  // namespace cephalo::planner

namespace cephalo::planner::split_detail {

struct EstimatorAccess {
  static SplitEstimator::Impl& impl(SplitEstimator& e) { return *e.impl_; }
};

// From now on every stage's replicas are priced one at a time, not by runs of alike ones (same
// GPU class, capacity and place of the tightest rank): the same answers, to the bit. For the
// tests that compare the two forms; the planner never asks it.
inline void price_replica_by_replica(SplitEstimator& estimator) {
  EstimatorAccess::impl(estimator).by_runs = false;
}

}  // namespace cephalo::planner::split_detail

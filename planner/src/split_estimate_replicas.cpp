// A stage's replicas as one estimate prices them (their GPU types, tightest ranks, sharding
// groups, samples and shares) and a replica's memory by the one rule: the parts of
// SplitEstimator's estimate (split_estimate.cpp) that look at a stage's replicas.
#include <algorithm>
#include <limits>
#include <map>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "split_estimator_impl.hpp"

namespace cephalo::planner {

split_detail::ReplicaLayout& SplitEstimator::Impl::replica_layout(StageRanks& sr,
                                                                  const PipelineStage& st, int T,
                                                                  const std::string& file,
                                                                  const std::string& ranks_at) {
  if (sr.replicas) return *sr.replicas;
  const auto& ranks = rank_table;
  const int R = static_cast<int>(st.ranks.size()) / T;
  auto out = std::make_unique<split_detail::ReplicaLayout>();
  split_detail::ReplicaLayout& rep = *out;
  rep.first_node = ranks[static_cast<std::size_t>(st.ranks.front())].node;
  // Per replica only integer work: GPU types by their index (rank_type), the stage's classes
  // found through a table by type.
  std::vector<int> class_of_type(types.size(), -1);
  rep.class_of.reserve(static_cast<std::size_t>(R));
  rep.capacity.reserve(static_cast<std::size_t>(R));
  rep.capacity_rank.reserve(static_cast<std::size_t>(R));
  rep.capacity_place.reserve(static_cast<std::size_t>(R));
  rep.node.reserve(static_cast<std::size_t>(R));
  for (int j = 0; j < R; ++j) {
    const int lead = st.ranks[static_cast<std::size_t>(j * T)];
    const int type = rank_type[static_cast<std::size_t>(lead)];
    double cap = std::numeric_limits<double>::infinity(), slowdown = 1.0;
    int cap_rank = lead, cap_place = 0;
    for (int t = 0; t < T; ++t) {
      const int r = st.ranks[static_cast<std::size_t>(j * T + t)];
      slowdown = std::max(slowdown, rank_slowdown[static_cast<std::size_t>(r)]);
      if (rank_type[static_cast<std::size_t>(r)] != type)
        throw ValidationError(file, ranks_at, std::to_string(r),
                              "the ranks of one tensor-parallel group of one GPU type (rank " +
                                  std::to_string(lead) + " is " +
                                  types[static_cast<std::size_t>(type)]->name + ")");
      const double c = rank_usable[static_cast<std::size_t>(r)];
      if (c < cap) {
        cap = c;
        cap_rank = r;
        cap_place = t;
      }
    }
    // A class is a (type, slowdown): real hardware through the table, an emulated slowdown
    // (test clusters of a few ranks) by a walk over the stage's classes.
    int emulated = -1;
    if (slowdown != 1.0)
      for (std::size_t c = 0; c < rep.classes.size() && emulated < 0; ++c)
        if (rep.class_type[c] == type && rep.class_slowdown[c] == slowdown)
          emulated = static_cast<int>(c);
    int& cls = slowdown == 1.0 ? class_of_type[static_cast<std::size_t>(type)] : emulated;
    if (cls < 0) {
      const DeviceSpec& spec = ranks[static_cast<std::size_t>(lead)].slot->spec;
      if (!rep.gpu_names.empty()) rep.gpu_names += "+";
      rep.gpu_names += spec.name;
      rep.classes.push_back(&spec);
      rep.class_type.push_back(type);
      rep.class_slowdown.push_back(slowdown);
      cls = static_cast<int>(rep.classes.size()) - 1;
    }
    rep.class_of.push_back(static_cast<std::size_t>(cls));
    rep.capacity.push_back(cap);
    rep.capacity_rank.push_back(cap_rank);
    rep.capacity_place.push_back(cap_place);
    rep.node.push_back(ranks[static_cast<std::size_t>(lead)].node);
  }
  for (std::size_t j = 1; j < rep.node.size(); ++j)
    if (rep.class_of[j] != rep.class_of[j - 1] || rep.capacity[j] != rep.capacity[j - 1] ||
        rep.capacity_place[j] != rep.capacity_place[j - 1])
      rep.run_end.push_back(j);
  rep.run_end.push_back(rep.node.size());
  rep.whole.emplace_back(rep.node.size());
  for (std::size_t j = 0; j < rep.node.size(); ++j) rep.whole.back()[j] = j;
  sr.replicas = std::move(out);
  return *sr.replicas;
}

void SplitEstimator::Impl::resolve_replicas(Replicas& rep, StageRanks& sr, const ModelSplit& split,
                                            const PipelineStage& st, int s, int T,
                                            const SplitOptions& options, const std::string& file) {
  const Job& job = scenario.job;
  const auto& ranks = rank_table;
  const int m = split.micro_batches;
  const int R = static_cast<int>(st.ranks.size()) / T;
  // The keys a refusal names are keys the split's file has: a stage where it lists its stages;
  // else the one stage of every rank is the cluster's ranks at the split's degree, and the
  // batch's divisor is its micro_batches, its tensor_parallel or, neither given, the split itself.
  const std::string& root = options.split_path;
  const bool listed = !split.stages.empty();
  const std::string where = listed   ? split_key(root, "stages[" + std::to_string(s) + "]")
                            : m != 1 ? split_key(root, "micro_batches")
                            : T != 1 ? split_key(root, "tensor_parallel")
                                     : split_key(root, "");
  const std::string ranks_at = listed ? split_key(root, "stages[" + std::to_string(s) + "].ranks")
                                      : split_key(root, "tensor_parallel");
  split_detail::ReplicaLayout& layout = replica_layout(sr, st, T, file, ranks_at);
  // Sharding groups: the domain, or under hybrid its replicas on each node, by node (a stage's
  // replicas come node by node, so in one pass unless their nodes are out of order).
  if (split.sharding == ShardingKind::Hybrid && !layout.by_node) {
    auto& groups = layout.by_node.emplace();
    const auto& node = layout.node;
    if (std::is_sorted(node.begin(), node.end())) {
      for (std::size_t j = 0; j < node.size(); ++j) {
        if (j == 0 || node[j] != node[j - 1]) groups.emplace_back();
        groups.back().push_back(j);
      }
    } else {
      std::map<int, std::vector<std::size_t>> by_node;
      for (std::size_t j = 0; j < node.size(); ++j) by_node[node[j]].push_back(j);
      for (auto& [n, g] : by_node) groups.push_back(std::move(g));
    }
  }
  rep.classes = layout.classes;
  rep.class_slowdown = layout.class_slowdown;
  rep.class_type = layout.class_type;
  rep.class_of = layout.class_of;
  rep.capacity = layout.capacity;
  rep.capacity_rank = layout.capacity_rank;
  rep.capacity_place = layout.capacity_place;
  rep.node = layout.node;
  rep.groups = split.sharding == ShardingKind::Hybrid ? *layout.by_node : layout.whole;
  if (by_runs) {
    rep.run_end = layout.run_end;
  } else {
    rep.own_runs.resize(layout.node.size());
    for (std::size_t j = 0; j < rep.own_runs.size(); ++j) rep.own_runs[j] = j + 1;
    rep.run_end = rep.own_runs;
  }
  rep.first_node = layout.first_node;
  rep.gpu_names = layout.gpu_names;
  rep.share.assign(rep.node.size(), 0.0);
  for (const auto& g : rep.groups)
    for (std::size_t j : g) rep.share[j] = 1.0 / static_cast<double>(g.size());

  const ReplicaBatches mode = options.replica_batches;
  if (mode == ReplicaBatches::Even) {
    const long long per_micro = static_cast<long long>(m) * R;
    if (job.global_batch % per_micro != 0) {
      std::ostringstream v, x;
      v << "global batch " << job.global_batch << " over " << m << " micro-batches x " << R
        << " replicas";
      if (!listed)
        v << " (no \"stages\": one stage of the cluster's " << st.ranks.size()
          << " ranks at tensor_parallel " << T << ")";
      x << "a global batch (the job's global_batch) divisible by micro_batches x replicas ("
        << per_micro << ")";
      throw ValidationError(file, where, v.str(), x.str());
    }
    rep.total = static_cast<int>(job.global_batch / m);
    rep.size.assign(static_cast<std::size_t>(R), static_cast<int>(job.global_batch / per_micro));
    rep.sub.assign(static_cast<std::size_t>(R), 1);
  } else {
    if (job.global_batch % m != 0)
      throw ValidationError(
          file, split_key(root, "micro_batches"), std::to_string(m),
          "a micro-batch count dividing the global batch " + std::to_string(job.global_batch));
    rep.total = static_cast<int>(job.global_batch / m);
    if (mode == ReplicaBatches::Given) {
      const ReplicaAllocation& a = options.allocation;
      if (a.micro_batch.size() != ranks.size() || a.state_share.size() != ranks.size())
        throw ValidationError(file, "ranks", std::to_string(a.micro_batch.size()) + " ranks",
                              std::to_string(ranks.size()) + " ranks, one per GPU");
      if (!a.sub_steps.empty() && a.sub_steps.size() != ranks.size())
        throw ValidationError(file, "ranks",
                              std::to_string(a.sub_steps.size()) + " sub-step counts",
                              std::to_string(ranks.size()) + ", one per GPU");
      long long sum = 0;
      for (int j = 0; j < R; ++j) {
        const int lead = st.ranks[static_cast<std::size_t>(j * T)];
        rep.size.push_back(a.micro_batch[static_cast<std::size_t>(lead)]);
        rep.sub.push_back(a.sub_steps_of(static_cast<std::size_t>(lead)));
        if (rep.size.back() % rep.sub.back() != 0)
          throw ValidationError(file, "ranks[" + std::to_string(lead) + "]",
                                std::to_string(rep.size.back()) + " samples per micro-batch in " +
                                    std::to_string(rep.sub.back()) + " sub-steps",
                                "a sub-step count dividing the rank's samples per micro-batch");
        rep.share[static_cast<std::size_t>(j)] = a.state_share[static_cast<std::size_t>(lead)];
        sum += rep.size.back();
      }
      // A plan's shares are of the domain; the memory reads them per sharding group.
      for (const auto& g : rep.groups) {
        double group_sum = 0;
        for (std::size_t j : g) group_sum += rep.share[j];
        for (std::size_t j : g) rep.share[j] = group_sum > 0 ? rep.share[j] / group_sum : 0;
      }
      if (sum != rep.total || rep.unplaced())
        throw ValidationError(file, where,
                              "replica micro-batches summing to " + std::to_string(sum),
                              "at least one sample per replica, summing to global batch / "
                              "micro_batches = " +
                                  std::to_string(rep.total));
    }
  }
  rep.uniform =
      rep.classes.size() == 1 &&
      std::adjacent_find(rep.size.begin(), rep.size.end(), std::not_equal_to<>()) == rep.size.end();
}

SplitEstimator::Impl::ReplicaMemory::ReplicaMemory(const Impl& impl, const ModelSplit& split, int T,
                                                   const std::vector<std::vector<int>>& units,
                                                   std::span<const pipeline::Step> order,
                                                   const SplitOptions& options,
                                                   const std::string& file)
    : impl_(impl),
      split_(split),
      T_(T),
      units_(units),
      order_(order),
      options_(options),
      file_(file) {}

const std::vector<costmodels::MemoryTerm>& SplitEstimator::Impl::ReplicaMemory::terms(
    const Replicas& rep, std::size_t j, int b, int sub, double share) {
  const Scenario& scenario = impl_.scenario;
  const Job& job = scenario.job;
  const int rank = rep.capacity_rank[j];
  const int type = rep.class_type[rep.class_of[j]];
  const bool fsdp = split_.is_default();
  const bool gpu_runtime = impl_.type_gpu_runtime[static_cast<std::size_t>(type)] != 0;
  const auto key = std::make_tuple(fsdp ? type : rep.capacity_place[j], gpu_runtime, b, sub, share);
  auto it = known_.find(key);
  if (it != known_.end()) return it->second;
  const auto& constants = costmodels::memory_constants();
  std::vector<costmodels::MemoryTerm> out;
  if (fsdp) {
    // One stage, T = 1, full sharding: the plan is an FSDP plan, its memory the FSDP terms.
    if (!fsdp_plan_) {
      fsdp_plan_ = even_split_plan(scenario, split_, file_, options_.split_path);
      fsdp_plan_->activation_checkpointing = options_.activation_checkpointing;
    }
    Plan& plan = *fsdp_plan_;
    PlanRank& row = plan.ranks[static_cast<std::size_t>(rank)];
    const PlanRank even = row;
    // An FSDP plan's sub-steps are its micro-batches: m · sub of b / sub.
    row.micro_batch = b / sub;
    row.batch = b * row.micro_batches;
    row.micro_batches *= sub;
    row.state_share = share;
    out = costmodels::predict_memory(scenario, plan, rank, constants).terms;
    row = even;
  } else {
    const int p = static_cast<int>(split_.stages.empty() ? 1 : split_.stages.size());
    costmodels::SplitRankMemoryInputs in;
    in.chunks = units_;
    in.order = order_;
    in.tensor_parallel = T_;
    in.tp_rank = rep.capacity_place[j];
    in.sequence_parallel = split_.sequence_parallel;
    in.head_holds_word_embedding = job.model.tied_embeddings && p > 1;
    in.micro_batch = b / sub;
    in.sub_steps = sub;
    in.sharding = split_.sharding;
    in.state_share = share;
    in.activation_checkpointing = options_.activation_checkpointing;
    in.gpu_runtime = gpu_runtime;
    in.world_size = scenario.cluster.num_ranks();
    out = costmodels::split_rank_memory_terms(job, in, constants);
  }
  return known_.emplace(key, std::move(out)).first->second;
}

double SplitEstimator::Impl::ReplicaMemory::total(const Replicas& rep, std::size_t j, int b,
                                                  int sub, double share) {
  double sum = 0;
  for (const auto& t : terms(rep, j, b, sub, share)) sum += t.bytes;
  return sum;
}

}  // namespace cephalo::planner

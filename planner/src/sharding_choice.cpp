// Choosing full or hybrid sharding (sharding_choice.hpp).
#include "sharding_choice.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "plan_support.hpp"
#include "replay_outcome.hpp"

namespace cephalo::planner {

using namespace detail;

namespace {

// `auto` tries every group size up to this many nodes, powers of two beyond.
constexpr int kEveryGroupSizeUpTo = 16;

ShardingCandidate grouping(const Scenario& s, int k) {
  ShardingCandidate c;
  c.nodes_per_group = k;
  c.sharding.kind = ShardingKind::Hybrid;
  // Groups of k consecutive nodes, each its nodes' ranks in rank order (the cluster is
  // node-major): one walk over the nodes for every group (walking the cluster once per group
  // was quadratic in nodes: at 12,800 nodes and k = 1, 1.3 G steps).
  const int nodes = static_cast<int>(s.cluster.nodes.size());
  int rank = 0;
  for (int first = 0; first < nodes; first += k) {
    std::vector<int> g;
    for (int n = first; n < std::min(first + k, nodes); ++n) {
      const int here =
          static_cast<int>(s.cluster.nodes[static_cast<std::size_t>(n)].devices.size());
      for (int i = 0; i < here; ++i) g.push_back(rank++);
    }
    if (!g.empty()) c.sharding.groups.push_back(std::move(g));
  }
  c.label = "hybrid: " + std::to_string(k) + (k == 1 ? " node" : " nodes") + " per group (" +
            std::to_string(c.sharding.groups.size()) + " groups)";
  return c;
}

// A rank's predicted memory at state share `share` (the memory model is affine in it).
double memory_at(const Scenario& s, const Plan& plan, const PlanRank& r, const DeviceSpec& spec,
                 double share) {
  PlanRank x = r;
  x.state_share = share;
  return costmodels::predict_memory(s.job, plan, x, spec, static_cast<int>(plan.ranks.size()))
      .total;
}

}  // namespace

std::vector<ShardingCandidate> sharding_candidates(const Scenario& s, const std::string& mode,
                                                   int group_nodes) {
  const int nodes = static_cast<int>(s.cluster.nodes.size());
  std::vector<ShardingCandidate> out;
  if (schedule::replicates_state(s.job.implementation.framework)) {
    // A replica per rank is the framework's only layout (the plan check refuses any other).
    ShardingCandidate c;
    c.sharding = replica_sharding(s.cluster.num_ranks());
    c.label = "replicas: 1 device per group (" + std::to_string(s.cluster.num_ranks()) +
              " groups, framework " + to_string(s.job.implementation.framework) + ")";
    out.push_back(std::move(c));
    return out;
  }
  if (mode == "full" || mode == "auto") out.push_back({"full", Sharding{}, 0});
  if (mode == "hybrid") {
    const int k = group_nodes > 0 ? group_nodes : 1;
    if (k > nodes)
      throw InfeasibleError("--group-size " + std::to_string(k) + ": the cluster has only " +
                            std::to_string(nodes) + " nodes");
    out.push_back(grouping(s, k));
  } else if (mode == "auto") {
    if (group_nodes > 0) {
      if (group_nodes < nodes) out.push_back(grouping(s, group_nodes));
    } else {
      // Every group size on small clusters; on large ones powers of two (each candidate is a
      // replay, and at 12,800 nodes every size would be 12,799 of them).
      for (int k = 1; k < nodes; k = nodes <= kEveryGroupSizeUpTo ? k + 1 : 2 * k)
        out.push_back(grouping(s, k));
    }
  }
  return out;
}

bool apply_grouping(const Scenario& s, Plan& plan, const Sharding& sharding, std::string* why) {
  plan.sharding = sharding;
  if (!sharding.hybrid()) return true;
  const auto& devices = s.cluster.ranks();
  // A rank's memory at state share 0 and 1 (the memory model is affine in the share), once per
  // slot kind and row: alike ranks come in runs (a group is mostly one kind of rank), and at
  // 100k ranks and a dozen group sizes this was most of the default search.
  RunMemo<std::tuple<int, int, int, int>, std::pair<double, double>> memory;
  // The plannable bytes, once per slot kind (RankDevice::slot_kind): each rank's own slot is
  // one of 100k places at 100k ranks, read a dozen times over.
  std::vector<double> plannable;
  auto plannable_of = [&](const RankDevice& d) {
    const auto k = static_cast<std::size_t>(d.slot_kind);
    if (k >= plannable.size()) plannable.resize(k + 1, -1.0);
    if (plannable[k] < 0) plannable[k] = plannable_bytes(d.slot->spec);
    return plannable[k];
  };
  for (std::size_t g = 0; g < sharding.groups.size(); ++g) {
    const auto& group = sharding.groups[g];
    for (int attempt = 0;; ++attempt) {
      // free_i = what rank i may still hold once everything but the state is in; the state's
      // full copy costs `state` (the slope of the affine memory model).
      std::vector<double> free_bytes;
      free_bytes.reserve(group.size());
      double total_free = 0, state = 0;
      for (int r : group) {
        const PlanRank& pr = plan.ranks[static_cast<std::size_t>(r)];
        const RankDevice& d = devices[static_cast<std::size_t>(r)];
        const auto [m0, m1] =
            memory.get({d.slot_kind, pr.batch, pr.micro_batch, pr.micro_batches}, [&] {
              return std::make_pair(memory_at(s, plan, pr, d.slot->spec, 0.0),
                                    memory_at(s, plan, pr, d.slot->spec, 1.0));
            });
        state = std::max(state, m1 - m0);
        free_bytes.push_back(std::max(0.0, plannable_of(d) - m0));
        total_free += free_bytes.back();
      }
      if (total_free >= state && total_free > 0) {
        const std::vector<double> shares = shares_by_free_memory(free_bytes);
        for (std::size_t i = 0; i < group.size(); ++i)
          plan.ranks[static_cast<std::size_t>(group[i])].state_share = shares[i];
        break;
      }
      // Smaller micro-batches leave more room for the state.
      bool split = false;
      for (int r : group) {
        PlanRank& pr = plan.ranks[static_cast<std::size_t>(r)];
        if (pr.batch > 0 && pr.micro_batch > 1 && pr.micro_batches * 2 <= kMaxMicroBatchesPerRank) {
          pr.micro_batch = (pr.micro_batch + 1) / 2;
          pr.micro_batches = (pr.batch + pr.micro_batch - 1) / pr.micro_batch;
          split = true;
        }
      }
      if (!split || attempt >= 6) {
        if (why) {
          std::ostringstream o;
          o << "group " << g << " (" << group.size() << " devices from rank " << group.front()
            << ") has " << format_bytes(total_free) << " left after activations for a "
            << format_bytes(state) << " copy of the state";
          *why = o.str();
        }
        return false;
      }
    }
  }
  return true;
}

double hybrid_comm_seconds(const Scenario& s, const costmodels::CostModels& models,
                           const Plan& plan) {
  // A graph holds the collectives its built ranks join, each priced here over its group's full
  // membership (the layout's), as the simulator prices it. The class replay's representatives
  // are a few ranks in a group of every kind (groups of one kind, alike in members, node
  // offsets and links, are priced alike: sim::rank_classes), so the slowest group is among
  // theirs, without building (and paying for) every rank's program.
  traces::ShardLayout cut = traces::shard_layout_of(plan, s);
  const std::vector<int> representatives = sim::rank_classes(cut, s, plan).representatives;
  const traces::TrainingGraph g = traces::build_training_graph_of_ranks(
      plan, s, representatives, std::move(cut), models.comm.get());
  const traces::ShardLayout& layout = g.layout();
  std::map<std::tuple<int, int, double>, double> memo;
  std::vector<double> per_group(static_cast<std::size_t>(layout.num_groups()), 0.0);
  double cross = 0;
  for (const auto& c : g.collectives()) {
    const auto key = std::make_tuple(static_cast<int>(c.kind), c.group, c.total_bytes);
    auto it = memo.find(key);
    if (it == memo.end())
      it = memo.emplace(
                   key,
                   models.comm->collective(s.cluster, sim::full_collective_request(g, c)).seconds)
               .first;
    if (c.group < 0)
      cross += it->second;
    else
      per_group[static_cast<std::size_t>(c.group)] += it->second;
  }
  return *std::max_element(per_group.begin(), per_group.end()) + cross;
}

// Most ranks a hybrid candidate's replay may build (sim::SimOptions::most_replayed_ranks): a replay
// of 8,192 ranks of Llama-7B takes about a second and a few hundred MB on the dev VM; the planner's
// groupings of alike nodes build a few ranks per group shape.
constexpr int kMostReplayedRanks = 8192;

void choose_sharding(const Scenario& s, const costmodels::CostModels& models,
                     const PlannerOptions& options, PlanResult& res, ReplayCache* replays) {
  const auto candidates = sharding_candidates(s, options.sharding, options.group_nodes);
  const Plan base = res.plan;
  std::ostringstream why;
  why << "sharding " << options.sharding << ":";
  std::optional<Plan> best;
  double best_s = 0;
  std::string best_label;
  std::string runner_label;  // the fastest sharding not kept, for the summary
  double runner_s = 0;
  auto offer_runner_up = [&](const std::string& label, double s) {
    if (runner_label.empty() || s < runner_s) {
      runner_label = label;
      runner_s = s;
    }
  };
  for (const auto& c : candidates) {
    Plan p = base;
    std::string reason;
    if (!apply_grouping(s, p, c.sharding, &reason)) {
      why << " " << c.label << " does not fit (" << reason << ");";
      continue;
    }
    // A grouping whose ranks are too unlike to replay by class would be replayed rank by rank:
    // at 100k ranks seconds and gigabytes for one candidate among many. Its replay is refused
    // before anything is built, and the note says so; below the limit every candidate is
    // replayed. A grouping replayed before passed this check then (hybrid plans are replayed
    // only here): even's and proportional's plans, weighed after optimal's, often group into
    // the same plan.
    const int most = c.nodes_per_group > 0 && s.cluster.num_ranks() > kMostReplayedRanks
                         ? kMostReplayedRanks
                         : 0;
    SimOutcome o;
    try {
      o = replays ? replays->outcome(p, s, models, most) : replay_outcome(p, s, models, most);
    } catch (const sim::ReplayTooLarge& e) {
      why << " " << c.label << " not replayed (its replay would build " << e.ranks() << " of "
          << s.cluster.num_ranks() << " ranks; a candidate may build at most " << kMostReplayedRanks
          << ");";
      continue;
    }
    ++res.simulated_candidates;
    if (o.oom) {
      why << " " << c.label << " OOM in simulation (" << o.oom_detail << ");";
      continue;
    }
    why << " " << c.label << " " << format_seconds(o.iteration_s) << ";";
    if (!best || o.iteration_s < best_s) {
      if (best) offer_runner_up(best_label, best_s);
      best = std::move(p);  // 100k rows at 100k ranks: moved, not copied
      best_s = o.iteration_s;
      best_label = c.label;
    } else {
      offer_runner_up(c.label, o.iteration_s);
    }
  }
  if (!best) throw InfeasibleError(why.str() + " no sharding candidate fits");
  why << " chose " << best_label << " (fastest simulated)";
  res.plan = std::move(*best);
  res.simulated_iteration_s = best_s;
  res.note = res.note.empty() ? why.str() : res.note + "; " + why.str();
  if (!runner_label.empty()) {
    const std::string sharding = runner_up_text("sharding " + runner_label, runner_s, best_s);
    res.runner_up = res.runner_up.empty() ? sharding : res.runner_up + "; " + sharding;
  }
}

}  // namespace cephalo::planner

#include "cephalo/sim/class_replay.hpp"

#include <cstdint>
#include <map>
#include <span>
#include <tuple>

#include "cephalo/traces/training_graph.hpp"
#include "replay_internal.hpp"

namespace cephalo::sim {

RankClasses rank_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan) {
  const auto devices = scenario.cluster.ranks();
  const int ranks = static_cast<int>(devices.size());
  const int units = graph.summary().num_units;
  // Everything a rank's replay depends on besides the collectives it shares with all others.
  using Key =
      std::tuple<std::string, double, std::string, int, int, int, std::vector<std::int64_t>>;
  std::map<Key, int> first;
  RankClasses out;
  out.representative.resize(static_cast<std::size_t>(ranks));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(units));
  for (int r = 0; r < ranks; ++r) {
    const auto& d = devices[static_cast<std::size_t>(r)];
    const auto& row = plan.ranks[static_cast<std::size_t>(r)];
    for (int u = 0; u < units; ++u) counts[static_cast<std::size_t>(u)] = graph.slice(u, r).count;
    const auto& node = scenario.cluster.nodes[static_cast<std::size_t>(d.node)];
    Key key{d.slot->spec.name,
            d.slot->slowdown,
            node.intra_link.kind,
            row.batch,
            row.micro_batch,
            row.micro_batches,
            counts};
    auto [it, fresh] = first.emplace(std::move(key), r);
    out.representative[static_cast<std::size_t>(r)] = it->second;
    if (fresh) out.representatives.push_back(r);
  }
  return out;
}

SimResult simulate_plan(const Plan& plan, const Scenario& scenario,
                        const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                        const SimOptions& options) {
  const int ranks = scenario.cluster.num_ranks();
  auto full = [&]() {
    const auto graph = traces::build_training_graph(plan, scenario);
    SimResult r = simulate(graph, scenario, plan, compute, comm, options);
    r.replayed_ranks = ranks;
    return r;
  };
  // Hybrid sharding: classes would also need the group's shape and position (class_replay.hpp);
  // the full replay runs.
  if (options.record_ops || options.record_memory || ranks < 2 || plan.sharding.hybrid())
    return full();
  // A graph of rank 0 alone carries the whole plan's sharding, which the classes depend on.
  const int zero = 0;
  const auto probe = traces::build_training_graph_of_ranks(plan, scenario, {&zero, 1});
  const RankClasses classes = rank_classes(probe, scenario, plan);
  if (static_cast<int>(classes.representatives.size()) == ranks) return full();
  detail::ClassView view;
  view.representative = classes.representative;
  view.spans_nodes = scenario.cluster.nodes.size() > 1;
  const auto graph = traces::build_training_graph_of_ranks(plan, scenario, classes.representatives);
  SimResult r = detail::replay_classes(graph, scenario, plan, compute, comm, options, view);
  r.replayed_ranks = static_cast<int>(classes.representatives.size());
  return r;
}

}  // namespace cephalo::sim

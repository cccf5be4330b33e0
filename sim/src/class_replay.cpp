#include "cephalo/sim/class_replay.hpp"

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <span>
#include <sstream>
#include <tuple>

#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/collective_request.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/training_graph.hpp"
#include "replay_internal.hpp"

namespace cephalo::sim {

namespace {

// Class of every rank from what its own replay depends on besides the collectives: device
// (spec, slowdown), node link kind, plan row and slice sizes in every unit. The exact form: the
// slice sizes in the key.
std::vector<int> exact_device_row_classes(const traces::ShardLayout& graph, const Plan& plan,
                                          const std::vector<RankDevice>& devices) {
  const int units = graph.num_units();
  // The device by its kind (RankDevice::device_kind: spec name, slowdown, node link kind).
  using Key = std::tuple<int, int, int, int, std::vector<std::int64_t>>;
  std::map<Key, int> ids;
  std::vector<int> out(devices.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(units));
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const auto& d = devices[r];
    const auto& row = plan.ranks[r];
    for (int u = 0; u < units; ++u)
      counts[static_cast<std::size_t>(u)] = graph.slice(u, static_cast<int>(r)).count;
    Key key{d.device_kind, row.batch, row.micro_batch, row.micro_batches, counts};
    out[r] = ids.emplace(std::move(key), static_cast<int>(ids.size())).first->second;
  }
  return out;
}

// The same classes, numbered the same (by first rank), without a per-rank key of every unit's
// slice: the slices are hashed unit by unit (a unit's slices lie contiguous in the layout, a
// rank's are a cluster's width apart: at 100k ranks the exact key's walk missed the cache per
// unit), the hash stands in for them in the key, and every rank's slices are then checked
// against its class's first rank, unit by unit. A collision (two slice lists, one hash) fails
// the check and the exact form decides.
std::vector<int> device_row_classes(const traces::ShardLayout& graph, const Plan& plan,
                                    const std::vector<RankDevice>& devices) {
  const std::size_t n = devices.size();
  // Units of one element count are cut alike for every rank (a layout's bounds follow from the
  // count and the shares alone): one unit of each count tells the ranks apart as well as all
  // of them (a model's 32 layers are one).
  std::vector<int> cuts;
  for (int u = 0; u < graph.num_units(); ++u) {
    bool seen = false;
    for (int c : cuts) seen = seen || graph.numel(c) == graph.numel(u);
    if (!seen) cuts.push_back(u);
  }
  std::vector<std::uint64_t> hash(n, 0x9e3779b97f4a7c15ULL);
  for (int u : cuts)
    for (std::size_t r = 0; r < n; ++r) {
      std::uint64_t x =
          hash[r] ^ static_cast<std::uint64_t>(graph.slice(u, static_cast<int>(r)).count);
      x *= 0xff51afd7ed558ccdULL;  // a multiply-xorshift round per unit (murmur3's finaliser)
      hash[r] = x ^ (x >> 33);
    }
  // The device by its kind (RankDevice::device_kind: spec name, slowdown, node link kind), read
  // from the rank table: comparing the names and link kinds themselves read every rank's own
  // slot and node (at 100k ranks, string copies and compares were a third of this function).
  using Key = std::tuple<int, int, int, int, std::uint64_t>;
  std::map<Key, int> ids;
  std::vector<int> out(n), first_rank;
  // Ranks come in long runs of alike ones (a node's GPUs, a fleet's nodes): a rank whose key
  // equals the previous rank's joins its class without a map lookup (at 100k ranks that lookup
  // was most of this function's time).
  const auto key_of = [&](std::size_t r) {
    const auto& row = plan.ranks[r];
    return Key{devices[r].device_kind, row.batch, row.micro_batch, row.micro_batches, hash[r]};
  };
  Key previous;
  for (std::size_t r = 0; r < n; ++r) {
    Key key = key_of(r);
    if (r > 0 && key == previous) {
      out[r] = out[r - 1];
      continue;
    }
    previous = key;
    auto [it, fresh] = ids.emplace(std::move(key), static_cast<int>(ids.size()));
    if (fresh) first_rank.push_back(static_cast<int>(r));
    out[r] = it->second;
  }
  for (int u : cuts)
    for (std::size_t r = 0; r < n; ++r)
      if (graph.slice(u, static_cast<int>(r)).count !=
          graph.slice(u, first_rank[static_cast<std::size_t>(out[r])]).count)
        return exact_device_row_classes(graph, plan, devices);
  return out;
}

// The plan's rank classes as its replay forms them. An FSDP plan's depend on its sharding
// alone: its layout (`layout`, the graph builder's own), not a graph (a graph of even one rank
// prices every uneven collective's variant over its full membership). A split plan's are its
// pipeline lanes' (split_classes.cpp), read from a graph of rank 0 alone, which carries every
// domain's layout and static bytes; empty, with `why`, where the lanes cannot form them.
std::optional<RankClasses> plan_rank_classes(const Plan& plan, const Scenario& scenario,
                                             const std::optional<traces::ShardLayout>& layout,
                                             const costmodels::CommModel* comm, std::string& why) {
  if (layout) return rank_classes(*layout, scenario, plan);
  const int zero = 0;
  return detail::split_rank_classes(
      traces::build_training_graph_of_ranks(plan, scenario, {&zero, 1}, comm), scenario, plan, why);
}

}  // namespace

std::vector<int> node_link_classes(const Cluster& cluster) {
  using Links =
      std::tuple<std::string, double, double, std::string, double, double, int, bool, bool>;
  std::map<Links, int> link_ids;
  std::vector<int> out(cluster.nodes.size());
  for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
    const Node& node = cluster.nodes[n];
    Links key{node.intra_link.kind,
              node.intra_link.bandwidth,
              node.intra_link.latency,
              node.nic.kind,
              node.nic.bandwidth,
              node.nic.latency,
              node.nic_count,
              node.nvls,
              node.sharp};
    out[n] = link_ids.emplace(std::move(key), static_cast<int>(link_ids.size())).first->second;
  }
  return out;
}

RankClasses rank_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan) {
  if (!graph.summary().split) return rank_classes(graph.layout(), scenario, plan);
  std::string why;
  if (auto classes = detail::split_rank_classes(graph, scenario, plan, why)) return *classes;
  RankClasses each;  // no classes: every rank its own
  for (int r = 0; r < graph.num_ranks(); ++r) {
    each.representative.push_back(r);
    each.representatives.push_back(r);
  }
  return each;
}

RankClasses rank_classes(const traces::ShardLayout& layout, const Scenario& scenario,
                         const Plan& plan) {
  const auto& devices = scenario.cluster.ranks();
  const int ranks = static_cast<int>(devices.size());
  const std::vector<int> base = device_row_classes(layout, plan, devices);
  // Hybrid sharding. A group's collectives start when its last member arrives and are priced
  // over its whole membership, so every member of a group sees the same collective times; two
  // members with the same base class (device, row, slices in every unit: all a rank's own ops
  // and memory read) therefore replay alike whatever their positions, and their cross-group
  // pieces change only the reduction's price, which is one for every rank. Two groups replay
  // alike when the comm model prices their collectives alike and their links carry the same
  // flows: the same members' base classes, node offsets and node links (bandwidths, NICs, in
  // group order), each node holding ranks of one group only. A group sharing a node with
  // another is built whole: the node's NIC carries both groups' collectives, so its members
  // are told apart by position and its group by number. Under full sharding every collective
  // has every rank and the base class is the class.
  const bool hybrid = layout.hybrid();
  constexpr int kAlone = 0;  // the third key of a rank in a group of whole nodes
  std::vector<int> group_kind(static_cast<std::size_t>(layout.num_groups()), 0);
  std::vector<char> shares_node(static_cast<std::size_t>(layout.num_groups()), 0);
  if (hybrid) {
    const auto& nodes = scenario.cluster.nodes;
    std::vector<int> node_group(nodes.size(), -1);
    for (int r = 0; r < ranks; ++r) {
      const int g = layout.group_of(r);
      int& at = node_group[static_cast<std::size_t>(devices[static_cast<std::size_t>(r)].node)];
      if (at < 0) at = g;
      if (at != g)
        shares_node[static_cast<std::size_t>(at)] = shares_node[static_cast<std::size_t>(g)] = 1;
    }
    const std::vector<int> node_links = node_link_classes(scenario.cluster);
    std::map<std::vector<int>, int> kinds;
    for (int g = 0; g < layout.num_groups(); ++g) {
      if (shares_node[static_cast<std::size_t>(g)]) {
        group_kind[static_cast<std::size_t>(g)] = -1 - g;  // its own kind
        continue;
      }
      const auto members = layout.group(g);
      const int first_node = devices[static_cast<std::size_t>(members.front())].node;
      std::vector<int> shape;
      for (int r : members) {
        const int node = devices[static_cast<std::size_t>(r)].node;
        shape.push_back(base[static_cast<std::size_t>(r)]);
        shape.push_back(node - first_node);
        shape.push_back(node_links[static_cast<std::size_t>(node)]);
      }
      group_kind[static_cast<std::size_t>(g)] =
          kinds.emplace(std::move(shape), static_cast<int>(kinds.size())).first->second;
    }
  }
  std::map<std::tuple<int, int, int>, int> first;
  RankClasses out;
  out.representative.resize(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    int kind = 0, where = kAlone;
    if (hybrid) {
      const int g = layout.group_of(r);
      kind = group_kind[static_cast<std::size_t>(g)];
      if (shares_node[static_cast<std::size_t>(g)]) where = layout.position(r);
    }
    const auto key = std::make_tuple(base[static_cast<std::size_t>(r)], kind, where);
    auto [it, fresh] = first.emplace(key, r);
    out.representative[static_cast<std::size_t>(r)] = it->second;
    if (fresh) out.representatives.push_back(r);
  }
  return out;
}

costmodels::CollectiveRequest full_collective_request(const traces::TrainingGraph& graph,
                                                      const traces::Collective& c,
                                                      bool overlaps_compute) {
  // Kind, variant and the cross-group pieces as the full replay asks; the members replaced by
  // the full membership (each its slice of every segment, as the full graph's members carry).
  costmodels::CollectiveRequest req = traces::collective_request(graph, c, overlaps_compute);
  // A split plan's tensor-parallel, pipeline and tied collectives stay in a pipeline lane,
  // which its class replay builds whole (split_classes.cpp): their members are all there.
  if (!traces::is_data_parallel(c.kind)) return req;
  req.ranks.clear();
  req.shard_bytes.clear();
  const auto segments = graph.segments(c);
  detail::for_each_full_member(graph, c, [&](int r) {
    std::int64_t elements = 0;
    for (const auto& seg : segments) elements += graph.slice(seg.unit, r).count;
    req.ranks.push_back(r);
    req.shard_bytes.push_back(static_cast<double>(elements) * c.element_bytes);
  });
  return req;
}

namespace detail {

std::vector<char> collective_spans_nodes(const traces::TrainingGraph& graph,
                                         const Scenario& scenario) {
  const auto& devices = scenario.cluster.ranks();
  auto node_of = [&](int r) { return devices[static_cast<std::size_t>(r)].node; };
  // A data-parallel membership is one group (or domain) of one layout, shared by every phase's
  // collectives: walked once each (at 100k ranks under full sharding every collective has
  // every rank).
  std::map<std::pair<const traces::ShardLayout*, int>, char> of_group;
  std::vector<char> out;
  out.reserve(graph.collectives().size());
  for (const traces::Collective& c : graph.collectives()) {
    const auto members = graph.members(c);
    const int node = node_of(members.front().rank);
    char spans = 0;
    if (traces::is_data_parallel(c.kind)) {
      const auto key = std::make_pair(&graph.layout_of(members.front().rank), c.group);
      const auto inserted = of_group.emplace(key, 0);
      char& group_spans = inserted.first->second;
      if (inserted.second)
        for_each_full_member(graph, c, [&](int r) { group_spans |= node_of(r) != node; });
      spans = group_spans;
    } else {
      for (const auto& m : members) spans |= node_of(m.rank) != node ? 1 : 0;
    }
    out.push_back(spans);
  }
  return out;
}

}  // namespace detail

ReplayTooLarge::ReplayTooLarge(int ranks, int most)
    : Error("the replay would build " + std::to_string(ranks) + " ranks; at most " +
            std::to_string(most) + " were allowed (SimOptions::most_replayed_ranks)"),
      ranks_(ranks) {}

SimResult simulate_plan(const Plan& plan, const Scenario& scenario,
                        const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                        const SimOptions& options) {
  return replay_plan(plan, scenario, compute, comm, options).result;
}

PlanReplay replay_plan(const Plan& plan, const Scenario& scenario,
                       const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                       const SimOptions& options) {
  const int ranks = scenario.cluster.num_ranks();
  const auto refuse_above = [&](int built) {
    if (options.most_replayed_ranks > 0 && built > options.most_replayed_ranks)
      throw ReplayTooLarge(built, options.most_replayed_ranks);
  };
  auto full = [&]() {
    refuse_above(ranks);
    // Every rank is built: the bound is the per-rank sum (core/plan.hpp), whatever the classes.
    if (!plan.has_split())
      check_unit_passes(plan, full_unit_passes(plan, scenario),
                        "units x micro-batches summed over ranks: this replay builds every rank "
                        "(per-op records, a trace, or no two ranks alike)",
                        "the plan");
    PlanReplay out;
    out.graph = traces::build_training_graph(plan, scenario, &comm);
    out.result = simulate(*out.graph, scenario, plan, compute, comm, options);
    out.result.replayed_ranks = ranks;
    return out;
  };
  if (options.record_ops || options.record_memory || ranks < 2) return full();
  std::string why;
  // An FSDP plan's layout is cut once: its classes are formed from it, then the graph of their
  // representatives is built on it.
  std::optional<traces::ShardLayout> layout;
  if (!plan.has_split()) layout = traces::shard_layout_of(plan, scenario);
  const auto classes = plan_rank_classes(plan, scenario, layout, &comm, why);
  if (!classes) {
    PlanReplay out = full();
    out.result.full_replay_reason = "no rank classes: " + why;
    return out;
  }
  if (static_cast<int>(classes->representatives.size()) == ranks) return full();
  refuse_above(static_cast<int>(classes->representatives.size()));
  // What this replay builds: an FSDP plan's representatives' passes (validate_plan_for bounded
  // the plan's row classes; hybrid positions can make more). A split plan's reader bounded its
  // passes per rank (core/plan.hpp), the representatives' among them.
  if (!plan.has_split()) {
    std::int64_t passes = 0;
    for (int r : classes->representatives)
      passes += std::int64_t{scenario.job.model.num_layers + 2} *
                plan.ranks[static_cast<std::size_t>(r)].micro_batches;
    check_unit_passes(plan, passes,
                      "units x micro-batches summed over the " +
                          std::to_string(classes->representatives.size()) +
                          " ranks this class replay builds, one per class",
                      "the plan");
  }
  // One representative per class, the collectives between classes priced over their full
  // membership: FSDP, hybrid and split plans alike (detail::replay_classes).
  detail::ClassView view;
  view.representative = classes->representative;
  const auto graph =
      layout
          ? traces::build_training_graph_of_ranks(plan, scenario, classes->representatives,
                                                  std::move(*layout), &comm)
          : traces::build_training_graph_of_ranks(plan, scenario, classes->representatives, &comm);
  PlanReplay out;
  out.result = detail::replay_classes(graph, scenario, plan, compute, comm, options, view);
  out.result.replayed_ranks = static_cast<int>(classes->representatives.size());
  return out;
}

Simulation simulate_checked(const Scenario& scenario, const Plan& plan,
                            const std::string& plan_label, const std::string& compute_model,
                            SimOptions options, const OutputTarget& trace) {
  if (!trace.file.empty()) traces::check_chrome_trace_name(trace.file, "arguments", trace.what);
  traces::check_plan_for(plan, scenario, plan_label);
  if ((options.record_ops || !trace.file.empty()) && !plan.has_split())
    check_unit_passes(plan, full_unit_passes(plan, scenario),
                      "units x micro-batches summed over ranks: per-op records and traces "
                      "replay every rank",
                      plan_label);
  Simulation s;
  s.models = costmodels::make_cost_models(scenario, compute_model);
  check_outputs({trace});                       // before simulating (output_file.hpp)
  options.record_memory = !trace.file.empty();  // the trace's memory counter track
  const auto t0 = std::chrono::steady_clock::now();
  // Per-op records and traces need every rank's ops: the full graph, which replay_plan keeps.
  // Otherwise it replays one representative per class of identical ranks.
  s.replay = replay_plan(plan, scenario, *s.models.compute, *s.models.comm, options);
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.replay.result.report.warnings = costmodels::prediction_warnings(scenario);
  return s;
}

bool write_simulation_trace(const Simulation& run, const Scenario& scenario,
                            const std::string& file) {
  if (!run.replay.graph) return false;
  traces::write_chrome_trace(file, trace_input(run.replay.result, *run.replay.graph, scenario));
  return true;
}

std::string render_replay_summary(const Simulation& run, const Scenario& scenario,
                                  const Plan& plan) {
  const SimResult& result = run.replay.result;
  const auto& graph = run.replay.graph;
  std::ostringstream out;
  out << "simulated "
      << (graph ? std::to_string(graph->num_ops()) + " ops"
                : std::to_string(result.replayed_ranks) + " of " +
                      std::to_string(plan.ranks.size()) + " ranks")
      << ", " << result.report.events << " events in " << format_seconds(run.wall_s)
      << "; implementation " << to_string(scenario.job.implementation)
      << stack_label(scenario.job.implementation) << "\n";
  for (const auto& line : replay_notices(run)) out << line << "\n";
  return out.str();
}

std::vector<std::string> replay_notices(const Simulation& run) {
  const std::string& why = run.replay.result.full_replay_reason;
  if (why.empty()) return {};
  return {"note: every rank replayed (" + why + ")"};
}

std::string render_simulation(const Simulation& run, const Scenario& scenario, const Plan& plan,
                              const std::string& plan_label, bool ops, bool per_rank) {
  const SimResult& result = run.replay.result;
  std::ostringstream out;
  out << "scenario " << scenario.name << ", plan " << plan_label << " (";
  if (plan.has_split())
    out << describe(plan.model_split, static_cast<int>(plan.ranks.size()));
  else
    out << to_string(plan.accumulation) << " accumulation, offload " << to_string(plan.offload);
  out << ", prefetch " << (plan.prefetch ? "on" : "off") << ", compute model "
      << run.models.compute->name() << ", implementation " << to_string(scenario.job.implementation)
      << stack_label(scenario.job.implementation) << ")\n";
  if (const std::string idle = idle_line(scenario.cluster); !idle.empty()) out << idle << "\n";
  out << "\n" << traces::render_table(result.report, per_rank);
  if (ops) {
    TextTable t({"op", "name", "start", "end"});
    t.set_align(1, TextTable::Align::Left);
    for (const auto& o : result.report.ops)
      t.add_row({std::to_string(o.id), run.replay.graph->op_name(o.id),
                 fixed(o.start_s * 1e3, 3) + " ms", fixed(o.end_s * 1e3, 3) + " ms"});
    out << "\n" << t.render();
  }
  return out.str();
}

}  // namespace cephalo::sim

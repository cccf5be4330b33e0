// The split search's classes of alike ranks (split_search_impl.hpp): nodes of one class at one
// local index, and each stage's TP groups by class, so the floors and the balancing weights are
// worked out once per class instead of once per rank (a 100k-GPU fleet of one node kind has
// eight classes).
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "split_search_impl.hpp"

namespace cephalo::planner::split_detail {
namespace {

bool same_link(const LinkSpec& a, const LinkSpec& b) {
  return a.kind == b.kind && a.bandwidth == b.bandwidth && a.latency == b.latency;
}

bool same_spec(const DeviceSpec& a, const DeviceSpec& b) {
  return std::tie(a.name, a.kind, a.memory_bytes, a.memory_bandwidth, a.peak_fp32, a.peak_tf32,
                  a.peak_fp16, a.peak_bf16, a.pcie_generation, a.pcie_lanes, a.nvlink_bandwidth,
                  a.price_per_hour, a.tdp_watts, a.architecture, a.sm_count, a.boost_clock_hz,
                  a.l2_bytes) == std::tie(b.name, b.kind, b.memory_bytes, b.memory_bandwidth,
                                          b.peak_fp32, b.peak_tf32, b.peak_fp16, b.peak_bf16,
                                          b.pcie_generation, b.pcie_lanes, b.nvlink_bandwidth,
                                          b.price_per_hour, b.tdp_watts, b.architecture, b.sm_count,
                                          b.boost_clock_hz, b.l2_bytes);
}

// Everything of a node a cost model reads (its name aside): its devices in order, its link,
// its NICs and its switches' features.
bool same_node(const Node& a, const Node& b) {
  if (a.devices.size() != b.devices.size() || !same_link(a.intra_link, b.intra_link) ||
      !same_link(a.nic, b.nic) || a.nic_count != b.nic_count || a.nvls != b.nvls ||
      a.sharp != b.sharp)
    return false;
  for (std::size_t i = 0; i < a.devices.size(); ++i) {
    const DeviceSlot& x = a.devices[i];
    const DeviceSlot& y = b.devices[i];
    if (x.type != y.type || x.slowdown != y.slowdown || x.threads != y.threads ||
        !same_spec(x.spec, y.spec))
      return false;
  }
  return true;
}

// A key that alike nodes share: the device names and the link and NIC figures. Nodes with the
// same key are then compared in full (same_node).
std::string node_key(const Node& n) {
  std::string key;
  const auto add = [&key](double x) {
    char bytes[sizeof x];
    std::memcpy(bytes, &x, sizeof x);
    key.append(bytes, sizeof x);
  };
  for (const DeviceSlot& d : n.devices) {
    key += d.spec.name;
    key += '\n';
  }
  add(n.intra_link.bandwidth);
  add(n.nic.bandwidth);
  add(static_cast<double>(n.nic_count));
  return key;
}

}  // namespace

void Search::index_rank_classes() {
  const auto& nodes = scenario_.cluster.nodes;
  std::vector<long long> node_class(nodes.size(), -1);
  // Class representatives by key; a run of copies (a node entry with a count) matches its
  // predecessor at once.
  std::unordered_map<std::string, std::vector<std::size_t>> by_key;
  long long classes = 0;
  std::size_t width = 1;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    width = std::max(width, nodes[n].devices.size());
    if (n > 0 && same_node(nodes[n], nodes[n - 1])) {
      node_class[n] = node_class[n - 1];
      continue;
    }
    auto& reps = by_key[node_key(nodes[n])];
    for (std::size_t r : reps)
      if (same_node(nodes[n], nodes[r])) {
        node_class[n] = node_class[r];
        break;
      }
    if (node_class[n] < 0) {
      node_class[n] = classes++;
      reps.push_back(n);
    }
  }
  const auto& ranks = scenario_.cluster.ranks();
  rank_block_.assign(ranks.size(), -1);
  for (std::size_t t = 0; t < blocks_.size(); ++t)
    for (int r : blocks_[t].ranks) rank_block_[static_cast<std::size_t>(r)] = static_cast<int>(t);
  rank_class_.resize(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r)
    rank_class_[r] =
        node_class[static_cast<std::size_t>(ranks[r].node)] * static_cast<long long>(width) +
        ranks[r].local_index;
}

const ShapeClasses& Search::shape_classes(const StageShape& shape) {
  if (shape.classes && shape.classes->tensor_parallel == shape.tensor_parallel &&
      shape.classes->ranks == shape.ranks.size())
    return *shape.classes;
  ShapeClasses out;
  out.tensor_parallel = shape.tensor_parallel;
  out.ranks = shape.ranks.size();
  const auto& ranks = scenario_.cluster.ranks();
  const double usable = costmodels::memory_constants().usable_fraction;
  const auto T = static_cast<std::size_t>(shape.tensor_parallel);
  std::unordered_map<long long, std::size_t> seen;  // class -> index in out.groups
  long long last_class = 0;
  std::size_t last_index = 0;
  for (std::size_t j = 0; j + T <= shape.ranks.size(); j += T) {
    const long long c = group_class(shape.ranks.data() + j, static_cast<int>(T));
    if (j == 0 || c != last_class) {
      const auto [at, added] = seen.emplace(c, out.groups.size());
      if (added) out.groups.emplace_back(j, 0);
      last_class = c;
      last_index = at->second;
    }
    ++out.groups[last_index].second;
  }
  // A class's groups are alike, so one group per class tells its GPU type and capacity.
  for (const auto& [j, count] : out.groups) {
    const DeviceSpec& spec = ranks[static_cast<std::size_t>(shape.ranks[j])].slot->spec;
    double capacity = std::numeric_limits<double>::infinity();
    for (std::size_t i = j; i < j + T; ++i)
      capacity = std::min(
          capacity,
          ranks[static_cast<std::size_t>(shape.ranks[i])].slot->spec.memory_bytes * usable);
    const bool known = std::any_of(out.fits.begin(), out.fits.end(), [&](const auto& f) {
      return f.first->name == spec.name && f.second == capacity;
    });
    if (!known) out.fits.emplace_back(&spec, capacity);
  }
  std::vector<std::pair<std::string, double>> fit_set;
  for (const auto& [spec, capacity] : out.fits) fit_set.emplace_back(spec->name, capacity);
  std::sort(fit_set.begin(), fit_set.end());
  out.fits_id =
      fit_sets_.emplace(std::move(fit_set), static_cast<int>(fit_sets_.size())).first->second;
  // Runs of one GPU type by the leads' type blocks (rank_block_): a stage of 100k groups
  // compares 100k integers, not as many names.
  int run_block = -1;
  for (std::size_t j = 0; j + T <= shape.ranks.size(); j += T) {
    const int block = rank_block_[static_cast<std::size_t>(shape.ranks[j])];
    if (block != run_block)
      out.type_runs.emplace_back(&ranks[static_cast<std::size_t>(shape.ranks[j])].slot->spec, 0);
    run_block = block;
    ++out.type_runs.back().second;
  }
  shape.classes = std::make_shared<const ShapeClasses>(std::move(out));
  return *shape.classes;
}

double Search::type_step_floor(std::size_t t, int T, int b, bool recompute) {
  const TypeBlock& block = blocks_[t];
  if (block_leads_.size() < blocks_.size()) block_leads_.resize(blocks_.size());
  std::vector<std::size_t>& leads = block_leads_[t];
  if (leads.empty()) {
    // The type's first rank on each node, one per class of rank.
    const auto& ranks = scenario_.cluster.ranks();
    std::unordered_map<long long, bool> seen;
    int node = -1;
    for (std::size_t at = 0; at < block.ranks.size(); ++at) {
      const auto& d = ranks[static_cast<std::size_t>(block.ranks[at])];
      if (d.node == node) continue;
      node = d.node;
      if (seen.emplace(rank_class_[static_cast<std::size_t>(block.ranks[at])], true).second)
        leads.push_back(at);
    }
  }
  double least = std::numeric_limits<double>::infinity();
  std::vector<int> group;
  for (std::size_t at : leads) {
    group.assign(block.ranks.begin() + static_cast<std::ptrdiff_t>(at),
                 block.ranks.begin() + static_cast<std::ptrdiff_t>(at) + T);
    least = std::min(least, step_floor(group, b, recompute));
  }
  return least;
}

}  // namespace cephalo::planner::split_detail

// Cluster's rank table (scenario.hpp): one list of every device, built once per node list.
#include <memory>
#include <utility>

#include "cephalo/core/scenario.hpp"

namespace cephalo::detail {

struct RankTable::Built {
  // What the table was built from: every node's device list (where it is and how long). The
  // table is a function of exactly these, so equal shapes mean an equal table, and any change
  // of a device list (on any node) rebuilds it: O(nodes) per query, ranks/8 on the large
  // clusters, against the O(ranks) copy a query used to make.
  const Node* nodes = nullptr;
  std::vector<std::pair<const DeviceSlot*, std::size_t>> shape;
  std::vector<RankDevice> ranks;

  bool matches(const std::vector<Node>& n) const {
    if (n.data() != nodes || n.size() != shape.size()) return false;
    for (std::size_t i = 0; i < n.size(); ++i)
      if (n[i].devices.data() != shape[i].first || n[i].devices.size() != shape[i].second)
        return false;
    return true;
  }
};

RankTable& RankTable::operator=(const RankTable& other) noexcept {
  if (this != &other) {
    std::lock_guard<std::mutex> lock(mutex_);
    delete current_.exchange(nullptr);
  }
  return *this;
}

RankTable::~RankTable() { delete current_.load(); }

const std::vector<RankDevice>& RankTable::of(const std::vector<Node>& nodes) const {
  if (const Built* b = current_.load(std::memory_order_acquire); b && b->matches(nodes))
    return b->ranks;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const Built* b = current_.load(std::memory_order_acquire); b && b->matches(nodes))
    return b->ranks;
  auto built = std::make_unique<Built>();
  built->nodes = nodes.data();
  std::size_t total = 0;
  for (const auto& node : nodes) {
    built->shape.emplace_back(node.devices.data(), node.devices.size());
    total += node.devices.size();
  }
  built->ranks.reserve(total);
  int rank = 0;
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (std::size_t d = 0; d < nodes[n].devices.size(); ++d)
      built->ranks.push_back(
          {rank++, static_cast<int>(n), static_cast<int>(d), &nodes[n].devices[d]});
  // The previous table belonged to a node list that no longer exists as it was; references
  // into it were invalidated by that change (ranks()'s contract).
  delete current_.exchange(built.get(), std::memory_order_acq_rel);
  return built.release()->ranks;
}

}  // namespace cephalo::detail

// Cluster's rank table (scenario.hpp): one list of every device, built once per node list.
#include <memory>

#include "cephalo/core/scenario.hpp"

namespace cephalo::detail {

struct RankTable::Built {
  // What the table was built from: a change of any of these rebuilds it.
  const Node* nodes = nullptr;
  std::size_t node_count = 0;
  const DeviceSlot* last_devices = nullptr;
  std::size_t last_device_count = 0;
  std::vector<RankDevice> ranks;

  bool matches(const std::vector<Node>& n) const {
    if (n.data() != nodes || n.size() != node_count) return false;
    if (n.empty()) return true;
    return n.back().devices.data() == last_devices && n.back().devices.size() == last_device_count;
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
  built->node_count = nodes.size();
  if (!nodes.empty()) {
    built->last_devices = nodes.back().devices.data();
    built->last_device_count = nodes.back().devices.size();
  }
  std::size_t total = 0;
  for (const auto& node : nodes) total += node.devices.size();
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

// The rank table of a NodeList (scenario.hpp): built on the first query after a change.
#include <memory>

#include "cephalo/core/scenario.hpp"

namespace cephalo::detail {

void RankTable::reset() noexcept {
  // A change of the list is never concurrent with a query (the contract), so no lock: the next
  // query builds the table of the list as it then is.
  delete current_.exchange(nullptr, std::memory_order_acq_rel);
}

const std::vector<RankDevice>& RankTable::build(const std::vector<Node>& nodes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto* built = current_.load(std::memory_order_acquire)) return *built;
  auto table = std::make_unique<std::vector<RankDevice>>();
  std::size_t total = 0;
  for (const auto& node : nodes) total += node.devices.size();
  table->reserve(total);
  int rank = 0;
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (std::size_t d = 0; d < nodes[n].devices.size(); ++d)
      table->push_back({rank++, static_cast<int>(n), static_cast<int>(d), &nodes[n].devices[d]});
  current_.store(table.get(), std::memory_order_release);
  return *table.release();
}

}  // namespace cephalo::detail

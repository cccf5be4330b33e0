// The rank table of a NodeList (scenario.hpp): built on the first query after a change.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>

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
  // Slot kinds: candidates found by the fields most likely to differ, then compared in full.
  // A rank is first compared with the previous one (a node's slots and a fleet's nodes come in
  // long runs of alike ones).
  std::map<std::tuple<std::string, double, double, std::string>, std::vector<int>> slot_kinds;
  std::vector<const DeviceSlot*> slot_of_kind;
  std::map<std::tuple<std::string, double, std::string>, int> device_kinds;
  int rank = 0;
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (std::size_t d = 0; d < nodes[n].devices.size(); ++d) {
      const DeviceSlot& slot = nodes[n].devices[d];
      RankDevice here{rank++, static_cast<int>(n), static_cast<int>(d), &slot};
      const RankDevice* before = table->empty() ? nullptr : &table->back();
      if (before && *before->slot == slot) {
        here.slot_kind = before->slot_kind;
      } else {
        auto& same_key =
            slot_kinds[{slot.spec.name, slot.slowdown, slot.spec.memory_bytes, slot.type}];
        const auto it = std::find_if(same_key.begin(), same_key.end(), [&](int k) {
          return *slot_of_kind[static_cast<std::size_t>(k)] == slot;
        });
        if (it != same_key.end()) {
          here.slot_kind = *it;
        } else {
          here.slot_kind = static_cast<int>(slot_of_kind.size());
          same_key.push_back(here.slot_kind);
          slot_of_kind.push_back(&slot);
        }
      }
      const std::string& link = nodes[n].intra_link.kind;
      if (before && before->slot->spec.name == slot.spec.name &&
          before->slot->slowdown == slot.slowdown &&
          nodes[static_cast<std::size_t>(before->node)].intra_link.kind == link)
        here.device_kind = before->device_kind;
      else
        here.device_kind = device_kinds
                               .emplace(std::make_tuple(slot.spec.name, slot.slowdown, link),
                                        static_cast<int>(device_kinds.size()))
                               .first->second;
      table->push_back(here);
    }
  current_.store(table.get(), std::memory_order_release);
  return *table.release();
}

}  // namespace cephalo::detail

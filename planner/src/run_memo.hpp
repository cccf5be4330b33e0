#pragma once
// RunMemo: the memo of the planner's walks over ranks (internal).
#include <map>
#include <utility>

namespace cephalo::planner::detail {

// A memo for a walk over a plan's ranks, whose alike ranks come in runs (a node's GPUs, a
// fleet's nodes): the last key asked is compared before the map is searched, so a run of
// equal keys costs one comparison per rank (at 100k ranks a map search per rank was most of
// such a walk). Answers are the map's: `make()` runs once per distinct key.
template <typename Key, typename Value>
class RunMemo {
 public:
  template <typename Make>
  const Value& get(const Key& key, Make&& make) {
    if (last_ && last_->first == key) return last_->second;
    auto it = map_.find(key);
    if (it == map_.end()) it = map_.emplace(key, make()).first;
    last_ = &*it;  // map nodes stay where they are
    return it->second;
  }
  std::size_t size() const { return map_.size(); }

 private:
  std::map<Key, Value> map_;
  const std::pair<const Key, Value>* last_ = nullptr;
};

}  // namespace cephalo::planner::detail

#include "link_flows.hpp"

#include <algorithm>

namespace cephalo::sim::detail {

std::uint32_t LinkFlows::new_flow() {
  if (!free_flows_.empty()) {
    std::uint32_t f = free_flows_.back();
    free_flows_.pop_back();
    return f;
  }
  flows_.emplace_back();
  return static_cast<std::uint32_t>(flows_.size() - 1);
}

void LinkFlows::schedule(std::uint32_t f) {
  Flow& fl = flows_[f];
  engine_.schedule_at(engine_.now() + to_ticks(fl.work / fl.rate), done_kind_, f, fl.version);
}

void LinkFlows::retime(std::uint32_t f) {
  Flow& fl = flows_[f];
  const Time now = engine_.now();
  fl.work = std::max(0.0, fl.work - fl.rate * to_seconds(now - fl.last));
  fl.last = now;
  fl.rate = 1.0 / fl.max_load;
  ++fl.version;
  schedule(f);
}

void LinkFlows::shift_load(std::uint32_t f, std::uint32_t from, std::uint32_t to) {
  Flow& fl = flows_[f];
  if (to >= fl.load_hist.size()) fl.load_hist.resize(to + 1, 0);
  --fl.load_hist[from];
  ++fl.load_hist[to];
  std::uint32_t m = fl.max_load;
  if (to > m) m = to;
  while (m > 1 && fl.load_hist[m] == 0) --m;
  if (m != fl.max_load) {
    fl.max_load = m;
    retime(f);
  }
}

void LinkFlows::start(Owner owner, std::span<const std::uint32_t> links, double seconds) {
  const std::uint32_t f = new_flow();
  {
    Flow& fl = flows_[f];
    fl.owner = owner;
    fl.links.assign(links.begin(), links.end());
    fl.active = true;
    fl.work = seconds;
    fl.last = engine_.now();
    fl.max_load = 1;
    fl.load_hist.assign(2, 0);
  }
  if (sharing_) {
    for (std::uint32_t l : flows_[f].links) {
      auto& on = link_flows_[l];
      const auto load = static_cast<std::uint32_t>(on.size() + 1);
      for (std::uint32_t other : on) shift_load(other, load - 1, load);
      on.push_back(f);
      Flow& me = flows_[f];
      if (load >= me.load_hist.size()) me.load_hist.resize(load + 1, 0);
      ++me.load_hist[load];
      me.max_load = std::max(me.max_load, load);
    }
  }
  Flow& me = flows_[f];
  me.rate = 1.0 / me.max_load;
  ++me.version;
  schedule(f);
}

bool LinkFlows::finish(const Event& e, Owner& owner) {
  const std::uint32_t f = e.target;
  Flow& fl = flows_[f];
  if (!fl.active || fl.version != e.data) return false;  // re-timed since: a stale completion
  owner = fl.owner;
  fl.active = false;
  if (sharing_) {
    for (std::uint32_t l : flows_[f].links) {
      auto& on = link_flows_[l];
      auto it = std::find(on.begin(), on.end(), f);
      *it = on.back();
      on.pop_back();
      const auto load = static_cast<std::uint32_t>(on.size());
      for (std::uint32_t other : on) shift_load(other, load + 1, load);
    }
  }
  free_flows_.push_back(f);
  return true;
}

}  // namespace cephalo::sim::detail

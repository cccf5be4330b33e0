#pragma once
// Internal: the fluid model of shared links (sim/README.md, "links are shared resources").
// A flow is a transfer (a copy or a collective) over a set of links; its rate is
// 1 / (the largest number of flows on any of its links), and every flow whose rate changes
// is re-timed: its pending completion event goes stale (version stamp) and a new one is
// scheduled. Per-flow histograms of link loads keep a change O(flows on that link).
#include <cstdint>
#include <span>
#include <vector>

#include "cephalo/sim/event_queue.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::sim::detail {

class LinkFlows {
 public:
  // Completions are scheduled on `engine` as events of `done_kind` whose target is the flow.
  // Without `sharing` every flow runs at full rate (its isolated time).
  LinkFlows(Engine& engine, std::uint32_t done_kind, bool sharing, std::size_t num_links)
      : engine_(engine), done_kind_(done_kind), sharing_(sharing), link_flows_(num_links) {}

  // What a flow moves: a copy op, or a collective (all its members' ops).
  struct Owner {
    traces::OpId op = traces::kNoOp;
    std::int32_t collective = -1;
  };

  // Starts a flow of `seconds` at full rate over `links` now.
  void start(Owner owner, std::span<const std::uint32_t> links, double seconds);
  // On a completion event: false when it is stale (the flow was re-timed since); else the
  // flow ends, its links are released and `owner` says what it moved.
  bool finish(const Event& e, Owner& owner);

 private:
  struct Flow {
    double work = 0;  // seconds left at full rate, as of `last`
    double rate = 1;  // fraction of full rate
    Time last = 0;
    std::uint64_t version = 0;
    std::uint32_t max_load = 1;
    bool active = false;
    Owner owner;
    std::vector<std::uint32_t> links;
    std::vector<std::uint32_t> load_hist;  // number of this flow's links carrying k flows
  };

  std::uint32_t new_flow();
  void shift_load(std::uint32_t f, std::uint32_t from, std::uint32_t to);
  void retime(std::uint32_t f);
  void schedule(std::uint32_t f);

  Engine& engine_;
  std::uint32_t done_kind_;
  bool sharing_;
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_flows_;
  std::vector<std::vector<std::uint32_t>> link_flows_;  // per link: the flows on it
};

}  // namespace cephalo::sim::detail

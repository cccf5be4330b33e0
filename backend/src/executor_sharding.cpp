// Hybrid sharding in the executor: the communicators of this rank's sharding group and of the
// cross-group pieces it owns, and the cross-group reduction op. Everything is read from the
// graph's ShardLayout (which ranks form a group, which pieces a rank owns); nothing is derived
// here.
#include <algorithm>
#include <map>

#include "cephalo/core/error.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

void Executor::Impl::setup_sharding() {
  const tr::ShardLayout& layout = graph.layout();
  group = layout.group_of(rank);
  group_comm = &comm;
  cross_pieces.assign(static_cast<std::size_t>(units), {});
  if (!layout.hybrid()) return;
  // The group: one split of the world, numbered by the position in the group (slice order).
  sub_comms.push_back(comm.split(group, layout.position(rank)));
  group_comm = sub_comms.back().get();
  if (!group_comm || group_comm->size() != static_cast<int>(layout.group(group).size()) ||
      group_comm->rank() != layout.position(rank))
    throw RuntimeFailure("executor: the group communicator of rank " + std::to_string(rank) +
                         " does not match sharding group " + std::to_string(group));
  // The owner sets of every piece of every unit, in one order all ranks agree on (sorted), each
  // split once from the world: a rank joins the splits of the sets it is in. Numbered by group,
  // so member i of a piece's communicator is the owner from group i.
  std::map<std::vector<int>, int> sets;
  for (int u = 0; u < units; ++u)
    for (const auto& p : layout.pieces(u)) {
      auto owners = layout.owners(p);
      sets.emplace(std::vector<int>(owners.begin(), owners.end()), 0);
    }
  std::map<std::vector<int>, Communicator*> by_set;
  for (auto& [owners, unused] : sets) {
    (void)unused;
    const bool member = std::find(owners.begin(), owners.end(), rank) != owners.end();
    auto part = comm.split(member ? 0 : -1, group);
    if (member != (part != nullptr))
      throw RuntimeFailure("executor: MPI split of a cross-group piece disagrees with the layout");
    if (part) {
      by_set[owners] = part.get();
      sub_comms.push_back(std::move(part));
    }
  }
  for (int u = 0; u < units; ++u) {
    const tr::UnitSlice mine = layout.slice(u, rank);
    for (const auto& p : layout.pieces(u)) {
      auto owners = layout.owners(p);
      if (owners[static_cast<std::size_t>(group)] != rank) continue;
      cross_pieces[static_cast<std::size_t>(u)].push_back(
          {p.offset - mine.offset, p.count,
           by_set.at(std::vector<int>(owners.begin(), owners.end()))});
    }
  }
}

// The unit's gradient shard, reduced within the group already, summed across groups: one
// in-place all-reduce per piece over its owners, in offset order (every rank issues the pieces
// of a unit in the same global order, so the blocking collectives cannot deadlock).
void Executor::Impl::run_cross_reduction(const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Comm);
  TensorRef shard = state->grad(op.unit).slice(0, state->owned(op.unit));
  for (const CrossPieceRun& p : cross_pieces.at(static_cast<std::size_t>(op.unit)))
    p.comm->all_reduce(s, shard.slice(p.offset, p.count), ReduceOp::Sum);
}

}  // namespace cephalo::backend

// The executor's communicators (DESIGN §4, "A split in the plan and the graph"; an FSDP plan is
// the one-stage, T = 1 case): this rank's TP group, the data-parallel group of its domain's
// layout, the cross-group pieces it owns (hybrid sharding, and `none` over several ranks), one
// two-rank communicator per direction of every pipeline link and per tied pair. Everything is
// read from the graph (places, layouts, collectives); nothing is derived here.
#include <algorithm>
#include <set>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

TensorParallel tensor_parallel_of(const tr::TrainingGraph& graph, const GptConfig& config,
                                  Communicator& comm, std::unique_ptr<Communicator>& tp_comm) {
  const tr::GraphSummary& sum = graph.summary();
  const int ranks = graph.num_ranks();
  if (comm.size() != ranks)
    throw RuntimeFailure("executor: the graph has " + std::to_string(ranks) +
                         " ranks, the communicator " + std::to_string(comm.size()));
  // Everything a rank could refuse is checked for every rank before the first collective, so
  // that all refuse alike instead of some waiting in a split the others never reach.
  ModelSplit what_runs;  // the graph's split, as far as backend_split_refusal reads it
  what_runs.sequence_parallel = sum.sequence_parallel;
  if (const std::string why = backend_split_refusal(what_runs); !why.empty())
    throw InfeasibleError(why +
                          "; drop it to run the plan, or simulate it with `cephalo simulate`");
  int widest = 1;
  for (int r = 0; r < ranks; ++r) {
    const RankPlace& p = graph.place(r);
    widest = std::max(widest, p.tensor_parallel);
    if (const auto why = GptModel::tensor_parallel_refusal(config, p.tensor_parallel); !why.empty())
      throw InfeasibleError("stage " + std::to_string(p.stage) + ": " + why);
  }
  const int me = comm.rank();
  const RankPlace& mine = graph.place(me);
  const int head = sum.num_units - 1;
  // A tied head on a stage without the embedding keeps its own copy of the word embedding.
  const bool head_copy = config.tied_head && sum.pipeline_stages > 1 && graph.holds(me, head);
  // Every group of one rank (no rank splits its units): no communicator to make.
  if (widest == 1) return {1, 0, nullptr, head_copy};
  // The TP group: the ranks of this stage's replica, coloured by the lowest of them.
  int colour = ranks;
  for (int r = 0; r < ranks; ++r)
    if (graph.place(r).stage == mine.stage && graph.place(r).replica == mine.replica)
      colour = std::min(colour, r);
  tp_comm = comm.split(colour, mine.tp_rank);
  if (!tp_comm || tp_comm->size() != mine.tensor_parallel || tp_comm->rank() != mine.tp_rank)
    throw RuntimeFailure("executor: the tensor-parallel communicator of rank " +
                         std::to_string(me) + " does not match its group");
  return {mine.tensor_parallel, mine.tp_rank, tp_comm.get(), head_copy};
}

void Executor::Impl::set_up_groups() {
  // The data-parallel group: this rank's group of its domain's layout, numbered in slice order.
  // The world itself when the group is the world in rank order (then it is every rank's);
  // otherwise a split coloured by its first member's global rank (groups are disjoint, so
  // colours are unique).
  const tr::ShardLayout& layout = graph.layout_of(rank);
  const int position = graph.layout_position(rank);
  const auto global = graph.layout_ranks(rank);
  const auto members = layout.group(layout.group_of(position));
  const int key =
      static_cast<int>(std::find(members.begin(), members.end(), position) - members.begin());
  bool world = static_cast<int>(members.size()) == ranks;
  for (std::size_t i = 0; world && i < members.size(); ++i)
    world = global[static_cast<std::size_t>(members[i])] == static_cast<int>(i);
  if (world) {
    dp = &comm;
  } else {
    auto group = comm.split(global[static_cast<std::size_t>(members.front())], key);
    if (!group || group->size() != static_cast<int>(members.size()) || group->rank() != key)
      throw RuntimeFailure("executor: the data-parallel communicator of rank " +
                           std::to_string(rank) + " does not match its group");
    dp = group.get();
    owned.push_back(std::move(group));
  }

  // Cross-group pieces (hybrid, or none over several ranks): every domain's owner sets, as
  // global ranks in group order, split from the world in one order all ranks share.
  std::set<std::vector<int>> sets;
  for (int r = 0; r < ranks; ++r) {
    if (graph.layout_position(r) != 0) continue;  // each domain once
    const tr::ShardLayout& l = graph.layout_of(r);
    if (!l.hybrid()) continue;
    const auto g = graph.layout_ranks(r);
    for (int u = 0; u < units; ++u)
      for (const auto& p : l.pieces(u)) {
        std::vector<int> owners;
        for (int o : l.owners(p)) owners.push_back(g[static_cast<std::size_t>(o)]);
        sets.insert(owners);
      }
  }
  std::map<std::vector<int>, Communicator*> by_set;
  for (const auto& owners : sets) {
    const auto at = std::find(owners.begin(), owners.end(), rank);
    auto part = comm.split(at != owners.end() ? 0 : -1, static_cast<int>(at - owners.begin()));
    if ((at != owners.end()) != (part != nullptr))
      throw RuntimeFailure("executor: the split of a cross-group piece disagrees with the layout");
    if (part) {
      by_set[owners] = part.get();
      owned.push_back(std::move(part));
    }
  }
  pieces.assign(static_cast<std::size_t>(units), {});
  if (layout.hybrid())
    for (int u = 0; u < units; ++u) {
      const tr::UnitSlice mine = layout.slice(u, position);
      for (const auto& p : layout.pieces(u)) {
        const auto owners = layout.owners(p);
        if (owners[static_cast<std::size_t>(layout.group_of(position))] != position) continue;
        std::vector<int> g;
        for (int o : owners) g.push_back(global[static_cast<std::size_t>(o)]);
        pieces[static_cast<std::size_t>(u)].push_back(
            {p.offset - mine.offset, p.count, by_set.at(g)});
      }
    }

  // Two-rank communicators: one per direction of every pipeline link (its sender is rank 0),
  // so a link's sends and receives never share a communicator with the other direction (NCCL,
  // communicator.hpp), and one per tied pair (first stage's rank, last stage's). Made in rounds
  // in which no rank is in two pairs, one world split per round.
  std::vector<std::tuple<int, int, bool>> pairs;  // (from / first, to / last, tied)
  for (const auto& c : graph.collectives()) {
    if (c.kind != tr::OpKind::Send && c.kind != tr::OpKind::TiedAllReduce) continue;
    const auto ms = graph.members(c);
    pairs.emplace_back(ms[0].rank, ms[1].rank, c.kind == tr::OpKind::TiedAllReduce);
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::vector<std::set<int>> rounds;
  std::vector<std::size_t> round_of(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b, is_tied] = pairs[i];
    std::size_t k = 0;
    while (k < rounds.size() && (rounds[k].count(a) || rounds[k].count(b))) ++k;
    if (k == rounds.size()) rounds.emplace_back();
    rounds[k].insert({a, b});
    round_of[i] = k;
  }
  for (std::size_t k = 0; k < rounds.size(); ++k) {
    int colour = -1, pair_key = 0;
    std::size_t mine = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, b, is_tied] = pairs[i];
      if (round_of[i] != k || (a != rank && b != rank)) continue;
      colour = static_cast<int>(i);
      pair_key = a == rank ? 0 : 1;
      mine = i;
    }
    auto part = comm.split(colour, pair_key);
    if ((colour >= 0) != (part != nullptr) || (part && part->size() != 2))
      throw RuntimeFailure("executor: a pipeline link's split disagrees with the graph");
    if (!part) continue;
    const auto [a, b, is_tied] = pairs[mine];
    (is_tied ? tied : links)[{a, b}] = part.get();
    owned.push_back(std::move(part));
  }
}

}  // namespace cephalo::backend

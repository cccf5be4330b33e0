// TrainingGraph's accessors and its Boost.Graph view; the builder is graph_builder.hpp.
#include "cephalo/traces/training_graph.hpp"

#include <algorithm>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>
#include <stdexcept>

#include "cephalo/core/schedule.hpp"

namespace cephalo::traces {

struct TrainingGraph::BoostGraph {
  using Graph =
      boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                         boost::no_property, std::uint32_t, std::uint32_t>;
  Graph graph;
};

TrainingGraph::TrainingGraph() = default;
TrainingGraph::~TrainingGraph() = default;
TrainingGraph::TrainingGraph(TrainingGraph&&) noexcept = default;
TrainingGraph& TrainingGraph::operator=(TrainingGraph&&) noexcept = default;

std::span<const Op> TrainingGraph::program(int rank) const {
  return {ops_.data() + rank_offsets_[rank], ops_.data() + rank_offsets_[rank + 1]};
}

std::span<const OpId> TrainingGraph::stream_program(int rank, Stream stream) const {
  std::size_t i = static_cast<std::size_t>(rank) * kNumStreams + static_cast<int>(stream);
  return {stream_ops_.data() + stream_offsets_[i], stream_ops_.data() + stream_offsets_[i + 1]};
}

std::span<const OpId> TrainingGraph::waits_on(OpId id) const {
  const Op& o = ops_[id];
  return {deps_.data() + o.deps_begin, o.deps_count};
}

std::span<const OpId> TrainingGraph::waited_by(OpId id) const {
  return {succs_.data() + succ_offsets_[id], succs_.data() + succ_offsets_[id + 1]};
}

std::span<const CollectiveMember> TrainingGraph::members(const Collective& c) const {
  return {members_.data() + c.members_begin, c.members_count};
}

std::span<const CollectiveSegment> TrainingGraph::segments(const Collective& c) const {
  return {segments_.data() + c.segments_begin, c.segments_count};
}

OpId TrainingGraph::append_op(Op op, int rank, std::span<const OpId> deps) {
  op.id = static_cast<OpId>(ops_.size());
  op.rank = rank;
  op.stream = stream_of(op.kind);
  op.deps_begin = static_cast<std::uint32_t>(deps_.size());
  for (OpId d : deps) {
    if (d == kNoOp || ops_[d].stream == op.stream) continue;
    if (std::find(deps_.begin() + op.deps_begin, deps_.end(), d) != deps_.end()) continue;
    deps_.push_back(d);
  }
  op.deps_count = static_cast<std::uint32_t>(deps_.size()) - op.deps_begin;
  ops_.push_back(op);
  return op.id;
}

void TrainingGraph::index_streams() {
  const std::size_t lanes = static_cast<std::size_t>(summary_.num_ranks) * kNumStreams;
  auto lane = [](const Op& o) {
    return static_cast<std::size_t>(o.rank) * kNumStreams + static_cast<int>(o.stream);
  };
  stream_offsets_.assign(lanes + 1, 0);
  for (const Op& o : ops_) ++stream_offsets_[lane(o) + 1];
  for (std::size_t i = 0; i < lanes; ++i) stream_offsets_[i + 1] += stream_offsets_[i];
  stream_ops_.resize(ops_.size());
  {
    std::vector<std::uint32_t> cursor(stream_offsets_.begin(), stream_offsets_.end() - 1);
    for (const Op& o : ops_) stream_ops_[cursor[lane(o)]++] = o.id;
  }

  succ_offsets_.assign(ops_.size() + 1, 0);
  for (OpId d : deps_) ++succ_offsets_[d + 1];
  for (std::size_t i = 0; i < ops_.size(); ++i) succ_offsets_[i + 1] += succ_offsets_[i];
  succs_.resize(deps_.size());
  {
    std::vector<std::uint32_t> cursor(succ_offsets_.begin(), succ_offsets_.end() - 1);
    for (const Op& o : ops_)
      for (std::uint32_t i = 0; i < o.deps_count; ++i)
        succs_[cursor[deps_[o.deps_begin + i]]++] = o.id;
  }
}

std::span<const int> TrainingGraph::layout_ranks(int rank) const {
  return domain_ranks_[static_cast<std::size_t>(domain_of_[static_cast<std::size_t>(rank)])];
}

bool TrainingGraph::recomputes_attention_core(int unit) const {
  return schedule::recomputes_attention_core(summary_.activation_checkpointing, unit,
                                             summary_.num_units);
}

std::string TrainingGraph::op_name(OpId id) const {
  const Op& o = ops_[id];
  std::string s = short_name(o.kind);
  if (o.unit >= 0) s += " u" + std::to_string(o.unit);
  if (o.micro_batch >= 0) s += " mb" + std::to_string(o.micro_batch);
  s += " r" + std::to_string(o.rank);
  return s;
}

const TrainingGraph::BoostGraph& TrainingGraph::boost_graph() const {
  if (boost_) return *boost_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  edges.reserve(ops_.size() * 2 + deps_.size());
  // Stream order.
  for (std::size_t s = 0; s + 1 < stream_offsets_.size(); ++s)
    for (std::uint32_t i = stream_offsets_[s]; i + 1 < stream_offsets_[s + 1]; ++i)
      edges.emplace_back(stream_ops_[i], stream_ops_[i + 1]);
  // Cross-stream waits.
  for (const Op& o : ops_)
    for (OpId d : waits_on(o.id)) edges.emplace_back(d, o.id);
  // Cross-rank rendezvous: lowest-ranked participant to every other participant.
  for (const Collective& c : collectives_) {
    auto m = members(c);
    for (std::size_t i = 1; i < m.size(); ++i) edges.emplace_back(m[0].op, m[i].op);
  }
  boost_ = std::make_unique<BoostGraph>(
      BoostGraph{BoostGraph::Graph(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(),
                                   static_cast<std::uint32_t>(ops_.size()))});
  return *boost_;
}

std::size_t TrainingGraph::boost_num_edges() const { return boost::num_edges(boost_graph().graph); }

std::vector<OpId> TrainingGraph::topological_order() const {
  const auto& g = boost_graph().graph;
  std::vector<OpId> reversed;
  reversed.reserve(ops_.size());
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    throw std::logic_error("TrainingGraph has a cycle");
  }
  std::reverse(reversed.begin(), reversed.end());
  return reversed;
}

}  // namespace cephalo::traces

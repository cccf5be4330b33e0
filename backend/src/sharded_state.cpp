#include "cephalo/backend/sharded_state.hpp"

namespace cephalo::backend {

ShardedState::ShardedState(Device& dev, const GptModel& model, const traces::TrainingGraph& graph,
                           int rank, ElemType reduce_type)
    : dev_(dev), rank_(rank), reduce_type_(reduce_type) {
  auto& cs = dev.stream(StreamKind::Compute);
  // The layout this rank's state is sharded by: the plan's, or under a split its data-parallel
  // domain's (positions numbered within the domain; a unit of another stage has no elements).
  const traces::ShardLayout& layout = graph.layout_of(rank);
  const int position = graph.layout_position(rank);
  for (int u = 0; u < model.num_units(); ++u) {
    slices_.push_back(layout.slice(u, position));
    counts_.push_back(layout.group_counts(u, layout.group_of(position)));
    const auto n = static_cast<std::size_t>(owned(u));
    param_.push_back(dev.allocate(n, ElemType::F32));
    grad_.push_back(dev.allocate(n, reduce_type));
    m_.push_back(dev.allocate(n, ElemType::F32));
    v_.push_back(dev.allocate(n, ElemType::F32));
    if (!n) continue;
    auto init = model.initial_unit(u);
    dev.upload(param(u).ref(), init.data() + begin(u), n * 4);
    dev.fill(cs, m(u).ref(), 0.0f);
    dev.fill(cs, v(u).ref(), 0.0f);
  }
}

void ShardedState::zero_gradients(Stream& s) {
  for (int u = 0; u < units(); ++u)
    if (owned(u)) dev_.fill(s, grad(u).ref(), 0.0f);
}

void ShardedState::restore(int u, const float* params, const float* mm, const float* vv) {
  const auto bytes = static_cast<std::size_t>(owned(u)) * 4;
  if (!bytes) return;
  dev_.upload(param(u).ref(), params, bytes);
  dev_.upload(m(u).ref(), mm, bytes);
  dev_.upload(v(u).ref(), vv, bytes);
}

}  // namespace cephalo::backend

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
  in_checkpoint_ = layout.group_of(position) == 0;
  for (int u = 0; u < model.num_units(); ++u) {
    slices_.push_back(layout.slice(u, position));
    counts_.push_back(layout.group_counts(u, layout.group_of(position)));
    checkpoint_offsets_.push_back(layout.checkpoint_offsets(u));
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

std::string ShardedState::serialize() {
  dev_.synchronize();
  std::string bytes;
  if (!in_checkpoint_) return bytes;
  for (int u = 0; u < units(); ++u) {
    const auto n = static_cast<std::size_t>(owned(u));
    std::vector<float> host(n);
    for (Buffer* b : {&param(u), &m(u), &v(u)}) {
      if (n) dev_.download(host.data(), b->ref(), n * 4);
      bytes.append(reinterpret_cast<const char*>(host.data()), n * 4);
    }
  }
  return bytes;
}

void ShardedState::restore(int u, const float* params, const float* mm, const float* vv) {
  const auto bytes = static_cast<std::size_t>(owned(u)) * 4;
  if (!bytes) return;
  dev_.upload(param(u).ref(), params, bytes);
  dev_.upload(m(u).ref(), mm, bytes);
  dev_.upload(v(u).ref(), vv, bytes);
}

}  // namespace cephalo::backend

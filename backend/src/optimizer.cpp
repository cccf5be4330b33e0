#include "optimizer.hpp"

#include <cmath>
#include <vector>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {

LossScaler::LossScaler(bool enabled, const LossScalerOptions& options)
    : enabled_(enabled), opt_(options) {
  if (!enabled_) return;
  if (!(opt_.init > 0 && opt_.backoff > 0 && opt_.backoff < 1 && opt_.growth >= 1 &&
        opt_.growth_interval >= 1))
    throw RuntimeFailure(
        "executor: invalid loss-scaling options (init > 0, 0 < backoff < 1, "
        "growth >= 1, growth interval >= 1)");
  scale_ = opt_.init;
}

bool LossScaler::update(bool overflowed) {
  if (!enabled_) return true;
  if (overflowed) {
    scale_ *= opt_.backoff;
    clean_steps_ = 0;
    return false;
  }
  if (++clean_steps_ >= opt_.growth_interval) {
    scale_ *= opt_.growth;
    clean_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int clean_steps) {
  if (!enabled_) return;
  scale_ = scale;
  clean_steps_ = clean_steps;
}

// The sum of a shard is finite exactly when every element is (overflow cannot come from
// summing gradients that are themselves far below fp32's range).
bool gradients_overflowed(Device& dev, Communicator& comm, ShardedState& state) {
  auto& cs = dev.stream(StreamKind::Compute);
  const int units = state.units();
  Buffer sums = dev.allocate(static_cast<std::size_t>(units), ElemType::F32);
  for (int u = 0; u < units; ++u) {
    if (state.owned(u))
      dev.sum(cs, state.grad(u).slice(0, state.owned(u)), sums.slice(u, 1));
    else
      dev.fill(cs, sums.slice(u, 1), 0.0f);
  }
  cs.synchronize();
  std::vector<float> host(static_cast<std::size_t>(units));
  dev.download(host.data(), sums.ref(), host.size() * sizeof(float));
  double bad = 0;
  for (float x : host)
    if (!std::isfinite(x)) bad = 1;
  comm.all_reduce_host(&bad, 1, ReduceOp::Max);
  return bad > 0;
}

void adamw_update(Device& dev, ShardedState& state, const OptimizerSpec& o, double loss_scale,
                  const std::function<void(Buffer, Stream&)>& retire) {
  ++state.adam_step;
  AdamWParams p{static_cast<float>(o.learning_rate), static_cast<float>(o.beta1),
                static_cast<float>(o.beta2),         static_cast<float>(o.epsilon),
                static_cast<float>(o.weight_decay),  state.adam_step};
  auto& cs = dev.stream(StreamKind::Compute);
  const float unscale = static_cast<float>(1.0 / loss_scale);
  const ElemType reduce_type = state.reduce_type();
  for (int u = 0; u < state.units(); ++u) {
    const std::int64_t n = state.owned(u);
    if (!n) continue;
    // AdamW reads an fp32 gradient: a bf16/fp16 shard is widened, and a loss-scaled one
    // unscaled, in a transient fp32 buffer (the shard itself stays as reduced, so
    // gather_gradients sees one convention whatever the types).
    Buffer wide;
    TensorRef g = state.grad(u).slice(0, n);
    if (reduce_type != ElemType::F32 || unscale != 1.0f) {
      wide = dev.allocate(static_cast<std::size_t>(n), ElemType::F32);
      if (reduce_type == ElemType::F32)
        dev.copy(cs, wide.ref(), g);
      else
        dev.cast(cs, g, wide.ref());
      g = wide.ref();
    }
    if (unscale != 1.0f) dev.scale(cs, g, unscale);
    dev.adamw_step(cs, state.param(u).ref(), g, state.m(u).ref(), state.v(u).ref(), p);
    if (wide) retire(std::move(wide), cs);
  }
}

}  // namespace cephalo::backend

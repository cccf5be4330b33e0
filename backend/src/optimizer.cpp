#include "optimizer.hpp"

#include <algorithm>
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

const char* state_part_name(StatePart part) {
  switch (part) {
    case StatePart::Gradients:
      return "gradients";
    case StatePart::Parameters:
      return "parameters";
    case StatePart::FirstMoments:
      return "AdamW first moments (m)";
    case StatePart::SecondMoments:
      return "AdamW second moments (v)";
  }
  return "state";
}

namespace {

Buffer& part_buffer(ShardedState& state, StatePart part, int u) {
  switch (part) {
    case StatePart::Gradients:
      return state.grad(u);
    case StatePart::Parameters:
      return state.param(u);
    case StatePart::FirstMoments:
      return state.m(u);
    case StatePart::SecondMoments:
      break;
  }
  return state.v(u);
}

// Element by element, after a non-finite sum: widened to fp32 on the device, read on the host.
bool holds_non_finite(Device& dev, Stream& cs, TensorRef x) {
  Buffer wide = dev.allocate(static_cast<std::size_t>(x.numel), ElemType::F32);
  if (x.type == ElemType::F32)
    dev.copy(cs, wide.ref(), x);
  else
    dev.cast(cs, x, wide.ref());
  cs.synchronize();
  std::vector<float> host(static_cast<std::size_t>(x.numel));
  dev.download(host.data(), wide.ref(), host.size() * sizeof(float));
  for (float e : host)
    if (!std::isfinite(e)) return true;
  return false;
}

}  // namespace

std::vector<bool> non_finite_parts(Device& dev, Communicator& comm, ShardedState& state,
                                   const std::vector<StatePart>& parts) {
  auto& cs = dev.stream(StreamKind::Compute);
  const int units = state.units();
  const std::size_t n = parts.size() * static_cast<std::size_t>(units);
  Buffer sums = dev.allocate(std::max<std::size_t>(n, 1), ElemType::F32);
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (int u = 0; u < units; ++u) {
      const auto at = static_cast<std::int64_t>(p * static_cast<std::size_t>(units)) + u;
      if (state.owned(u))
        dev.sum(cs, part_buffer(state, parts[p], u).slice(0, state.owned(u)), sums.slice(at, 1));
      else
        dev.fill(cs, sums.slice(at, 1), 0.0f);
    }
  cs.synchronize();
  std::vector<float> host(n);
  if (n) dev.download(host.data(), sums.ref(), n * sizeof(float));
  std::vector<double> bad(parts.size(), 0.0);
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (int u = 0; u < units && bad[p] == 0; ++u)
      if (!std::isfinite(host[p * static_cast<std::size_t>(units) + static_cast<std::size_t>(u)]) &&
          holds_non_finite(dev, cs, part_buffer(state, parts[p], u).slice(0, state.owned(u))))
        bad[p] = 1;
  if (!bad.empty()) comm.all_reduce_host(bad.data(), static_cast<int>(bad.size()), ReduceOp::Max);
  std::vector<bool> out;
  for (double b : bad) out.push_back(b > 0);
  return out;
}

bool gradients_overflowed(Device& dev, Communicator& comm, ShardedState& state) {
  return non_finite_parts(dev, comm, state, {StatePart::Gradients}).front();
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

#pragma once
// The optimizer of the sharded state: fp16 dynamic loss scaling and AdamW on the owned fp32
// shard (DESIGN §7, the job's `precision` and `optimizer`).
#include <functional>
#include <vector>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/sharded_state.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::backend {

struct LossScalerOptions {
  double init = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  int growth_interval = 2000;
};

// Dynamic loss scaling, used only when the job computes in fp16 (bf16 and fp32 have fp32's
// exponent range): the loss gradient is multiplied by scale(); a step whose gradients hold an
// inf/NaN on any rank is skipped on every rank and the scale multiplied by `backoff`; after
// `growth_interval` clean steps in a row it is multiplied by `growth`. Disabled: scale 1.
class LossScaler {
 public:
  // RuntimeFailure for invalid options when enabled.
  LossScaler(bool enabled, const LossScalerOptions& options);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int clean_steps() const { return clean_steps_; }
  // After a step's gradients, with the verdict agreed by every rank: true = apply the update.
  bool update(bool overflowed);
  // From a checkpoint (ignored when disabled: the scale only means something under fp16).
  void restore(double scale, int clean_steps);

 private:
  bool enabled_;
  LossScalerOptions opt_;
  double scale_ = 1.0;
  int clean_steps_ = 0;
};

// The scale at or below which an fp16 overflow ends the run (the gradients overflow fp16 even
// unscaled: DeepSpeed's minimum loss scale).
inline constexpr double kMinLossScale = 1.0;

// One quantity of the sharded state, per unit the owned slice of one of its buffers.
enum class StatePart { Gradients, Parameters, FirstMoments, SecondMoments };
const char* state_part_name(StatePart part);  // "gradients", "parameters", ...

// For each part, whether any rank's owned shard of it holds an inf or NaN (collective: one
// all-reduce over every part, so every rank gets the same verdict). Exact: a shard whose sum is
// finite holds only finite values; one whose sum is not is checked element by element (a sum of
// large finite values may overflow).
std::vector<bool> non_finite_parts(Device& dev, Communicator& comm, ShardedState& state,
                                   const std::vector<StatePart>& parts);

// True when any rank's gradient shard holds an inf or NaN (collective, blocking).
bool gradients_overflowed(Device& dev, Communicator& comm, ShardedState& state);

// One AdamW update of every owned shard with gradients divided by `loss_scale`. Transient
// buffers are handed to `retire` with the stream that last uses them.
void adamw_update(Device& dev, ShardedState& state, const OptimizerSpec& optimizer,
                  double loss_scale, const std::function<void(Buffer, Stream&)>& retire);

}  // namespace cephalo::backend

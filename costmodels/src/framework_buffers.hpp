#pragma once
// What each sharding runtime copies around its parameter gathers and gradient reductions,
// beyond the collective itself (costmodels/README.md, "Frameworks": each count below is a
// source fact of the runtime named, cited there). The copies are memory-bound passes over the
// unsharded buffer on every GPU rank, priced at the rank's memory bandwidth.
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/comm_model.hpp"

namespace cephalo::costmodels {

// Passes over the unsharded buffer (a read or a write of each of its bytes is one pass) that
// `framework` makes per collective of each kind on the training state:
//   gather      after an all-gather of parameters (FSDP2's copy-out into the parameters)
//   reduce      before a reduce-scatter of gradients (FSDP2's copy-in, FSDP1's pre-divide,
//               ZeRO-3's bucket copy, concatenation and divide)
//   all_reduce  around the gradient all-reduce of replicas (DDP's bucket copy in and out; the
//               sharded runtimes all-reduce their reduced shard in place)
struct FrameworkBufferPasses {
  double gather = 0;
  double reduce = 0;
  double all_reduce = 0;
};
FrameworkBufferPasses framework_buffer_passes(Framework framework);

// The fraction of the datasheet memory bandwidth a copy kernel is priced at (the roofline's
// memory-bound efficiency, Efficiency::memory).
inline constexpr double kCopyBandwidthFraction = 0.7;

// Seconds the framework's copies add to `request` (0 unless request.training_state and at
// least two ranks take part): the
// slowest GPU participant's passes over its buffer (the whole buffer, Σ shard_bytes, for a
// gather or reduce-scatter; its own slice for an all-reduce) at kCopyBandwidthFraction of its
// memory bandwidth. CPU ranks add nothing: the backend's CPU runtime is none of these
// frameworks, and its collectives are measured as the backend runs them.
double framework_buffer_seconds(const Cluster& cluster, Framework framework,
                                const CollectiveRequest& request);

}  // namespace cephalo::costmodels

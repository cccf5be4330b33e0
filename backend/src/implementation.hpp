#pragma once
// The software stack the backend executes, declared once: the simulator prices a job run on
// the backend with it (`cephalo run` warns when the scenario says otherwise), RunResult records
// it, `cephalo compare` prints it beside the simulated side's, and `cephalo profile` labels its
// rows with it.
#include "cephalo/core/scenario.hpp"

namespace cephalo::backend {

// Both devices (CPU and CUDA) materialise the attention scores (eager: a batched QKᵀ, softmax,
// PV; no fused attention kernel) and run every elementwise op (residual adds, norms) as its own
// kernel (unfused).
inline Implementation executed_implementation() {
  Implementation impl;
  impl.attention = AttentionKernel::Eager;
  impl.fused_elementwise = false;
  return impl;
}

}  // namespace cephalo::backend

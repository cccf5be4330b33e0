#pragma once
// Internal to costmodels: how every rank's memory terms end, for FSDP plans (memory_model.cpp)
// and split plans (split_memory.cpp) alike.
#include <vector>

#include "cephalo/costmodels/memory_model.hpp"

namespace cephalo::costmodels::detail {

// Appends framework_buffers, then the device runtime's cuda_context and nccl_reserve, then the
// allocator's fragmentation over the dynamic terms (all but training_state, framework buffers
// included): one rule, so the two plan families cannot drift apart.
inline void append_runtime_terms(std::vector<MemoryTerm>& t, bool gpu_runtime, int world_size,
                                 const MemoryConstants& k) {
  t.push_back({"framework_buffers", k.framework_buffers});
  double dynamic = 0;
  for (const auto& term : t)
    if (term.name != "training_state") dynamic += term.bytes;
  t.push_back({"cuda_context", gpu_runtime ? k.cuda_context : 0.0});
  t.push_back({"nccl_reserve", gpu_runtime && world_size > 1 ? k.nccl_reserve : 0.0});
  t.push_back({"fragmentation", allocator_slack_fraction(gpu_runtime, k) * dynamic});
}

}  // namespace cephalo::costmodels::detail

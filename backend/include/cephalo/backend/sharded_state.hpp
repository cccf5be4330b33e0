#pragma once
// This rank's shard of the training state (DESIGN §4 "Sharding"): for every FSDP unit, the
// owned contiguous slice of the flat fp32 parameters, its gradient accumulator (in the job's
// reduce type) and the fp32 AdamW moments, plus the optimizer's step count.
#include <cstdint>
#include <string>
#include <vector>

#include "cephalo/backend/device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::backend {

// Contiguous shard slices of a unit of `numel` elements for the plan's state shares:
// rank r owns [offsets[r], offsets[r+1]). The graph's sharding (traces::shard_offsets), which
// the executor reads from the graph; kept here for the profiler and tests.
inline std::vector<std::int64_t> shard_offsets(std::int64_t numel,
                                               const std::vector<double>& shares) {
  return traces::shard_offsets(numel, shares);
}

class ShardedState {
 public:
  // Allocates the slices the graph gives `rank` (graph.slice: inside its sharding group's copy
  // of the state; under a split, of its data-parallel domain's copy of its TP slice) and
  // initialises the owned parameters from the model's deterministic initialisation (Adam
  // moments zero).
  ShardedState(Device& dev, const GptModel& model, const traces::TrainingGraph& graph, int rank,
               ElemType reduce_type);

  int units() const { return static_cast<int>(slices_.size()); }
  int rank() const { return rank_; }
  std::int64_t begin(int u) const { return slices_[static_cast<std::size_t>(u)].offset; }
  std::int64_t owned(int u) const { return slices_[static_cast<std::size_t>(u)].count; }
  // Elements each member of this rank's group owns of unit u, in group order (the -v
  // collectives' counts on the group's communicator).
  const std::vector<std::int64_t>& counts(int u) const {
    return counts_[static_cast<std::size_t>(u)];
  }

  Buffer& param(int u) { return param_[static_cast<std::size_t>(u)]; }
  Buffer& grad(int u) { return grad_[static_cast<std::size_t>(u)]; }
  Buffer& m(int u) { return m_[static_cast<std::size_t>(u)]; }
  Buffer& v(int u) { return v_[static_cast<std::size_t>(u)]; }
  ElemType reduce_type() const { return reduce_type_; }

  void zero_gradients(Stream& s);

  // Restores unit u's owned slice (owned(u) floats each).
  void restore(int u, const float* params, const float* m, const float* v);

  std::int64_t adam_step = 0;  // AdamW updates applied (bias correction)

 private:
  Device& dev_;
  int rank_;
  ElemType reduce_type_;
  std::vector<traces::UnitSlice> slices_;
  std::vector<std::vector<std::int64_t>> counts_;
  std::vector<Buffer> param_, grad_, m_, v_;
};

}  // namespace cephalo::backend

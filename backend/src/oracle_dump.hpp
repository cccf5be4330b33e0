#pragma once
// Testing hook of `cephalo run --dump-oracle DIR`: what an independent implementation (the
// PyTorch oracle in tests/oracle/) needs to recompute this run and compare it tensor by
// tensor. Rank 0 writes, into DIR:
//   oracle.json          model shape and parameter layout (unit, tensor name, offset, numel),
//                        job optimizer and precision, plan (ranks, batches, checkpointing,
//                        sharding), data seed, and per step the loss, loss scale and skip flag
//   params_SSSSS.f32     the full fp32 parameters before step S (S = first step: the initial
//                        weights, or the restored ones under --resume), and after the last
//   grads_SSSSS.f32      the reduced fp32 gradients step S fed the optimizer
//   tokens_SSSSS.i32, targets_SSSSS.i32
//                        the global batch of step S, samples in global order (rank 0's first)
// Every file is written atomically. The gathers are collective: every rank calls every member.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/backend/executor.hpp"

namespace cephalo::backend {

class OracleDump {
 public:
  // Checks nothing about DIR beyond creating it; the CLI checks it as an output folder.
  OracleDump(std::filesystem::path dir, Executor& exec, const Scenario& scenario, const Plan& plan,
             std::uint64_t data_seed, int rank);
  // Before the first step: the starting parameters.
  void before_training();
  // After each step: that step's gradients, batch and loss, the parameters after it.
  void after_step(const StepResult& r);
  // After training: oracle.json (its presence says the dump is complete).
  void finish();

 private:
  void write_floats(const std::string& name, const std::vector<float>& v) const;
  std::filesystem::path dir_;
  Executor& exec_;
  const Scenario& scenario_;
  const Plan& plan_;
  std::uint64_t seed_;
  int rank_;
  int first_step_ = 0;
  std::vector<StepResult> steps_;
};

}  // namespace cephalo::backend

#pragma once
// The executor (DESIGN §7): walks this rank's program of the TrainingGraph and runs real
// kernels and collectives for the same op ids the simulator replays. One Executor per process;
// it owns the rank's shard of the training state (fp32 master parameters, gradient shard,
// AdamW moments) for every FSDP unit and runs whole training steps.
//
// Device-agnostic: everything goes through Device / Communicator, so the CUDA backend reuses
// this file unchanged.
//
// Every plan runs as one rank program (DESIGN §4, "A split in the plan and the graph"; an FSDP
// plan is the one-stage, T = 1 case): this rank's tensor-parallel slice of its stage's units,
// the pipeline transfers on the send and receive streams, its data-parallel domain's
// collectives (full, hybrid, optimizer, none), the tied embedding's all-reduce. Sequence
// parallelism is refused (InfeasibleError).
//
// Precision follows the job (`precision` in the job file, DESIGN §4): master weights and AdamW
// moments are fp32 (`params` must be fp32); gathered parameters, activations and input
// gradients are `compute` (fp32/tf32 -> F32, bf16, fp16); unit gradients, their
// reduce-scatter and the gradient shard are `reduce`. These are exactly the bytes the memory
// model charges. fp16 compute trains with dynamic loss scaling (below).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/backend/checkpoint.hpp"
#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/backend/sharded_state.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/traces/chrome_trace.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::backend {

struct ExecutorOptions {
  std::uint64_t data_seed = 42;
  // The run identity agreed by every rank (run_identity.hpp), recorded in every checkpoint;
  // empty: derived from the scenario, the plan and the data seed.
  std::string run_identity;
  // Emulation: after every compute op the rank waits (slowdown - 1) x the op's measured time,
  // so a fast core behaves like a slower device. 1 = real hardware.
  double slowdown = 1.0;
  // Testing: this rank throws RuntimeFailure at the start of this step (-1 = never).
  int fail_at_step = -1;
  // ... by dying on SIGKILL instead (no message, no cleanup: what an OOM kill looks like).
  bool fail_by_kill = false;
  // ... or, instead of failing, by writing a NaN into this rank's state from that step on:
  // "loss", "gradients", "parameters" or "moments" (the second moment, +inf); empty: none.
  // Tests the checks that end a run whose state is no longer finite.
  std::string fail_non_finite;
  // Dynamic loss scaling, used only when the job computes in fp16 (bf16 and fp32 have fp32's
  // exponent range): the loss gradient is multiplied by the scale; a step whose gradients hold
  // an inf/NaN on any rank is skipped on every rank and the scale multiplied by `backoff`;
  // after `growth_interval` clean steps in a row it is multiplied by `growth`.
  double loss_scale_init = 65536.0;
  double loss_scale_growth = 2.0;
  double loss_scale_backoff = 0.5;
  int loss_scale_growth_interval = 2000;
};

// A training run never goes on, or reports success, on state that is no longer finite. After
// every step the executor checks, on every rank and agreed through one all-reduce, the loss,
// the reduced gradients (before the update, unless fp16's loss scaler owns their overflow),
// the owned parameters and AdamW's moments (after it), and under fp16 the loss scale (an
// overflow at a scale of 1 or less: the gradients overflow fp16 even unscaled, so skipping
// can never recover). Every rank throws this at the same point with the same message, naming
// the step and the quantity; its kind is a runtime failure (exit 4).
class NonFiniteState : public RuntimeFailure {
 public:
  NonFiniteState(int step, const std::string& quantity, const std::string& detail);
  int step() const { return step_; }
  const std::string& quantity() const { return quantity_; }

 private:
  int step_;
  std::string quantity_;
};

struct StepResult {
  int step = 0;       // 0-based global step index
  double loss = 0;    // mean token loss over the global batch, before the update
  double time_s = 0;  // slowest rank's wall time of the step
  double samples_per_s = 0;
  double loss_scale = 1;  // the scale this step's gradients were computed with (1 unless fp16)
  bool skipped = false;   // fp16 overflow: the update was skipped on every rank
};

class Executor {
 public:
  Executor(const Scenario& scenario, const Plan& plan, const traces::TrainingGraph& graph,
           const GptConfig& model, Device& device, Communicator& comm,
           const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs training step `step_` (data of that step) and advances. Collective across ranks.
  StepResult run_step();
  int next_step() const { return step_; }

  // Measured report of the last step (identical on every rank): schema of SimResult with
  // source = device kind, per-op timings keyed by op id. Collective.
  traces::IterationReport last_report();
  // Per-op start/end (ns from the step start) of the last step, every rank's ops (collective).
  void last_op_times(std::vector<std::int64_t>& start_ns, std::vector<std::int64_t>& end_ns);
  // Device bytes allocated on each rank right after each of its ops was issued in the last
  // step, as (op end time, bytes) samples per rank, for the trace's memory track. Collective.
  std::vector<std::vector<traces::MemorySample>> last_memory();

  // Full (gathered) fp32 parameters of every unit, concatenated in unit order. Collective.
  std::vector<float> gather_parameters();
  // Full reduced gradients of the last step as fp32, same layout (what the optimizer
  // consumed: divided by the loss scale under fp16).
  std::vector<float> gather_gradients();

  // Checkpoint (checkpoint.hpp): every rank writes its shard (params, m, v) atomically, then
  // rank 0 writes the manifest (with every shard's size and checksum) and finally `latest`; a
  // checkpoint without manifest is never used. Collective.
  void save_checkpoint(const std::filesystem::path& dir);
  // Restores from dir/latest; the checkpoint may come from another plan (rank count, shares):
  // each rank reads and verifies the old shards that overlap its new slices, then copies the
  // overlapping byte ranges. Not collective: a rank that fails here throws, and the caller
  // (TrainingSession) agrees on the outcome across ranks.
  void load_checkpoint(const std::filesystem::path& dir);
  // The run as its checkpoints name it: model, plan hash, data seed, run identity.
  RunIdentity identity() const;

  // The model this rank runs: its tensor-parallel slice under a split plan.
  const GptModel& model() const { return *model_; }

 private:
  std::vector<float> gather_full(bool gradients);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<GptModel> model_;
  int step_ = 0;
};

}  // namespace cephalo::backend

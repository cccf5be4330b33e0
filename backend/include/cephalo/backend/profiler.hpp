#pragma once
// The profiler (DESIGN §7): measures what the cost models need on this rank's device with the
// backend's own kernels (so the numbers are the ones `cephalo run` will see):
//  * per transformer layer, for each micro-batch size: forward (the checkpointed forward the
//    executor runs), recompute (the forward re-run right before the backward) and backward;
//  * the embedding and head units the same way (head "backward" is the fused
//    forward+backward+loss the executor runs as the head's backward op);
//  * the AdamW step per shard size; device<->host copies per size;
//  * with 2 or more ranks: even and uneven (grouped: MPI's -v calls) all-gather and
//    reduce-scatter over sizes through the Communicator on the comm stream, each on otherwise idle
//    ranks and under compute load
//    (`under_compute`: every rank keeps its compute stream busy with a layer GEMM until the
//    collective completes, as prefetch and overlapped reduce-scatters do in training).
// Every point is the --statistic (median or min) of `repeats` timed calls after `warmup`
// untimed ones; every rank measures at once (as in training) and compute numbers are averaged
// over ranks, a collective's time is the slowest rank's.
#include <functional>
#include <string>
#include <vector>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/costmodels/profile_writer.hpp"

namespace cephalo::backend {

struct ProfilerOptions {
  std::vector<int> micro_batches = {1, 2, 3, 4};
  Dtype dtype = Dtype::FP32;  // compute type of parameters and activations (as a job's)
  int repeats = 5;
  int warmup = 1;
  std::string statistic = "median";       // of the timed repeats: median, or min (least disturbed)
  double max_bytes = 16.0 * 1024 * 1024;  // largest collective and copy size
  bool collectives = true;                // the collective sweep when comm has 2+ ranks
  std::string record_as;                  // catalog device name the rows are recorded under
  std::string model_name;                 // catalog model name of the rows
};

// Measures the model on `dev`; collective over `comm` (every rank calls it). The result's rows,
// optimizer, copies and collectives are filled (identical on every rank); tool, date, host and
// source are the caller's. `say` receives progress lines (on every rank; print on one).
costmodels::MeasuredProfile profile_model(Device& dev, Communicator& comm, const GptConfig& cfg,
                                          const ProfilerOptions& options,
                                          const std::function<void(const std::string&)>& say);

// The record's provenance as `cephalo profile` writes it: `tool`, the date (UTC, ISO 8601),
// this host's name and how it was measured (device, ranks, the statistic of the repeats after
// the warm-up).
void stamp_provenance(costmodels::MeasuredProfile& profile, const std::string& tool,
                      const std::string& device_name, int ranks, const ProfilerOptions& options);

// The collective sweep's file beside a calibration file: "<dir>/<stem>.sweep.json" ("" for "").
std::string sweep_file_beside(const std::string& calibration_file);

}  // namespace cephalo::backend

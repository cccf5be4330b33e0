#pragma once
// Published end-to-end training throughput (scenarios/calibration/published-throughput/): each
// point is a measured tokens/s per GPU with the configuration it was measured under and the
// software stack (implementation) it ran. The calibrated model fits the factor of that stack on
// them; scripts/validate-published simulates them end to end.
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/compute_model.hpp"

namespace cephalo::costmodels {

struct PublishedPoint {
  std::string id;
  std::string gpu;  // canonical catalog name
  Job job;          // inline architecture, sequence, global batch, precision, implementation
  int gpus = 0;
  int micro_batch = 0;
  int grad_accum = 0;
  // The plan key's type: full (every layer recomputed before its backward) or none ("off").
  ActivationCheckpointing checkpointing;
  double tokens_per_s_per_gpu = 0;

  // Measured seconds of one iteration on one GPU.
  double measured_iteration_s() const;
};

// Reads a "published-throughput" file. Every point must carry its implementation (at the
// top level of the file or per point): a point without one is refused naming file and path.
std::vector<PublishedPoint> load_published_throughput(const std::filesystem::path& file);
// Every file of data_dir()/calibration/published-throughput, loaded once.
const std::vector<PublishedPoint>& builtin_published_throughput();

// Compute seconds of one iteration on one GPU of the point under `model` (every unit's
// forward, recompute when checkpointing, backward, for every micro-batch, plus the optimizer
// step on the GPU's 1/gpus share). Communication is left out: exposed communication is a few
// per cent of these iterations (scripts/validate-published prints it per point).
double published_compute_seconds(const ComputeModel& model, const PublishedPoint& point);

}  // namespace cephalo::costmodels

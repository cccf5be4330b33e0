#pragma once
// Time of compute ops on a device. Implementations: profile tables, roofline, calibrated.
#include <memory>
#include <string>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {

enum class ComputePhase { Forward, Backward, Recompute };

struct ComputeEstimate {
  double seconds = 0;
  bool extrapolated = false;  // outside the measured range of a profile
  std::string source;         // "profile", "roofline", "calibrated"
};

class ComputeModel {
 public:
  virtual ~ComputeModel() = default;
  // One unit, one micro-batch of `micro_batch` samples of the job's sequence length.
  virtual ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit,
                                    ComputePhase phase, int micro_batch) const = 0;
  // AdamW step over `shard_parameters` fp32 master parameters.
  virtual ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                         double shard_parameters) const = 0;
  virtual std::string name() const = 0;
};

}  // namespace cephalo::costmodels

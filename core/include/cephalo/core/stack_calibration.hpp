#pragma once
// A software stack's calibration ("cephalo-stack" v1): factors on the modelled compute,
// collective and optimizer times, fitted by `cephalo calibrate stack` from one measured run of
// that stack (planner/README.md, "Calibrating a stack"), and what they were fitted on, so that
// a prediction made with them for another GPU, model, size or cluster mix can say so.
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"

namespace cephalo {

// Most a factor may be: a stack this much slower than the model on every op class is not a
// stack the model describes (calibrate_stack refuses to fit one; a file with one is refused).
constexpr double kMaxStackFactor = 10.0;
// Least a factor may be: the cost models' times are already the hardware's best.
constexpr double kMinStackFactor = 1.0 / 64.0;

struct StackFactor {
  double value = 1.0;
  // Whether the measurement determined it; a factor it could not see stays 1 and says so.
  bool identified = false;
  bool operator==(const StackFactor&) const = default;
};

struct StackCalibration {
  StackFactor compute;    // every forward, backward and recompute kernel
  StackFactor comm;       // every collective (not host <-> device copies)
  StackFactor optimizer;  // the optimizer step
  struct FittedOn {
    std::string model;              // the job's model name
    std::string family;             // "gpt", "llama", ...
    std::vector<std::string> gpus;  // GPU types of the cluster, sorted, each once
    int ranks = 0;
    int sequence_length = 0;
    int global_batch = 0;
    std::string dtype;           // compute dtype
    std::string implementation;  // to_string(Implementation)
    std::string compute_source;  // the cost models' compute source the factors multiply
    std::string plan_hash;
    std::string measured;        // "tokens_per_s" or "run"
    double measured_value = 0;   // tokens/s, or the run's iteration seconds
    double predicted_value = 0;  // the same quantity predicted without the stack
    bool operator==(const FittedOn&) const = default;
  } fitted_on;
  bool operator==(const StackCalibration&) const = default;
};

// Reads {"format": "cephalo-stack", "version": 1, "factors": {"compute": {"value", "identified"},
// "comm": ..., "optimizer": ...}, "fitted_on": {...}}; a foreign or corrupt file is refused at
// the JSON path that breaks it.
StackCalibration parse_stack_calibration(JsonReader& reader);
StackCalibration load_stack_calibration(const std::filesystem::path& file);
Json to_json(const StackCalibration& stack);

}  // namespace cephalo

#pragma once
// The calibrated compute model: the roofline op breakdown (analytic_compute.hpp) with its
// efficiencies fitted by Eigen least squares to the profiles that exist.
//
// Per (GPU, dtype class) and phase the model is linear in θ = (1/η_gemm, 1/η_attention,
// 1/η_memory, µs per kernel):   t = Σ_k θ_k · x_k(model, seq, micro-batch, GPU specs)
// fitted on relative errors. A GPU with profiles gets its own θ, shrunk toward the pooled θ
// (ridge); a GPU without profiles gets the pooled θ of its dtype class, i.e. it is predicted
// from its datasheet peaks and bandwidth alone. Rows the inconsistency detector flags are
// listed and left out of every fit.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/profile.hpp"

namespace cephalo::costmodels {

struct Theta {
  OpFeatures forward{};
  OpFeatures backward{};
  int rows = 0;  // profile rows behind the fit
};

// A row of the published data that contradicts another row or itself.
struct InconsistentRow {
  const LayerProfile* row = nullptr;
  std::string reason;
};
std::vector<InconsistentRow> find_inconsistent_rows(const ProfileTables& tables);

struct CalibrationOptions {
  double ridge = 0.05;  // shrinkage of a GPU's θ toward the pooled θ (relative units)
  std::vector<std::string> exclude_gpus;  // canonical names left out (leave-one-GPU-out)
  // (model, gpu) pairs left out (leave-one-model-out); model is canonical
  std::vector<std::pair<std::string, std::string>> exclude_model_on_gpu;
  bool drop_inconsistent = true;
  bool family_factors = true;  // one multiplicative factor per model family and phase
  // Shrinkage of a family's residual factor on one GPU toward 1: a pseudo-count in rows
  // (chosen by leave-one-model-out: 0.5 → 12.2%, 1 → 13.3%, 2 → 14.6%, 4 → 14.4% median).
  double local_pseudo_rows = 1.0;
  // An unprofiled GPU is predicted with θ pooled over all profiled rows (false), or with the
  // median over the profiled GPUs' own θ applied to its specs (true). Leave-one-GPU-out median:
  // pooled 18.3%, median-of-GPUs 19.6%, so pooled is the default.
  bool unseen_median_of_gpus = false;
};

// The architecture a profile row was measured on (the catalog entry, with Cephalo's ViT image
// size of 384).
ModelSpec profiled_spec(const LayerProfile& row);

class CalibratedComputeModel : public ComputeModel {
 public:
  static std::shared_ptr<CalibratedComputeModel> fit(const ProfileTables& tables,
                                                     const CalibrationOptions& options = {});
  // Fitted once to ProfileTables::builtin().
  static std::shared_ptr<const CalibratedComputeModel> builtin();

  ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit, ComputePhase phase,
                            int micro_batch) const override;
  ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                 double shard_parameters) const override;
  std::string name() const override { return "calibrated"; }

  // Per-layer time for a model on a device (used by validation).
  double layer_ms(const DeviceSpec& device, const ModelSpec& model, int seq, Dtype dtype,
                  int micro_batch, bool backward) const;
  // θ used for a device: its own when profiled (`own` = true), else the pooled one.
  const Theta& theta(const std::string& gpu, Dtype dtype, bool* own = nullptr) const;
  const std::map<std::pair<std::string, int>, Theta>& per_gpu() const { return per_gpu_; }
  const std::vector<InconsistentRow>& dropped() const { return dropped_; }
  std::array<double, 2> family_factor(const std::string& family) const;  // forward, backward
  // Family factor times the family's shrunk residual factor on this GPU, when it has one.
  std::array<double, 2> factor(const std::string& gpu, Dtype dtype,
                               const std::string& family) const;

 private:
  double predict_seconds(const DeviceSpec& device, const std::string& family, Dtype dtype,
                         const PhaseFeatures& x, bool backward, bool* own = nullptr) const;
  bool median_of_gpus_ = false;
  std::map<std::string, std::array<double, 2>> family_;
  std::map<std::tuple<std::string, int, std::string>, std::array<double, 2>> local_;
  std::map<std::pair<std::string, int>, Theta> per_gpu_;  // (gpu, dtype class)
  std::map<int, Theta> pooled_;                           // dtype class
  std::vector<InconsistentRow> dropped_;
};

// Leave-one-GPU-out and leave-one-model-out validation over the shipped profiles.
struct RowError {
  std::string model, gpu;
  int seq = 0;
  Dtype dtype = Dtype::FP16;
  double ape = 0;  // mean absolute percentage error over the row's points (fwd and bwd)
};
struct GroupError {
  std::string name;  // GPU
  int rows = 0;
  double mape = 0;  // mean over rows
  double median_ape = 0;
};
struct ValidationReport {
  std::vector<GroupError> leave_one_gpu_out;  // per GPU
  double logo_median_over_gpus = 0, logo_overall = 0;
  std::vector<GroupError> leave_one_model_out;  // per GPU (models held out one at a time)
  double lomo_median_over_gpus = 0, lomo_overall = 0;
  std::vector<RowError> logo_rows, lomo_rows;
  std::vector<InconsistentRow> inconsistent;
  double roofline_overall = 0;  // the uncalibrated roofline, for reference
};
ValidationReport validate_compute_models(const ProfileTables& tables);

// The points a row is judged on: its measured micro-batches, else m = 1, 2, 4, 8 of its fit.
struct RowPoint {
  int micro_batch = 0;
  double forward_ms = 0, backward_ms = 0;
};
std::vector<RowPoint> row_points(const LayerProfile& row);

}  // namespace cephalo::costmodels

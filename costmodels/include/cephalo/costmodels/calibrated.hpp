#pragma once
// The calibrated compute model: the roofline op breakdown (analytic_compute.hpp) with its
// efficiencies fitted by Eigen least squares to the profiles that exist.
//
// Per (GPU, pipeline) and phase the model is linear in θ = (1/η_gemm, 1/η_attention,
// 1/η_memory, GEMM-traffic weight, µs per kernel):
//     t = φ_family · ψ_model · λ_gpu,family · Σ_k θ_k · x_k(model, seq, micro-batch, GPU specs)
// fitted on relative errors. The FLOP features are taken at the rate the board can sustain,
// q · peak with q = min(1, (tdp_watts / (k · peak))^(1/3)): dynamic power grows as f·V² with V
// roughly ∝ f, so a power-limited part runs at a clock ∝ the cube root of its budget. One k per
// pipeline (CUDA-core fp32, tensor-core fp16/bf16) is chosen on the training GPUs by
// leave-one-GPU-out among them. A GPU with profiles gets its own θ, shrunk toward the pooled θ
// (ridge); a GPU without profiles gets the pooled θ of its pipeline, i.e. it is predicted from
// its datasheet peaks, bandwidth and board power alone. φ is one factor per model family and
// pipeline (fp16 on Pascal takes the fp32 one), ψ a model's residual over its rows on the training
// GPUs (centred in its family, shrunk toward 1), λ a family's residual on one GPU (shrunk toward
// 1). Rows the inconsistency detector flags are listed and left out of every fit.
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cephalo/core/json_reader.hpp"
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
std::vector<InconsistentRow> find_inconsistent_rows(const ProfileTables& tables,
                                                    bool whole_stack_test_model = true);

struct CalibrationOptions {
  double ridge = 0.05;  // shrinkage of a GPU's θ toward the pooled θ (relative units)
  std::vector<std::string> exclude_gpus;  // canonical names left out (leave-one-GPU-out)
  // (model, gpu) pairs left out (leave-one-model-out); model is canonical
  std::vector<std::pair<std::string, std::string>> exclude_model_on_gpu;
  std::vector<std::string> exclude_models;  // canonical models left out on every GPU
  bool drop_inconsistent = true;
  bool family_factors = true;  // one multiplicative factor per model family and phase
  // Shrinkage of a family's residual factor on one GPU toward 1: a pseudo-count in rows
  // (chosen by the previous model's leave-one-model-out: 0.5 → 12.2%, 1 → 13.3%, 2 → 14.6%,
  // 4 → 14.4% median; kept at 1).
  double local_pseudo_rows = 1.0;
  // An unprofiled GPU is predicted with θ pooled over all profiled rows (false), or with the
  // median over the profiled GPUs' own θ applied to its specs (true). Leave-one-GPU-out median
  // of the previous model: pooled 18.3%, median-of-GPUs 19.6%, so pooled is the default.
  bool unseen_median_of_gpus = false;
  // Sustained FLOP rate q·peak, q = min(1, (tdp_watts / (k·peak))^power_exponent), one k per
  // pipeline chosen by leave-one-GPU-out over the training GPUs (see the file comment).
  bool power_limit = true;
  double power_exponent = 1.0 / 3.0;  // P ∝ f³; not tuned (1 and 1/2: costmodels/README.md)
  // Per-model residual factors, shrunk toward 1 with this pseudo-count of rows (as
  // local_pseudo_rows, not tuned); < 0: none.
  double model_pseudo_rows = 1;
  // Family (and model) factors per dtype class (fp16/bf16 vs fp32): Cephalo's GPT layers are
  // 2.2-3.4x slower per FLOP than its LLaMA layers in fp16, 1.2-1.6x in fp32.
  bool family_per_dtype = true;
  // ... and the class is the pipeline the row computes on (pipeline_class), not the dtype: the
  // GPT stack's fp16 slowness per FLOP is a tensor-core effect, and fp16 on Pascal runs on the
  // fp32 pipeline (false: by dtype class, as until 2026-12-01 night).
  bool factors_per_pipeline = true;
  bool whole_stack_test_model = true;  // see profiled_layers
  // Fit the factor of each published stack (implementation label) on the published
  // end-to-end points (published_throughput.hpp), tensor-core pipeline only.
  bool published_stacks = true;
  // With it, also the weight of that stack's flash-attention FLOPs relative to its GEMMs'
  // (one scalar per stack, fitted jointly with the factor on the same points).
  bool published_attention_weight = true;
  // GEMM FLOPs divided by their wave efficiency over the GPU's SMs (unit_features).
  bool gemm_waves = false;
  // An unprofiled GPU gets θ pooled over the training GPUs of its architecture generation
  // (shrunk toward the pipeline's pooled θ with this ridge), else the pipeline's pooled θ.
  bool per_generation = true;
  double generation_ridge = 0.2;
  // The CUDA-core pipeline's FP32 rate divided by 1 + ι·int32_shared_lane_fraction (the FP32
  // issue slots the kernel's integer instructions take where lanes are shared), ι chosen with
  // the power constant by the same leave-one-GPU-out over the training GPUs (false: ι = 0).
  bool int32_shared_lanes = true;
};

// The architecture a profile row was measured on (the catalog entry, with Cephalo's ViT image
// size of 384).
ModelSpec profiled_spec(const LayerProfile& row);
// The pipeline a (device, dtype) computes on: 1 for fp16/bf16 on a GPU whose effective peak
// for it exceeds fp32 (tensor cores), 0 for fp32 and for fp16 on Pascal (fp32 pipeline).
// θ, its pooling and the power constant are per pipeline.
int pipeline_class(const DeviceSpec& device, Dtype dtype);
// Transformer layers a row's times cover. 1, except Cephalo's test GPT (`deepspeedgpt_test`,
// 12 layers of hidden 512), whose rows time the whole 12-layer stack: per layer they imply
// 0.4-1.3 TFLOP/s, 10x below every other GPT row on the same GPUs, and divided by 12 they fall
// among them. (`whole_stack_test_model` = false reads them as per-layer, for comparison.)
int profiled_layers(const LayerProfile& row, bool whole_stack_test_model = true);

class CalibratedComputeModel : public ComputeModel {
 public:
  static std::shared_ptr<CalibratedComputeModel> fit(const ProfileTables& tables,
                                                     const CalibrationOptions& options = {});
  // Fitted to ProfileTables::builtin() once per process, or read from the start-up cache
  // (fit_cache.cpp: the user cache folder, keyed by the code and its inputs' bytes).
  static std::shared_ptr<const CalibratedComputeModel> builtin();

  ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit, ComputePhase phase,
                            int micro_batch) const override;
  ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                 double shard_parameters) const override;
  std::string name() const override { return "calibrated"; }
  // Seconds of each of a unit's ops (unit_ops' order), each priced as unit_time prices the
  // unit: the same θ, factors, flash weight and stack factor on that op's features alone. The
  // model is linear in the features, so they add up to unit_time's seconds (to rounding).
  std::vector<double> unit_op_seconds(const DeviceSpec& device, const Job& job, int unit,
                                      ComputePhase phase, int micro_batch) const;

  // Per-layer time for a model on a device as a Cephalo profile row measured it (validation):
  // its family's source factors, the row's implementation.
  double layer_ms(const DeviceSpec& device, const ModelSpec& model, int seq, Dtype dtype,
                  int micro_batch, bool backward, const Implementation& impl) const;
  // Seconds of an op list (each op its own kernel launches), priced as a layer's ops of a stack
  // that is not one of the Cephalo source's own are: θ of the device's pipeline, the reference
  // stack's factors, no published-stack factor. What `kernel_validation` checks the layer model
  // against measured eager kernels with.
  double ops_seconds(const DeviceSpec& device, Dtype dtype, const std::vector<OpCost>& ops,
                     bool backward) const;
  // The factors a job is priced with: (stack, model) keys of the source factors (see .cpp).
  static constexpr const char* kReferenceStack = "llama";
  static std::pair<std::string, std::string> job_stack(const Job& job);
  // The factor of a software stack fitted on published end-to-end throughput (1 when none was
  // fitted for the implementation or the pipeline), and how many points it rests on.
  double stack_factor(const Implementation& impl, int pipeline) const;
  // The weight of the stack's flash-attention FLOPs in the GEMM column (1 when none was fitted).
  double stack_attention_weight(const Implementation& impl, int pipeline) const;
  int stack_points(const Implementation& impl) const;
  // θ used for a device: its own when profiled (`own` = true), else the pooled one.
  const Theta& theta(const DeviceSpec& device, Dtype dtype, bool* own = nullptr) const;
  const std::map<std::pair<std::string, int>, Theta>& per_gpu() const { return per_gpu_; }
  const std::vector<InconsistentRow>& dropped() const { return dropped_; }
  // Forward, backward factor of a family for a compute dtype on a GPU with tensor cores (its
  // dtype class; `factor` resolves the pipeline per device).
  std::array<double, 2> family_factor(const std::string& family, Dtype dtype) const;
  // Family factor times the model's factor (when the model was profiled) times the family's
  // shrunk residual factor on this GPU (when it has one).
  std::array<double, 2> factor(const DeviceSpec& device, Dtype dtype, const std::string& family,
                               const std::string& model = "") const;
  // Fraction of the effective peak a device sustains: min(1, (tdp_watts / (k·peak))^(1/3)); 1
  // without a board power in its spec or when its pipeline is not capped.
  double sustained_fraction(const DeviceSpec& device, Dtype dtype) const;
  // The power constant k of a pipeline (pipeline_class), W per FLOP/s (0: no cap).
  double watts_per_flops(int pipeline) const {
    return watts_per_flops_[static_cast<std::size_t>(pipeline)];
  }
  // ι: integer instructions' share of the FP32 issue slots on shared lanes (CUDA-core pipeline).
  double int32_share() const { return int32_share_; }

 private:
  friend struct FitCacheCodec;  // the start-up cache (fit_cache.cpp)
  // `memory_coefficient` > 0 prices the memory-bound column with it instead of θ's (a compiled
  // stack's generated kernels, unit_time).
  double predict_seconds(const DeviceSpec& device, const std::string& stack,
                         const std::string& model_name, Dtype dtype, const PhaseFeatures& x,
                         bool backward, bool* own = nullptr, double memory_coefficient = 0) const;
  // A unit's (or one of its ops') features `x_peak` priced for the job: unit_time's steps after
  // the features.
  double job_seconds(const DeviceSpec& device, const Job& job, int unit, ComputePhase phase,
                     const PhaseFeatures& x_peak, bool* own = nullptr) const;
  // The features of `ops` as unit_time computes a unit's (waves, the stack's flash weight).
  PhaseFeatures job_features(const DeviceSpec& device, const Job& job,
                             const std::vector<OpCost>& ops) const;
  std::string family_key(const std::string& family, int factor_class) const;
  // The class a (device, dtype)'s family and model factors are keyed by: the pipeline, or the
  // dtype class (factors_per_pipeline = false); [0] fp32, [1] fp16/bf16 in ByDtype.
  int factor_class(const DeviceSpec& device, Dtype dtype) const;
  // The published stacks' factors and flash weights (calibrated_stacks.cpp), after every
  // other factor is fitted.
  void fit_published_stacks(const CalibrationOptions& options);
  bool median_of_gpus_ = false;
  bool waves_ = true;
  bool family_per_dtype_ = false;
  bool factors_per_pipeline_ = true;
  double power_exponent_ = 1.0 / 3.0;
  std::array<double, 2> watts_per_flops_{0, 0};
  double int32_share_ = 0;
  std::map<std::string, std::array<double, 2>> family_;  // family key (family_key)
  std::map<std::string, std::array<double, 2>> model_;   // model key (family_key of the name)
  // (gpu, pipeline, family key) → the family's residual factor on that GPU
  std::map<std::tuple<std::string, int, std::string>, std::array<double, 2>> local_;
  // The same factors for prediction, by plain name and dtype class ([0] fp32, [1] fp16/bf16;
  // 1 where none was fitted).
  struct ByDtype {
    std::array<std::array<double, 2>, 2> f{{{1, 1}, {1, 1}}};
  };
  std::map<std::string, ByDtype> family_by_name_, model_by_name_;
  std::map<std::string, std::map<std::string, ByDtype>> local_by_name_;  // gpu → family
  std::map<std::pair<std::string, int>, Theta> per_gpu_;                 // (gpu, pipeline)
  std::map<int, Theta> pooled_;                                          // pipeline
  std::map<std::pair<std::string, int>, Theta> per_generation_;          // (architecture, pipeline)
  std::vector<InconsistentRow> dropped_;
  // Keyed by stack_key(impl) (an int: no string built per unit_time call). A compiled stack
  // is its own key: torch.compile keeps the attention call (the same SDPA kernel as eager) and
  // the GEMM library calls, so it is not the published source's stack (Composer with its own
  // Triton attention kernel) and no published point fits its factor or attention weight; its
  // fused op list is priced with the reference stack's factors, as an eager flash job's is.
  // Every key of a stack that is not compiled is what it was (the start-up cache stores them).
  static int stack_key(const Implementation& impl) {
    return static_cast<int>(impl.attention) * 2 + (impl.fused() ? 1 : 0) + (impl.compiled ? 16 : 0);
  }
  std::map<int, std::pair<double, int>> stack_;  // stack → factor, points
  std::map<int, double> stack_attention_;        // stack → flash weight
};

// Leave-one-GPU-out, leave-one-model-out (the model held out on one GPU; its rows on other
// GPUs stay in) and unseen-model (held out on every GPU) validation over the shipped profiles.
// `base` is the configuration validated (exclusions are added per fold).
struct RowError {
  std::string model, gpu;
  int seq = 0;
  Dtype dtype = Dtype::FP16;
  double ape = 0;  // mean absolute percentage error over the row's points (fwd and bwd)
  // Mean signed error over the row's points, % of measured (predicted − measured; > 0: the
  // prediction is too slow). A row published as forward + backward together gives its sum's
  // error in both.
  double forward_error = 0, backward_error = 0;
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
  // The model left out on every GPU (an architecture never profiled), per GPU.
  std::vector<GroupError> unseen_model;
  double unseen_model_median_over_gpus = 0, unseen_model_overall = 0;
  // Every GPU of one architecture generation left out: predicted from the other generations.
  std::vector<GroupError> leave_one_generation_out;  // per generation
  double logeno_median_over_generations = 0, logeno_overall = 0;
  std::vector<RowError> logo_rows, lomo_rows;
  std::vector<InconsistentRow> inconsistent;
  double roofline_overall = 0;  // the uncalibrated roofline, for reference
};
ValidationReport validate_compute_models(const ProfileTables& tables,
                                         const CalibrationOptions& base = {});
// One protocol's rows of one dtype class (fp32, or fp16/bf16) on one GPU: what the per-layer
// targets are stated over, and which way and where that GPU's held-out rows are off.
struct DtypeClassGpuError {
  std::string gpu;
  int rows = 0;
  double mape = 0;                             // mean of the rows' APE
  double forward_bias = 0, backward_bias = 0;  // median of the rows' signed errors, %
  std::string worst;                           // "model s<seq>" of the row with the largest APE
  double worst_ape = 0, worst_forward = 0, worst_backward = 0;
};
struct DtypeClassError {
  std::vector<DtypeClassGpuError> per_gpu;  // GPUs with rows of the class, by name
  double median_over_gpus = 0;              // median of the per-GPU MAPE
  double overall = 0;                       // MAPE over all the class's rows
  int rows = 0;
};
DtypeClassError by_dtype_class(const std::vector<RowError>& rows, bool fp32);
// The report as `cephalo profile validate` prints it: its record (--json) and its text.
Json to_json(const ValidationReport& report);
std::string render_validation(const ValidationReport& report);

// The points a row is judged on: its measured micro-batches, else m = 1, 2, 4, 8 of its fit.
struct RowPoint {
  int micro_batch = 0;
  double forward_ms = 0, backward_ms = 0;
};
// Per layer (the row's times divided by profiled_layers).
std::vector<RowPoint> row_points(const LayerProfile& row, bool whole_stack_test_model = true);
// As published (per row, whatever it covers).
std::vector<RowPoint> raw_points(const LayerProfile& row);

// Why the start-up cache's entry was there but not used (a symbolic link or other non-regular
// file at its name, an oversized, cut-short or corrupt file), for a command to print as a note;
// empty when it was used, absent, of another build or other inputs (the normal refit), or the
// cache is off or not read yet. An ignored entry is refitted and rewritten, never trusted.
std::string start_up_cache_note();

}  // namespace cephalo::costmodels

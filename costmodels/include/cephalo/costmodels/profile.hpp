#pragma once
// Measured profiles: per-layer compute time tables and compute-memory curves.
//
// Two formats are read:
//  * the Cephalo format (scenarios/calibration/cephalo-profiles/model_latencies.json):
//    [model][gpu][seq][dtype] = [[fwd_slope, fwd_intercept], [bwd_slope, bwd_intercept],
//    fwd_ms_by_batch?, bwd_ms_by_batch?] in ms per layer; older rows are a bare
//    [slope, intercept] or a bare slope of forward+backward together, which are split with
//    the forward fraction measured on the same GPU and dtype (flagged `combined`).
//  * the project's own format ("format": "cephalo-profile"), what `cephalo profile` writes;
//    see costmodels/README.md.
// Names resolve through the catalogs' aliases, so "deepspeedgpt_2.7b" on "l4" is the row of
// (gpt-2.7b, L4). When two file names resolve to the same row, the richer row wins (measured
// points > separate forward/backward fits > combined).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

struct LinearFit {
  double slope_ms = 0;  // per sample
  double intercept_ms = 0;
  double at(double micro_batch) const { return slope_ms * micro_batch + intercept_ms; }
};

enum class ProfileShape { Measured, Fit, Combined, CombinedSlope };
std::string to_string(ProfileShape shape);

// One (model, GPU, sequence, dtype) row, per transformer layer.
struct LayerProfile {
  std::string model;  // canonical catalog name
  std::string gpu;    // canonical catalog name
  int seq = 0;
  Dtype dtype = Dtype::FP16;
  std::string file_model;  // names as written in the file
  std::string file_gpu;
  std::string file;
  ProfileShape shape = ProfileShape::Fit;
  // The software stack the row was measured with (every source records it; see
  // cephalo_profile_implementation and costmodels/README.md).
  Implementation implementation;
  LinearFit forward, backward;
  // Measured points (may be empty), ascending micro-batch sizes; Cephalo rows are 1..K.
  std::vector<int> micro_batches;
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;
  std::vector<double> recompute_ms;  // own format only (empty: recompute = forward)
  int richness() const;              // for choosing between duplicate rows
  int measured_max() const { return micro_batches.empty() ? 0 : micro_batches.back(); }
};

// Time of one layer for one micro-batch.
struct LayerTime {
  double forward_ms = 0;
  double backward_ms = 0;
  double recompute_ms = 0;
  bool extrapolated = false;  // beyond the measured micro-batches
  bool measured = false;      // exactly a measured point
  std::string detail;         // e.g. "measured", "interpolated", "fit", "extrapolated from m=8"
};

// Per-unit times of the own format (embedding, head) and the optimizer fit.
struct UnitProfile {
  std::string model, gpu, unit;  // unit: "embedding" | "head"
  int seq = 0;
  Dtype dtype = Dtype::FP16;
  LayerProfile points;  // same point/fit layout as a layer row
};
struct OptimizerProfile {
  std::string gpu;
  std::vector<std::pair<double, double>> points;  // (parameters, ms)
};

// What the Cephalo paper's profiles ran (their code: DeepSpeed-style GPT, BERT and ViT layers
// with eager attention and unfused elementwise kernels; Hugging Face LLaMA / Mistral layers,
// which use flash-attn 2 in fp16/bf16 on Ampere and newer and eager (SDPA math) attention
// elsewhere). `architecture` is the GPU's catalog generation.
Implementation cephalo_profile_implementation(const std::string& family,
                                              const std::string& architecture, Dtype dtype);

class ProfileTables {
 public:
  // Cephalo's model_latencies.json.
  static ProfileTables load_cephalo(const std::filesystem::path& file);
  // The project's format.
  static ProfileTables load_own(const std::filesystem::path& file);
  // Either format, by content: "format": "cephalo-profile", or no "format" and the Cephalo
  // layout; anything else (a plan, a sweep spec) is a ValidationError, not an empty table.
  static ProfileTables load(const std::filesystem::path& file);
  // Whether `j` has the shape of Cephalo's model_latencies.json, {model: {gpu: {seq: {dtype:
  // entry}}}} with numeric seq keys (that file carries no "format" key of its own).
  static bool is_cephalo_layout(const nlohmann::json& j);
  // The shipped Cephalo profiles (data_dir()/calibration/cephalo-profiles/model_latencies.json).
  static const ProfileTables& builtin();

  void merge(const ProfileTables& other);  // rows of `other` replace poorer duplicates

  // Names may be catalog names or aliases, any case. nullptr when there is no row.
  const LayerProfile* find(const std::string& model, const std::string& gpu, int seq,
                           Dtype dtype) const;
  // The row used for a job: exact dtype, or the fp16 row for bf16 (same tensor-core rate on
  // the GPUs that have bf16; the detail says so).
  const LayerProfile* find_for(const std::string& model, const std::string& gpu, int seq,
                               Dtype dtype, std::string* note = nullptr) const;

  // Per-layer F(m) and B(m) in ms. InfeasibleError (suggesting `calibrated`) without a row.
  LayerTime layer_time(const std::string& model, const std::string& gpu, int seq, Dtype dtype,
                       int micro_batch) const;
  static LayerTime evaluate(const LayerProfile& row, int micro_batch);

  const UnitProfile* find_unit(const std::string& model, const std::string& gpu, int seq,
                               Dtype dtype, const std::string& unit) const;
  const OptimizerProfile* find_optimizer(const std::string& gpu) const;

  const std::vector<LayerProfile>& rows() const { return rows_; }
  // Names in the files that no catalog entry resolves (their rows are skipped).
  const std::vector<std::string>& unresolved() const { return unresolved_; }

 private:
  friend struct FitCacheCodec;  // the start-up cache (fit_cache.cpp)
  void add(LayerProfile row);
  const LayerProfile* lookup(const std::string& model_lower, const std::string& gpu_lower, int seq,
                             Dtype dtype) const;
  std::vector<LayerProfile> rows_;
  // (lower-case canonical model, lower-case canonical GPU, seq, dtype) -> index into rows_; the
  // simulator asks once per op, so lookups must not scan.
  std::map<std::tuple<std::string, std::string, int, int>, std::size_t> index_;
  std::vector<UnitProfile> units_;
  std::vector<OptimizerProfile> optimizers_;
  std::vector<std::string> unresolved_;
};

// Cephalo's model_memory.json: profiled compute memory vs micro-batch on the authors' clusters.
// The published numbers are GiB (bytes / 2^30): the fitted activation line profiled_ga_model
// of deepspeedgpt_2.7b, fp32, seq 512 has slope 0.16607 = 34 boundaries × 512 × 2560 × 4 B / 2^30
// to 0.03%.
struct MemoryCurve {
  std::string cluster;  // "paper", "aws-16gpu", ...
  std::string model;    // canonical
  std::string file_model;
  Dtype dtype = Dtype::FP32;
  double parameters = 0;  // as profiled (their position table follows the sequence length)
  std::vector<double> compute_gib;    // index m-1 = micro-batch m
  std::optional<LinearFit> ga_model;  // profiled_ga_model: GiB per sample, intercept GiB
  // Compute memory for micro-batch m in GiB; linear extrapolation from the last two points
  // beyond the measured range (flagged).
  double compute_gib_at(int micro_batch, bool* extrapolated = nullptr) const;
};

class MemoryProfiles {
 public:
  static MemoryProfiles load(const std::filesystem::path& file);
  static const MemoryProfiles& builtin();
  const MemoryCurve* find(const std::string& cluster, const std::string& model, Dtype dtype) const;
  const std::vector<MemoryCurve>& curves() const { return curves_; }
  std::vector<std::string> clusters() const;
  const std::vector<std::string>& unresolved() const { return unresolved_; }

 private:
  std::vector<MemoryCurve> curves_;
  std::vector<std::string> unresolved_;
};

}  // namespace cephalo::costmodels

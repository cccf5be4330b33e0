#include "cephalo/costmodels/cost_models.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/scenario_notices.hpp"
#include "cephalo/costmodels/weight_gradients.hpp"
#include "framework_buffers.hpp"
#include "profile_compute.hpp"

namespace cephalo::costmodels {

std::vector<std::string> precision_warnings(const Cluster& cluster, const Job& job) {
  std::vector<std::string> out;
  const Dtype asked = job.precision.compute;
  if (asked != Dtype::FP16 && asked != Dtype::BF16) return out;
  std::vector<std::string> seen;
  for (const auto& node : cluster.nodes)
    for (const auto& slot : node.devices) {
      const DeviceSpec& gpu = slot.spec;
      if (gpu.kind == "cpu" || pipeline_class(gpu, asked) == 1) continue;
      if (std::find(seen.begin(), seen.end(), gpu.name) != seen.end()) continue;
      seen.push_back(gpu.name);
      // The dtype runs on the CUDA-core pipeline: no tensor-core rate for it (V100 and T4
      // have no bf16), or none at all (Pascal, whose fp16 GEMMs accumulate in fp32).
      std::string line =
          gpu.name + " has no " + to_string(asked) + " tensor-core rate: " + to_string(asked) +
          " is priced at its fp32 rate (" + format_flop_rate(effective_peak(gpu, asked)) + ")";
      const Dtype other = asked == Dtype::FP16 ? Dtype::BF16 : Dtype::FP16;
      if (pipeline_class(gpu, other) == 1)
        line += "; " + to_string(other) + " would run on its tensor cores (" +
                format_flop_rate(effective_peak(gpu, other)) + ")";
      out.push_back(line);
    }
  return out;
}

std::vector<std::string> prediction_warnings(const Scenario& scenario) {
  auto out = precision_warnings(scenario.cluster, scenario.job);
  for (auto& n : stack_notes(scenario)) out.push_back(std::move(n));
  return out;
}

std::vector<std::string> cluster_notices(const Cluster& cluster) {
  std::vector<std::string> out;
  for (const auto& n : cluster_notes(cluster)) out.push_back("note: " + n);
  return out;
}

std::vector<std::string> scenario_notices(const Scenario& scenario) {
  std::vector<std::string> out;
  for (const auto& w : prediction_warnings(scenario)) out.push_back("warning: " + w);
  for (auto& n : cluster_notices(scenario.cluster)) out.push_back(std::move(n));
  return out;
}

const std::vector<std::string>& compute_sources() {
  static const std::vector<std::string> names = {"auto", "profile", "calibrated", "roofline"};
  return names;
}

namespace {

// Per device: the calibrated model for GPUs, the roofline for CPU devices (no GPU profile can
// say anything about a CPU core).
class ByDeviceKind : public ComputeModel {
 public:
  // `tables`: the profile rows the GPU model was fitted to (its dropped-row list points into
  // them), kept alive as long as the model.
  ByDeviceKind(std::shared_ptr<const ComputeModel> gpu, std::shared_ptr<const ComputeModel> cpu,
               std::shared_ptr<const ProfileTables> tables)
      : gpu_(std::move(gpu)), cpu_(std::move(cpu)), tables_(std::move(tables)) {}
  ComputeEstimate unit_time(const DeviceSpec& d, const Job& j, int u, ComputePhase p,
                            int m) const override {
    return (d.kind == "cpu" ? cpu_ : gpu_)->unit_time(d, j, u, p, m);
  }
  ComputeEstimate optimizer_time(const DeviceSpec& d, const Job& j, double n) const override {
    return (d.kind == "cpu" ? cpu_ : gpu_)->optimizer_time(d, j, n);
  }
  std::string name() const override { return gpu_->name(); }

 private:
  std::shared_ptr<const ComputeModel> gpu_, cpu_;
  std::shared_ptr<const ProfileTables> tables_;
};

// A measured stack's factors (Implementation::stack) on another model's times: compute and
// optimizer kernels, and collectives. Copies between host and device are the PCIe link's,
// which no stack changes, and are left as they are.
class StackScaledCompute : public ComputeModel {
 public:
  StackScaledCompute(std::shared_ptr<const ComputeModel> inner, StackCalibration stack)
      : inner_(std::move(inner)), stack_(std::move(stack)) {}
  ComputeEstimate unit_time(const DeviceSpec& d, const Job& j, int u, ComputePhase p,
                            int m) const override {
    ComputeEstimate e = inner_->unit_time(d, j, u, p, m);
    e.seconds *= stack_.compute.value;
    return e;
  }
  ComputeEstimate optimizer_time(const DeviceSpec& d, const Job& j, double n) const override {
    ComputeEstimate e = inner_->optimizer_time(d, j, n);
    e.seconds *= stack_.optimizer.value;
    return e;
  }
  std::string name() const override { return inner_->name(); }

 private:
  std::shared_ptr<const ComputeModel> inner_;
  StackCalibration stack_;
};

// The job's weight-gradient path (weight_gradients.hpp) on a GPU model whose backward carries
// the profiles' path (fitted to the profiles, or measured by them): applied after a stack's
// factors, which scale the time the profiles' stack would take. CPU devices are priced by the
// roofline, which prices no path.
class JobWeightGradients : public ComputeModel {
 public:
  explicit JobWeightGradients(std::shared_ptr<const ComputeModel> inner)
      : inner_(std::move(inner)) {}
  ComputeEstimate unit_time(const DeviceSpec& d, const Job& j, int u, ComputePhase p,
                            int m) const override {
    ComputeEstimate e = inner_->unit_time(d, j, u, p, m);
    if (p == ComputePhase::Backward && d.kind != "cpu")
      e.seconds = job_backward_seconds(d, j, u, m, e.seconds);
    return e;
  }
  ComputeEstimate optimizer_time(const DeviceSpec& d, const Job& j, double n) const override {
    return inner_->optimizer_time(d, j, n);
  }
  std::string name() const override { return inner_->name(); }

 private:
  std::shared_ptr<const ComputeModel> inner_;
};

// What the job's stack adds to each collective: the framework's copies of its buffers around
// a collective on the training state (framework_buffers.hpp; their time is added to the
// collective's, whose consumer waits for them: FSDP2's copy-out before the gathered layer
// runs, the pre-reduce passes before the reduce-scatter starts), then a measured stack's comm
// factor (Implementation::stack) on the whole. Host <-> device copies are the PCIe link's,
// which no stack changes.
class JobStackComm : public CommModel {
 public:
  // `framework`: the job's when it names one (Implementation::framework_declared), else none:
  // a job that names no framework prices its collectives as they were before the copies.
  JobStackComm(std::shared_ptr<const CommModel> inner, std::optional<Framework> framework,
               double factor)
      : inner_(std::move(inner)), framework_(framework), factor_(factor) {}
  CollectiveEstimate collective(const Cluster& cluster,
                                const CollectiveRequest& request) const override {
    CollectiveEstimate e = inner_->collective(cluster, request);
    const double extra = framework_ ? framework_buffer_seconds(cluster, *framework_, request) : 0;
    const double seconds = (e.seconds + extra) * factor_;
    if (e.seconds > 0 && seconds > 0) {
      e.algbw *= e.seconds / seconds;
      e.busbw *= e.seconds / seconds;
    }
    e.framework_seconds = extra * factor_;
    e.seconds = seconds;
    return e;
  }
  double copy_time(const Cluster& cluster, int rank, double bytes) const override {
    return inner_->copy_time(cluster, rank, bytes);
  }

 private:
  std::shared_ptr<const CommModel> inner_;
  std::optional<Framework> framework_;
  double factor_;
};

enum class CalibrationKind { LayerProfile, CollectiveSweep, MemoryProfile, Unknown };

CalibrationKind classify(const Json& j) {
  if (!j.is_object()) return CalibrationKind::Unknown;
  if (j.contains("format")) {
    if (j["format"] == "cephalo-profile") return CalibrationKind::LayerProfile;
    if (j["format"] == "cephalo-collective-sweep") return CalibrationKind::CollectiveSweep;
    return CalibrationKind::Unknown;
  }
  // Cephalo's files carry no "format": recognise them by shape, and nothing else, so a plan
  // or a sweep spec given as calibration is refused instead of read as an empty profile.
  bool memory_layout = !j.empty();
  for (auto& [k, v] : j.items()) {
    if (!v.is_object() || v.empty())
      memory_layout = false;
    else
      for (auto& [k2, v2] : v.items())
        if (!v2.is_object() || !v2.contains("profiled_compute_memory")) memory_layout = false;
  }
  if (memory_layout) return CalibrationKind::MemoryProfile;
  if (ProfileTables::is_cephalo_layout(j)) return CalibrationKind::LayerProfile;
  return CalibrationKind::Unknown;
}

}  // namespace

std::optional<std::string> check_calibration_file(const std::filesystem::path& file) {
  switch (classify(read_json_file(file))) {
    case CalibrationKind::LayerProfile:
      (void)ProfileTables::load(file);
      return "layer profile";
    case CalibrationKind::CollectiveSweep:
      return "collective sweep, " + std::to_string(load_collective_sweep(file).size()) + " points";
    case CalibrationKind::MemoryProfile:
      (void)MemoryProfiles::load(file);
      return "memory profile";
    case CalibrationKind::Unknown:
      break;
  }
  return std::nullopt;
}

std::shared_ptr<const CommModel> make_comm_model(const Scenario& scenario) {
  std::vector<SweepPoint> sweep;
  std::map<std::string, CopyFit> copies;
  for (const auto& file : scenario.calibration) {
    Json j = read_json_file(file);
    const CalibrationKind kind = classify(j);
    if (kind == CalibrationKind::CollectiveSweep) {
      auto points = load_collective_sweep(file);
      sweep.insert(sweep.end(), points.begin(), points.end());
    } else if (kind == CalibrationKind::LayerProfile && j.contains("copies")) {
      auto [device, fit] = fit_profile_copies(file);
      if (fit.points > 0) copies[device] = fit;
    }
  }
  CommCalibration comm =
      sweep.empty() ? AlphaBetaCommModel().calibration() : calibrate_comm(scenario.cluster, sweep);
  for (const auto& [device, fit] : copies) comm.copies[device] = fit;
  const auto& impl = scenario.job.implementation;
  return std::make_shared<JobStackComm>(
      std::make_shared<AlphaBetaCommModel>(comm),
      impl.framework_declared ? std::optional<Framework>(impl.framework) : std::nullopt,
      impl.stack ? impl.stack->comm.value : 1.0);
}

CostModels make_cost_models(const Scenario& scenario, const std::string& source) {
  const auto& names = compute_sources();
  if (std::find(names.begin(), names.end(), source) == names.end())
    throw NotFoundError("cost-model source", source, names);

  // The shipped tables are shared, not copied; a scenario's own profiles get a merged copy.
  std::shared_ptr<const ProfileTables> tables(std::shared_ptr<void>(), &ProfileTables::builtin());
  std::shared_ptr<ProfileTables> merged;
  bool extra_profiles = false;
  for (const auto& file : scenario.calibration) {
    Json j = read_json_file(file);
    switch (classify(j)) {
      case CalibrationKind::LayerProfile:
        if (!merged) merged = std::make_shared<ProfileTables>(ProfileTables::builtin());
        merged->merge(ProfileTables::load(file));
        tables = merged;
        extra_profiles = true;
        break;
      case CalibrationKind::CollectiveSweep:  // make_comm_model's
        break;
      case CalibrationKind::MemoryProfile:
        MemoryProfiles::load(file);  // checked; read by the planner's memory lookups
        break;
      case CalibrationKind::Unknown:
        throw ValidationError(file.string(), "format",
                              j.is_object() && j.contains("format") ? brief(j["format"])
                                                                    : "nothing (no \"format\" key)",
                              "\"cephalo-profile\", \"cephalo-collective-sweep\" or a Cephalo "
                              "model_latencies/model_memory file");
    }
  }

  auto roofline = std::make_shared<RooflineComputeModel>();
  std::shared_ptr<const ComputeModel> calibrated =
      extra_profiles ? std::shared_ptr<const ComputeModel>(CalibratedComputeModel::fit(*tables))
                     : std::shared_ptr<const ComputeModel>(CalibratedComputeModel::builtin());
  calibrated = std::make_shared<ByDeviceKind>(calibrated, roofline, tables);

  CostModels models;
  if (source == "roofline") {
    models.compute = roofline;
  } else if (source == "calibrated") {
    models.compute = calibrated;
  } else if (source == "profile") {
    // Every GPU of the cluster must have a row for the job, or the request is refused here.
    const Job& job = scenario.job;
    for (const auto& r : scenario.cluster.ranks()) {
      const DeviceSpec& d = r.slot->spec;
      if (!tables->find_for(job.model.name, d.name, job.sequence_length, job.precision.compute))
        throw InfeasibleError("no profile for model " + job.model.name + " on GPU " + d.name +
                              " (rank " + std::to_string(r.rank) + ") at sequence " +
                              std::to_string(job.sequence_length) + " in " +
                              to_string(job.precision.compute) +
                              "; use source \"calibrated\" (fitted to the profiles that exist) "
                              "or \"auto\" (profiles where they exist, calibrated elsewhere)");
    }
    models.compute = std::make_shared<ProfileComputeModel>(tables, calibrated, true);
  } else {
    models.compute = std::make_shared<ProfileComputeModel>(tables, calibrated, false);
  }
  if (const auto& stack = scenario.job.implementation.stack)
    models.compute = std::make_shared<StackScaledCompute>(models.compute, *stack);
  // The roofline prices no weight-gradient path (neither the profiles' nor the job's).
  if (source != "roofline") models.compute = std::make_shared<JobWeightGradients>(models.compute);
  models.comm = make_comm_model(scenario);
  return models;
}

}  // namespace cephalo::costmodels

#include "published_throughput.hpp"

#include <algorithm>
#include <optional>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

// The published names of the GPUs (llm-foundry's tables).
std::string catalog_gpu(JsonReader& r) {
  const std::string name = r.as_enum({"a100_40gb", "a100_80gb", "h100_80gb"});
  if (name == "a100_40gb") return "A100-40GB";
  if (name == "a100_80gb") return "A100-80GB";
  return "H100-SXM";
}

Precision precision_of(JsonReader& r) {
  // Composer FSDP: DEFAULT computes in the autocast dtype and reduces in fp32, PURE reduces in
  // bf16 too; both keep fp32 master shards.
  const std::string mp = r.as_enum({"DEFAULT", "PURE", "FULL"});
  Precision p;
  p.params = Dtype::FP32;
  p.compute = mp == "FULL" ? Dtype::FP32 : Dtype::BF16;
  p.reduce = mp == "PURE" ? Dtype::BF16 : Dtype::FP32;
  return p;
}

}  // namespace

double PublishedPoint::measured_iteration_s() const {
  const double tokens = static_cast<double>(job.global_batch) / gpus * job.sequence_length;
  return tokens / tokens_per_s_per_gpu;
}

std::vector<PublishedPoint> load_published_throughput(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  if (root.child("format").as_enum({"published-throughput"}).empty()) root.fail("a format");
  root.integer("version", 1, 1);
  root.allow({"description"});
  std::optional<Implementation> file_impl;
  if (auto impl = root.optional_child("implementation")) file_impl = parse_implementation(*impl);
  std::vector<PublishedPoint> out;
  for (auto& p : root.child("points").elements()) {
    PublishedPoint pt;
    pt.id = p.string("id");
    p.allow({"source", "notes"});
    auto model = p.child("model");
    model.allow({"label", "params_published"});
    auto arch = model.child("arch");
    pt.job.model = parse_model_spec(arch);
    pt.job.model_name = pt.job.model.name;
    model.finish();
    auto c = p.child("config");
    c.allow(
        {"framework", "nodes", "gpus_per_node", "precision", "sharding", "activation_cpu_offload"});
    pt.job.sequence_length = static_cast<int>(c.integer("seq_len", 1, 1 << 22));
    pt.gpus = static_cast<int>(c.integer("gpus", 1, 1 << 20));
    auto g = c.child("gpu_published");
    pt.gpu = catalog_gpu(g);
    pt.job.global_batch = static_cast<int>(c.integer("global_batch", 1, 1 << 24));
    pt.micro_batch = static_cast<int>(c.integer("micro_batch", 1, 1 << 20));
    pt.grad_accum = static_cast<int>(c.integer("grad_accum", 1, 1 << 20));
    auto mp = c.child("fsdp_mixed_precision");
    pt.job.precision = precision_of(mp);
    if (c.child("activation_checkpointing").as_enum({"full", "off"}) == "off")
      pt.checkpointing.kind = ActivationCheckpointing::Kind::None;
    if (static_cast<long long>(pt.micro_batch) * pt.grad_accum * pt.gpus != pt.job.global_batch)
      c.child("global_batch")
          .fail("gpus × micro_batch × grad_accum (" +
                std::to_string(static_cast<long long>(pt.micro_batch) * pt.grad_accum * pt.gpus) +
                ")");
    c.finish();
    auto m = p.child("measured");
    m.allow({"tokens_per_s", "samples_per_s_rounded", "mfu", "hfu", "model_tflops_per_gpu",
             "mfu_basis"});
    pt.tokens_per_s_per_gpu = m.number("tokens_per_s_per_gpu");
    if (!(pt.tokens_per_s_per_gpu > 0)) m.child("tokens_per_s_per_gpu").fail("a rate > 0");
    m.finish();
    if (auto impl = p.optional_child("implementation")) {
      pt.job.implementation = parse_implementation(*impl);
    } else if (file_impl) {
      pt.job.implementation = *file_impl;
    } else {
      throw ValidationError(file.string(), p.where() + ".implementation", "nothing (missing)",
                            "the software stack the point was measured with, "
                            "{\"attention\": \"flash\" | \"eager\", \"fused_elementwise\": bool}, "
                            "per point or at the top level of the file");
    }
    p.finish();
    GpuCatalog::builtin().get(pt.gpu);
    out.push_back(std::move(pt));
  }
  root.finish();
  return out;
}

const std::vector<PublishedPoint>& builtin_published_throughput() {
  static const std::vector<PublishedPoint> points = [] {
    std::vector<PublishedPoint> all;
    const auto dir = data_dir() / "calibration" / "published-throughput";
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return all;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      auto pts = load_published_throughput(f);
      all.insert(all.end(), pts.begin(), pts.end());
    }
    return all;
  }();
  return points;
}

double published_compute_seconds(const ComputeModel& model, const PublishedPoint& pt) {
  const DeviceSpec& gpu = GpuCatalog::builtin().get(pt.gpu);
  double per_micro_batch = 0;
  for (int u = 0; u < num_units(pt.job.model); ++u) {
    per_micro_batch +=
        model.unit_time(gpu, pt.job, u, ComputePhase::Forward, pt.micro_batch).seconds +
        model.unit_time(gpu, pt.job, u, ComputePhase::Backward, pt.micro_batch).seconds;
    if (pt.checkpointing.is_full() && unit_kind(pt.job.model, u) == UnitKind::Layer)
      per_micro_batch +=
          model.unit_time(gpu, pt.job, u, ComputePhase::Recompute, pt.micro_batch).seconds;
  }
  return per_micro_batch * pt.grad_accum +
         model.optimizer_time(gpu, pt.job, total_parameters(pt.job.model) / pt.gpus).seconds;
}

}  // namespace cephalo::costmodels

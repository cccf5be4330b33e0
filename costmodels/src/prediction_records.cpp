#include "cephalo/costmodels/prediction_records.hpp"

#include <cmath>
#include <iterator>
#include <numeric>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/checked.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_description.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"

namespace cephalo::costmodels {
namespace {

// A one-GPU scenario, so that a layer is priced by the same factory as the simulator's.
Scenario single_gpu_scenario(const DeviceSpec& spec, const Job& job) {
  Scenario s;
  s.name = "predict-layer";
  DeviceSlot slot;
  slot.type = spec.name;
  slot.spec = spec;
  Node node;
  node.name = "node0";
  node.devices.push_back(slot);
  node.intra_link = {"pcie", spec.pcie_bandwidth(), 5e-6};
  node.nic = {"ethernet", 25e9 / 8, 10e-6};
  s.cluster.name = "single";
  s.cluster.nodes.push_back(node);
  s.job = job;
  return s;
}

}  // namespace

std::string QueryOrigin::field(const std::string& name) const {
  if (!flags) return name;
  std::string flag = "--" + name;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

Implementation query_implementation(const LayerQuery& q, const QueryOrigin& origin) {
  auto fail = [&](const char* field, const std::string& value, const std::string& expected) {
    throw ValidationError(origin.file, origin.field(field), value, expected);
  };
  Implementation impl;
  if (q.attention == "flash")
    impl.attention = AttentionKernel::Flash;
  else if (q.attention == "eager")
    impl.attention = AttentionKernel::Eager;
  else
    fail("attention", q.attention, "one of flash, eager");
  if (!q.flash_kernel.empty()) {
    if (!flash_kernel_applies(impl.attention))
      fail("flash_kernel", q.flash_kernel,
           "no flash kernel unless the attention is flash (got attention " + q.attention + ")");
    const auto kernel = parse_flash_kernel(q.flash_kernel);
    if (!kernel) {
      std::string allowed;
      for (const auto& n : flash_kernel_names()) allowed += (allowed.empty() ? "" : ", ") + n;
      fail("flash_kernel", q.flash_kernel, "one of " + allowed);
    }
    impl.flash_kernel = *kernel;
  }
  impl.fused_elementwise = q.fused_elementwise;
  impl.compiled = q.compiled;
  if (q.compiled && !q.fused_elementwise)
    fail("fused_elementwise", "false",
         "true when compiled (torch.compile fuses the elementwise ops itself)");
  if (auto f = parse_framework(q.framework)) {
    impl.framework = *f;
    impl.framework_declared = true;  // the query always names one (fsdp2 by default)
  } else {
    std::string allowed;
    for (const auto& n : framework_names()) allowed += (allowed.empty() ? "" : ", ") + n;
    fail("framework", q.framework, "one of " + allowed);
  }
  return impl;
}

LayerJob layer_job(const LayerQuery& q, const QueryOrigin& origin) {
  const DeviceSpec& gpu = GpuCatalog::builtin().get(q.gpu);
  HfModel found = find_model_or_config(q.model);
  const ModelSpec& model = found.spec;
  auto fail = [&](const char* field, const std::string& value, const std::string& expected) {
    throw ValidationError(origin.file, origin.field(field), value, expected);
  };
  // No dtype asked: a config's torch_dtype (the checkpoint's), else fp16.
  const std::string dtype_text = !q.dtype.empty() ? q.dtype
                                 : !found.model_type.empty() && model.checkpoint_dtype
                                     ? to_string(*model.checkpoint_dtype)
                                     : "fp16";
  auto dtype = parse_dtype(dtype_text);
  if (!dtype || *dtype == Dtype::TF32) fail("dtype", dtype_text, "one of " + dtype_spellings(true));
  if (q.seq <= 0) fail("seq", std::to_string(q.seq), "a sequence length >= 1");
  // The job checks of parse_job (validate, plan, simulate), not a second version of them.
  if (const std::string why = sequence_refusal(model, q.seq); !why.empty())
    fail("seq", std::to_string(q.seq), why);
  if (q.micro_batch <= 0)
    fail("micro_batch", std::to_string(q.micro_batch), "a micro-batch size >= 1");
  LayerJob out{&gpu, {}};
  Job& job = out.job;
  job.model_name = found.model_type.empty() ? q.model : model.name;
  job.model = model;
  job.sequence_length = q.seq;
  job.global_batch = q.micro_batch;
  job.precision.compute = *dtype;
  job.implementation = query_implementation(q, origin);
  return out;
}

LayerPrediction predict_layer(const LayerQuery& q, const QueryOrigin& origin) {
  const LayerJob lj = layer_job(q, origin);
  const DeviceSpec& gpu = *lj.gpu;
  const Job& job = lj.job;
  const ModelSpec& model = job.model;
  const Dtype dtype = job.precision.compute;
  const Scenario one = single_gpu_scenario(gpu, job);
  auto models = make_cost_models(one, q.source);
  auto f = models.compute->unit_time(gpu, job, 1, ComputePhase::Forward, q.micro_batch);
  auto b = models.compute->unit_time(gpu, job, 1, ComputePhase::Backward, q.micro_batch);
  auto r = models.compute->unit_time(gpu, job, 1, ComputePhase::Recompute, q.micro_batch);
  LayerPrediction p;
  p.gpu = gpu.name;
  p.model = model.name;
  // A ViT's sequence is its patches + the class token whatever --seq says: report what is
  // priced, and say so.
  p.seq = effective_sequence(model, q.seq);
  p.dtype = to_string(dtype);
  p.micro_batch = q.micro_batch;
  p.forward_s = f.seconds;
  p.backward_s = b.seconds;
  p.recompute_s = r.seconds;
  p.source = f.source;
  p.extrapolated = f.extrapolated || b.extrapolated;
  p.implementation = job.implementation;
  p.warnings = precision_warnings(one.cluster, job);
  if (f.source.rfind("profile", 0) == 0)
    if (auto* row = ProfileTables::builtin().find_for(model.name, gpu.name, q.seq, dtype)) {
      p.detail = ProfileTables::evaluate(*row, q.micro_batch).detail + " (" + row->file_model +
                 " on " + row->file_gpu + ")";
      // A profile is what its stack measured; the asked-for stack is not priced by it.
      if (!(row->implementation == job.implementation))
        p.notes.push_back("the profile row was measured with \"" + to_string(row->implementation) +
                          "\", not the \"" + to_string(job.implementation) +
                          "\" asked for; --source calibrated prices the stack asked for");
    }
  // The per-layer kernels are the same under every sharding framework: what the framework
  // changes (collectives, copies, their schedule) is priced by plan and simulate.
  if (job.implementation.framework != Framework::FSDP2)
    p.notes.push_back("framework " + to_string(job.implementation.framework) +
                      " does not change a layer's kernels; its schedule is priced by simulate");
  if (model.family == "vit" && p.seq != q.seq)
    p.notes.push_back("ViT: the sequence is (image_size / patch_size)^2 + 1 = " +
                      std::to_string(p.seq) + " tokens, not --seq " + std::to_string(q.seq));
  return p;
}

Json to_json(const LayerPrediction& p) {
  Json j = {{"gpu", p.gpu},
            {"model", p.model},
            {"seq", p.seq},
            {"dtype", p.dtype},
            {"micro_batch", p.micro_batch},
            {"forward_ms", p.forward_s * 1e3},
            {"backward_ms", p.backward_s * 1e3},
            {"recompute_ms", p.recompute_s * 1e3},
            {"source", p.source},
            {"extrapolated", p.extrapolated}};
  if (!p.detail.empty()) j["detail"] = p.detail;
  j["implementation"] = to_json(p.implementation);
  if (!p.notes.empty()) j["notes"] = p.notes;
  if (!p.warnings.empty()) j["warnings"] = p.warnings;
  return j;
}

std::vector<MemoryBreakdown> predict_plan_memory(const Scenario& scenario, const Plan& plan) {
  std::vector<MemoryBreakdown> out;
  out.reserve(plan.ranks.size());
  for (const auto& r : plan.ranks) out.push_back(predict_memory(scenario, plan, r.rank));
  return out;
}

Json memory_record(const Scenario& scenario, const std::string& plan_label,
                   const std::vector<MemoryBreakdown>& ranks) {
  Json out = {{"scenario", scenario.name}, {"plan", plan_label}, {"ranks", Json::array()}};
  for (const auto& b : ranks) {
    Json terms = Json::object();
    for (const auto& t : b.terms) terms[t.name] = t.bytes;
    out["ranks"].push_back({{"rank", b.rank},
                            {"gpu", b.gpu},
                            {"terms_bytes", terms},
                            {"total_bytes", b.total},
                            {"capacity_bytes", b.capacity},
                            {"usable_bytes", b.usable},
                            {"headroom_bytes", b.headroom()},
                            {"fits", b.headroom() >= 0}});
  }
  return out;
}

CollectivePrediction predict_collective(const Scenario& scenario, const CollectiveQuery& q,
                                        const QueryOrigin& origin) {
  auto fail = [&](const char* field, const std::string& value, const std::string& expected) {
    throw ValidationError(origin.file, origin.field(field), value, expected);
  };
  Scenario s = scenario;
  if (!q.sweep.empty()) s.calibration.push_back(q.sweep);
  auto models = make_cost_models(s, "roofline");  // the compute source is irrelevant here
  CollectiveRequest req;
  req.kind = parse_collective_kind(q.kind);
  auto bytes = parse_quantity(q.bytes, Quantity::Bytes);
  if (!bytes) fail("bytes", q.bytes, "a byte size >= 0 such as 1048576 or \"64MiB\"");
  const int num_ranks = s.cluster.num_ranks();
  if (!q.ranks) {
    for (int r = 0; r < num_ranks; ++r) req.ranks.push_back(r);
  } else {
    if (q.ranks->empty()) fail("ranks", "[]", "a non-empty list");
    std::vector<bool> listed(static_cast<std::size_t>(num_ranks), false);
    for (double r : *q.ranks) {
      if (r != std::floor(r) || r < 0 || r >= num_ranks)
        fail("ranks", shortest(r),
             "ranks of the cluster (0.." + std::to_string(num_ranks - 1) + ")");
      // Checked here, where the list is the caller's: the comm model's own check would blame
      // an unnamed input.
      if (listed[static_cast<std::size_t>(r)])
        fail("ranks", shortest(r), "each rank at most once (" + shortest(r) + " is listed twice)");
      listed[static_cast<std::size_t>(r)] = true;
      req.ranks.push_back(static_cast<int>(r));
    }
  }
  // Only all-gather and reduce-scatter move per-rank shards; an all-reduce or broadcast of
  // uneven shares is priced as the even one, so the shares would be dropped unread.
  if (q.shares && req.kind != CollectiveKind::AllGather &&
      req.kind != CollectiveKind::ReduceScatter)
    fail("shares", "shares for " + to_string(req.kind),
         "no shares: only all-gather and reduce-scatter have per-rank shards (" +
             to_string(req.kind) + " moves the whole buffer whatever its shares)");
  const std::size_t n = req.ranks.size();
  if (!q.shares) {
    req.shard_bytes.assign(n, *bytes / static_cast<double>(n));
  } else {
    const auto& shares = *q.shares;
    std::string listed;
    for (double x : shares) listed += (listed.empty() ? "" : ",") + shortest(x);
    if (shares.size() != n)
      fail("shares", listed, std::to_string(n) + " shares, one per participating rank");
    for (double x : shares)
      if (!(x >= 0) || !std::isfinite(x)) fail("shares", shortest(x), "shares >= 0");
    const double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
    if (std::abs(sum - 1) > 1e-6)
      fail("shares", listed,
           "shares summing to 1 (they sum to " + shortest(std::round(sum * 1e12) / 1e12) + ")");
    for (double x : shares) req.shard_bytes.push_back(x * *bytes);
  }
  if (q.uneven == "grouped")
    req.uneven = UnevenCollective::Grouped;
  else if (q.uneven == "padded")
    req.uneven = UnevenCollective::Padded;
  else if (q.uneven == "auto")
    req.uneven = UnevenCollective::Auto;
  else
    fail("uneven", q.uneven, "auto, grouped or padded");
  // The variant is of uneven shards: with even ones (no shares) it would be dropped.
  if (!q.shares && req.uneven != UnevenCollective::Auto)
    fail("uneven", q.uneven,
         "auto without " + origin.field("shares") +
             " (even shards take the even collective; give shares for an uneven variant)");
  CollectivePrediction p;
  p.scenario = s.name;
  p.estimate = models.comm->collective(s.cluster, req);
  p.request = std::move(req);
  p.calibration = q.sweep.empty() ? "defaults" : q.sweep;
  return p;
}

Json to_json(const CollectivePrediction& p) {
  Json j = {{"scenario", p.scenario},
            {"kind", to_string(p.request.kind)},
            {"ranks", p.request.ranks},
            {"bytes", p.estimate.total_bytes},
            {"shard_bytes", p.request.shard_bytes},
            {"seconds", p.estimate.seconds},
            {"algbw_bytes_per_s", p.estimate.algbw},
            {"busbw_bytes_per_s", p.estimate.busbw},
            {"algorithm", p.estimate.algorithm},
            {"protocol", p.estimate.protocol},
            {"channels", p.estimate.channels},
            {"calibration", p.calibration}};
  if (p.estimate.variant) j["variant"] = to_string(*p.estimate.variant);
  return j;
}

std::string render_text(const LayerPrediction& p) {
  TextTable t({"gpu", "model", "seq", "dtype", "micro-batch", "forward ms", "backward ms",
               "recompute ms", "source", "extrapolated"});
  t.add_row({p.gpu, p.model, std::to_string(p.seq), p.dtype, std::to_string(p.micro_batch),
             fixed(p.forward_s * 1e3, 3), fixed(p.backward_s * 1e3, 3),
             fixed(p.recompute_s * 1e3, 3), p.source, p.extrapolated ? "yes" : "no"});
  std::string out = t.render();
  out += "implementation: ";
  out += to_string(p.implementation);
  out += "\n";
  if (!p.detail.empty()) out += "profile: " + p.detail + "\n";
  for (const auto& n : p.notes) out += "note: " + n + "\n";
  if (p.extrapolated)
    out +=
        "note: the micro-batch lies outside the measured range; the time is a linear "
        "extrapolation\n";
  return out;
}

std::string render_memory_table(const Scenario& scenario, const std::string& plan_label,
                                const std::vector<MemoryBreakdown>& ranks, bool per_rank) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::vector<std::string> headers = {"rank", "gpu"};
  for (const auto& t : ranks.front().terms) headers.push_back(t.name);
  for (const char* h : {"total", "usable", "headroom", "fits"}) headers.push_back(h);
  // A rank's cells as printed (all but its rank): ranks that differ only past the printed
  // digits share a row; --per-rank and the JSON record keep every rank's exact bytes.
  auto cells = [&](const MemoryBreakdown& b) {
    std::vector<std::string> row = {b.gpu};
    for (const auto& t : b.terms) row.push_back(fixed(t.bytes / kGiB, 2));
    row.push_back(fixed(b.total / kGiB, 2));
    row.push_back(fixed(b.usable / kGiB, 2));
    row.push_back(fixed(b.headroom() / kGiB, 2));
    row.push_back(b.headroom() >= 0 ? "yes" : "NO");
    return row;
  };
  std::vector<std::vector<std::string>> rows;
  rows.reserve(ranks.size());
  for (const auto& b : ranks) rows.push_back(cells(b));
  const auto runs = equal_runs(static_cast<int>(ranks.size()), [&](int a, int b) {
    return !per_rank && rows[static_cast<std::size_t>(a)] == rows[static_cast<std::size_t>(b)];
  });
  TextTable table(headers);
  for (const auto& [begin, end] : runs) {
    std::vector<std::string> row = {
        format_rank_range(ranks[static_cast<std::size_t>(begin)].rank,
                          ranks[static_cast<std::size_t>(end - 1)].rank)};
    auto& c = rows[static_cast<std::size_t>(begin)];
    row.insert(row.end(), std::make_move_iterator(c.begin()), std::make_move_iterator(c.end()));
    table.add_row(std::move(row));
  }
  std::string out =
      "per-rank memory of " + plan_label + " on " + scenario.name + " (GiB" +
      (runs.size() < ranks.size() ? "; a row per run of ranks that print alike" : "") + ")\n";
  return out + table.render();
}

std::string render_text(const CollectivePrediction& p) {
  const auto& e = p.estimate;
  TextTable t({"collective", "ranks", "bytes", "time", "algbw", "busbw", "algorithm", "protocol",
               "channels"});
  t.add_row({to_string(p.request.kind), std::to_string(p.request.ranks.size()),
             format_bytes(e.total_bytes), format_seconds(e.seconds), format_bandwidth(e.algbw),
             format_bandwidth(e.busbw), e.algorithm, e.protocol.empty() ? "-" : e.protocol,
             e.channels > 0 ? std::to_string(e.channels) : "-"});
  return t.render();
}

}  // namespace cephalo::costmodels

// `cephalo predict layer | memory | collective`: what the cost models say, one record two ways
// (aligned table, or --json).
#include <iostream>
#include <numeric>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/alpha_beta_comm.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

constexpr double kGiBd = 1024.0 * 1024.0 * 1024.0;

struct LayerArgs {
  std::string gpu, model, dtype = "fp16", source = "auto";
  int seq = 0;
  int micro_batch = 0;
  bool json = false;
};

struct MemoryArgs {
  std::string scenario, plan;
  bool json = false;
};

struct CollectiveArgs {
  std::string scenario, kind, bytes, shares, ranks, uneven = "grouped", sweep;
  bool json = false;
};

// A one-GPU scenario so `predict layer` goes through the same factory as the simulator.
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

void predict_layer(const LayerArgs& a) {
  const DeviceSpec& gpu = costmodels::GpuCatalog::builtin().get(a.gpu);
  const ModelSpec& model = costmodels::ModelCatalog::builtin().get(a.model);
  auto dtype = parse_dtype(a.dtype);
  if (!dtype) throw ValidationError("command line", "--dtype", a.dtype, "fp16, bf16 or fp32");
  if (a.seq <= 0)
    throw ValidationError("command line", "--seq", std::to_string(a.seq), "a sequence length >= 1");
  if (model.max_positions > 0 && a.seq > model.max_positions)
    throw ValidationError(
        "command line", "--seq", std::to_string(a.seq),
        "at most the model's " + std::to_string(model.max_positions) + " positions");
  if (a.micro_batch <= 0)
    throw ValidationError("command line", "--micro-batch", std::to_string(a.micro_batch),
                          "a micro-batch size >= 1");
  Job job;
  job.model_name = a.model;
  job.model = model;
  job.sequence_length = a.seq;
  job.global_batch = a.micro_batch;
  job.precision.compute = *dtype;
  auto models = costmodels::make_cost_models(single_gpu_scenario(gpu, job), a.source);
  using costmodels::ComputePhase;
  auto f = models.compute->unit_time(gpu, job, 1, ComputePhase::Forward, a.micro_batch);
  auto b = models.compute->unit_time(gpu, job, 1, ComputePhase::Backward, a.micro_batch);
  auto r = models.compute->unit_time(gpu, job, 1, ComputePhase::Recompute, a.micro_batch);
  std::string detail;
  if (f.source.rfind("profile", 0) == 0) {
    if (auto* row =
            costmodels::ProfileTables::builtin().find_for(model.name, gpu.name, a.seq, *dtype))
      detail = costmodels::ProfileTables::evaluate(*row, a.micro_batch).detail + " (" +
               row->file_model + " on " + row->file_gpu + ")";
  }
  Json j = {{"gpu", gpu.name},
            {"model", model.name},
            {"seq", a.seq},
            {"dtype", to_string(*dtype)},
            {"micro_batch", a.micro_batch},
            {"forward_ms", f.seconds * 1e3},
            {"backward_ms", b.seconds * 1e3},
            {"recompute_ms", r.seconds * 1e3},
            {"source", f.source},
            {"extrapolated", f.extrapolated || b.extrapolated}};
  if (!detail.empty()) j["detail"] = detail;
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  TextTable t({"gpu", "model", "seq", "dtype", "micro-batch", "forward ms", "backward ms",
               "recompute ms", "source", "extrapolated"});
  t.add_row({gpu.name, model.name, std::to_string(a.seq), to_string(*dtype),
             std::to_string(a.micro_batch), fixed(f.seconds * 1e3, 3), fixed(b.seconds * 1e3, 3),
             fixed(r.seconds * 1e3, 3), f.source, j["extrapolated"].get<bool>() ? "yes" : "no"});
  std::cout << t.render();
  if (!detail.empty()) std::cout << "profile: " << detail << "\n";
  if (j["extrapolated"].get<bool>())
    std::cout << "note: the micro-batch lies outside the measured range; the time is a linear "
                 "extrapolation\n";
}

void predict_memory(const MemoryArgs& a) {
  Scenario s = costmodels::load_scenario(a.scenario);
  Plan plan = load_plan(a.plan);
  validate_plan_for(plan, s, a.plan);
  traces::check_groups_hold_state(plan, s, a.plan);
  std::vector<costmodels::MemoryBreakdown> all;
  for (const auto& r : plan.ranks) all.push_back(costmodels::predict_memory(s, plan, r.rank));
  if (a.json) {
    Json out = {{"scenario", s.name}, {"plan", a.plan}, {"ranks", Json::array()}};
    for (const auto& b : all) {
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
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::vector<std::string> headers = {"rank", "gpu"};
  for (const auto& t : all.front().terms) headers.push_back(t.name);
  for (const char* h : {"total", "usable", "headroom", "fits"}) headers.push_back(h);
  TextTable table(headers);
  for (const auto& b : all) {
    std::vector<std::string> row = {std::to_string(b.rank), b.gpu};
    for (const auto& t : b.terms) row.push_back(fixed(t.bytes / kGiBd, 2));
    row.push_back(fixed(b.total / kGiBd, 2));
    row.push_back(fixed(b.usable / kGiBd, 2));
    row.push_back(fixed(b.headroom() / kGiBd, 2));
    row.push_back(b.headroom() >= 0 ? "yes" : "NO");
    table.add_row(row);
  }
  std::cout << "per-rank memory of " << a.plan << " on " << s.name << " (GiB)\n" << table.render();
}

std::vector<double> parse_number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      double v = std::stod(item, &used);
      if (used != item.size() || !std::isfinite(v)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw ValidationError("command line", flag, item, "a comma-separated list of numbers");
    }
  }
  if (out.empty()) throw ValidationError("command line", flag, text, "a non-empty list");
  return out;
}

void predict_collective(const CollectiveArgs& a) {
  Scenario s = costmodels::load_scenario(a.scenario);
  if (!a.sweep.empty()) s.calibration.push_back(a.sweep);
  auto models = costmodels::make_cost_models(s, "roofline");  // compute source is irrelevant here
  costmodels::CollectiveRequest req;
  req.kind = costmodels::parse_collective_kind(a.kind);
  auto bytes = parse_quantity(a.bytes, Quantity::Bytes);
  if (!bytes)
    throw ValidationError("command line", "--bytes", a.bytes,
                          "a byte size >= 0 such as 1048576 or \"64MiB\"");
  if (a.ranks.empty()) {
    for (int r = 0; r < s.cluster.num_ranks(); ++r) req.ranks.push_back(r);
  } else {
    for (double r : parse_number_list(a.ranks, "--ranks")) {
      if (r != std::floor(r) || r < 0 || r >= s.cluster.num_ranks())
        throw ValidationError(
            "command line", "--ranks", std::to_string(r),
            "ranks of the cluster (0.." + std::to_string(s.cluster.num_ranks() - 1) + ")");
      req.ranks.push_back(static_cast<int>(r));
    }
  }
  const std::size_t n = req.ranks.size();
  if (a.shares.empty()) {
    req.shard_bytes.assign(n, *bytes / static_cast<double>(n));
  } else {
    auto shares = parse_number_list(a.shares, "--shares");
    if (shares.size() != n)
      throw ValidationError("command line", "--shares", a.shares,
                            std::to_string(n) + " shares, one per participating rank");
    double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
    for (double x : shares)
      if (x < 0)
        throw ValidationError("command line", "--shares", std::to_string(x), "shares >= 0");
    if (std::abs(sum - 1) > 1e-6)
      throw ValidationError("command line", "--shares", a.shares,
                            "shares summing to 1 (they sum to " + fixed(sum, 6) + ")");
    for (double x : shares) req.shard_bytes.push_back(x * *bytes);
  }
  if (a.uneven == "grouped")
    req.uneven = UnevenCollective::Grouped;
  else if (a.uneven == "padded")
    req.uneven = UnevenCollective::Padded;
  else
    throw ValidationError("command line", "--uneven", a.uneven, "grouped or padded");
  auto e = models.comm->collective(s.cluster, req);
  Json j = {{"scenario", s.name},
            {"kind", costmodels::to_string(req.kind)},
            {"ranks", req.ranks},
            {"bytes", e.total_bytes},
            {"shard_bytes", req.shard_bytes},
            {"seconds", e.seconds},
            {"algbw_bytes_per_s", e.algbw},
            {"busbw_bytes_per_s", e.busbw},
            {"algorithm", e.algorithm},
            {"calibration", a.sweep.empty() ? "defaults" : a.sweep}};
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  TextTable t({"collective", "ranks", "bytes", "time", "algbw", "busbw", "algorithm"});
  t.add_row({costmodels::to_string(req.kind), std::to_string(n), format_bytes(e.total_bytes),
             format_seconds(e.seconds), format_bandwidth(e.algbw), format_bandwidth(e.busbw),
             e.algorithm});
  std::cout << t.render();
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "predict", "What the cost models predict for a layer, a plan's memory or a collective");
  cmd->require_subcommand(1);

  static LayerArgs layer;
  auto* l = cmd->add_subcommand("layer", "Per-layer forward/backward time of a model on a GPU");
  l->add_option("--gpu", layer.gpu, "GPU (catalog name or alias, e.g. l4, a6000)")
      ->required()
      ->check(catalog_gpu());
  l->add_option("--model", layer.model, "model (catalog name or alias)")
      ->required()
      ->check(catalog_model());
  l->add_option("--seq", layer.seq, "sequence length")->required()->check(integer_in(1, 1 << 22));
  l->add_option("--dtype", layer.dtype, "compute dtype: fp16, bf16 or fp32")->check(dtype_name());
  l->add_option("--micro-batch", layer.micro_batch, "samples per micro-batch")
      ->required()
      ->check(integer_in(1, 1 << 24));
  l->add_option("--source", layer.source, "auto | profile | calibrated | roofline")
      ->check(one_of(costmodels::compute_sources()));
  l->add_flag("--json", layer.json, "Print the record as JSON");
  l->callback([] { predict_layer(layer); });

  static MemoryArgs memory;
  auto* m = cmd->add_subcommand("memory", "Per-rank memory of a plan, term by term");
  m->add_option("--scenario", memory.scenario, "scenario file")->required();
  m->add_option("--plan", memory.plan, "plan file")->required();
  m->add_flag("--json", memory.json, "Print the record as JSON");
  m->callback([] { predict_memory(memory); });

  static CollectiveArgs coll;
  auto* c = cmd->add_subcommand("collective",
                                "Time and bandwidth of a collective on a scenario's cluster");
  c->add_option("--scenario", coll.scenario, "scenario file")->required();
  c->add_option("--kind", coll.kind, "all-gather | reduce-scatter | all-reduce | broadcast")
      ->required()
      ->check(one_of({"all-gather", "reduce-scatter", "all-reduce", "broadcast", "allgather",
                      "reducescatter", "allreduce", "bcast"}));
  c->add_option("--bytes", coll.bytes, "total size (bytes, or with a unit: 64MiB)")->required();
  c->add_option("--shares", coll.shares, "per-rank shares a,b,... summing to 1 (uneven shards)");
  c->add_option("--ranks", coll.ranks, "participating ranks r0,r1,... (default: all)");
  c->add_option("--uneven", coll.uneven, "uneven-shard variant: grouped (default) or padded")
      ->check(one_of({"grouped", "padded"}));
  c->add_option("--sweep", coll.sweep, "measured collective sweep to calibrate the links with");
  c->add_flag("--json", coll.json, "Print the record as JSON");
  c->callback([] { predict_collective(coll); });
}

}  // namespace cephalo::cli

// `cephalo predict layer | memory | collective`: what the cost models say, one record two ways
// (aligned table, or --json).
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/prediction_records.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct LayerArgs {
  std::string gpu, model, dtype, source = "auto";
  int seq = 0;
  int micro_batch = 0;
  std::string attention = "flash", fused_elementwise = "true", framework = "fsdp2";
  bool compiled = false;
  bool json = false;
};

struct MemoryArgs {
  std::string scenario, plan;
  bool json = false;
};

struct CollectiveArgs {
  std::string scenario, kind, bytes, shares, ranks, uneven = "auto", sweep;
  bool json = false;
};

void predict_layer(const LayerArgs& a) {
  const auto p = costmodels::predict_layer(
      {a.gpu, a.model, a.seq, a.dtype, a.micro_batch, a.source, a.attention,
       a.fused_elementwise == "true", a.compiled, a.framework},
      {kCommandLine, true});
  for (const auto& w : p.warnings) std::cerr << "warning: " << w << "\n";
  if (a.json)
    std::cout << costmodels::to_json(p).dump(2) << "\n";
  else
    std::cout << costmodels::render_text(p);
}

void predict_memory(const MemoryArgs& a) {
  Scenario s = costmodels::load_scenario(a.scenario);
  const Plan plan = traces::load_plan_for(s, a.plan);
  const auto all = costmodels::predict_plan_memory(s, plan);
  if (a.json)
    std::cout << costmodels::memory_record(s, a.plan, all).dump(2) << "\n";
  else
    std::cout << costmodels::render_memory_table(s, a.plan, all);
}

// "a,b,c" as numbers (the command line's list syntax; the values are checked by the library).
std::optional<std::vector<double>> parse_number_list(const std::string& text,
                                                     const std::string& flag) {
  if (text.empty()) return std::nullopt;
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
      throw ValidationError(kCommandLine, flag, item, "a comma-separated list of numbers");
    }
  }
  if (out.empty()) throw ValidationError(kCommandLine, flag, text, "a non-empty list");
  return out;
}

void predict_collective(const CollectiveArgs& a) {
  const Scenario s = costmodels::load_scenario(a.scenario);
  costmodels::CollectiveQuery q;
  q.kind = a.kind;
  q.bytes = a.bytes;
  q.ranks = parse_number_list(a.ranks, "--ranks");
  q.shares = parse_number_list(a.shares, "--shares");
  q.uneven = a.uneven;
  q.sweep = a.sweep;
  const auto p = costmodels::predict_collective(s, q, {kCommandLine, true});
  if (a.json)
    std::cout << costmodels::to_json(p).dump(2) << "\n";
  else
    std::cout << costmodels::render_text(p);
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
  l->add_option("--model", layer.model,
                "model (catalog name or alias, or a Hugging Face config.json)")
      ->required()
      ->check(catalog_model_or_config());
  l->add_option("--seq", layer.seq, "sequence length")->required()->check(integer_in(1, 1 << 22));
  l->add_option("--dtype", layer.dtype,
                "compute dtype: fp16, bf16 or fp32 (default: a config's torch_dtype, else fp16)")
      ->check(dtype_name());
  l->add_option("--micro-batch", layer.micro_batch, "samples per micro-batch")
      ->required()
      ->check(integer_in(1, 1 << 24));
  add_compute_model_option(l, layer.source, "Compute model", "--source");
  l->add_option("--attention", layer.attention, "attention kernel: flash (default) or eager")
      ->check(one_of({"flash", "eager"}));
  l->add_option("--fused-elementwise", layer.fused_elementwise,
                "elementwise ops fused into their neighbours: true (default) or false")
      ->check(one_of({"true", "false"}));
  l->add_flag("--compiled", layer.compiled, "torch.compile'd layers (implies fused elementwise)");
  l->add_option("--framework", layer.framework,
                "sharding framework: fsdp2 (default), fsdp1, deepspeed_zero3, ddp")
      ->check(one_of(framework_names()));
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
  c->add_option("--uneven", coll.uneven,
                "uneven-shard variant: auto (default: the cheaper), grouped or padded")
      ->check(one_of({"auto", "grouped", "padded"}));
  c->add_option("--sweep", coll.sweep, "measured collective sweep to calibrate the links with");
  c->add_flag("--json", coll.json, "Print the record as JSON");
  c->callback([] { predict_collective(coll); });
  add_predict_3d_command(*cmd);
}

}  // namespace cephalo::cli

// `cephalo predict layer | memory | collective`: what the cost models say, one record two ways
// (aligned table, or --json).
#include <iostream>
#include <optional>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/prediction_records.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

struct LayerArgs {
  costmodels::LayerQuery query;
  std::string fused_elementwise = "true";
  bool json = false;
};

struct MemoryArgs {
  std::string scenario, plan;
  bool json = false;
};

struct CollectiveArgs {
  std::string scenario, shares, ranks;
  costmodels::CollectiveQuery query;
  bool json = false;
};

void predict_layer(const LayerArgs& a) {
  costmodels::LayerQuery query = a.query;
  query.fused_elementwise = a.fused_elementwise == "true";
  const auto p = costmodels::predict_layer(query, {kCommandLine, true});
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

// A list flag's numbers (core/units.hpp), nullopt when the flag is not given.
std::optional<std::vector<double>> number_list(const std::string& text, const std::string& flag) {
  if (text.empty()) return std::nullopt;
  return parse_number_list(text, kCommandLine, flag);
}

void predict_collective(const CollectiveArgs& a) {
  const Scenario s = costmodels::load_scenario(a.scenario);
  costmodels::CollectiveQuery q = a.query;
  q.ranks = number_list(a.ranks, "--ranks");
  q.shares = number_list(a.shares, "--shares");
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
  l->add_option("--gpu", layer.query.gpu, "GPU (catalog name or alias, e.g. l4, a6000)")
      ->required()
      ->check(catalog_gpu());
  l->add_option("--model", layer.query.model,
                "model (catalog name or alias, or a Hugging Face config.json)")
      ->required()
      ->check(catalog_model_or_config());
  l->add_option("--seq", layer.query.seq, "sequence length")
      ->required()
      ->check(integer_in(1, 1 << 22));
  l->add_option("--dtype", layer.query.dtype,
                "compute dtype: fp16, bf16 or fp32 (default: a config's torch_dtype, else fp16)")
      ->check(dtype_name());
  l->add_option("--micro-batch", layer.query.micro_batch, "samples per micro-batch")
      ->required()
      ->check(integer_in(1, 1 << 24));
  add_compute_model_option(l, layer.query.source, "Compute model", "--source");
  l->add_option("--attention", layer.query.attention, "attention kernel: flash (default) or eager")
      ->check(one_of({"flash", "eager"}));
  l->add_option("--fused-elementwise", layer.fused_elementwise,
                "elementwise ops fused into their neighbours: true (default) or false")
      ->check(one_of({"true", "false"}));
  l->add_flag("--compiled", layer.query.compiled,
              "torch.compile'd layers (implies fused elementwise)");
  l->add_option("--framework", layer.query.framework,
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
  c->add_option("--kind", coll.query.kind, "all-gather | reduce-scatter | all-reduce | broadcast")
      ->required()
      ->check(one_of({"all-gather", "reduce-scatter", "all-reduce", "broadcast", "allgather",
                      "reducescatter", "allreduce", "bcast"}));
  c->add_option("--bytes", coll.query.bytes, "total size (bytes, or with a unit: 64MiB)")
      ->required();
  c->add_option("--shares", coll.shares, "per-rank shares a,b,... summing to 1 (uneven shards)");
  c->add_option("--ranks", coll.ranks, "participating ranks r0,r1,... (default: all)");
  c->add_option("--uneven", coll.query.uneven,
                "uneven-shard variant: auto (default: the cheaper), grouped or padded")
      ->check(one_of({"auto", "grouped", "padded"}));
  c->add_option("--sweep", coll.query.sweep,
                "measured collective sweep to calibrate the links with");
  c->add_flag("--json", coll.json, "Print the record as JSON");
  c->callback([] { predict_collective(coll); });
  add_predict_3d_command(*cmd);
}

}  // namespace cephalo::cli

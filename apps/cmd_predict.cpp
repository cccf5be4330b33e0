// `cephalo predict layer | memory | collective | 3d`: what the cost models say, one record two
// ways (aligned table, or --json). The records and their text are costmodels' (prediction
// records), the same Python's predict_* return.
#include <iostream>
#include <optional>

#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/layer_ops.hpp"
#include "cephalo/costmodels/prediction_records.hpp"
#include "cephalo/costmodels/scenario_notices.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "commands.hpp"

namespace cephalo::cli {
namespace {

// A list flag's numbers (core/units.hpp), nullopt when the flag is not given.
std::optional<std::vector<double>> number_list(const std::string& text, const std::string& flag) {
  if (text.empty()) return std::nullopt;
  return parse_number_list(text, kCommandLine, flag);
}

void add_layer(CLI::App* cmd) {
  static struct {
    costmodels::LayerQuery query;
    std::string fused_elementwise = "true";
    bool json = false, ops = false;
  } a;
  auto* l = cmd->add_subcommand("layer", "Per-layer forward/backward time of a model on a GPU");
  l->add_option("--gpu", a.query.gpu, "GPU (catalog name or alias, e.g. l4, a6000)")
      ->required()
      ->check(catalog_gpu());
  l->add_option("--model", a.query.model,
                "model (catalog name or alias, or a Hugging Face config.json)")
      ->required()
      ->check(catalog_model_or_config());
  l->add_option("--seq", a.query.seq, "sequence length")->required()->check(integer_in(1, 1 << 22));
  l->add_option("--dtype", a.query.dtype,
                "compute dtype: fp16, bf16 or fp32 (default: a config's torch_dtype, else fp16)")
      ->check(dtype_name(true));
  l->add_option("--micro-batch", a.query.micro_batch, "samples per micro-batch")
      ->required()
      ->check(integer_in(1, 1 << 24));
  add_compute_model_option(l, a.query.source, "Compute model", "--source");
  l->add_option("--attention", a.query.attention, "attention kernel: flash (default) or eager")
      ->check(one_of({"flash", "eager"}));
  l->add_option("--flash-kernel", a.query.flash_kernel,
                "flash attention's kernel: flash-attn (default) or cudnn (only with --attention "
                "flash)")
      ->check(one_of(flash_kernel_names()));
  l->add_option("--fused-elementwise", a.fused_elementwise,
                "elementwise ops fused into their neighbours: true (default) or false")
      ->check(one_of({"true", "false"}));
  l->add_flag("--compiled", a.query.compiled, "torch.compile'd layers (implies fused elementwise)");
  l->add_option("--framework", a.query.framework,
                "sharding framework: fsdp2 (default), fsdp1, deepspeed_zero3, ddp")
      ->check(one_of(framework_names()));
  l->add_flag("--ops", a.ops,
              "Also one row per op class (GEMMs, attention core, elementwise, norms): priced "
              "time, the datasheet roofline, their ratio, share of the layer (calibrated model)");
  l->add_flag("--json", a.json, "Print the record as JSON");
  l->callback([] {
    costmodels::LayerQuery query = a.query;
    query.fused_elementwise = a.fused_elementwise == "true";
    if (a.ops) {
      const auto p = costmodels::predict_layer_ops(query, {kCommandLine, true});
      for (const auto& w : p.layer.warnings) std::cerr << "warning: " << w << "\n";
      print_json_or_text(
          a.json, [&] { return costmodels::to_json(p); },
          [&] { return costmodels::render_text(p); });
      return;
    }
    const auto p = costmodels::predict_layer(query, {kCommandLine, true});
    for (const auto& w : p.warnings) std::cerr << "warning: " << w << "\n";
    print_json_or_text(
        a.json, [&] { return costmodels::to_json(p); }, [&] { return costmodels::render_text(p); });
  });
}

void add_memory(CLI::App* cmd) {
  static struct {
    std::string scenario, plan;
    bool json = false, per_rank = false;
  } a;
  auto* m = cmd->add_subcommand("memory", "Per-rank memory of a plan, term by term");
  m->add_option("--scenario", a.scenario, "scenario file")->required();
  m->add_option("--plan", a.plan, "plan file")->required();
  m->add_flag("--json", a.json, "Print the record as JSON (always one entry per rank)");
  m->add_flag("--per-rank", a.per_rank,
              "One table row per rank (default: one per run of ranks whose rows print alike, "
              "with their rank range)");
  m->callback([] {
    Scenario s = costmodels::load_scenario(a.scenario);
    const Plan plan = traces::load_plan_for(s, a.plan);  // `s` becomes the plan's nodes
    const auto all = costmodels::predict_plan_memory(s, plan);
    print_json_or_text(
        a.json, [&] { return costmodels::memory_record(s, a.plan, all); },
        [&] { return costmodels::render_memory_table(s, a.plan, all, a.per_rank); });
  });
}

void add_collective(CLI::App* cmd) {
  static struct {
    std::string scenario, shares, ranks;
    costmodels::CollectiveQuery query;
    bool json = false;
  } a;
  auto* c = cmd->add_subcommand("collective",
                                "Time and bandwidth of a collective on a scenario's cluster");
  c->add_option("--scenario", a.scenario, "scenario file")->required();
  c->add_option("--kind", a.query.kind, "all-gather | reduce-scatter | all-reduce | broadcast")
      ->required()
      ->check(one_of({"all-gather", "reduce-scatter", "all-reduce", "broadcast", "allgather",
                      "reducescatter", "allreduce", "bcast"}));
  c->add_option("--bytes", a.query.bytes, "total size (bytes, or with a unit: 64MiB)")->required();
  c->add_option("--shares", a.shares, "per-rank shares a,b,... summing to 1 (uneven shards)");
  c->add_option("--ranks", a.ranks, "participating ranks r0,r1,... (default: all)");
  c->add_option("--uneven", a.query.uneven,
                "uneven-shard variant: auto (default: the cheaper), grouped or padded")
      ->check(one_of({"auto", "grouped", "padded"}));
  c->add_option("--sweep", a.query.sweep, "measured collective sweep to calibrate the links with");
  c->add_flag("--json", a.json, "Print the record as JSON");
  c->callback([] {
    const Scenario s = costmodels::load_scenario(a.scenario);
    // The network's notes only: a dtype or stack warning says nothing about a collective.
    for (const auto& line : costmodels::cluster_notices(s.cluster)) std::cerr << line << "\n";
    costmodels::CollectiveQuery q = a.query;
    q.ranks = number_list(a.ranks, "--ranks");
    q.shares = number_list(a.shares, "--shares");
    const auto p = costmodels::predict_collective(s, q, {kCommandLine, true});
    print_json_or_text(
        a.json, [&] { return costmodels::to_json(p); }, [&] { return costmodels::render_text(p); });
  });
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "predict", "What the cost models predict for a layer, a plan's memory or a collective");
  cmd->require_subcommand(1);
  add_layer(cmd);
  add_memory(cmd);
  add_collective(cmd);
  add_predict_3d_command(*cmd);
}

}  // namespace cephalo::cli

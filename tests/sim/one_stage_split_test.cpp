// An FSDP plan is a model split's one-stage, T = 1 case (DESIGN §4, "A split in the plan and the
// graph"): written again with its one stage spelt out ("model_split": every layer on every rank,
// tensor_parallel 1, full sharding), it must give the same training graph op for op (every
// field, every wait, every collective's members and segments, the static bytes and the slices)
// and the same replay to the nanosecond, in full and by class. One check over every FSDP plan
// the project ships (tests/golden/*.plan.json, scenarios/plans/*.json) and over variants of the
// schedule choices each builder path must keep (uneven batches and micro-batch counts, an idle
// rank, layered / standard / no_sync, host offload, hybrid groups, prefetch off, uneven
// collectives, every activation-checkpointing choice), in the style of ns-3's one test over
// every scheduler: whichever builder serves a split, the FSDP graph is its one-stage output.
// The plan is written again through the plan file's reader (to_json, plus the key), so the
// check covers what a user writes, not only a Plan built in code.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/report.hpp"
#include "cephalo/traces/shard_layout.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::sim {
namespace {

namespace fs = std::filesystem;
const std::string kSource = CEPHALO_SOURCE_DIR;

struct Case {
  std::string name;
  Scenario scenario;
  Plan plan;
};

// The plan with its one stage written out, through the plan file's reader (the key as a user
// would write it beside the plan's own FSDP keys), and checked for the scenario.
Plan as_one_stage_split(const Plan& plan, const Scenario& scenario) {
  ModelSplit split;
  split.tensor_parallel = 1;
  split.sharding = ShardingKind::Full;
  split.micro_batches = 1;
  PipelineStage stage;
  stage.chunks = {LayerRange{0, scenario.job.model.num_layers}};
  for (int r = 0; r < static_cast<int>(plan.ranks.size()); ++r) stage.ranks.push_back(r);
  stage.tensor_parallel = 1;
  split.stages = {stage};
  Json j = to_json(plan, PlanForm::PerRank);
  j["model_split"] = to_json(split);
  JsonReader reader(j, "<one-stage split of " + plan.scenario + ">");
  Plan out = parse_plan(reader);
  EXPECT_EQ(out.model_split, split) << "the reader kept the one stage as written";
  traces::check_plan_for(out, scenario, "<one-stage split>");
  return out;
}

void expect_same_op(const traces::Op& a, const traces::Op& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.kind, b.kind) << "op " << a.id;
  EXPECT_EQ(a.stream, b.stream) << "op " << a.id;
  EXPECT_EQ(a.pass, b.pass) << "op " << a.id;
  EXPECT_EQ(a.frees_gathered, b.frees_gathered) << "op " << a.id;
  EXPECT_EQ(a.rank, b.rank) << "op " << a.id;
  EXPECT_EQ(a.unit, b.unit) << "op " << a.id;
  EXPECT_EQ(a.micro_batch, b.micro_batch) << "op " << a.id;
  EXPECT_EQ(a.micro_batch_size, b.micro_batch_size) << "op " << a.id;
  EXPECT_EQ(a.collective, b.collective) << "op " << a.id;
  EXPECT_EQ(a.phase, b.phase) << "op " << a.id;
  // Bit-equal: the same decisions must give the same arithmetic.
  EXPECT_EQ(a.flops, b.flops) << "op " << a.id;
  EXPECT_EQ(a.bytes, b.bytes) << "op " << a.id;
  EXPECT_EQ(a.shard_bytes, b.shard_bytes) << "op " << a.id;
  EXPECT_EQ(a.shard_parameters, b.shard_parameters) << "op " << a.id;
  EXPECT_EQ(a.mem_alloc, b.mem_alloc) << "op " << a.id;
  EXPECT_EQ(a.mem_free, b.mem_free) << "op " << a.id;
}

void expect_same_summary(const traces::GraphSummary& a, const traces::GraphSummary& b) {
  EXPECT_EQ(a.num_ranks, b.num_ranks);
  EXPECT_EQ(a.num_units, b.num_units);
  EXPECT_EQ(a.sequence_length, b.sequence_length);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.model_flops_per_iteration, b.model_flops_per_iteration);
  EXPECT_EQ(a.accumulation, b.accumulation);
  EXPECT_EQ(a.activation_checkpointing, b.activation_checkpointing);
  EXPECT_EQ(a.offload, b.offload);
  EXPECT_EQ(a.prefetch, b.prefetch);
  EXPECT_EQ(a.split, b.split);
  EXPECT_EQ(a.pipeline_stages, b.pipeline_stages);
  EXPECT_EQ(a.virtual_stages, b.virtual_stages);
  EXPECT_EQ(a.pipeline_micro_batches, b.pipeline_micro_batches);
  EXPECT_EQ(a.sequence_parallel, b.sequence_parallel);
  EXPECT_EQ(a.stage_sharding, b.stage_sharding);
}

// Op for op, wait for wait, collective for collective; the plan-wide decisions the replay and
// the executor read (static bytes, unit sizes, slices, groups, recompute, gradient buffers).
void expect_same_graph(const traces::TrainingGraph& a, const traces::TrainingGraph& b) {
  expect_same_summary(a.summary(), b.summary());
  ASSERT_EQ(a.num_ops(), b.num_ops());
  int phases = 0;
  for (std::size_t i = 0; i < a.num_ops(); ++i) {
    const auto id = static_cast<traces::OpId>(i);
    expect_same_op(a.op(id), b.op(id));
    const auto wa = a.waits_on(id), wb = b.waits_on(id);
    EXPECT_EQ(std::vector<traces::OpId>(wa.begin(), wa.end()),
              std::vector<traces::OpId>(wb.begin(), wb.end()))
        << "waits of op " << id << " (" << a.op_name(id) << ")";
    phases = std::max(phases, a.op(id).phase + 1);
  }
  ASSERT_EQ(a.collectives().size(), b.collectives().size());
  for (std::size_t i = 0; i < a.collectives().size(); ++i) {
    const traces::Collective& x = a.collectives()[i];
    const traces::Collective& y = b.collectives()[i];
    EXPECT_EQ(x.kind, y.kind) << "collective " << i;
    EXPECT_EQ(x.group, y.group) << "collective " << i;
    EXPECT_EQ(x.unit, y.unit) << "collective " << i;
    EXPECT_EQ(x.pass, y.pass) << "collective " << i;
    EXPECT_EQ(x.phase, y.phase) << "collective " << i;
    EXPECT_EQ(x.variant, y.variant) << "collective " << i;
    EXPECT_EQ(x.element_bytes, y.element_bytes) << "collective " << i;
    EXPECT_EQ(x.total_bytes, y.total_bytes) << "collective " << i;
    EXPECT_EQ(x.calls, y.calls) << "collective " << i;
    const auto ma = a.members(x), mb = b.members(y);
    ASSERT_EQ(ma.size(), mb.size()) << "collective " << i;
    for (std::size_t k = 0; k < ma.size(); ++k) {
      EXPECT_EQ(ma[k].rank, mb[k].rank) << "collective " << i << " member " << k;
      EXPECT_EQ(ma[k].op, mb[k].op) << "collective " << i << " member " << k;
      EXPECT_EQ(ma[k].elements, mb[k].elements) << "collective " << i << " member " << k;
      EXPECT_EQ(ma[k].shard_bytes, mb[k].shard_bytes) << "collective " << i << " member " << k;
    }
    const auto sa = a.segments(x), sb = b.segments(y);
    ASSERT_EQ(sa.size(), sb.size()) << "collective " << i;
    for (std::size_t k = 0; k < sa.size(); ++k) {
      EXPECT_EQ(sa[k].unit, sb[k].unit);
      EXPECT_EQ(sa[k].numel, sb[k].numel);
      EXPECT_EQ(sa[k].variant, sb[k].variant);
    }
  }
  for (int p = 0; p < phases; ++p)
    EXPECT_EQ(a.gradient_phase(p), b.gradient_phase(p)) << "phase " << p;
  const int units = a.summary().num_units;
  for (int u = 0; u < units; ++u) {
    EXPECT_EQ(a.recomputes(u), b.recomputes(u)) << "unit " << u;
    EXPECT_EQ(a.recomputes_attention_core(u), b.recomputes_attention_core(u)) << "unit " << u;
    EXPECT_EQ(a.unit_sizes(u).numel, b.unit_sizes(u).numel) << "unit " << u;
    EXPECT_EQ(a.unit_sizes(u).parameters, b.unit_sizes(u).parameters) << "unit " << u;
    EXPECT_EQ(a.unit_sizes(u).gathered_bytes, b.unit_sizes(u).gathered_bytes) << "unit " << u;
    EXPECT_EQ(a.unit_sizes(u).gradient_bytes, b.unit_sizes(u).gradient_bytes) << "unit " << u;
  }
  for (int r = 0; r < a.num_ranks(); ++r) {
    EXPECT_EQ(a.static_bytes(r), b.static_bytes(r)) << "rank " << r;
    EXPECT_EQ(a.layout_of(r).num_groups(), b.layout_of(r).num_groups()) << "rank " << r;
    EXPECT_EQ(a.layout_of(r).group_of(a.layout_position(r)),
              b.layout_of(r).group_of(b.layout_position(r)))
        << "rank " << r;
    for (int u = 0; u < units; ++u) {
      EXPECT_EQ(a.slice(u, r).offset, b.slice(u, r).offset) << "rank " << r << " unit " << u;
      EXPECT_EQ(a.slice(u, r).count, b.slice(u, r).count) << "rank " << r << " unit " << u;
    }
    for (int s = 0; s < traces::kNumStreams; ++s) {
      const auto pa = a.stream_program(r, static_cast<traces::Stream>(s));
      const auto pb = b.stream_program(r, static_cast<traces::Stream>(s));
      EXPECT_EQ(std::vector<traces::OpId>(pa.begin(), pa.end()),
                std::vector<traces::OpId>(pb.begin(), pb.end()))
          << "rank " << r << " stream " << s;
    }
  }
}

// The report as JSON text (render_json is deterministic): every field, to the last digit.
std::string report_text(const SimResult& r) { return traces::render_json(r.report); }

void expect_same_everywhere(const Case& c) {
  SCOPED_TRACE(c.name);
  const Plan split = as_one_stage_split(c.plan, c.scenario);
  const auto models = costmodels::make_cost_models(c.scenario);
  const traces::TrainingGraph a =
      traces::build_training_graph(c.plan, c.scenario, models.comm.get());
  const traces::TrainingGraph b =
      traces::build_training_graph(split, c.scenario, models.comm.get());
  expect_same_graph(a, b);
  // The full replay, op by op to the nanosecond.
  const SimResult ra = simulate(a, c.scenario, c.plan, *models.compute, *models.comm);
  const SimResult rb = simulate(b, c.scenario, split, *models.compute, *models.comm);
  EXPECT_EQ(ra.iteration_ns, rb.iteration_ns);
  EXPECT_EQ(ra.start_ns, rb.start_ns);
  EXPECT_EQ(ra.end_ns, rb.end_ns);
  EXPECT_EQ(report_text(ra), report_text(rb));
  // And the replay each command runs (by class where the plan allows it: the graphs of some
  // ranks, build_training_graph_of_ranks).
  const SimResult ca = simulate_plan(c.plan, c.scenario, *models.compute, *models.comm);
  const SimResult cb = simulate_plan(split, c.scenario, *models.compute, *models.comm);
  EXPECT_EQ(ca.replayed_ranks, cb.replayed_ranks);
  EXPECT_EQ(ca.iteration_ns, cb.iteration_ns);
  EXPECT_EQ(ca.start_ns, cb.start_ns);
  EXPECT_EQ(report_text(ca), report_text(cb));
}

// The scenario file whose "name" the plan names.
Scenario scenario_named(const std::string& name) {
  for (const auto& e : fs::directory_iterator(kSource + "/scenarios")) {
    if (e.path().extension() != ".json") continue;
    const Json j = read_json_file(e.path());
    if (j.is_object() && j.contains("name") && j["name"] == name)
      return costmodels::load_scenario(e.path());
  }
  ADD_FAILURE() << "no scenario named " << name << " in scenarios/";
  return {};
}

// Every FSDP plan the project ships: the planner's golden plan of each shipped scenario and
// the hand-written plans beside the scenarios. A split plan is not an FSDP plan.
std::vector<Case> shipped_fsdp_plans() {
  std::vector<fs::path> files;
  for (const auto& dir : {kSource + "/tests/golden", kSource + "/scenarios/plans"})
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.ends_with(".json") && !name.ends_with(".simulate.json")) files.push_back(e.path());
    }
  std::sort(files.begin(), files.end());
  std::vector<Case> out;
  for (const fs::path& f : files) {
    Plan plan = load_plan(f);
    if (plan.has_split()) continue;
    // A plan of some nodes runs on them (core/plan_nodes.hpp), as every reader cuts it.
    Scenario s = scenario_for_plan(scenario_named(plan.scenario), plan, f.string());
    traces::check_plan_for(plan, s, f.string());
    out.push_back({fs::relative(f, kSource).string(), std::move(s), std::move(plan)});
  }
  return out;
}

// The comparison tells two plans apart: the same plan without prefetch has as many ops, each
// gather waiting on another phase's compute.
TEST(OneStageSplit, TheComparisonSeesADifferentSchedule) {
  const std::string file = kSource + "/scenarios/plans/cpu-3rank-uneven-layered.json";
  const Plan plan = load_plan(file);
  const Scenario scenario = scenario_named(plan.scenario);
  Plan other = plan;
  other.prefetch = false;
  const traces::TrainingGraph a = traces::build_training_graph(plan, scenario);
  const traces::TrainingGraph b = traces::build_training_graph(other, scenario);
  ASSERT_EQ(a.num_ops(), b.num_ops());
  ::testing::TestPartResultArray failures;
  {
    const ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_same_graph(a, b);
  }
  bool waits = false;
  for (int i = 0; i < failures.size(); ++i)
    waits = waits || std::string(failures.GetTestPartResult(i).message()).find("waits of op") !=
                         std::string::npos;
  EXPECT_TRUE(waits) << failures.size() << " differences, none in an op's waits";
}

TEST(OneStageSplit, EveryShippedFsdpPlanIsItsOneStageSplit) {
  const std::vector<Case> cases = shipped_fsdp_plans();
  // The golden FSDP plans (default, cpu-1rank, cpu-3rank, cpu-2rank-emulated, h200, h100x16,
  // a100-l4-ethernet and its hybrid) and the hand-written ones: at least these many.
  EXPECT_GE(cases.size(), 25u);
  bool hybrid = false, offload = false, standard = false, no_sync = false, idle = false;
  for (const Case& c : cases) {
    hybrid = hybrid || c.plan.sharding.hybrid();
    offload = offload || c.plan.offload == Offload::Host;
    standard = standard || c.plan.accumulation == Accumulation::Standard;
    no_sync = no_sync || c.plan.accumulation == Accumulation::NoSync;
    for (const auto& r : c.plan.ranks) idle = idle || r.batch == 0;
    expect_same_everywhere(c);
  }
  // The shipped set covers what the variants below do not need to repeat.
  EXPECT_TRUE(hybrid && offload && standard && no_sync && idle);
}

// The schedule choices over an uneven plan (ranks with 3, 1 and 2 samples in 2, 1 and 2
// micro-batches, shares 0.5 / 0.2 / 0.3) and a hybrid one (two groups of two): every
// accumulation × every checkpointing choice × offload where the plan allows it × prefetch.
TEST(OneStageSplit, EveryScheduleChoiceIsItsOneStageSplit) {
  const std::vector<ActivationCheckpointing> checkpointing = {
      {ActivationCheckpointing::Kind::Full, 1},
      {ActivationCheckpointing::Kind::None, 1},
      {ActivationCheckpointing::Kind::Selective, 1},
      {ActivationCheckpointing::Kind::Every, 1},
      {ActivationCheckpointing::Kind::Every, 2}};
  int checked = 0;
  for (const std::string base : {"cpu-3rank-uneven-layered", "cpu-4rank-hybrid"}) {
    const std::string file = kSource + "/scenarios/plans/" + base + ".json";
    const Plan plan = load_plan(file);
    const Scenario scenario = scenario_named(plan.scenario);
    for (Accumulation acc : {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync})
      for (const auto& ac : checkpointing)
        for (Offload off : {Offload::None, Offload::Host})
          for (bool prefetch : {true, false}) {
            Plan p = plan;
            p.accumulation = acc;
            p.activation_checkpointing = ac;
            p.offload = off;
            p.prefetch = prefetch;
            p.uneven_collective = prefetch ? UnevenCollective::Grouped : UnevenCollective::Padded;
            if (schedule::offload_conflict(p.offload, p.activation_checkpointing)) continue;
            traces::check_plan_for(p, scenario, file);
            expect_same_everywhere({base + " " + to_string(acc) + " " + to_string(ac) + " " +
                                        to_string(off) + (prefetch ? "" : " no prefetch"),
                                    scenario, p});
            ++checked;
          }
  }
  EXPECT_GE(checked, 2 * 3 * 5 * 2);
}

}  // namespace
}  // namespace cephalo::sim

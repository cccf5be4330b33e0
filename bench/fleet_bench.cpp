// Fleets of identical GPUs planned and simulated by rank class (bench/README.md, "Fleets by
// rank class"): 100k and 1M H100 (nodes of 8 written as one repeated node entry), Llama-7B,
// sequence 4096, 2 samples per GPU. Each benchmark also reports the process's peak resident
// memory so far (`peak_rss_mib`); run one benchmark per process (--benchmark_filter) to read
// the peak of that benchmark alone.
//
// Targets (2-core machine): 1M GPUs even plan <= 10 s and simulate <= 10 s, each <= 4 GiB;
// 100k GPUs default (optimal) plan <= 5 s and <= 2 GiB.
//
// Split plans (tensor x pipeline x data parallel): 16,384 H100, Llama-3-70B, sequence 8192,
// global batch 2048: `plan --parallelism 3d` <= 10 s (the search and the replays of its
// finalists), `simulate` of the written split plan <= 2 s (the class replay of its pipeline
// lanes), and the same plan replayed in full for comparison.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/training_graph.hpp"

using namespace cephalo;

namespace {

// `nodes` nodes of 8 H100-SXM (NVLink, 8 x 400 Gbit/s InfiniBand) as one entry with a count.
Scenario fleet(int nodes, const std::string& model = "llama-7b", int sequence = 4096,
               int batch = 0) {
  const Json doc = {
      {"name", "fleet"},
      {"cluster",
       {{"name", "h100-fleet"},
        {"nodes",
         {{{"name", "h100"},
           {"count", nodes},
           {"gpus", {{{"type", "H100-SXM"}, {"count", 8}}}},
           {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "450GB/s"}, {"latency", "2us"}}},
           {"nic",
            {{"kind", "infiniband"},
             {"count", 8},
             {"bandwidth", "400Gbit/s"},
             {"latency", "5us"}}}}}}}},
      {"job",
       {{"name", model + "-s" + std::to_string(sequence)},
        {"model", model},
        {"sequence_length", sequence},
        {"global_batch", batch > 0 ? batch : nodes * 8 * 2},
        {"precision", {{"params", "fp32"}, {"compute", "bf16"}, {"reduce", "fp32"}}}}}};
  JsonReader reader(doc, "<bench>");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

void plan_fleet(benchmark::State& state, const std::string& strategy) {
  const int gpus = static_cast<int>(state.range(0));
  const Scenario s = fleet(gpus / 8);
  planner::PlannerOptions opt;
  opt.strategy = strategy;
  bench::time_make_plan(state, s, opt);
  state.counters["gpus"] = gpus;
  state.counters["peak_rss_mib"] = bench::peak_rss_mib();
}

// `plan --strategy even` (its plan replayed once, as make_plan always does).
void BM_FleetPlanEven(benchmark::State& state) { plan_fleet(state, "even"); }
// The default `plan`: optimal with its schedule search and replays.
void BM_FleetPlanDefault(benchmark::State& state) { plan_fleet(state, "optimal"); }
BENCHMARK(BM_FleetPlanEven)
    ->Arg(102400)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_FleetPlanDefault)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(1);

// What a simulate benchmark reports beside its time.
void replay_counters(benchmark::State& state, int gpus, int replayed) {
  state.counters["gpus"] = gpus;
  state.counters["replayed_ranks"] = replayed;
  state.counters["peak_rss_mib"] = bench::peak_rss_mib();
}

// `simulate` of the even plan: the class replay (one representative per class).
void BM_FleetSimulate(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const Scenario s = fleet(gpus / 8);
  planner::PlannerOptions opt;
  opt.strategy = "even";
  const Plan plan = planner::make_plan(s, opt).plan;
  const auto models = costmodels::make_cost_models(s);
  int replayed = 0;
  for (auto _ : state) {
    const auto r = sim::simulate_plan(plan, s, *models.compute, *models.comm);
    replayed = r.replayed_ranks;
    benchmark::DoNotOptimize(r.report.iteration_time_s);
  }
  replay_counters(state, gpus, replayed);
}
BENCHMARK(BM_FleetSimulate)
    ->Arg(102400)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// The split-plan fleet: 16,384 H100 training Llama-3-70B at sequence 8192, batch 2048.
Scenario split_fleet(int gpus) { return fleet(gpus / 8, "llama3-70b", 8192, 2048); }

planner::PlanRequest split_request() {
  planner::PlanRequest r;
  r.parallelism = "3d";
  return r;
}

// `answer_plan` of `request` on `s` timed once; the answer's simulated iteration (whichever
// family answered) and the peak memory as counters.
void time_answer(benchmark::State& state, const Scenario& s, const planner::PlanRequest& request) {
  double iteration_s = 0;
  for (auto _ : state) {
    try {
      const auto answer = planner::answer_plan(s, request);
      iteration_s = answer.simulated_iteration_s.value_or(0.0);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.counters["gpus"] = s.cluster.num_ranks();
  state.counters["iteration_s"] = iteration_s;
  state.counters["peak_rss_mib"] = bench::peak_rss_mib();
}

// `plan --parallelism 3d`: the split search and the replays of its finalists.
void BM_FleetSplitPlan(benchmark::State& state) {
  time_answer(state, split_fleet(static_cast<int>(state.range(0))), split_request());
}
BENCHMARK(BM_FleetSplitPlan)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

// The default `plan` (no flags): both families, the FSDP plan (optimal) and the split search,
// each family's finalists replayed, the faster answer. On the Llama-7B fleet.
void BM_FleetPlanBothFamilies(benchmark::State& state) {
  time_answer(state, fleet(static_cast<int>(state.range(0)) / 8), planner::PlanRequest{});
}
BENCHMARK(BM_FleetPlanBothFamilies)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// `simulate` of the plan `plan --parallelism 3d` writes (made outside the timed loop): the
// class replay, or with `full` the replay of every rank's graph (what split plans took before).
void simulate_split(benchmark::State& state, bool full) {
  const int gpus = static_cast<int>(state.range(0));
  const Scenario s = split_fleet(gpus);
  const Plan plan = planner::answer_plan(s, split_request()).plan;
  const auto models = costmodels::make_cost_models(s);
  int replayed = 0;
  for (auto _ : state) {
    if (full) {
      const auto graph = traces::build_training_graph(plan, s, models.comm.get());
      const auto r = sim::simulate(graph, s, plan, *models.compute, *models.comm);
      replayed = gpus;
      benchmark::DoNotOptimize(r.report.iteration_time_s);
    } else {
      const auto r = sim::simulate_plan(plan, s, *models.compute, *models.comm);
      replayed = r.replayed_ranks;
      benchmark::DoNotOptimize(r.report.iteration_time_s);
    }
  }
  replay_counters(state, gpus, replayed);
}
void BM_FleetSplitSimulate(benchmark::State& state) { simulate_split(state, false); }
void BM_FleetSplitSimulateFull(benchmark::State& state) { simulate_split(state, true); }
BENCHMARK(BM_FleetSplitSimulate)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_FleetSplitSimulateFull)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();

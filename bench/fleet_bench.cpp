// Fleets of identical GPUs planned and simulated by rank class (bench/README.md, "Fleets by
// rank class"): 100k and 1M H100 (nodes of 8 written as one repeated node entry), Llama-7B,
// sequence 4096, 2 samples per GPU. Each benchmark also reports the process's peak resident
// memory so far (`peak_rss_mib`); run one benchmark per process (--benchmark_filter) to read
// the peak of that benchmark alone.
//
// Targets (2-core machine): 1M GPUs even plan <= 10 s and simulate <= 10 s, each <= 4 GiB;
// 100k GPUs default (optimal) plan <= 5 s and <= 2 GiB.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/sim/class_replay.hpp"

using namespace cephalo;

namespace {

// `nodes` nodes of 8 H100-SXM (NVLink, 8 x 400 Gbit/s InfiniBand) as one entry with a count.
Scenario fleet(int nodes) {
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
       {{"name", "llama-7b-s4096"},
        {"model", "llama-7b"},
        {"sequence_length", 4096},
        {"global_batch", nodes * 8 * 2},
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
  state.counters["gpus"] = gpus;
  state.counters["replayed_ranks"] = replayed;
  state.counters["peak_rss_mib"] = bench::peak_rss_mib();
}
BENCHMARK(BM_FleetSimulate)
    ->Arg(102400)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();

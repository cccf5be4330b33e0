// Planner speed (bench/README.md records the numbers):
//  * `cephalo` (the published DP) vs `optimal` at 4 GPUs and global batch 128 (target: optimal
//    at least 100x faster), both on the default scenario's cluster (2x L4, A6000, P40);
//  * `optimal` at 1024 GPUs and global batch 16384 (target: <= 1 s), on a 128-node cluster of
//    four GPU types, for a job whose state fits evenly and for one where memory binds (13B
//    parameters on 24-48 GB GPUs), solver alone and end to end (cost-model tables included);
//  * scale: even, proportional and optimal (model + solver; end to end at 1k) at 1k, 10k and
//    100k GPUs (target: 100k in <= 2 s on one core); at 100k x 96 layers also optimal with its
//    replays, full and hybrid sharding. `cephalo` is not in the scale set: the
//    published DP holds (GPUs + 1) x batch^2 cells (~4e9 at 1k GPUs and batch 2k).
#include <benchmark/benchmark.h>

#include "bench_support.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/strategies.hpp"
// The solvers alone (planner/src, private to the planner).
#include "strategy_inputs.hpp"

namespace {

using namespace cephalo;

Scenario default_with_batch(int batch) {
  Scenario s = costmodels::load_scenario(costmodels::data_dir() / "default.json");
  s.job.global_batch = batch;
  return s;
}

// Node i of a benchmark cluster: 8 GPUs of one type, 100 Gbit/s InfiniBand.
Json bench_node(int i, const std::string& gpu, const Json& intra_link) {
  std::string name = std::to_string(i);  // (GCC 12 -Wrestrict false positive on "n" + ...)
  name.insert(name.begin(), 'n');
  return {{"name", name},
          {"gpus", Json::array({{{"type", gpu}, {"count", 8}}})},
          {"intra_link", intra_link},
          {"nic", {{"kind", "infiniband"}, {"bandwidth", "100Gbit/s"}, {"latency", "5us"}}}};
}

// A scenario of `nodes` running `model` (fp32 parameters, fp16 compute, fp32 reduction).
Scenario bench_scenario(const Json& nodes, const Json& model, int seq, int batch) {
  Json doc = {{"name", "bench"},
              {"cluster", {{"name", "bench-cluster"}, {"nodes", nodes}}},
              {"job",
               {{"name", "bench-job"},
                {"model", model},
                {"sequence_length", seq},
                {"global_batch", batch},
                {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp32"}}}}}};
  JsonReader reader(doc, "<bench>");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

// 128 nodes × 8 GPUs: 32 nodes each of A100-80GB (NVLink), A6000, L4 and V100-16GB, 100 Gbit/s.
Scenario big_cluster(const std::string& model, int seq, int batch) {
  Json nodes = Json::array();
  const std::vector<std::pair<std::string, Json>> kinds = {
      {"a100x80", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
      {"a6000", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
      {"l4", {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}}},
      {"v100x16", {{"kind", "nvlink"}, {"bandwidth", "150GB/s"}, {"latency", "2us"}}}};
  for (int i = 0; i < 128; ++i)
    nodes.push_back(bench_node(i, kinds[i % 4].first, kinds[i % 4].second));
  return bench_scenario(nodes, model, seq, batch);
}

// optimal under the schedule these rows have always timed (layered, full checkpointing, full
// sharding); the default search over schedules is BM_PlanDefault*.
planner::PlannerOptions pinned_optimal() {
  planner::PlannerOptions opt;
  opt.strategy = "optimal";
  opt.accumulation = Accumulation::Layered;
  opt.activation_checkpointing = ActivationCheckpointing{};
  opt.sharding = "full";
  return opt;
}

void BM_Cephalo_4gpu_b128(benchmark::State& state) {
  const Scenario s = default_with_batch(128);
  planner::PlannerOptions opt;
  const auto in = planner::build_cephalo_inputs(s, opt);
  for (auto _ : state) benchmark::DoNotOptimize(planner::solve_cephalo(in));
}
BENCHMARK(BM_Cephalo_4gpu_b128)->Unit(benchmark::kMillisecond);

void BM_Optimal_4gpu_b128(benchmark::State& state) {
  const Scenario s = default_with_batch(128);
  const auto models = costmodels::make_cost_models(s);
  const auto p = planner::build_optimal_problem(s, models, Offload::None);
  for (auto _ : state) benchmark::DoNotOptimize(planner::solve_optimal(p));
}
BENCHMARK(BM_Optimal_4gpu_b128)->Unit(benchmark::kMicrosecond);

void BM_OptimalEndToEnd_4gpu_b128(benchmark::State& state) {
  const Scenario s = default_with_batch(128);
  bench::time_make_plan(state, s, pinned_optimal());
}
BENCHMARK(BM_OptimalEndToEnd_4gpu_b128)->Unit(benchmark::kMillisecond);

void optimal_1024(benchmark::State& state, const std::string& model, int seq) {
  const Scenario s = big_cluster(model, seq, 16384);
  const auto models = costmodels::make_cost_models(s);
  const auto p = planner::build_optimal_problem(s, models, Offload::None);
  planner::OptimalSolution sol;
  for (auto _ : state) benchmark::DoNotOptimize(sol = planner::solve_optimal(p));
  state.counters["checks"] = sol.feasibility_checks;
  state.counters["knapsacks"] = sol.knapsack_runs;
  state.counters["max_share_x_n"] = sol.max_share * 1024;
}
void BM_Optimal_1024gpu_b16384_gpt1_3b(benchmark::State& state) {
  optimal_1024(state, "gpt-1.3b", 512);
}
BENCHMARK(BM_Optimal_1024gpu_b16384_gpt1_3b)->Unit(benchmark::kMillisecond);
void BM_Optimal_1024gpu_b16384_llama13b_s2048(benchmark::State& state) {
  optimal_1024(state, "llama-13b", 2048);
}
BENCHMARK(BM_Optimal_1024gpu_b16384_llama13b_s2048)->Unit(benchmark::kMillisecond);

void BM_OptimalEndToEnd_1024gpu_b16384(benchmark::State& state) {
  const Scenario s = big_cluster("llama-13b", 2048, 16384);
  planner::PlannerOptions opt = pinned_optimal();
  opt.offload = "none";
  bench::time_make_plan(state, s, opt);
}
BENCHMARK(BM_OptimalEndToEnd_1024gpu_b16384)->Unit(benchmark::kMillisecond)->Iterations(3);

// 96 layers of hidden 4096 (the simulator benchmark's model shape), GPT-style.
const Json kModel96 = {{"name", "gpt-96l"}, {"family", "gpt"}, {"layers", 96},
                       {"hidden", 4096},    {"heads", 32},     {"vocab_size", 50304}};

// Scale (plans for 100k GPUs within 2 s, bench/README.md): `gpus` GPUs in nodes of 8, alternating
// nodes of A100-80GB (NVLink) and L4 (PCIe 4 x16), 100 Gbit/s InfiniBand; GPT-1.3B, sequence 512,
// global batch 2 per GPU. Building the scenario (JSON parse) is outside the timed loop: what is
// timed is make_plan.
Scenario scale_cluster(int gpus, const Json& model = "gpt-1.3b") {
  Json nodes = Json::array();
  const Json nvlink = {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}};
  const Json pcie = {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}};
  for (int i = 0; i < gpus / 8; ++i)
    nodes.push_back(bench_node(i, i % 2 ? "l4" : "a100x80", i % 2 ? pcie : nvlink));
  return bench_scenario(nodes, model, 512, 2 * gpus);
}

void plan_at_scale(benchmark::State& state, const std::string& strategy, bool simulator,
                   const Json& model = "gpt-1.3b", const std::string& sharding = "full") {
  const Scenario s = scale_cluster(static_cast<int>(state.range(0)), model);
  planner::PlannerOptions opt;
  opt.strategy = strategy;
  opt.offload = "none";
  opt.verify_with_simulator = simulator;
  opt.sharding = sharding;
  // The schedule these rows have always timed (layered, full checkpointing); the default
  // search over schedules is BM_PlanDefault*.
  opt.accumulation = Accumulation::Layered;
  opt.activation_checkpointing = ActivationCheckpointing{};
  // Groups of 2 nodes (an A100 node and an L4 node): the 96-layer model's state does not fit
  // one L4 node.
  if (sharding == "hybrid") opt.group_nodes = 2;
  bench::time_make_plan(state, s, opt);
  state.counters["gpus"] = static_cast<double>(state.range(0));
}
void BM_PlanEven(benchmark::State& state) { plan_at_scale(state, "even", false); }
void BM_PlanProportional(benchmark::State& state) { plan_at_scale(state, "proportional", false); }
// optimal's model and exact solver alone (no simulator replays)
void BM_PlanOptimalModel(benchmark::State& state) { plan_at_scale(state, "optimal", false); }
// optimal end to end: the replays on the simulator (memory check, staircase breakpoints,
// phase-weighted candidate) are full replays of every rank, so they scale with sim/.
void BM_PlanOptimalWithReplays(benchmark::State& state) { plan_at_scale(state, "optimal", true); }
BENCHMARK(BM_PlanEven)
    ->Arg(1024)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_PlanProportional)
    ->Arg(1024)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_PlanOptimalModel)
    ->Arg(1024)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_PlanOptimalWithReplays)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(1);
// The planner's scale target: 100k GPUs x 96 layers (kModel96, same cluster and batch) planned in
// <= 2 s. The replays of optimal run the class replay (sim/class_replay.hpp).
void BM_PlanEven96(benchmark::State& state) { plan_at_scale(state, "even", false, kModel96); }
void BM_PlanOptimalModel96(benchmark::State& state) {
  plan_at_scale(state, "optimal", false, kModel96);
}
void BM_PlanOptimalWithReplays96(benchmark::State& state) {
  plan_at_scale(state, "optimal", true, kModel96);
}
BENCHMARK(BM_PlanEven96)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_PlanOptimalModel96)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_PlanOptimalWithReplays96)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(1);
// The solver alone at scale, per schedule: the problem `optimal` builds for layered / full
// checkpointing with and without host offload (under offload a rank keeps no activations per
// sample, so its batch cap is large and the per-rank knapsack was the whole default search),
// with how its feasibility checks were decided.
void solver_at_scale(benchmark::State& state, Offload offload) {
  const Scenario s = scale_cluster(static_cast<int>(state.range(0)), kModel96);
  const auto models = costmodels::make_cost_models(s);
  const auto p = planner::build_optimal_problem(s, models, offload);
  planner::OptimalSolution sol;
  for (auto _ : state) benchmark::DoNotOptimize(sol = planner::solve_optimal(p));
  state.counters["checks"] = sol.feasibility_checks;
  state.counters["class_knapsacks"] = sol.class_knapsack_runs;
  state.counters["rank_knapsacks"] = sol.knapsack_runs;
  state.counters["undecided"] = sol.undecided_checks;
}
void BM_OptimalSolver96(benchmark::State& state) { solver_at_scale(state, Offload::None); }
void BM_OptimalSolverOffload96(benchmark::State& state) { solver_at_scale(state, Offload::Host); }
BENCHMARK(BM_OptimalSolver96)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_OptimalSolverOffload96)
    ->Arg(10240)
    ->Arg(102400)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
// Hybrid sharding, two nodes per group (`--sharding hybrid --group-size 2`): optimal with its
// replays, then the grouped plan's replay. Since 2026-12-01 the class replay handles hybrid
// groups (one representative per group shape and position; before, a hybrid plan was replayed
// in full).
void BM_PlanHybrid96(benchmark::State& state) {
  plan_at_scale(state, "optimal", true, kModel96, "hybrid");
}
// At 102,400 GPUs it took 161 s while the comm model copied every rank per collective (6,400
// groups' collectives each priced over a copy of the whole cluster); with Cluster's rank table
// it is registered there too.
BENCHMARK(BM_PlanHybrid96)->Arg(1024)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(1);

// `cephalo plan --strategy optimal` with no schedule flag: accumulation, checkpointing, offload
// and sharding searched (planner/README.md), the returned plan replayed. Targets: 1024 GPUs in
// <= 1 s, 100k GPUs x 96 layers in <= 2 s.
void plan_default(benchmark::State& state, const Json& model) {
  const Scenario s = scale_cluster(static_cast<int>(state.range(0)), model);
  planner::PlannerOptions opt;
  opt.strategy = "optimal";
  bench::time_make_plan(state, s, opt);
  state.counters["gpus"] = static_cast<double>(state.range(0));
}
void BM_PlanDefault(benchmark::State& state) { plan_default(state, "gpt-1.3b"); }
void BM_PlanDefault96(benchmark::State& state) { plan_default(state, kModel96); }
BENCHMARK(BM_PlanDefault)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_PlanDefault96)->Arg(10240)->Arg(102400)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();

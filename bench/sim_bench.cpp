// Simulator benchmarks (targets and results in bench/README.md):
//   * event queue, hold model, population 10^4: >= 10 M events/s on one core;
//   * replay of 64 GPUs x 32 layers x 4 micro-batches: <= 50 ms per simulated iteration;
//   * replay of 1024 GPUs x 96 layers x 8 micro-batches: <= 2 s and <= 2 GiB resident.
// Graph building and replay are reported separately and together; the cost models are the
// real analytic ones (roofline compute, alpha-beta comm) on a mixed A100/L4 cluster.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "../tests/support/scenario_builders.hpp"
#include "bench_support.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/sim/event_queue.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace {

using namespace cephalo;

// ----- hold model ----------------------------------------------------------------------------

// The classic hold model: a queue of N pending events; each step pops the earliest and pushes
// one at (its time + a random increment). Increments come from a precomputed table so the
// random number generator is not what is measured.
template <class Queue>
void BM_HoldModel(benchmark::State& state) {
  const std::size_t population = static_cast<std::size_t>(state.range(0));
  std::vector<sim::Time> increments(1 << 16);
  std::uint64_t x = 88172645463325252ull;
  for (auto& inc : increments) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    inc = static_cast<sim::Time>(x % 1000000);  // up to 1 ms in ns
  }
  Queue queue;
  std::uint64_t seq = 0;
  for (std::size_t i = 0; i < population; ++i)
    queue.push({increments[i & 0xffff], seq++, 0, static_cast<std::uint32_t>(i), 0});
  std::size_t k = 0;
  for (auto _ : state) {
    sim::Event e = queue.pop();
    e.time += increments[k++ & 0xffff];
    e.seq = seq++;
    queue.push(e);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["population"] = static_cast<double>(queue.size());
}
BENCHMARK_TEMPLATE(BM_HoldModel, sim::BinaryHeapQueue)->Arg(10000);
BENCHMARK_TEMPLATE(BM_HoldModel, sim::PairingHeapQueue)->Arg(10000);

// The same through the virtual EventQueue interface, as the replay uses it.
void BM_HoldModelVirtual(benchmark::State& state) {
  auto queue = sim::make_event_queue(state.range(1) == 0 ? "binary-heap" : "pairing-heap");
  std::uint64_t seq = 0, x = 88172645463325252ull;
  for (int i = 0; i < state.range(0); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    queue->push({static_cast<sim::Time>(x % 1000000), seq++, 0, 0, 0});
  }
  for (auto _ : state) {
    sim::Event e = queue->pop();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e.time += static_cast<sim::Time>(x % 1000000);
    e.seq = seq++;
    queue->push(e);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(queue->name());
}
BENCHMARK(BM_HoldModelVirtual)->Args({10000, 0})->Args({10000, 1});

// ----- replay at scale -----------------------------------------------------------------------

struct Setup {
  Scenario scenario;
  Plan plan;
  costmodels::CostModels models;
};

// `gpus` devices in nodes of 8: even nodes A100-80GB with NVLink, odd nodes L4 over PCIe,
// 100 Gbit/s NICs; a GPT-style model of `layers` layers (hidden 4096); every rank runs
// `micro_batches` micro-batches of one sample of 2048 tokens, even shares.
std::unique_ptr<Setup> make_setup(int gpus, int layers, int micro_batches, Accumulation acc) {
  auto s = std::make_unique<Setup>();
  const auto& catalog = costmodels::GpuCatalog::builtin();
  Scenario& sc = s->scenario;
  sc.name = "bench-" + std::to_string(gpus);
  sc.cluster.name = sc.name;
  for (int n = 0; n < (gpus + 7) / 8; ++n) {
    const bool a100 = n % 2 == 0;
    DeviceSlot slot;
    slot.type = a100 ? "a100-80gb" : "l4";
    slot.spec = catalog.get(a100 ? "A100-80GB" : "L4");
    sc.cluster.nodes.push_back(test_support::uniform_node(
        "node" + std::to_string(n),
        a100 ? LinkSpec{"nvlink", 300e9, 3e-6} : LinkSpec{"pcie", 25e9, 5e-6},
        LinkSpec{"infiniband", 12.5e9, 5e-6}, slot, std::min(8, gpus - n * 8)));
  }
  sc.job.model = test_support::gpt_model("bench-gpt", layers, 4096, 32, 16384, 50304, 2048);
  sc.job.model_name = sc.job.model.name;
  sc.job.sequence_length = 2048;
  sc.job.global_batch = gpus * micro_batches;
  s->plan = test_support::even_plan(sc, micro_batches, acc);
  s->models = costmodels::make_cost_models(sc, "roofline");
  return s;
}

void BM_BuildGraph(benchmark::State& state) {
  auto s = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)), Accumulation::Layered);
  std::size_t ops = 0;
  for (auto _ : state) {
    auto g = traces::build_training_graph(s->plan, s->scenario);
    ops = g.num_ops();
    benchmark::DoNotOptimize(g);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["peak_rss_MiB"] = bench::peak_rss_mib();
}

void BM_Replay(benchmark::State& state) {
  auto s = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)), Accumulation::Layered);
  auto g = traces::build_training_graph(s->plan, s->scenario);
  std::uint64_t events = 0;
  double simulated = 0;
  for (auto _ : state) {
    auto r = sim::simulate(g, s->scenario, s->plan, *s->models.compute, *s->models.comm);
    events = r.report.events;
    simulated = r.report.iteration_time_s;
  }
  state.counters["ops"] = static_cast<double>(g.num_ops());
  state.counters["events"] = static_cast<double>(events);
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(events), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["simulated_s"] = simulated;
  state.counters["peak_rss_MiB"] = bench::peak_rss_mib();
}

// Build + replay: what scoring one candidate plan costs.
void BM_BuildAndReplay(benchmark::State& state) {
  auto s = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)),
                      state.range(3) == 0 ? Accumulation::Layered : Accumulation::Standard);
  std::size_t ops = 0;
  for (auto _ : state) {
    auto g = traces::build_training_graph(s->plan, s->scenario);
    auto r = sim::simulate(g, s->scenario, s->plan, *s->models.compute, *s->models.comm);
    ops = g.num_ops();
    benchmark::DoNotOptimize(r);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["peak_rss_MiB"] = bench::peak_rss_mib();
}

BENCHMARK(BM_BuildGraph)->Args({64, 32, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Replay)->Args({64, 32, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildAndReplay)
    ->Args({64, 32, 4, 0})
    ->Args({64, 32, 4, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildGraph)->Args({1024, 96, 8})->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_Replay)->Args({1024, 96, 8})->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_BuildAndReplay)->Args({1024, 96, 8, 0})->Unit(benchmark::kMillisecond)->Iterations(2);
// Scaling in ranks (the target is near-linear): the same 8-layer model, one micro-batch, on 1k, 4k
// and 10k GPUs; time per rank should stay roughly flat.
// Building the graph is linear in ranks too (the builder once read the cluster's
// rank list per rank, quadratic: a third of a 10k-rank build + replay).
BENCHMARK(BM_BuildGraph)
    ->Args({1024, 8, 1})
    ->Args({10240, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_Replay)
    ->Args({1024, 8, 1})
    ->Args({4096, 8, 1})
    ->Args({10240, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

// A split plan (DESIGN §4, "A split in the plan and the graph") on the same clusters: TP
// `range(3)` inside each node, `range(4)` pipeline stages of consecutive nodes, 1F1B over
// `range(2)` micro-batches of one sample per replica, full sharding per domain. Split plans
// always replay in full (no class replay).
std::unique_ptr<Setup> make_split_setup(int gpus, int layers, int micro_batches, int tp,
                                        int stages) {
  auto s = make_setup(gpus, layers, 1, Accumulation::Layered);
  ModelSplit split;
  split.tensor_parallel = tp;
  split.micro_batches = micro_batches;
  const int per_stage = gpus / stages;
  for (int st = 0; st < stages; ++st) {
    PipelineStage stage;
    stage.chunks = {{layers * st / stages, layers * (st + 1) / stages}};
    for (int r = st * per_stage; r < (st + 1) * per_stage; ++r) stage.ranks.push_back(r);
    split.stages.push_back(stage);
  }
  s->scenario.job.global_batch = micro_batches * per_stage / tp;
  s->plan = even_split_plan(s->scenario, split);
  return s;
}

void BM_BuildAndReplaySplit(benchmark::State& state) {
  auto s = make_split_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                            static_cast<int>(state.range(2)), static_cast<int>(state.range(3)),
                            static_cast<int>(state.range(4)));
  std::size_t ops = 0;
  double simulated = 0;
  for (auto _ : state) {
    auto g = traces::build_training_graph(s->plan, s->scenario);
    auto r = sim::simulate(g, s->scenario, s->plan, *s->models.compute, *s->models.comm);
    ops = g.num_ops();
    simulated = r.report.iteration_time_s;
    benchmark::DoNotOptimize(r);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["simulated_s"] = simulated;
  state.counters["peak_rss_MiB"] = bench::peak_rss_mib();
}
BENCHMARK(BM_BuildAndReplaySplit)->Args({64, 32, 16, 2, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildAndReplaySplit)
    ->Args({1024, 96, 32, 8, 8})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// Class-representative replay (sim/class_replay.hpp): graph building (rank 0's probe
// for the sharding, then one representative per class) and the replay, as `simulate_plan`
// runs them. Target at 100k GPUs x 96 layers: <= 5 s and <= 2 GiB on one core.
void BM_ClassReplay(benchmark::State& state) {
  auto s = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)), Accumulation::Layered);
  int replayed = 0;
  double simulated = 0;
  for (auto _ : state) {
    auto r = sim::simulate_plan(s->plan, s->scenario, *s->models.compute, *s->models.comm);
    replayed = r.replayed_ranks;
    simulated = r.report.iteration_time_s;
    benchmark::DoNotOptimize(r);
  }
  state.counters["replayed_ranks"] = replayed;
  state.counters["simulated_s"] = simulated;
  state.counters["peak_rss_MiB"] = bench::peak_rss_mib();
}
BENCHMARK(BM_ClassReplay)
    ->Args({1024, 96, 8})
    ->Args({10240, 8, 1})
    ->Args({102400, 96, 1})
    ->Args({102400, 96, 8})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace

BENCHMARK_MAIN();

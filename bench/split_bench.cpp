// Speed of the 3D split search (`cephalo plan --parallelism 3d`, planner::search_split):
// planning stays interactive, 1024 GPUs in <= 2 s and 16,384 GPUs in <= 10 s on one core
// (bench/README.md records the numbers). Building the scenario (JSON parse) and the cost models
// is outside the timed loop, as `plan` builds them once before the search.
//
//  * BM_SearchSplit/1024: 128 DGX-like nodes of 8 A100-80GB (NVLink 300 GB/s, 8 x 200 Gbit/s
//    InfiniBand), a 64-layer GPT of hidden 8192, sequence 2048, global batch 1024: the case the
//    search was first timed on (2.7 s from the command line).
//  * BM_SearchSplit/16384: 2048 such nodes of H100-SXM, a 128-layer GPT of hidden 16384 (~400 B
//    parameters, the size the largest published 16k-GPU runs train), sequence 4096, global
//    batch 2048.
//  * BM_SearchSplitTwoTypes/1024: 64 A100 nodes and 64 H100 nodes, the 1024 case's model: the
//    search lays the types' stages out in both orders with a T per type.
#include <benchmark/benchmark.h>

#include <string>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_search.hpp"

namespace {

using namespace cephalo;

Json dgx_node(int i, const std::string& gpu) {
  std::string name = std::to_string(i);  // (GCC 12 -Wrestrict false positive on "n" + ...)
  name.insert(name.begin(), 'n');
  return {{"name", name},
          {"gpus", Json::array({{{"type", gpu}, {"count", 8}}})},
          {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}},
          {"nic",
           {{"kind", "infiniband"}, {"count", 8}, {"bandwidth", "200Gbit/s"}, {"latency", "5us"}}}};
}

// `nodes` nodes, the first `first_type_nodes` of `first`, the rest of `second`; a GPT of
// `layers` x `hidden` in fp16 compute with fp32 master weights.
Scenario split_bench_scenario(int nodes, const std::string& first, int first_type_nodes,
                              const std::string& second, int layers, int hidden, int seq,
                              int batch) {
  Json node_list = Json::array();
  for (int i = 0; i < nodes; ++i)
    node_list.push_back(dgx_node(i, i < first_type_nodes ? first : second));
  const Json model = {{"name", "gpt-bench"}, {"family", "gpt"},       {"layers", layers},
                      {"hidden", hidden},    {"heads", hidden / 128}, {"ffn_hidden", 4 * hidden},
                      {"vocab_size", 51200}, {"max_positions", seq},  {"activation", "gelu"},
                      {"norm", "layernorm"}};
  const Json doc = {
      {"name", "split-bench"},
      {"cluster", {{"name", "split-bench-cluster"}, {"nodes", node_list}}},
      {"job",
       {{"name", "split-bench-job"},
        {"model", model},
        {"sequence_length", seq},
        {"global_batch", batch},
        {"precision", {{"params", "fp32"}, {"compute", "fp16"}, {"reduce", "fp16"}}}}}};
  JsonReader reader(doc, "<split-bench>");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), costmodels::data_dir());
}

void time_search(benchmark::State& state, const Scenario& s) {
  const auto models = costmodels::make_cost_models(s);
  planner::SplitSearchResult r;
  for (auto _ : state) {
    try {
      benchmark::DoNotOptimize(r = planner::search_split(s, {}, models));
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.counters["gpus"] = static_cast<double>(s.cluster.num_ranks());
  state.counters["priced"] = r.evaluated;
  state.counters["pruned"] = r.pruned;
  state.counters["iteration_s"] = r.estimate.iteration_s;
}

void BM_SearchSplit(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const Scenario s =
      gpus <= 1024
          ? split_bench_scenario(gpus / 8, "A100-80GB", gpus / 8, "", 64, 8192, 2048, 1024)
          : split_bench_scenario(gpus / 8, "H100-SXM", gpus / 8, "", 128, 16384, 4096, 2048);
  time_search(state, s);
}
BENCHMARK(BM_SearchSplit)->Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_SearchSplitTwoTypes(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0)) / 8;
  time_search(
      state, split_bench_scenario(nodes, "A100-80GB", nodes / 2, "H100-SXM", 64, 8192, 2048, 1024));
}
BENCHMARK(BM_SearchSplitTwoTypes)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(1);

// Zorse's cluster A (scenarios/zorse/zorse-a-llama13b.json: 4 H100 + 16 A100 over 100 Gbit/s,
// LLaMA-13B, 1M tokens), the search `plan --parallelism 3d` runs; with the family floors
// (SplitSearchOptions::bound) and without, the same best.
void BM_SearchSplitZorseA(benchmark::State& state) {
  const Scenario s = costmodels::load_scenario(std::string(CEPHALO_SOURCE_DIR) +
                                               "/scenarios/zorse/zorse-a-llama13b.json");
  const auto models = costmodels::make_cost_models(s);
  planner::SplitSearchOptions options;
  options.bound = state.range(0) != 0;
  planner::SplitSearchResult r;
  for (auto _ : state) benchmark::DoNotOptimize(r = planner::search_split(s, options, models));
  state.counters["priced"] = r.evaluated;
  state.counters["bounded"] = static_cast<double>(r.bounded);
  state.counters["iteration_s"] = r.estimate.iteration_s;
}
BENCHMARK(BM_SearchSplitZorseA)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(1);

// Zorse's cluster B (scenarios/zorse/zorse-b-llama13b.json: 8 A100 + 16 A10G + 16 V100 + 24 T4,
// LLaMA-13B, 1M tokens), the search `plan --parallelism 3d` runs: the default budget of priced
// candidates (SplitSearchOptions::budget), and the gap it leaves stated (unexplored_floor_s).
// Arg 16: its node mix times 16 (zorse-b-x16-llama13b.json: 1,024 GPUs of 4 types, 270,656
// type families), issue 40's 1,024-GPU planning target.
void BM_SearchSplitZorseB(benchmark::State& state) {
  const Scenario s =
      costmodels::load_scenario(std::string(CEPHALO_SOURCE_DIR) +
                                (state.range(0) == 16 ? "/scenarios/zorse/zorse-b-x16-llama13b.json"
                                                      : "/scenarios/zorse/zorse-b-llama13b.json"));
  const auto models = costmodels::make_cost_models(s);
  planner::SplitSearchOptions options;
  planner::SplitSearchResult r;
  for (auto _ : state) benchmark::DoNotOptimize(r = planner::search_split(s, options, models));
  state.counters["priced"] = r.evaluated;
  state.counters["bounded"] = static_cast<double>(r.bounded);
  state.counters["unexplored"] = static_cast<double>(r.unexplored);
  state.counters["unexplored_floor_s"] = r.unexplored_floor;
  state.counters["iteration_s"] = r.estimate.iteration_s;
}
BENCHMARK(BM_SearchSplitZorseB)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();

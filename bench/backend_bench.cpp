// CPU backend benchmarks: the fp32 GEMM rate of the CPU device (what the `CPU-core` catalog
// entry's peak_fp32 is measured with) and one gpt-tiny layer's forward + backward.
// Run: build/bin/backend_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/gpt.hpp"

using namespace cephalo::backend;

namespace {

// Square fp32 GEMM C = A B on one CPU-device thread (Eigen); FLOP/s = 2 n^3 / time.
void BM_CpuGemmF32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  CpuDeviceOptions o;
  o.threads = static_cast<int>(state.range(1));
  auto dev = make_cpu_device(o);
  auto& s = dev->stream(StreamKind::Compute);
  Buffer a = dev->allocate(static_cast<std::size_t>(n * n), ElemType::F32);
  Buffer b = dev->allocate(static_cast<std::size_t>(n * n), ElemType::F32);
  Buffer c = dev->allocate(static_cast<std::size_t>(n * n), ElemType::F32);
  dev->fill(s, a.ref(), 0.5f);
  dev->fill(s, b.ref(), 0.25f);
  for (auto _ : state) {
    dev->gemm(s, Transpose::No, Transpose::No, n, n, n, 1.0f, a.ref(), b.ref(), 0.0f, c.ref());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CpuGemmF32)
    ->ArgsProduct({{128, 256, 512, 1024}, {1}})
    ->Args({1024, 2})
    ->Unit(benchmark::kMillisecond);

// One gpt-tiny layer (hidden 64, seq 16) forward + recompute + backward for a micro-batch.
void BM_GptTinyLayerStep(benchmark::State& state) {
  auto dev = make_cpu_device({});
  GptConfig cfg = GptConfig::tiny();
  cfg.seq = 16;
  GptModel model(cfg);
  const std::int64_t rows = state.range(0) * cfg.seq, C = cfg.hidden;
  auto init = model.initial_unit(1);
  Buffer p = dev->allocate(init.size(), ElemType::F32),
         g = dev->allocate(init.size(), ElemType::F32);
  dev->upload(p.ref(), init.data(), init.size() * 4);
  auto& s = dev->stream(StreamKind::Compute);
  dev->fill(s, g.ref(), 0.0f);
  Buffer x = dev->allocate(static_cast<std::size_t>(rows * C), ElemType::F32);
  Buffer y = dev->allocate(static_cast<std::size_t>(rows * C), ElemType::F32);
  Buffer dx = dev->allocate(static_cast<std::size_t>(rows * C), ElemType::F32);
  dev->fill(s, x.ref(), 0.1f);
  LayerActivations acts;
  for (auto _ : state) {
    model.layer_forward(*dev, p.ref(), x.ref(), y.ref(), acts, rows);
    model.layer_forward(*dev, p.ref(), x.ref(), y.ref(), acts, rows);  // recompute
    model.layer_backward(*dev, p.ref(), g.ref(), x.ref(), acts, y.ref(), dx.ref(), rows);
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(state.range(0)),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GptTinyLayerStep)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond);

// A step's buffer churn: allocate N MiB, write every byte (what a kernel does to an output),
// free, with the CPU device's block cache (second arg 1) and without it (0). glibc serves a
// repeated size below its dynamic mmap threshold (at most 32 MiB) from the heap after the
// first free; above it every reuse is a fresh mmap that page-faults.
static void BM_CpuAllocateWriteFree(benchmark::State& state) {
  CpuDeviceOptions o;
  o.cache_bytes = state.range(0) ? CpuDeviceOptions{}.cache_bytes : 0;
  auto dev = make_cpu_device(o);
  const std::size_t kBytes = static_cast<std::size_t>(state.range(1)) << 20;
  for (auto _ : state) {
    Buffer b = dev->allocate(kBytes / 4, ElemType::F32);
    std::memset(b.data(), 1, kBytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kBytes);
}
BENCHMARK(BM_CpuAllocateWriteFree)
    ->ArgsProduct({{0, 1}, {1, 64}})
    ->ArgNames({"cache", "MiB"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();

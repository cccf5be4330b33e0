// The memory model's per-layer terms are the backend's allocations, byte for byte, measured
// through the CPU device's accounting (every buffer goes through Device::allocate):
//  * what GptModel::layer_forward keeps for the backward = costmodels::unit_working_bytes;
//  * the high-water mark of GptModel::layer_backward's input-gradient temporaries above that
//    = costmodels::unit_backward_transient_bytes, all of them released on return.
// The TrainingGraph charges exactly these to the F / RC / B ops, so the simulated and the
// measured peak memory agree (tests/backend/mpi_memory_test.cpp checks the whole run).
#include <gtest/gtest.h>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/gpt.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

using namespace cephalo;
using namespace cephalo::backend;

TEST(BackendMemory, LayerForwardAndBackwardAllocateWhatTheMemoryModelCharges) {
  const ModelSpec spec = costmodels::ModelCatalog::builtin().get("gpt-tiny");
  const int seq = 32;
  const GptModel model(GptConfig::from_spec(spec, seq));
  const std::int64_t C = model.config().hidden;
  for (Dtype dtype : {Dtype::FP32, Dtype::BF16}) {
    for (int micro_batch : {1, 3}) {
      SCOPED_TRACE(to_string(dtype) + ", micro-batch " + std::to_string(micro_batch));
      auto dev = make_cpu_device({});
      auto& s = dev->stream(StreamKind::Compute);
      const ElemType t = elem_type_of(dtype);
      const std::int64_t rows = std::int64_t{micro_batch} * seq;
      auto make = [&](std::int64_t n, ElemType type, float value) {
        Buffer b = dev->allocate(static_cast<std::size_t>(n), type);
        dev->fill(s, b.ref(), value);
        return b;
      };
      Buffer params = make(model.unit_numel(1), t, 0.02f),
             grads = make(model.unit_numel(1), ElemType::F32, 0.0f), x = make(rows * C, t, 0.5f),
             y = make(rows * C, t, 0.0f), dy = make(rows * C, t, 0.01f),
             dx = make(rows * C, t, 0.0f);
      const std::size_t base = dev->memory_stats(MemorySpace::Device).current;
      LayerActivations acts;
      model.layer_forward(*dev, params.ref(), x.ref(), y.ref(), acts, rows);
      const std::size_t saved = dev->memory_stats(MemorySpace::Device).current - base;
      EXPECT_EQ(static_cast<double>(saved),
                costmodels::unit_working_bytes(spec, 1, seq, micro_batch, dtype));
      dev->reset_peak();
      model.layer_backward(*dev, params.ref(), grads.ref(), x.ref(), acts, dy.ref(), dx.ref(),
                           rows);
      const auto after = dev->memory_stats(MemorySpace::Device);
      EXPECT_EQ(static_cast<double>(after.peak - base - saved),
                costmodels::unit_backward_transient_bytes(spec, 1, seq, micro_batch, dtype));
      EXPECT_EQ(after.current, base + saved);  // every temporary released
    }
  }
}

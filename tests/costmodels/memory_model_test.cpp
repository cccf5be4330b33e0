// The memory model's terms for what the backend allocates, hand-computed on gpt-tiny.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

// The memory terms follow what the backend allocates (checked byte for byte against the CPU
// device by tests/backend/memory_terms_test.cpp), on gpt-tiny at sequence 64, fp32:
//  * a layer's saved activations: 5h + 2kv + 2f elements per token (norm outputs, q k v, context,
//    residual sum, MLP pre-activation and activation) and 4 + heads fp32 statistics;
//  * its backward's input-gradient temporaries at their high-water mark: max(h + 2f, 5h);
//  * a tied head's phases gather the embedding unit too;
//  * the collectives' transient shards; no runtime reserves and no allocator slack on CPU.
TEST(MemoryModel, TermsFollowTheBackendTensorByTensor) {
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-tiny");  // 2 layers, h 64, 4 heads, f 256, V 256
  job.sequence_length = 64;
  job.precision = {Dtype::FP32, Dtype::FP32, Dtype::FP32};
  const ModelSpec& m = job.model;
  const double tokens = 64 * 4;  // micro-batch of 4
  EXPECT_DOUBLE_EQ(unit_working_bytes(m, 1, 64, 4, Dtype::FP32),
                   tokens * ((5 * 64 + 2 * 64 + 2 * 256) * 4 + (4 + 4) * 4));  // 991232
  EXPECT_DOUBLE_EQ(unit_backward_transient_bytes(m, 1, 64, 4, Dtype::FP32),
                   tokens * (64 + 2 * 256) * 4);  // 589824
  EXPECT_EQ(unit_backward_transient_bytes(m, 0, 64, 4, Dtype::FP32), 0.0);
  EXPECT_EQ(unit_backward_transient_bytes(m, 3, 64, 4, Dtype::FP32), 0.0);
  const double layer = 49984;  // 12·64² + 13·64
  EXPECT_DOUBLE_EQ(unit_parameters(m, 1), layer);
  EXPECT_DOUBLE_EQ(phase_parameters(m, 1), layer);
  EXPECT_DOUBLE_EQ(phase_parameters(m, 3), 128 + (256 + 64) * 64.0);  // final norm + embedding
  ModelSpec untied = m;
  untied.tied_embeddings = false;
  EXPECT_DOUBLE_EQ(phase_parameters(untied, 3), 128 + 256 * 64.0);  // final norm + own weight

  RankMemoryInputs in;
  in.state_share = 0.5;
  in.micro_batch_sizes = {4, 4};
  in.world_size = 2;
  in.gpu_runtime = false;
  auto term = [](const std::vector<MemoryTerm>& terms, const std::string& name) {
    for (const auto& t : terms)
      if (t.name == name) return t.bytes;
    ADD_FAILURE() << "no term " << name;
    return -1.0;
  };
  auto cpu = memory_terms(job, in);
  EXPECT_DOUBLE_EQ(term(cpu, "working_set"), 991232 + 589824);
  EXPECT_DOUBLE_EQ(term(cpu, "gathered_params"), 2 * layer * 4);  // prefetch: two layers
  EXPECT_DOUBLE_EQ(term(cpu, "unit_gradient"), layer * 4);
  EXPECT_DOUBLE_EQ(term(cpu, "comm_buffers"), 0.5 * layer * 4);  // the received gradient shard
  EXPECT_EQ(term(cpu, "cuda_context"), 0.0);
  EXPECT_EQ(term(cpu, "nccl_reserve"), 0.0);
  EXPECT_EQ(term(cpu, "fragmentation"), 0.0);  // a CPU device reports allocated bytes
  in.gpu_runtime = true;
  auto gpu = memory_terms(job, in);
  double dynamic = 0;
  for (const char* name : {"gathered_params", "unit_gradient", "comm_buffers", "activations",
                           "working_set", "framework_buffers"})
    dynamic += term(gpu, name);
  EXPECT_DOUBLE_EQ(term(gpu, "fragmentation"), memory_constants().fragmentation * dynamic);

  // With a large vocabulary the tied head's phase (head + embedding) is the largest gather;
  // bf16 compute from fp32 master weights adds the cast send shard to the in-flight buffers.
  Job big = job;
  big.model.vocab_size = 50000;
  big.precision.compute = Dtype::BF16;
  const double head_phase = 128 + (50000 + 64) * 64.0;
  auto b = memory_terms(big, in);
  EXPECT_DOUBLE_EQ(term(b, "gathered_params"), 2 * head_phase * 2);
  EXPECT_DOUBLE_EQ(term(b, "unit_gradient"), head_phase * 4);
  EXPECT_DOUBLE_EQ(term(b, "comm_buffers"), 0.5 * head_phase * (4 + 2));
}

// A fused cross-entropy (flash-attn's, llm-foundry's default loss) keeps the logits and one fp32
// log-sum-exp per token and writes the logits' gradient in their dtype: the head holds 2·V
// elements of the compute dtype per token where the framework's loss holds V of them plus an
// fp32 log-softmax. The closed form, the graph's per-op bytes (what the replay holds) and the
// loss kernel's traffic all read it from the job's implementation.
TEST(MemoryModel, AFusedCrossEntropyKeepsNoFp32CopyOfTheLogits) {
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-tiny");
  job.model.vocab_size = 50000;  // the head's working set is then the largest unit's
  job.sequence_length = 64;
  job.precision = {Dtype::FP32, Dtype::BF16, Dtype::FP32};
  const ModelSpec& m = job.model;
  const int head = num_units(m) - 1;
  const double tokens = 64 * 4, V = m.vocab_size;
  Implementation fused;
  fused.cross_entropy = LossKernel::Fused;
  const double eager_head = unit_working_bytes(m, head, 64, 4, Dtype::BF16);
  EXPECT_DOUBLE_EQ(eager_head, tokens * V * (2 + 4));
  EXPECT_DOUBLE_EQ(unit_working_bytes(m, head, 64, 4, Dtype::BF16, Implementation{}), eager_head);
  EXPECT_DOUBLE_EQ(unit_working_bytes(m, head, 64, 4, Dtype::BF16, fused),
                   tokens * (2 * V * 2 + 4));
  // In fp32 the two hold the same but the fused kernel's log-sum-exps.
  EXPECT_DOUBLE_EQ(unit_working_bytes(m, head, 64, 4, Dtype::FP32, fused),
                   unit_working_bytes(m, head, 64, 4, Dtype::FP32) + tokens * 4);
  // A layer's working set does not depend on the loss.
  EXPECT_DOUBLE_EQ(unit_working_bytes(m, 1, 64, 4, Dtype::BF16, fused),
                   unit_working_bytes(m, 1, 64, 4, Dtype::BF16));

  RankMemoryInputs in;
  in.state_share = 0.5;
  in.micro_batch_sizes = {4};
  in.world_size = 2;
  in.gpu_runtime = true;
  Job fused_job = job;
  fused_job.implementation = fused;
  double eager_total = 0, fused_total = 0, eager_ws = 0, fused_ws = 0;
  for (const auto& t : memory_terms(job, in)) {
    eager_total += t.bytes;
    if (t.name == "working_set") eager_ws = t.bytes;
  }
  for (const auto& t : memory_terms(fused_job, in)) {
    fused_total += t.bytes;
    if (t.name == "working_set") fused_ws = t.bytes;
  }
  EXPECT_DOUBLE_EQ(eager_ws - fused_ws, tokens * (2 * V - 4));
  EXPECT_LT(fused_total, eager_total);
  // The graph's head forward allocates the same working set (the replay's per-op bytes).
  const OpBytes op = split_compute_op_bytes(fused_job, ActivationCheckpointing{}, head,
                                            ComputeStep::Forward, 4, 1, false, true);
  EXPECT_DOUBLE_EQ(op.alloc, unit_working_bytes(m, head, 64, 4, Dtype::BF16, fused));
  // The loss kernel's traffic: the logits read once forward, read and written backward.
  auto loss_op = [&](const Implementation& impl) {
    for (const auto& o : unit_ops(m, head, 64, 4, Dtype::BF16, impl))
      if (std::string_view(o.name) == "cross_entropy") return o;
    ADD_FAILURE() << "no cross_entropy op";
    return OpCost{};
  };
  EXPECT_DOUBLE_EQ(loss_op(fused).forward_bytes, tokens * V * 2);
  EXPECT_DOUBLE_EQ(loss_op(fused).backward_bytes, tokens * V * 4);
  EXPECT_DOUBLE_EQ(loss_op(Implementation{}).forward_bytes, tokens * V * 6);
}

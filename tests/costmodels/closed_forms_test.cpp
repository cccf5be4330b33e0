// Closed forms of the cost models checked against hand computations and the published counts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <tuple>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/tensor_parallel.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
const std::filesystem::path kSource = CEPHALO_SOURCE_DIR;
}

TEST(ModelMath, GptForwardFlopsPerLayerMatchTheTextbookFormula) {
  // 24·s·h² + 4·s²·h per sample (Narayanan et al. 2021, forward, no recompute).
  for (const char* name : {"gpt-1.3b", "gpt-2.7b", "gpt-6.7b", "gpt-175b"}) {
    const ModelSpec& m = ModelCatalog::builtin().get(name);
    for (int seq : {128, 512, 2048}) {
      for (int b : {1, 3}) {
        double s = seq, h = m.hidden;
        double expected = b * (24 * s * h * h + 4 * s * s * h);
        UnitFlops f = unit_flops(m, 1, seq, b);
        EXPECT_DOUBLE_EQ(f.forward, expected) << name << " s=" << seq << " b=" << b;
        EXPECT_DOUBLE_EQ(f.backward, 2 * expected);
        // The eager op breakdown sums to the same GEMM + attention FLOPs.
        double ops = 0;
        for (const auto& op : unit_ops(m, 1, seq, b, Dtype::FP16, {AttentionKernel::Eager, false}))
          if (op.op_class != OpClass::Memory) ops += op.forward_flops;
        EXPECT_DOUBLE_EQ(ops, expected);
      }
    }
  }
}

// Flash attention in the GEMM column: its matmuls at the rate mma.sync reaches (2/3 of the
// tensor peak on Hopper, all of it on Ampere) plus one exponential per unmasked score element in
// each phase on the special-function units (16 per SM per clock).
TEST(AnalyticCompute, FlashAttentionPaysForItsInstructionsAndExponentials) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-2.7b");
  const Implementation flash{AttentionKernel::Flash, true};
  for (const char* name : {"A100-80GB", "H100-SXM"}) {
    const DeviceSpec& d = GpuCatalog::builtin().get(name);
    const double sfu = 16.0 * d.sm_count * d.boost_clock_hz;
    EXPECT_DOUBLE_EQ(special_function_rate(d), sfu) << name;
    const double mma = d.architecture == "hopper" ? 2.0 / 3.0 : 1.0;
    EXPECT_DOUBLE_EQ(legacy_mma_fraction(d), mma) << name;
    OpCost fa;
    for (const auto& op : unit_ops(gpt, 1, 4096, 1, Dtype::BF16, flash))
      if (std::string(op.name) == "flash_attention") fa = op;
    EXPECT_DOUBLE_EQ(fa.forward_exps, 0.5 * gpt.heads * 4096.0 * 4096.0) << name;
    EXPECT_DOUBLE_EQ(fa.backward_exps, fa.forward_exps) << name;
    // The flash share of the GEMM column: with it minus without it (eager has none of it).
    const double peak = effective_peak(d, Dtype::BF16);
    const auto with = unit_features(d, gpt, 1, 4096, 1, Dtype::BF16, flash, false, 2.0);
    const auto unit = unit_features(d, gpt, 1, 4096, 1, Dtype::BF16, flash, false, 1.0);
    const double share = fa.forward_flops / (peak * mma) + fa.forward_exps / sfu;
    EXPECT_NEAR(with.forward[0] - unit.forward[0], share, 1e-9 * share) << name;
  }
  // A spec without SM count or clock (inline) has no exponential term.
  DeviceSpec inline_gpu;
  EXPECT_EQ(special_function_rate(inline_gpu), 0);
}

// cuDNN's fused attention (Transformer Engine's choice on Hopper) issues each architecture's own
// tensor-core instructions: on Hopper its matmuls are priced at the whole peak, FlashAttention-2's
// at legacy_mma_fraction of it; on Ampere, where mma.sync is native, the two price alike. Nothing
// else of the unit moves: the same bytes, kernels and exponentials.
TEST(AnalyticCompute, CudnnFlashAttentionIssuesTheNativeInstructions) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-2.7b");
  const Implementation fa2{AttentionKernel::Flash, true};
  Implementation cudnn = fa2;
  cudnn.flash_kernel = FlashKernel::Cudnn;
  Job job;
  job.model = gpt;
  job.sequence_length = 4096;
  job.precision.compute = Dtype::BF16;
  for (const char* name : {"A100-80GB", "H100-SXM"}) {
    const DeviceSpec& d = GpuCatalog::builtin().get(name);
    const auto a = unit_ops(gpt, 1, 4096, 2, Dtype::BF16, fa2);
    const auto b = unit_ops(gpt, 1, 4096, 2, Dtype::BF16, cudnn);
    ASSERT_EQ(a.size(), b.size());
    const OpCost* fa = nullptr;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].legacy_mma, std::string(a[i].name) == "flash_attention") << a[i].name;
      EXPECT_FALSE(b[i].legacy_mma) << b[i].name;
      EXPECT_EQ(a[i].forward_bytes, b[i].forward_bytes) << a[i].name;
      EXPECT_EQ(a[i].backward_exps, b[i].backward_exps) << a[i].name;
      if (std::string(a[i].name) == "flash_attention") fa = &a[i];
    }
    ASSERT_NE(fa, nullptr);
    const double peak = effective_peak(d, Dtype::BF16), mma = legacy_mma_fraction(d);
    const auto x2 = unit_features(d, gpt, 1, 4096, 2, Dtype::BF16, fa2, false);
    const auto xc = unit_features(d, gpt, 1, 4096, 2, Dtype::BF16, cudnn, false);
    for (auto [flops, with, without] : {std::tuple{fa->forward_flops, x2.forward, xc.forward},
                                        std::tuple{fa->backward_flops, x2.backward, xc.backward}}) {
      const double saved = flops / peak * (1 / mma - 1);
      EXPECT_NEAR(with[0] - without[0], saved, 1e-9 * with[0]) << name;
      for (std::size_t k = 1; k < with.size(); ++k) EXPECT_EQ(with[k], without[k]) << name;
    }
    // The roofline prices the same rule: faster on Hopper, the same on Ampere.
    const RooflineComputeModel roofline;
    job.implementation = fa2;
    const double t2 = roofline.unit_time(d, job, 1, ComputePhase::Forward, 2).seconds;
    job.implementation = cudnn;
    const double tc = roofline.unit_time(d, job, 1, ComputePhase::Forward, 2).seconds;
    if (d.architecture == "hopper")
      EXPECT_LT(tc, t2) << name;
    else
      EXPECT_DOUBLE_EQ(tc, t2) << name;
  }
}

TEST(ModelMath, FlashAttentionSkipsTheMaskedHalfAndMovesNoScores) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-2.7b");
  const double s = 2048, b = 2, h = gpt.hidden, a = gpt.heads;
  auto find = [](const std::vector<OpCost>& ops, const std::string& name) -> const OpCost* {
    for (const auto& op : ops)
      if (name == op.name) return &op;
    return nullptr;
  };
  auto flash = unit_ops(gpt, 1, 2048, 2, Dtype::BF16, {AttentionKernel::Flash, true});
  const OpCost* fa = find(flash, "flash_attention");
  ASSERT_NE(fa, nullptr);
  EXPECT_EQ(find(flash, "softmax"), nullptr);
  EXPECT_EQ(find(flash, "scores"), nullptr);
  // Causal: half of QKᵀ and PV (4·b·s²·h in full); the backward recomputes the scores.
  EXPECT_DOUBLE_EQ(fa->forward_flops, 2 * b * s * s * h);
  EXPECT_DOUBLE_EQ(fa->backward_flops, 2.5 * fa->forward_flops);
  // Its traffic grows with s, not s²: q, k, v, o and a log-sum-exp per head and row.
  EXPECT_LT(fa->forward_bytes, 2.0 * (4 * b * s * h + 4 * b * a * s));
  auto eager = unit_ops(gpt, 1, 2048, 2, Dtype::BF16, {AttentionKernel::Eager, true});
  ASSERT_NE(find(eager, "softmax"), nullptr);
  EXPECT_GE(find(eager, "scores")->forward_bytes, 2 * b * a * s * s);
  // BERT attends both ways: no halving.
  const ModelSpec& bert = ModelCatalog::builtin().get("bert-large");
  auto bi = unit_ops(bert, 1, 512, 1, Dtype::FP16, {AttentionKernel::Flash, true});
  EXPECT_DOUBLE_EQ(find(bi, "flash_attention")->forward_flops, 4.0 * 512 * 512 * bert.hidden);
  // Fused elementwise: the residual adds are done by the norms (two kernels fewer).
  auto unfused = unit_ops(gpt, 1, 2048, 2, Dtype::BF16, {AttentionKernel::Flash, false});
  EXPECT_EQ(unfused.size(), flash.size() + 2);
  EXPECT_NE(find(unfused, "residual1"), nullptr);
  EXPECT_EQ(find(flash, "residual1"), nullptr);
}

TEST(ModelMath, EagerAttentionHoldsTheScoresAndTheirGradient) {
  const ModelSpec& gpt = ModelCatalog::builtin().get("gpt-2.7b");
  EXPECT_DOUBLE_EQ(eager_attention_bytes(gpt, 1, 1024, 3, {AttentionKernel::Eager, false}),
                   2.0 * 3 * gpt.heads * 1024.0 * 1024.0 * 4.0);
  EXPECT_EQ(eager_attention_bytes(gpt, 1, 1024, 3, {}), 0.0);
  EXPECT_EQ(eager_attention_bytes(gpt, 0, 1024, 3, {AttentionKernel::Eager, false}), 0.0);
}

TEST(ModelMath, ParameterCountsMatchPublishedModelStats) {
  Json stats = read_json_file(kSource / "scenarios/calibration/cephalo-profiles/model_stats.json");
  int checked = 0;
  for (auto& [name, s] : stats.items()) {
    auto m = ModelCatalog::builtin().find(name);
    ASSERT_TRUE(m.has_value()) << name << " does not resolve to a catalog model";
    EXPECT_EQ(m->hidden, s["hidden_size"].get<int>()) << name;
    EXPECT_EQ(m->num_layers, s["num_layers"].get<int>()) << name;
    EXPECT_EQ(layer_parameters(*m), s["parameters_per_layer"].get<double>()) << name;
    EXPECT_EQ(total_parameters(*m), s["total_parameters"].get<double>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 21);
}

TEST(ModelMath, ProfileNamesResolveToTheirArchitecture) {
  const auto& c = ModelCatalog::builtin();
  EXPECT_EQ(c.get("deepspeedgpt_2.7b").name, "gpt-2.7b");
  EXPECT_EQ(c.get("gpt_2.7b").name, "gpt-2.7b");
  EXPECT_EQ(c.get("deepspeedllama_7b").name, "llama-7b");
  EXPECT_EQ(c.get("deepspeedllamav2_13b").name, "llama-13b");
  EXPECT_EQ(c.get("deepspeedmistral_7b").name, "mistral-7b");
  EXPECT_EQ(c.get("bert_xlarge").name, "bert-xlarge");
  EXPECT_EQ(c.get("vit_g").name, "vit-g");
  EXPECT_EQ(GpuCatalog::builtin().get("l4").name, "L4");
  EXPECT_EQ(GpuCatalog::builtin().get("v100x32").name, "V100-SXM2-32GB");
}

TEST(ModelMath, LlamaUsesSwigluAndNoBiases) {
  const ModelSpec& m = ModelCatalog::builtin().get("llama-7b");
  double h = 4096, f = 11008;
  EXPECT_DOUBLE_EQ(layer_parameters(m), 4 * h * h + 3 * h * f + 2 * h);
  const ModelSpec& g = ModelCatalog::builtin().get("llama3-8b");  // GQA: 8 KV heads of 128
  EXPECT_DOUBLE_EQ(layer_parameters(g), 2 * h * h + 2 * h * 1024 + 3 * h * 14336 + 2 * h);
}

TEST(CommModel, BusBandwidthFactorsAreThoseOfNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::AllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::ReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::AllReduce, 4), 2.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::Broadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::AllReduce, 1), 0.0);
}

namespace {

// One node of four identical GPUs on a 10 GB/s, 5 µs link; corrections set to 1 so the
// numbers are the textbook α-β ones.
Cluster four_gpu_node(double bandwidth = 10e9, double latency = 5e-6) {
  Cluster c;
  c.name = "test";
  Node n;
  n.name = "n0";
  n.intra_link = {"nvlink", bandwidth, latency};
  n.nic = {"ethernet", 1e9, 20e-6};
  DeviceSlot slot;
  slot.type = "A100-40GB";
  slot.spec = GpuCatalog::builtin().get("A100-40GB");
  n.devices.assign(4, slot);
  c.nodes.push_back(n);
  return c;
}

CommCalibration exact() {
  CommCalibration cal;
  for (const char* k : {"pcie", "nvlink", "ethernet", "infiniband", "shm"})
    cal.links[k] = {1.0, -1};
  cal.launch_overhead_s = 0;
  return cal;
}

}  // namespace

// NCCL's Simple ring on one node of four A100s: base latency 8.4 µs (NCCL's constant), one
// step of the link's α per ring step, the bytes over the bottleneck at the link's bandwidth;
// 2 channels (the fewest NCCL opens) already fill a 10 GB/s link.
TEST(CommModel, RingTimesAreTheHandComputedAlphaBetaSums) {
  Cluster c = four_gpu_node();
  AlphaBetaCommModel model(exact());
  CollectiveRequest r;
  r.ranks = {0, 1, 2, 3};
  r.shard_bytes.assign(4, 25e6);  // 100 MB in total
  r.kind = CollectiveKind::AllGather;
  auto ag = model.collective(c, r);
  EXPECT_NEAR(ag.seconds, 8.4e-6 + 3 * 5e-6 + 75e6 / 10e9, 1e-12);
  EXPECT_EQ(ag.algorithm, "ring");
  EXPECT_EQ(ag.protocol, "Simple");
  EXPECT_EQ(ag.channels, 2);
  EXPECT_NEAR(ag.algbw, 100e6 / ag.seconds, 1e-3);
  EXPECT_NEAR(ag.busbw, ag.algbw * 0.75, 1e-3);
  EXPECT_DOUBLE_EQ(ag.link_bytes, 75e6);
  EXPECT_DOUBLE_EQ(ag.link_bandwidth, 10e9);
  // All-reduce: 6 steps; the ring beats the tree (2 × 100 MB at 92 % of the link).
  r.kind = CollectiveKind::AllReduce;
  auto ar = model.collective(c, r);
  EXPECT_NEAR(ar.seconds, 8.4e-6 + 6 * 5e-6 + 150e6 / 10e9, 1e-12);
  EXPECT_EQ(ar.algorithm, "ring");
  // Tiny all-reduce: latency-bound, LL (NCCL's LL step on NVLink: 0.6 / 3.4 of the Simple one),
  // base 6.6 µs; the LL ring's 6 short steps beat the LL tree (6.8 µs + 2 × 3 chain steps).
  r.shard_bytes.assign(4, 1.0);
  auto tiny = model.collective(c, r);
  EXPECT_EQ(tiny.protocol, "LL");
  EXPECT_EQ(tiny.algorithm, "ring");
  EXPECT_EQ(tiny.channels, 1);
  EXPECT_NEAR(tiny.seconds, 6.6e-6 + 6 * 5e-6 * 0.6 / 3.4 + 6.0 / (10e9 * 0.5), 1e-12);
}

// CPU ranks run the backend's MPI collectives: no NCCL protocol, every step the slowest α.
TEST(CommModel, CpuRanksRunTheHostRingAndTree) {
  Cluster c = four_gpu_node();
  c.nodes.edit([](std::vector<Node>& n) {
    n[0].intra_link = {"shm", 10e9, 5e-6};
    for (auto& slot : n[0].devices) slot.spec = GpuCatalog::builtin().get("CPU-core");
  });
  AlphaBetaCommModel model(exact());
  CollectiveRequest r;
  r.ranks = {0, 1, 2, 3};
  r.shard_bytes.assign(4, 25e6);
  r.kind = CollectiveKind::AllGather;
  auto ag = model.collective(c, r);
  EXPECT_EQ(ag.protocol, "host");
  EXPECT_NEAR(ag.seconds, 3 * (5e-6 + 2.5e-3), 1e-12);
  r.kind = CollectiveKind::AllReduce;
  r.shard_bytes.assign(4, 1.0);
  auto tiny = model.collective(c, r);
  EXPECT_EQ(tiny.algorithm, "tree");
  EXPECT_NEAR(tiny.seconds, 4 * 5e-6 + 2 * 4.0 / 10e9, 1e-15);
}

TEST(CommModel, UnevenShardsGroupedAndPadded) {
  Cluster c = four_gpu_node();
  AlphaBetaCommModel model(exact());
  CollectiveRequest r;
  r.kind = CollectiveKind::AllGather;
  r.ranks = {0, 1, 2, 3};
  r.shard_bytes = {10e6, 20e6, 30e6, 40e6};  // 100 MB
  r.uneven = UnevenCollective::Padded;
  auto padded = model.collective(c, r);  // ring over 4 × 40 MB
  EXPECT_EQ(padded.algorithm, "padded-ring");
  EXPECT_EQ(padded.variant, UnevenCollective::Padded);
  EXPECT_NEAR(padded.seconds, 8.4e-6 + 3 * 5e-6 + 3 * 40e6 / 10e9, 1e-12);
  r.uneven = UnevenCollective::Grouped;
  auto grouped = model.collective(c, r);  // rank 0 receives 90 MB
  EXPECT_EQ(grouped.algorithm, "grouped-broadcast");
  EXPECT_EQ(grouped.variant, UnevenCollective::Grouped);
  EXPECT_EQ(grouped.protocol, "Simple");
  EXPECT_NEAR(grouped.seconds, 8.4e-6 + 3 * 5e-6 + 90e6 / 10e9 + 3e-6, 1e-12);
  EXPECT_LT(grouped.seconds, padded.seconds);
  // Auto takes the cheaper, and uneven_variant is that decision.
  r.uneven = UnevenCollective::Auto;
  auto chosen = model.collective(c, r);
  EXPECT_EQ(chosen.variant, UnevenCollective::Grouped);
  EXPECT_DOUBLE_EQ(chosen.seconds, grouped.seconds);
  EXPECT_EQ(uneven_variant(model, c, r), UnevenCollective::Grouped);
  // Equal shares are the even collective whatever the variant asked: no variant.
  r.shard_bytes.assign(4, 25e6);
  EXPECT_FALSE(model.collective(c, r).variant.has_value());
  EXPECT_EQ(model.collective(c, r).algorithm, "ring");
}

namespace {

// `nodes` nodes of `per_node` H100s: NVLink inside (450 GB/s, 2 µs), a 3,200 Gbit/s
// InfiniBand NIC per node (5 µs), the shape of a current training cluster.
Cluster h100_nodes(int nodes, int per_node) {
  Cluster c;
  c.name = "h100";
  Node n;
  n.intra_link = {"nvlink", 450e9, 2e-6};
  n.nic = {"infiniband", 3200e9 / 8, 5e-6};
  DeviceSlot slot;
  slot.type = "H100-SXM";
  slot.spec = GpuCatalog::builtin().get("H100-SXM");
  n.devices.assign(static_cast<std::size_t>(per_node), slot);
  for (int i = 0; i < nodes; ++i) {
    n.name = std::to_string(i);  // (GCC 12 warns falsely on "n" + to_string, -Wrestrict)
    c.nodes.push_back(n);
  }
  return c;
}

}  // namespace

// A unit whose size does not divide the ranks (half of them own one element more) is gathered
// padded, as FSDP does: the even algorithm NCCL picks on max × n bytes, within 0.1 % of the
// even collective, from 2 to 102,400 ranks. The grouped variant runs on the same ring: it
// costs the even collective plus its one enqueue per owner.
TEST(CommModel, OneElementMoreCostsWhatTheEvenCollectiveCostsFrom2To100kRanks) {
  AlphaBetaCommModel model;  // the shipped default corrections
  const double element = 2;  // bf16
  const double total = 150.0 * 1024 * 1024;
  const std::vector<std::pair<int, int>> shapes = {{1, 2},   {1, 8},    {4, 8},    {16, 8},
                                                   {128, 8}, {1024, 8}, {12800, 8}};
  for (auto [nodes, per_node] : shapes) {
    const Cluster c = h100_nodes(nodes, per_node);
    const int n = nodes * per_node;
    const double q = std::floor(total / element / n);
    CollectiveRequest even;
    for (int r = 0; r < n; ++r) even.ranks.push_back(r);
    even.shard_bytes.assign(static_cast<std::size_t>(n), q * element);
    CollectiveRequest uneven = even;
    for (int r = 0; r < n / 2; ++r) uneven.shard_bytes[static_cast<std::size_t>(r)] += element;
    for (CollectiveKind kind : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter}) {
      even.kind = uneven.kind = kind;
      const CollectiveEstimate e = model.collective(c, even);
      const std::string what = std::to_string(n) + " ranks, " + to_string(kind);
      // NCCL runs all-gather and reduce-scatter as rings where GPUs share a node.
      EXPECT_EQ(e.algorithm, "ring") << what;
      for (UnevenCollective v : {UnevenCollective::Auto, UnevenCollective::Padded}) {
        uneven.uneven = v;
        const CollectiveEstimate u = model.collective(c, uneven);
        EXPECT_NEAR(u.seconds / e.seconds, 1.0, 1e-3) << what << ", " << to_string(v);
        EXPECT_GE(u.seconds, e.seconds) << what;
        EXPECT_EQ(u.algorithm, "padded-" + e.algorithm) << what;
        EXPECT_EQ(u.variant, UnevenCollective::Padded) << what;
      }
      uneven.uneven = UnevenCollective::Grouped;
      const CollectiveEstimate g = model.collective(c, uneven);
      const double enqueue = (n - 1) * 1e-6;
      EXPECT_NEAR((g.seconds - enqueue) / e.seconds, 1.0, 1e-3) << what;
      EXPECT_EQ(uneven_variant(model, c, uneven), UnevenCollective::Padded) << what;
    }
  }
}

TEST(CommModel, BadRequestsAreRejected) {
  Cluster c = four_gpu_node();
  AlphaBetaCommModel model;
  CollectiveRequest r;
  r.ranks = {0, 1};
  r.shard_bytes = {1, -5};
  EXPECT_THROW(model.collective(c, r), ValidationError);
  r.shard_bytes = {1};
  EXPECT_THROW(model.collective(c, r), ValidationError);
  r.ranks = {0, 9};
  r.shard_bytes = {1, 1};
  EXPECT_THROW(model.collective(c, r), ValidationError);
  EXPECT_THROW(model.copy_time(c, 0, -1), ValidationError);
}

TEST(Roofline, TimesGrowWithSizeAndFasterGpusAreFaster) {
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-2.7b");
  job.sequence_length = 512;
  RooflineComputeModel roofline;
  const DeviceSpec& a100 = GpuCatalog::builtin().get("a100x40");
  const DeviceSpec& t4 = GpuCatalog::builtin().get("t4");
  double t1 = roofline.unit_time(a100, job, 1, ComputePhase::Forward, 1).seconds;
  double t8 = roofline.unit_time(a100, job, 1, ComputePhase::Forward, 8).seconds;
  EXPECT_GT(t8, 4 * t1);
  EXPECT_LT(t8, 8 * t1);  // per-kernel overhead amortised
  EXPECT_LT(t8, roofline.unit_time(t4, job, 1, ComputePhase::Forward, 8).seconds);
  EXPECT_GT(roofline.unit_time(a100, job, 1, ComputePhase::Backward, 8).seconds, t8);
  EXPECT_THROW(roofline.unit_time(a100, job, 1, ComputePhase::Forward, 0), ValidationError);
}

TEST(GpuCatalog, BoardPowerIsParsedCheckedAndPrinted) {
  Json j = {{"name", "X"},
            {"memory", "16GB"},
            {"memory_bandwidth", "300GB/s"},
            {"peak_fp32", "8TFLOPS"},
            {"tdp_watts", 70}};
  JsonReader r(j, "inline.json");
  DeviceSpec d = parse_device_spec(r);
  EXPECT_DOUBLE_EQ(d.tdp_watts, 70);
  EXPECT_DOUBLE_EQ(to_json(d).at("tdp_watts").get<double>(), 70);
  for (const Json& bad : {Json(0), Json(-5), Json("70W"), Json(1e6)}) {
    Json b = j;
    b["tdp_watts"] = bad;
    JsonReader rb(b, "inline.json");
    try {
      parse_device_spec(rb);
      ADD_FAILURE() << "accepted tdp_watts " << bad.dump();
    } catch (const ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("tdp_watts"), std::string::npos) << e.what();
    }
  }
  Json none = j;
  none.erase("tdp_watts");
  JsonReader rn(none, "inline.json");
  DeviceSpec n = parse_device_spec(rn);
  EXPECT_EQ(n.tdp_watts, 0);
  EXPECT_FALSE(to_json(n).contains("tdp_watts"));
  // Every GPU of the catalog has a board power, and its source says where it comes from.
  for (const auto& g : GpuCatalog::builtin().all()) {
    if (g.kind != "gpu") continue;
    EXPECT_GT(g.tdp_watts, 0) << g.name;
    EXPECT_NE(g.source.find("tdp_watts"), std::string::npos) << g.name;
  }
}

// Transformer Engine's userbuffers overlap (tensor_parallel.hpp): each method's exposed time by
// hand, and a layer's two calls, which show everything when the GEMMs take no time and, under
// GEMMs far longer than the collectives, only the forward's last reduce-scatter split.
TEST(TpCommOverlap, EachMethodExposesWhatItsGemmDoesNotHide) {
  // Ring exchange over T = 4 chunks: the first on local rows, 3 transfers under 3 chunks.
  EXPECT_DOUBLE_EQ(ring_exchange_exposed(3.0, 4.0, 4), 0.0);  // 3 ≤ 4·3/4
  EXPECT_DOUBLE_EQ(ring_exchange_exposed(5.0, 4.0, 4), 2.0);  // 5 − 3
  // Pipelined in 4 splits: the last split's reduce-scatter after the GEMM.
  EXPECT_DOUBLE_EQ(pipelined_exposed(2.0, 8.0, 4), 0.5);
  EXPECT_DOUBLE_EQ(pipelined_exposed(8.0, 4.0, 4), 2.0 + 0.75 * 4.0);
  // Bulk: the whole collective beside an independent GEMM.
  EXPECT_DOUBLE_EQ(bulk_exposed(2.0, 3.0), 0.0);
  EXPECT_DOUBLE_EQ(bulk_exposed(5.0, 3.0), 2.0);

  const DeviceSpec& h100 = GpuCatalog::builtin().get("H100-SXM");
  Job job;
  job.model = ModelCatalog::builtin().get("gpt-6.7b");
  job.sequence_length = 2048;
  job.global_batch = 8;
  job.precision = {Dtype::FP32, Dtype::BF16, Dtype::BF16};
  const LayerLinearShares shares = layer_linear_shares(h100, job, 2);
  // The four GEMMs are most of a layer, and each a positive part of it.
  for (const LayerShare& s : {shares.qkv, shares.attention_out, shares.mlp_in, shares.mlp_out}) {
    EXPECT_GT(s.forward, 0.0);
    EXPECT_GT(s.backward, 0.0);
  }
  const double sum = shares.qkv.forward + shares.attention_out.forward + shares.mlp_in.forward +
                     shares.mlp_out.forward;
  EXPECT_GT(sum, 0.6);
  EXPECT_LT(sum, 1.0);
  const double ag = 1e-4, rs = 2e-4;
  for (auto phase : {ComputePhase::Forward, ComputePhase::Recompute, ComputePhase::Backward})
    EXPECT_DOUBLE_EQ(tp_overlap_exposed_seconds(shares, phase, 0.0, 4, ag, rs), 2 * (ag + rs));
  EXPECT_DOUBLE_EQ(tp_overlap_exposed_seconds(shares, ComputePhase::Forward, 1e3, 4, ag, rs),
                   2 * rs / kTpOverlapPipelineSplits);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed_seconds(shares, ComputePhase::Backward, 1e3, 4, ag, rs), 0.0);
  // More GEMM time never exposes more.
  double last = 1e9;
  for (double layer_s : {0.0, 1e-4, 1e-3, 1e-2}) {
    const double e = tp_overlap_exposed_seconds(shares, ComputePhase::Forward, layer_s, 4, ag, rs);
    EXPECT_LE(e, last);
    last = e;
  }
}

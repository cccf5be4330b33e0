// The schedule module (core/schedule.hpp): each rule checked against its definition, written
// out here independently of the module (DESIGN §1, core/plan.hpp's checkpointing comment).
#include <gtest/gtest.h>

#include "cephalo/core/schedule.hpp"

#include "../support/checkpointing.hpp"

using namespace cephalo;
using cephalo::test_support::every;
using cephalo::test_support::none;

TEST(Schedule, RecomputeFollowsTheCheckpointingOfEachUnit) {
  const int layers = 7, units = layers + 2;
  for (const ActivationCheckpointing& c : {ActivationCheckpointing{}, none(), every(1), every(3)}) {
    // The head always recomputes its logits; the embedding unless checkpointing is none.
    EXPECT_TRUE(schedule::recomputes(c, units - 1, units)) << to_string(c);
    EXPECT_EQ(schedule::recomputes(c, 0, units), c.kind != ActivationCheckpointing::Kind::None)
        << to_string(c);
    int expected = 0;
    for (int l = 1; l <= layers; ++l) {
      const bool ck = c.kind == ActivationCheckpointing::Kind::Full ||
                      (c.kind == ActivationCheckpointing::Kind::Every && (l - 1) % c.every == 0);
      EXPECT_EQ(schedule::recomputes(c, l, units), ck) << to_string(c) << " layer " << l;
      EXPECT_EQ(schedule::keeps_only_input(c, l), ck) << to_string(c) << " layer " << l;
      expected += ck ? 1 : 0;
    }
    EXPECT_EQ(schedule::checkpointed_layers(c, layers), expected) << to_string(c);
  }
  EXPECT_EQ(schedule::checkpointed_layers(every(3), 7), 3);  // layers 1, 4, 7
  EXPECT_EQ(schedule::checkpointed_layers(none(), 7), 0);
}

TEST(Schedule, AccumulationModesGatherAndReduceAsDefined) {
  // Layered: one round whatever the micro-batches (every unit gathered once in forward, once in
  // backward, reduce-scattered once); standard: per micro-batch all three; no_sync: gathers per
  // micro-batch, one reduce-scatter in the last round.
  for (int m : {1, 2, 5}) {
    EXPECT_EQ(schedule::rounds(Accumulation::Layered, m), 1);
    EXPECT_EQ(schedule::rounds(Accumulation::Standard, m), m);
    EXPECT_EQ(schedule::rounds(Accumulation::NoSync, m), m);
    using U = schedule::UnitCollectives;
    EXPECT_EQ(schedule::unit_collectives(Accumulation::Layered, 1), (U{1, 1, 1}));
    EXPECT_EQ(schedule::unit_collectives(Accumulation::Standard, m), (U{m, m, m}));
    EXPECT_EQ(schedule::unit_collectives(Accumulation::NoSync, m), (U{m, m, 1}));
    for (int k = 0; k < m; ++k) {
      EXPECT_TRUE(schedule::reduces_in_round(Accumulation::Standard, k, m));
      EXPECT_EQ(schedule::reduces_in_round(Accumulation::NoSync, k, m), k == m - 1);
    }
  }
  // A plan whose ranks have no samples still runs one round.
  EXPECT_EQ(schedule::rounds(Accumulation::Standard, 0), 1);
}

TEST(Schedule, HybridShardingAddsOneCrossGroupReductionPerUnit) {
  Sharding full;
  EXPECT_EQ(schedule::sharding_collectives(full).cross_group_all_reduces, 0);
  EXPECT_TRUE(schedule::sharding_collectives(full).group_collectives);
  Sharding hybrid;
  hybrid.kind = ShardingKind::Hybrid;
  hybrid.groups = {{0, 1}, {2, 3}};
  EXPECT_EQ(schedule::sharding_collectives(hybrid).cross_group_all_reduces, 1);
  hybrid.groups = {{0, 1, 2, 3}};  // one group holds the whole state: nothing to reduce across
  EXPECT_EQ(schedule::sharding_collectives(hybrid).cross_group_all_reduces, 0);
}

TEST(Schedule, TrainingStateBytesPerParameterByPrecision) {
  // Master weight + gradient shard + AdamW m and v in fp32.
  Precision p;  // fp32 params, fp32 reduce
  EXPECT_DOUBLE_EQ(schedule::state_bytes_per_parameter(p), 4 + 4 + 8);
  p.reduce = Dtype::BF16;
  EXPECT_DOUBLE_EQ(schedule::state_bytes_per_parameter(p), 4 + 2 + 8);
  p.params = Dtype::BF16;
  EXPECT_DOUBLE_EQ(schedule::state_bytes_per_parameter(p), 2 + 2 + 8);
}

TEST(Schedule, HostOffloadNeedsFullCheckpointing) {
  EXPECT_FALSE(schedule::offload_conflict(Offload::None, none()));
  EXPECT_FALSE(schedule::offload_conflict(Offload::Host, ActivationCheckpointing{}));
  EXPECT_FALSE(schedule::offload_conflict(Offload::Host, every(1)));
  for (const ActivationCheckpointing& c : {none(), every(2)}) {
    const auto why = schedule::offload_conflict(Offload::Host, c);
    ASSERT_TRUE(why) << to_string(c);
    EXPECT_NE(why->find("offload host needs activation checkpointing full"), std::string::npos);
    EXPECT_NE(why->find(to_string(c)), std::string::npos) << *why;
  }
}

namespace {

std::vector<schedule::GatherPhase> uniform_phases(int n, double elements) {
  std::vector<schedule::GatherPhase> out(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) out[static_cast<std::size_t>(q)] = {elements, q >= n / 2};
  return out;
}

}  // namespace

// FSDP2, FSDP1 (its limiter holds two all-gathers in flight) and DDP issue each gather one
// phase ahead; without prefetch only when its phase is next (costmodels/README.md,
// "Frameworks"). Gate q - 2 / q - 1, worked out by hand.
TEST(Schedule, GatherGatesRunOnePhaseAheadWithPrefetch) {
  const auto phases = uniform_phases(6, 1e8);
  const std::vector<int> ahead = {-1, -1, 0, 1, 2, 3}, next = {-1, 0, 1, 2, 3, 4};
  for (Framework f : {Framework::FSDP2, Framework::FSDP1, Framework::DDP}) {
    EXPECT_EQ(schedule::gather_gates(schedule::gather_rules(f, true), phases), ahead);
    EXPECT_EQ(schedule::gather_gates(schedule::gather_rules(f, false), phases), next);
  }
  EXPECT_EQ(
      schedule::gather_gates(schedule::gather_rules(Framework::DeepSpeedZero3, false), phases),
      next);
  // A longer lookahead after a shorter one never issues a gather before an earlier phase's.
  schedule::GatherRules mixed;
  mixed.forward_lookahead = 1;
  mixed.backward_lookahead = 3;
  EXPECT_EQ(schedule::gather_gates(mixed, phases), (std::vector<int>{-1, 0, 1, 1, 1, 2}));
}

// DeepSpeed ZeRO-3: at the start of each phase, the phases after the furthest one issued,
// while what this step issued is below the 5e7-element bucket and the live elements stay under
// 1e9. Phases of 1e7: step 0 issues 0 and 1..5 (1e7 .. 5e7), step 1 issues 6..10, step 2 the
// last. Phases of 2e8 cross the bucket: one phase ahead, as FSDP2.
TEST(Schedule, ZeroThreeGathersAheadAsFarAsItsPrefetchBucket) {
  const auto zero3 = schedule::gather_rules(Framework::DeepSpeedZero3, true);
  EXPECT_EQ(zero3.prefetch_bucket_elements, 5e7);
  EXPECT_EQ(zero3.max_live_elements, 1e9);
  EXPECT_EQ(schedule::gather_gates(zero3, uniform_phases(12, 1e7)),
            (std::vector<int>{-1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(schedule::gather_gates(zero3, uniform_phases(6, 2e8)),
            (std::vector<int>{-1, -1, 0, 1, 2, 3}));
  // The live cap: 3e7 elements hold three phases of 1e7, so from step 1 on one phase a step.
  schedule::GatherRules capped = zero3;
  capped.max_live_elements = 3e7;
  EXPECT_EQ(schedule::gather_gates(capped, uniform_phases(6, 1e7)),
            (std::vector<int>{-1, -1, -1, 0, 1, 2}));
  // Uneven phases: a 6e7 phase ends step 0's issue at once.
  const std::vector<schedule::GatherPhase> uneven = {{1e7}, {6e7}, {1e7}, {1e7}, {1e7}};
  EXPECT_EQ(schedule::gather_gates(zero3, uneven), (std::vector<int>{-1, -1, 0, 0, 0}));
}

// What the memory model's gathered term counts: the computing phase and those issued ahead.
TEST(Schedule, MostLiveGathersCountsTheComputingPhaseAndThoseAhead) {
  EXPECT_EQ(schedule::most_live_gathers(schedule::gather_rules(Framework::FSDP2, true), 1e8, 10),
            2);
  EXPECT_EQ(schedule::most_live_gathers(schedule::gather_rules(Framework::FSDP2, false), 1e8, 10),
            1);
  const auto zero3 = schedule::gather_rules(Framework::DeepSpeedZero3, true);
  EXPECT_EQ(schedule::most_live_gathers(zero3, 2e8, 10), 2);
  // 1e7-element phases: 0..5 are live at step 0, 1..10 at step 1, 2..11 at step 2; with more
  // phases four more each step (five issued, one done) until the 1e9 cap holds 100.
  EXPECT_EQ(schedule::most_live_gathers(zero3, 1e7, 12), 10);
  EXPECT_EQ(schedule::most_live_gathers(zero3, 1e7, 400), 100);
  schedule::GatherRules capped = zero3;
  capped.max_live_elements = 3e7;
  EXPECT_EQ(schedule::most_live_gathers(capped, 1e7, 12), 3);
}

TEST(Schedule, OnlyDdpReplicatesTheState) {
  EXPECT_TRUE(schedule::replicates_state(Framework::DDP));
  for (Framework f : {Framework::FSDP2, Framework::FSDP1, Framework::DeepSpeedZero3})
    EXPECT_FALSE(schedule::replicates_state(f));
}

TEST(Schedule, DescribeScheduleSaysWhatEachFrameworkDoes) {
  EXPECT_EQ(schedule::describe_schedule(Framework::FSDP2), "gathers 1 unit ahead");
  EXPECT_EQ(schedule::describe_schedule(Framework::FSDP2, false),
            "gathers each unit when it is next");
  EXPECT_EQ(schedule::describe_schedule(Framework::DeepSpeedZero3),
            "gathers ahead up to a 5e+07-element prefetch bucket (at most 1e+09 live)");
  EXPECT_EQ(schedule::describe_schedule(Framework::DDP),
            "gathers 1 unit ahead; one replica of the state per rank");
}

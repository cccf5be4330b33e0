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
  hybrid.kind = Sharding::Kind::Hybrid;
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

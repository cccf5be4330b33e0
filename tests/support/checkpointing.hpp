#pragma once
// Activation-checkpointing settings built in code for the schedule tests.
#include "cephalo/core/plan.hpp"

namespace cephalo::test_support {

inline ActivationCheckpointing every(int k) {
  ActivationCheckpointing c;
  c.kind = ActivationCheckpointing::Kind::Every;
  c.every = k;
  return c;
}
inline ActivationCheckpointing none() {
  ActivationCheckpointing c;
  c.kind = ActivationCheckpointing::Kind::None;
  return c;
}

inline ActivationCheckpointing selective() {
  ActivationCheckpointing c;
  c.kind = ActivationCheckpointing::Kind::Selective;
  return c;
}

}  // namespace cephalo::test_support

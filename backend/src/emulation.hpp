#pragma once
// Failure injection and slowdown emulation (DESIGN §7 "Emulation", tests of the abort policy):
// the only places the executor departs from running the plan as fast as the device can.
#include <memory>
#include <string>

#include "cephalo/backend/device.hpp"

namespace cephalo::backend {

// Testing: this rank fails at the start of step `at_step` (-1 = never), by throwing
// RuntimeFailure or, with `kill`, by dying on SIGKILL (no message, no cleanup: what an OOM
// kill looks like).
// With `non_finite` ("loss", "gradients", "parameters", "moments") it does not fail but writes
// a NaN (the moments: +inf) into that part of the rank's state at every step from `at_step`
// on, for the checks that end a run on non-finite state (executor.hpp, NonFiniteState).
struct FailureInjection {
  int at_step = -1;
  bool kill = false;
  std::string non_finite;
  void at_start_of(int step) const;
  bool injects(const char* part, int step) const {
    return at_step >= 0 && step >= at_step && non_finite == part;
  }
};

// A slower device on a fast core: after every compute op the rank holds its compute stream
// (factor - 1) x the op's measured time, sleeping rather than spinning so it steals no core
// from the other ranks. Factor 1 = real hardware (no events, no sleeps).
class SlowdownEmulator {
 public:
  explicit SlowdownEmulator(double factor) : factor_(factor) {}
  bool active() const { return factor_ > 1.0; }
  // Called right after a compute op was issued on `s`, whose start was recorded in `start`.
  void after_compute(Device& dev, Stream& s, Event& start);
  double slept_s() const { return slept_s_; }

 private:
  double factor_;
  double slept_s_ = 0;
};

}  // namespace cephalo::backend

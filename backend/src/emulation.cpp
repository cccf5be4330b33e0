#include "emulation.hpp"

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {

void FailureInjection::at_start_of(int step) const {
  if (at_step != step || !non_finite.empty()) return;
  if (kill) std::raise(SIGKILL);
  throw RuntimeFailure("injected failure at step " + std::to_string(step) + " (--inject-failure)");
}

void SlowdownEmulator::after_compute(Device& dev, Stream& s, Event& start) {
  if (!active()) return;
  auto mid = dev.create_event();
  mid->record(s);
  const double extra = (factor_ - 1.0) * mid->seconds_since(start);
  std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  slept_s_ += extra;
}

}  // namespace cephalo::backend

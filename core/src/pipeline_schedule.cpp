#include "cephalo/core/pipeline_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "cephalo/core/error.hpp"

namespace cephalo::pipeline {

std::string to_string(const PipelineSchedule& schedule) {
  switch (schedule.kind) {
    case PipelineSchedule::Kind::GPipe:
      return "gpipe";
    case PipelineSchedule::Kind::OneFOneB:
      return "1f1b";
    case PipelineSchedule::Kind::Interleaved:
      return "interleaved:" + std::to_string(schedule.virtual_stages);
  }
  return "1f1b";
}

std::string display_name(const PipelineSchedule& schedule) {
  switch (schedule.kind) {
    case PipelineSchedule::Kind::GPipe:
      return "GPipe";
    case PipelineSchedule::Kind::OneFOneB:
      return "1F1B";
    case PipelineSchedule::Kind::Interleaved:
      return "interleaved 1F1B (V=" + std::to_string(schedule.virtual_stages) + ")";
  }
  return "1F1B";
}

PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& file,
                                         const std::string& where) {
  PipelineSchedule s;
  if (text == "gpipe") {
    s.kind = PipelineSchedule::Kind::GPipe;
    return s;
  }
  if (text == "1f1b") return s;
  const std::string prefix = "interleaved:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string v = text.substr(prefix.size());
    const bool digits = !v.empty() && v.size() <= 5 && std::all_of(v.begin(), v.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (digits) {
      const int n = std::stoi(v);
      if (n >= 2 && n <= kMaxVirtualStages) {
        s.kind = PipelineSchedule::Kind::Interleaved;
        s.virtual_stages = n;
        return s;
      }
    }
  }
  throw ValidationError(file, where, "\"" + clip(text) + "\"",
                        "\"gpipe\", \"1f1b\" or \"interleaved:V\" with V (virtual stages per "
                        "stage) an integer from 2 to " +
                            std::to_string(kMaxVirtualStages));
}

std::string to_string(const Step& step, bool with_chunk) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on `"F" + std::to_string(...)`.
  std::string s(1, step.pass == Pass::Forward ? 'F' : 'B');
  s += std::to_string(step.micro_batch);
  if (with_chunk) {
    s += '.';
    s += std::to_string(step.chunk);
  }
  return s;
}

namespace {

int virtual_stages_of(const PipelineSchedule& schedule) {
  return schedule.kind == PipelineSchedule::Kind::Interleaved ? schedule.virtual_stages : 1;
}

void check_arguments(int p, int m, const PipelineSchedule& schedule) {
  if (p < 1) throw std::invalid_argument("pipeline: " + std::to_string(p) + " stages (need >= 1)");
  if (m < 1)
    throw std::invalid_argument("pipeline: " + std::to_string(m) + " micro-batches (need >= 1)");
  if (schedule.kind == PipelineSchedule::Kind::Interleaved) {
    const int v = schedule.virtual_stages;
    if (v < 2 || v > kMaxVirtualStages)
      throw std::invalid_argument("pipeline: interleaved with " + std::to_string(v) +
                                  " virtual stages (need 2.." + std::to_string(kMaxVirtualStages) +
                                  ")");
    if (p < 2)
      throw std::invalid_argument("pipeline: interleaved needs >= 2 stages, not " +
                                  std::to_string(p));
    if (m % p != 0)
      throw std::invalid_argument("pipeline: interleaved needs micro-batches (" +
                                  std::to_string(m) + ") a multiple of the stages (" +
                                  std::to_string(p) + ")");
  } else if (schedule.virtual_stages != 1) {
    throw std::invalid_argument("pipeline: " + to_string(schedule) + " with " +
                                std::to_string(schedule.virtual_stages) +
                                " virtual stages (only interleaved has more than 1)");
  }
}

// Megatron-Core's mapping of virtual micro-batch j to (micro-batch, chunk): groups of p
// micro-batches go through chunk 0, then the same group through chunk 1, ...; the backward
// visits the chunks in reverse.
Step interleaved_step(Pass pass, int j, int p, int v) {
  const int group = j / (p * v);
  const int in_group = j % (p * v);
  int chunk = in_group / p;
  if (pass == Pass::Backward) chunk = v - 1 - chunk;
  return Step{pass, group * p + in_group % p, chunk};
}

}  // namespace

namespace {

// Stage s's order; the arguments are checked.
std::vector<Step> order_of(int s, int p, int m, const PipelineSchedule& schedule) {
  const int v = virtual_stages_of(schedule);
  std::vector<Step> order;
  order.reserve(static_cast<std::size_t>(2 * m * v));
  switch (schedule.kind) {
    case PipelineSchedule::Kind::GPipe:
      for (int i = 0; i < m; ++i) order.push_back({Pass::Forward, i, 0});
      for (int i = 0; i < m; ++i) order.push_back({Pass::Backward, i, 0});
      break;
    case PipelineSchedule::Kind::OneFOneB: {
      const int warmup = std::min(p - s - 1, m);
      for (int i = 0; i < warmup; ++i) order.push_back({Pass::Forward, i, 0});
      for (int j = 0; warmup + j < m; ++j) {
        order.push_back({Pass::Forward, warmup + j, 0});
        order.push_back({Pass::Backward, j, 0});
      }
      for (int j = m - warmup; j < m; ++j) order.push_back({Pass::Backward, j, 0});
      break;
    }
    case PipelineSchedule::Kind::Interleaved: {
      const int total = m * v;
      const int warmup = std::min(2 * (p - s - 1) + (v - 1) * p, total);
      for (int j = 0; j < warmup; ++j) order.push_back(interleaved_step(Pass::Forward, j, p, v));
      for (int j = 0; warmup + j < total; ++j) {
        order.push_back(interleaved_step(Pass::Forward, warmup + j, p, v));
        order.push_back(interleaved_step(Pass::Backward, j, p, v));
      }
      for (int j = total - warmup; j < total; ++j)
        order.push_back(interleaved_step(Pass::Backward, j, p, v));
      break;
    }
  }
  return order;
}

void check_stage(int stage, int stages) {
  if (stage < 0 || stage >= stages)
    throw std::invalid_argument("pipeline: stage " + std::to_string(stage) + " of " +
                                std::to_string(stages));
}

}  // namespace

std::vector<Step> stage_order(int stage, int stages, int micro_batches,
                              const PipelineSchedule& schedule) {
  check_arguments(stages, micro_batches, schedule);
  check_stage(stage, stages);
  return order_of(stage, stages, micro_batches, schedule);
}

std::vector<std::vector<Step>> stage_orders(int stages, int micro_batches,
                                            const PipelineSchedule& schedule) {
  check_arguments(stages, micro_batches, schedule);
  std::vector<std::vector<Step>> orders;
  orders.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) orders.push_back(order_of(s, stages, micro_batches, schedule));
  return orders;
}

int peak_in_flight(std::span<const Step> order) {
  int held = 0, peak = 0;
  for (const Step& step : order) {
    held += step.pass == Pass::Forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

int peak_in_flight(int stage, int stages, int micro_batches, const PipelineSchedule& schedule) {
  return peak_in_flight(stage_order(stage, stages, micro_batches, schedule));
}

double PipelineTiming::bubble_fraction() const {
  if (makespan <= 0 || bubble.empty()) return 0;
  double idle = 0;
  for (double b : bubble) idle += b;
  return idle / (static_cast<double>(bubble.size()) * makespan);
}

PipelineTiming pipeline_makespan(int stages, int micro_batches, const PipelineSchedule& schedule,
                                 std::span<const StageTimes> times, double p2p) {
  const auto orders = stage_orders(stages, micro_batches, schedule);
  const int p = stages, m = micro_batches, v = virtual_stages_of(schedule);
  const int vp = p * v;
  if (times.size() != static_cast<std::size_t>(p) && times.size() != static_cast<std::size_t>(vp))
    throw std::invalid_argument("pipeline: " + std::to_string(times.size()) + " stage times for " +
                                std::to_string(p) + " stages (give " + std::to_string(p) +
                                (v > 1 ? " or one per virtual stage, " + std::to_string(vp) : "") +
                                ")");
  for (const auto& t : times)
    if (!std::isfinite(t.forward) || !std::isfinite(t.backward) || t.forward < 0 || t.backward < 0)
      throw std::invalid_argument("pipeline: stage times must be finite and >= 0");
  if (!std::isfinite(p2p) || p2p < 0)
    throw std::invalid_argument("pipeline: p2p time must be finite and >= 0");

  // Per virtual stage k = chunk·p + stage: its forward and backward time per micro-batch.
  auto time_of = [&](int k, Pass pass) {
    const bool per_stage = times.size() == static_cast<std::size_t>(p);
    const StageTimes& t = times[static_cast<std::size_t>(per_stage ? k % p : k)];
    const double full = pass == Pass::Forward ? t.forward : t.backward;
    return per_stage ? full / v : full;
  };
  // End time of each (virtual stage, micro-batch) forward and backward; < 0 while not run.
  const auto cells = static_cast<std::size_t>(vp) * static_cast<std::size_t>(m);
  std::vector<double> forward_end(cells, -1), backward_end(cells, -1);
  auto cell = [m](int k, int i) {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(m) + static_cast<std::size_t>(i);
  };

  PipelineTiming timing;
  timing.busy.assign(static_cast<std::size_t>(p), 0);
  timing.bubble.assign(static_cast<std::size_t>(p), 0);
  timing.start.resize(static_cast<std::size_t>(p));
  timing.end.resize(static_cast<std::size_t>(p));
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0);
  for (int s = 0; s < p; ++s) {
    timing.start[static_cast<std::size_t>(s)].assign(orders[static_cast<std::size_t>(s)].size(), 0);
    timing.end[static_cast<std::size_t>(s)].assign(orders[static_cast<std::size_t>(s)].size(), 0);
  }

  // A worklist of stages that may be able to run their next step: at first every stage, then
  // a stage each time a step it waits on (on its own or a neighbouring stage) has run, so each
  // step is looked at a bounded number of times (not once per stage per sweep).
  std::size_t left = 0;
  for (const auto& o : orders) left += o.size();
  std::vector<int> worklist(static_cast<std::size_t>(p));
  std::vector<char> queued(static_cast<std::size_t>(p), 1);
  for (int s = 0; s < p; ++s) worklist[static_cast<std::size_t>(s)] = p - 1 - s;
  auto wake = [&](int s) {
    if (!queued[static_cast<std::size_t>(s)]) {
      queued[static_cast<std::size_t>(s)] = 1;
      worklist.push_back(s);
    }
  };
  while (!worklist.empty()) {
    const int s = worklist.back();
    worklist.pop_back();
    const auto su = static_cast<std::size_t>(s);
    queued[su] = 0;
    const auto& order = orders[su];
    while (next[su] < order.size()) {
      const Step& step = order[next[su]];
      const int k = step.chunk * p + s;
      double dep = 0;  // when the step's input is on this stage; < 0: not yet computed
      auto from = [&](double end, int other) {
        return end < 0 ? -1.0 : end + (other % p == s ? 0.0 : p2p);
      };
      if (step.pass == Pass::Forward) {
        if (k > 0) dep = from(forward_end[cell(k - 1, step.micro_batch)], k - 1);
      } else if (k + 1 < vp) {
        dep = from(backward_end[cell(k + 1, step.micro_batch)], k + 1);
      } else {
        dep = from(forward_end[cell(k, step.micro_batch)], k);
      }
      if (dep < 0) break;  // waits on another stage, which wakes this one
      const double begin = std::max(free_at[su], dep);
      const double d = time_of(k, step.pass);
      const double finish = begin + d;
      timing.start[su][next[su]] = begin;
      timing.end[su][next[su]] = finish;
      timing.busy[su] += d;
      free_at[su] = finish;
      (step.pass == Pass::Forward ? forward_end : backward_end)[cell(k, step.micro_batch)] = finish;
      ++next[su];
      --left;
      // The one step on another stage that may wait on this one.
      if (step.pass == Pass::Forward && k + 1 < vp) wake((k + 1) % p);
      if (step.pass == Pass::Backward && k > 0) wake((k - 1) % p);
    }
  }
  // Every order of stage_orders is deadlock-free; this guards the evaluation itself.
  if (left > 0)
    throw std::logic_error("pipeline: the schedule's orders wait on each other (deadlock)");
  for (double f : free_at) timing.makespan = std::max(timing.makespan, f);
  for (int s = 0; s < p; ++s)
    timing.bubble[static_cast<std::size_t>(s)] =
        timing.makespan - timing.busy[static_cast<std::size_t>(s)];
  return timing;
}

namespace {

std::string percent(double fraction) {
  const double pct = 100 * fraction;
  char buf[32];
  std::snprintf(buf, sizeof buf, pct > 0 && pct < 9.95 ? "%.1f %%" : "%.0f %%", pct);
  return buf;
}

std::string describe_timing(int stages, int micro_batches, const PipelineSchedule& schedule,
                            const PipelineTiming& timing) {
  const int held = peak_in_flight(0, stages, micro_batches, schedule);
  std::string s = display_name(schedule) + ", " + std::to_string(stages) +
                  (stages == 1 ? " stage x " : " stages x ") + std::to_string(micro_batches) +
                  (micro_batches == 1 ? " micro-batch" : " micro-batches") + ": stage 0 holds ";
  if (schedule.kind == PipelineSchedule::Kind::Interleaved) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%d chunk passes (%.3g micro-batches)", held,
                  static_cast<double>(held) / schedule.virtual_stages);
    s += buf;
  } else {
    s += std::to_string(held);
  }
  return s + " in flight, bubble " + percent(timing.bubble_fraction());
}

}  // namespace

std::string describe(int stages, int micro_batches, const PipelineSchedule& schedule) {
  const std::vector<StageTimes> equal(static_cast<std::size_t>(std::max(stages, 1)),
                                      StageTimes{1, 2});
  return describe_timing(stages, micro_batches, schedule,
                         pipeline_makespan(stages, micro_batches, schedule, equal));
}

std::string describe(int stages, int micro_batches, const PipelineSchedule& schedule,
                     std::span<const StageTimes> times, double p2p) {
  return describe_timing(stages, micro_batches, schedule,
                         pipeline_makespan(stages, micro_batches, schedule, times, p2p));
}

}  // namespace cephalo::pipeline

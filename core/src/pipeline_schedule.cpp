#include "cephalo/core/pipeline_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <queue>
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

int deferred_wgrad_micro_batches(bool defer, int limit, int stages, int micro_batches) {
  if (limit < 0)
    throw std::invalid_argument("pipeline: wgrad deferral limit " + std::to_string(limit) +
                                " (need >= 0)");
  if (!defer || stages < 2 || micro_batches < 1) return 0;
  return limit == 0 ? micro_batches : std::min(limit, micro_batches);
}

double PipelineTiming::bubble_fraction() const {
  if (makespan <= 0 || bubble.empty()) return 0;
  double idle = 0;
  for (double b : bubble) idle += b;
  return idle / (static_cast<double>(bubble.size()) * makespan);
}

PipelineTiming pipeline_makespan(int stages, int micro_batches, const PipelineSchedule& schedule,
                                 std::span<const StageTimes> times, double p2p) {
  if (!std::isfinite(p2p) || p2p < 0)
    throw std::invalid_argument("pipeline: p2p time must be finite and >= 0");
  const int boundaries = std::max(0, stages * virtual_stages_of(schedule) - 1);
  const std::vector<Transfer> transfers(static_cast<std::size_t>(boundaries), Transfer{p2p, {}, 0});
  return pipeline_makespan(stages, micro_batches, schedule, times, transfers);
}

PipelineTiming pipeline_makespan(int stages, int micro_batches, const PipelineSchedule& schedule,
                                 std::span<const StageTimes> times,
                                 std::span<const Transfer> transfers) {
  const auto orders = stage_orders(stages, micro_batches, schedule);
  const int p = stages, m = micro_batches, v = virtual_stages_of(schedule);
  const int vp = p * v;
  if (times.size() != static_cast<std::size_t>(p) && times.size() != static_cast<std::size_t>(vp))
    throw std::invalid_argument("pipeline: " + std::to_string(times.size()) + " stage times for " +
                                std::to_string(p) + " stages (give " + std::to_string(p) +
                                (v > 1 ? " or one per virtual stage, " + std::to_string(vp) : "") +
                                ")");
  for (const auto& t : times) {
    if (!std::isfinite(t.forward) || !std::isfinite(t.backward) || t.forward < 0 ||
        t.backward < 0 || !std::isfinite(t.first_forward_end) || t.first_forward_end < 0 ||
        !std::isfinite(t.deferred_wgrad) || t.deferred_wgrad < 0)
      throw std::invalid_argument("pipeline: stage times must be finite and >= 0");
    if (t.deferred_micro_batches < 0 || t.deferred_micro_batches > m)
      throw std::invalid_argument("pipeline: " + std::to_string(t.deferred_micro_batches) +
                                  " deferred micro-batches of " + std::to_string(m));
    if (t.deferred_micro_batches > 0 && t.deferred_wgrad > t.backward)
      throw std::invalid_argument("pipeline: deferred work above the backward it leaves");
    if (t.deferred_micro_batches > 0 && v > 1 && times.size() == static_cast<std::size_t>(p))
      throw std::invalid_argument(
          "pipeline: deferred work needs one entry per virtual stage when interleaved");
  }
  if (transfers.size() != static_cast<std::size_t>(vp - 1))
    throw std::invalid_argument("pipeline: " + std::to_string(transfers.size()) +
                                " transfers for " + std::to_string(vp - 1) +
                                " boundaries between virtual stages");
  std::size_t links = 0;
  for (const auto& x : transfers) {
    if (!std::isfinite(x.seconds) || x.seconds < 0 || !std::isfinite(x.after) || x.after < 0)
      throw std::invalid_argument("pipeline: p2p time must be finite and >= 0");
    for (int l : x.links) {
      if (l < 0) throw std::invalid_argument("pipeline: a transfer's link must be >= 0");
      links = std::max(links, static_cast<std::size_t>(l) + 1);
    }
  }

  // Per virtual stage k = chunk·p + stage: its forward and backward time per micro-batch.
  // A deferred micro-batch's backward leaves its deferred work to the stage's flush.
  auto time_of = [&](int k, Pass pass, int micro_batch) {
    const bool per_stage = times.size() == static_cast<std::size_t>(p);
    const StageTimes& t = times[static_cast<std::size_t>(per_stage ? k % p : k)];
    double full = pass == Pass::Forward ? t.forward : t.backward;
    if (pass == Pass::Backward && micro_batch < t.deferred_micro_batches) full -= t.deferred_wgrad;
    return per_stage ? full / v : full;
  };
  // The floor on virtual stage k's first forward: its own entry's, or with one entry per stage
  // that stage's for chunk 0.
  auto floor_of = [&](int k) {
    if (times.size() == static_cast<std::size_t>(vp))
      return times[static_cast<std::size_t>(k)].first_forward_end;
    return k < p ? times[static_cast<std::size_t>(k)].first_forward_end : 0.0;
  };
  // When each (virtual stage, micro-batch) forward's and backward's input is on its stage;
  // < 0 while it is not. The first virtual stage reads the data.
  const auto cells = static_cast<std::size_t>(vp) * static_cast<std::size_t>(m);
  std::vector<double> forward_in(cells, -1), backward_in(cells, -1);
  auto cell = [m](int k, int i) {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(m) + static_cast<std::size_t>(i);
  };
  for (int i = 0; i < m; ++i) forward_in[cell(0, i)] = 0;

  PipelineTiming timing;
  timing.busy.assign(static_cast<std::size_t>(p), 0);
  timing.bubble.assign(static_cast<std::size_t>(p), 0);
  timing.start.resize(static_cast<std::size_t>(p));
  timing.end.resize(static_cast<std::size_t>(p));
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0);
  std::vector<char> running(static_cast<std::size_t>(p), 0);
  std::vector<double> link_free(links, 0);
  for (int s = 0; s < p; ++s) {
    timing.start[static_cast<std::size_t>(s)].assign(orders[static_cast<std::size_t>(s)].size(), 0);
    timing.end[static_cast<std::size_t>(s)].assign(orders[static_cast<std::size_t>(s)].size(), 0);
  }

  // Events in time order (ties in the order they were made): a stage's step ends, or an input
  // arrives at a stage. Taken in time order, transfers take their links first come, first
  // served: a link carries one transfer at a time.
  struct Event {
    double time;
    std::uint64_t seq;
    int stage;       // the stage whose step ends, or which the input arrives at
    std::size_t in;  // an arrival: its cell
    bool backward;   // an arrival: of a backward's input
    bool step_ends;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::uint64_t seq = 0;
  std::size_t left = 0;
  for (const auto& o : orders) left += o.size();

  auto try_start = [&](int s) {
    const auto su = static_cast<std::size_t>(s);
    if (running[su] || next[su] >= orders[su].size()) return;
    const Step& step = orders[su][next[su]];
    const int k = step.chunk * p + s;
    const double in =
        (step.pass == Pass::Forward ? forward_in : backward_in)[cell(k, step.micro_batch)];
    if (in < 0) return;  // its input arrives later, which tries again
    const double begin = std::max(free_at[su], in);
    const double d = time_of(k, step.pass, step.micro_batch);
    double end = begin + d;
    if (step.pass == Pass::Forward && step.micro_batch == 0) end = std::max(end, floor_of(k));
    timing.start[su][next[su]] = begin;
    timing.end[su][next[su]] = end;
    timing.busy[su] += d;
    running[su] = 1;
    events.push({end, seq++, s, 0, false, true});
  };
  // The input a finished step makes for virtual stage `to`: on the same stage at once, on
  // another after the boundary's transfer, which starts when all its links are free.
  auto deliver = [&](double at, int from, int to, bool backward, int micro_batch) {
    const std::size_t c = cell(to, micro_batch);
    if (from % p == to % p) {
      (backward ? backward_in : forward_in)[c] = at;
      try_start(to % p);
      return;
    }
    const Transfer& x = transfers[static_cast<std::size_t>(std::min(from, to))];
    double begin = at;
    for (int l : x.links) begin = std::max(begin, link_free[static_cast<std::size_t>(l)]);
    const double released = begin + x.seconds;
    for (int l : x.links) link_free[static_cast<std::size_t>(l)] = released;
    events.push({released + x.after, seq++, to % p, c, backward, false});
  };

  for (int s = p - 1; s >= 0; --s) try_start(s);
  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    const auto su = static_cast<std::size_t>(e.stage);
    if (!e.step_ends) {
      (e.backward ? backward_in : forward_in)[e.in] = e.time;
      try_start(e.stage);
      continue;
    }
    const Step& step = orders[su][next[su]];
    const int k = step.chunk * p + e.stage;
    free_at[su] = e.time;
    running[su] = 0;
    ++next[su];
    --left;
    if (step.pass == Pass::Forward) {
      if (k + 1 < vp)
        deliver(e.time, k, k + 1, false, step.micro_batch);
      else
        deliver(e.time, k, k, true, step.micro_batch);  // the loss: its backward may start
    } else if (k > 0) {
      deliver(e.time, k, k - 1, true, step.micro_batch);
    }
    try_start(e.stage);
  }
  // Every order of stage_orders is deadlock-free; this guards the evaluation itself.
  if (left > 0)
    throw std::logic_error("pipeline: the schedule's orders wait on each other (deadlock)");
  // Each stage's deferred work after its last step (the flush), its virtual stages' in order.
  timing.finish = free_at;
  for (std::size_t k = 0; k < times.size(); ++k) {
    const StageTimes& t = times[k];
    const double flush = t.deferred_micro_batches * t.deferred_wgrad;
    timing.finish[k % static_cast<std::size_t>(p)] += flush;
    timing.busy[k % static_cast<std::size_t>(p)] += flush;
  }
  for (double f : timing.finish) timing.makespan = std::max(timing.makespan, f);
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

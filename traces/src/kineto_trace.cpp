// Reading and classifying a PyTorch profiler trace (kineto_trace.hpp).
#include "cephalo/traces/kineto_trace.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::traces {

// Named, not anonymous: the library compiles as unity files.
namespace kineto_reader {

enum class Cat { CpuRange, Launch, Kernel, Known, Unknown };

// Kineto's categories (and the older spellings of kineto 2021); the legacy profiler writes
// none, and an uncategorised complete event is read as a CPU range in either form. Known ones
// that carry no time of their own (flows, GPU-side copies of annotations, the profiler's own
// span) are read past.
Cat category_of(const std::string& cat) {
  if (cat.empty()) return Cat::CpuRange;
  static const char* cpu[] = {"cpu_op", "user_annotation", "python_function", "Operator"};
  static const char* launch[] = {"cuda_runtime", "cuda_driver", "Runtime"};
  static const char* kernel[] = {"kernel",     "Kernel", "gpu_memcpy",
                                 "gpu_memset", "Memcpy", "Memset"};
  static const char* known[] = {"ac2g",
                                "fwdbwd",
                                "gpu_user_annotation",
                                "Trace",
                                "cpu_instant_event",
                                "overhead",
                                "cuda_profiler_range"};
  for (const char* c : cpu)
    if (cat == c) return Cat::CpuRange;
  for (const char* c : launch)
    if (cat == c) return Cat::Launch;
  for (const char* c : kernel)
    if (cat == c) return Cat::Kernel;
  for (const char* c : known)
    if (cat == c) return Cat::Known;
  return Cat::Unknown;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

constexpr int kNone = -1;
constexpr int kForward = static_cast<int>(TraceClass::Forward);
constexpr int kBackward = static_cast<int>(TraceClass::Backward);
constexpr int kOptimizer = static_cast<int>(TraceClass::Optimizer);
constexpr int kCollective = static_cast<int>(TraceClass::Collective);

// The class a range's own name gives it (the conventions torch and its users annotate with:
// torch.optim's "Optimizer.step#AdamW.step", the autograd engine's "autograd::engine::
// evaluate_function: ...", c10d's "nccl:all_reduce", DDP's "DistributedDataParallel.forward",
// record_function names such as "## forward ##", nn.Module ranges of with_modules).
int class_of_name(const std::string& name) {
  const std::string n = lower(name);
  if (starts(n, "profilerstep#")) return kNone;
  if (starts(n, "nccl:") || starts(n, "c10d::") || starts(n, "gloo:") || n == "record_param_comms")
    return kCollective;
  if (starts(n, "optimizer.") || has(n, "optimizer")) return kOptimizer;
  if (starts(n, "autograd::engine::evaluate_function") || has(n, "backward")) return kBackward;
  if (has(n, "forward") || starts(n, "nn.module:")) return kForward;
  return kNone;
}

// Innermost wins, except that a forward range inside a backward or optimizer range stays in
// its parent's class (a checkpointed layer's recompute runs its modules' forwards inside the
// backward) and a collective inside anything is a collective.
int combine(int parent, int own) {
  if (own == kNone) return parent;
  if (own == kForward && (parent == kBackward || parent == kOptimizer)) return parent;
  return own;
}

std::string collective_kind(const std::string& name) {
  const std::string n = lower(name);
  if (has(n, "reducescatter") || has(n, "reduce_scatter")) return "reduce-scatter";
  if (has(n, "allgather") || has(n, "all_gather")) return "all-gather";
  if (has(n, "allreduce") || has(n, "all_reduce")) return "all-reduce";
  if (has(n, "alltoall") || has(n, "all_to_all")) return "all-to-all";
  if (has(n, "broadcast")) return "broadcast";
  if (has(n, "sendrecv") || has(n, "send") || has(n, "recv")) return "send-recv";
  if (has(n, "reduce")) return "reduce";
  return "other";
}

struct Event {
  std::size_t index = 0;  // in traceEvents, for messages
  Cat cat = Cat::CpuRange;
  std::string category, name;
  double ts = 0, end = 0;  // seconds from the first event
  std::string thread;      // pid/tid
  std::int64_t correlation = -1;
  int device = -1;
  int parent = -1;
  int cls = kNone;  // effective class
  bool nccl = false;
};

using Interval = std::pair<double, double>;

std::string where(std::size_t i) { return "$.traceEvents[" + std::to_string(i) + "]"; }

std::string id_text(const Json& v) {
  return v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : brief(v);
}

class Reader {
 public:
  Reader(const Json& root, KinetoTrace& out) : root_(root), t_(out) {}

  void run() {
    const Json* events = nullptr;
    if (root_.is_array()) {
      t_.format = "legacy";
      events = &root_;
    } else if (root_.is_object() && root_.contains("traceEvents")) {
      t_.format = "kineto";
      events = &root_["traceEvents"];
      if (!events->is_array())
        throw ValidationError(t_.file, "$.traceEvents", brief(*events), "an array of events");
      read_header();
    } else {
      throw ValidationError(t_.file, "$", brief(root_),
                            "a PyTorch profiler trace: an object with \"traceEvents\" "
                            "(torch.profiler's export_chrome_trace) or an array of events");
    }
    read_events(*events);
    if (t_.events == 0)
      throw ValidationError(t_.file, t_.format == "legacy" ? "$" : "$.traceEvents", "no events",
                            "a trace of at least one training step (complete \"X\" events)");
    nest();
    steps();
  }

 private:
  const Json& root_;
  KinetoTrace& t_;
  std::vector<Event> ev_;
  std::map<std::int64_t, int> launch_of_;  // correlation -> launch event
  int begin_end_ = 0;

  void read_header() {
    if (root_.contains("deviceProperties") && root_["deviceProperties"].is_array()) {
      const Json& d = root_["deviceProperties"];
      for (std::size_t i = 0; i < d.size(); ++i) {
        JsonReader r(d[i], t_.file, "$.deviceProperties[" + std::to_string(i) + "]");
        if (!r.is_object()) r.fail("an object describing one GPU");
        TraceDevice dev;
        dev.id = static_cast<int>(r.integer_or("id", static_cast<std::int64_t>(i), 0, 1 << 20));
        dev.name = r.string_or("name", "");
        dev.memory_bytes = r.number_or("totalGlobalMem", 0);
        dev.compute_major = static_cast<int>(r.integer_or("computeMajor", 0, 0, 1000));
        dev.compute_minor = static_cast<int>(r.integer_or("computeMinor", 0, 0, 1000));
        dev.sm_count = static_cast<int>(r.integer_or("numSms", 0, 0, 1 << 20));
        t_.devices.push_back(dev);
      }
    }
    if (root_.contains("distributedInfo") && root_["distributedInfo"].is_object()) {
      JsonReader r(root_["distributedInfo"], t_.file, "$.distributedInfo");
      if (r.has("rank")) t_.rank = static_cast<int>(r.integer("rank", 0, 1 << 20));
      if (r.has("world_size"))
        t_.world_size = static_cast<int>(r.integer("world_size", 1, 1 << 20));
      t_.distributed_backend = r.string_or("backend", "");
    }
  }

  static double time_of(const Json& e, const char* key, const std::string& path,
                        const std::string& file) {
    const auto it = e.find(key);
    if (it == e.end() || !it->is_number())
      throw ValidationError(file, path + "." + key, it == e.end() ? "missing" : brief(*it),
                            "a number of microseconds");
    const double v = it->get<double>();
    if (!std::isfinite(v))
      throw ValidationError(file, path + "." + key, brief(*it), "a finite number");
    return v;
  }

  // A profiler trace covers a few steps: seconds, minutes at most. An event a day or more from
  // the others (a duration of 1e308 us, a start at -1e18 us) is no time the profiler measured:
  // read, it would make a step's class last 1e302 s, or put every time on a grid as coarse as
  // the outlier's floating-point spacing (128 us at 1e18). Refused, naming the event farther
  // from the trace's median start.
  void check_span(double origin) const {
    constexpr double kMaxSpanUs = 86400e6;  // one day
    if (ev_.empty()) return;
    const auto last = std::max_element(
        ev_.begin(), ev_.end(), [](const Event& a, const Event& b) { return a.end < b.end; });
    if (last->end - origin <= kMaxSpanUs) return;
    const auto first = std::min_element(ev_.begin(), ev_.end(),
                                        [](const Event& a, const Event& b) { return a.ts < b.ts; });
    std::vector<double> starts;
    starts.reserve(ev_.size());
    for (const Event& ev : ev_) starts.push_back(ev.ts);
    std::nth_element(starts.begin(), starts.begin() + starts.size() / 2, starts.end());
    const double median = starts[starts.size() / 2];
    const bool late = last->end - median >= median - first->ts;
    const Event& odd = late ? *last : *first;
    throw ValidationError(
        t_.file, where(odd.index) + (late ? ".dur" : ".ts"),
        late ? shortest(odd.end - odd.ts) + " us (ending " + shortest((odd.end - median) * 1e-6) +
                   " s after the trace's median event starts)"
             : shortest(odd.ts) + " us (" + shortest((median - odd.ts) * 1e-6) +
                   " s before the trace's median event)",
        "events within a day of each other: a profiler trace covers a few steps, and the "
        "trace's events span " +
            shortest((last->end - origin) * 1e-6) + " s");
  }

  void read_events(const Json& events) {
    double origin = INFINITY;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Json& e = events[i];
      const std::string path = where(i);
      if (!e.is_object()) throw ValidationError(t_.file, path, brief(e), "an event object");
      const auto ph = e.find("ph");
      if (ph == e.end() || !ph->is_string())
        throw ValidationError(t_.file, path + ".ph", ph == e.end() ? "missing" : brief(*ph),
                              "the event's phase, a string such as \"X\"");
      const std::string phase = ph->get<std::string>();
      if (phase == "B" || phase == "E") ++begin_end_;
      if (phase != "X") continue;  // metadata, flows, instants, counters: no duration
      const auto name = e.find("name");
      if (name == e.end() || !name->is_string())
        throw ValidationError(t_.file, path + ".name", name == e.end() ? "missing" : brief(*name),
                              "the event's name, a string");
      Event ev;
      ev.index = i;
      const auto cat = e.find("cat");
      if (cat != e.end() && !cat->is_string())
        throw ValidationError(t_.file, path + ".cat", brief(*cat), "a category string");
      ev.category = cat == e.end() ? "" : cat->get<std::string>();
      ev.cat = category_of(ev.category);
      ++t_.events;
      if (ev.cat == Cat::Unknown) {
        ++t_.unknown_categories[clip(ev.category, 60)];
        continue;
      }
      if (ev.cat == Cat::Known) continue;
      ev.name = name->get<std::string>();
      ev.ts = time_of(e, "ts", path, t_.file);
      const double dur = time_of(e, "dur", path, t_.file);
      if (dur < 0)
        throw ValidationError(t_.file, path + ".dur", shortest(dur),
                              "a duration >= 0 (timestamps out of order: the event would end "
                              "before it starts)");
      ev.end = ev.ts + dur;
      ev.thread = (e.contains("pid") ? id_text(e["pid"]) : "?") + "/" +
                  (e.contains("tid") ? id_text(e["tid"]) : "?");
      if (const auto a = e.find("args"); a != e.end() && a->is_object()) {
        if (const auto c = a->find("correlation"); c != a->end() && c->is_number_integer())
          ev.correlation = c->get<std::int64_t>();
        if (const auto d = a->find("device"); d != a->end() && d->is_number_integer())
          ev.device =
              static_cast<int>(std::clamp<std::int64_t>(d->get<std::int64_t>(), -1, 1 << 20));
      }
      origin = std::min(origin, ev.ts);
      ev_.push_back(std::move(ev));
    }
    check_span(origin);
    for (auto& ev : ev_) {
      ev.ts = (ev.ts - origin) * 1e-6;
      ev.end = (ev.end - origin) * 1e-6;
      if (ev.cat == Cat::CpuRange) ++t_.cpu_ranges;
      if (ev.cat == Cat::Kernel) {
        ++t_.kernels;
        ev.nccl = has(lower(ev.name), "nccl");
        t_.nccl_kernels += ev.nccl;
        if (ev.device >= 0) t_.kernel_devices.insert(ev.device);
      }
      if (ev.cat == Cat::Launch && ev.correlation >= 0)
        launch_of_.emplace(ev.correlation, static_cast<int>(&ev - ev_.data()));
    }
    t_.times_from_kernels = t_.kernels > 0;
    for (const auto& [cat, n] : t_.unknown_categories)
      t_.notes.push_back(std::to_string(n) + " events of the unknown category \"" + cat +
                         "\" ignored");
    if (begin_end_ > 0)
      t_.notes.push_back(std::to_string(begin_end_) +
                         " begin/end (\"B\"/\"E\") events ignored: torch.profiler writes "
                         "complete (\"X\") events");
  }

  // Per thread, each CPU range's and launch's parent (the innermost range enclosing it) and
  // its effective class.
  void nest() {
    std::map<std::string, std::vector<int>> threads;
    for (int i = 0; i < static_cast<int>(ev_.size()); ++i)
      if (ev_[i].cat == Cat::CpuRange || ev_[i].cat == Cat::Launch)
        threads[ev_[i].thread].push_back(i);
    for (auto& [thread, ids] : threads) {
      std::stable_sort(ids.begin(), ids.end(), [&](int x, int y) {
        if (ev_[x].ts != ev_[y].ts) return ev_[x].ts < ev_[y].ts;
        return ev_[x].end > ev_[y].end;
      });
      std::vector<int> stack;
      for (int i : ids) {
        Event& e = ev_[i];
        while (!stack.empty() && ev_[stack.back()].end <= e.ts) stack.pop_back();
        if (!stack.empty()) {
          Event& p = ev_[stack.back()];
          if (e.end > p.end + kTraceNestingSlackS)
            throw ValidationError(t_.file, where(e.index),
                                  "\"" + clip(e.name, 80) + "\" [" + fixed(e.ts * 1e6, 3) + ", " +
                                      fixed(e.end * 1e6, 3) + "] us, inside \"" + clip(p.name, 80) +
                                      "\" (" + where(p.index) + ", [" + fixed(p.ts * 1e6, 3) +
                                      ", " + fixed(p.end * 1e6, 3) + "] us) on thread " +
                                      clip(thread, 60) + " but ending after it",
                                  "ranges of one thread that nest (timestamps out of order)");
          e.end = std::min(e.end, p.end);
          e.parent = stack.back();
        }
        const int parent_cls = e.parent >= 0 ? ev_[e.parent].cls : kNone;
        e.cls = combine(parent_cls, e.cat == Cat::CpuRange ? class_of_name(e.name) : kNone);
        stack.push_back(i);
      }
    }
  }

  bool is_step_marker(const Event& e) const {
    return e.cat == Cat::CpuRange && starts(e.name, "ProfilerStep#");
  }

  void steps() {
    std::vector<int> markers;
    for (int i = 0; i < static_cast<int>(ev_.size()); ++i)
      if (is_step_marker(ev_[i])) markers.push_back(i);
    std::sort(markers.begin(), markers.end(), [&](int x, int y) { return ev_[x].ts < ev_[y].ts; });
    std::set<std::int64_t> seen;
    for (int i : markers) {
      const Event& e = ev_[i];
      TraceStep s;
      s.name = e.name;
      const std::string digits = e.name.substr(13);
      if (digits.empty() || digits.size() > 15 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c); }))
        throw ValidationError(t_.file, where(e.index) + ".name", "\"" + clip(e.name) + "\"",
                              "ProfilerStep#N with N a step number");
      s.number = std::stoll(digits);
      if (!seen.insert(s.number).second) continue;  // the same step as cpu_op and annotation
      s.start_s = e.ts;
      s.duration_s = e.end - e.ts;
      if (!t_.steps.empty()) {
        const TraceStep& prev = t_.steps.back();
        if (s.number <= prev.number ||
            s.start_s < prev.start_s + prev.duration_s - kTraceNestingSlackS)
          throw ValidationError(
              t_.file, where(e.index),
              "\"" + clip(e.name) + "\" starting at " + fixed(s.start_s * 1e6, 3) + " us after \"" +
                  prev.name + "\" (" + fixed(prev.start_s * 1e6, 3) + " .. " +
                  fixed((prev.start_s + prev.duration_s) * 1e6, 3) + " us)",
              "steps in order: each ProfilerStep#N after the previous one ends, N increasing "
              "(timestamps out of order)");
      }
      t_.steps.push_back(s);
    }
    if (t_.steps.empty()) {
      TraceStep s;
      s.name = "whole trace";
      double a = INFINITY, b = -INFINITY;
      for (const auto& e : ev_) a = std::min(a, e.ts), b = std::max(b, e.end);
      s.start_s = a;
      s.duration_s = b - a;
      t_.steps.push_back(s);
      t_.notes.push_back(
          "no ProfilerStep#N ranges (torch.profiler's schedule with prof.step() writes them): "
          "the whole trace is read as one step");
    }
    classify_steps();
  }

  // The step whose [start, end) holds t, or -1.
  int step_at(double t) const {
    auto it = std::upper_bound(t_.steps.begin(), t_.steps.end(), t,
                               [](double x, const TraceStep& s) { return x < s.start_s; });
    if (it == t_.steps.begin()) return -1;
    --it;
    return t <= it->start_s + it->duration_s ? static_cast<int>(it - t_.steps.begin()) : -1;
  }

  void add_unclassified(std::map<std::string, UnclassifiedEvents>& u, const Event& e) {
    auto& g = u[e.category.empty() ? "(none)" : e.category];
    g.events += 1;
    g.seconds += e.end - e.ts;
  }

  void classify_steps() {
    const std::size_t n = t_.steps.size();
    std::vector<std::array<std::vector<Interval>, kNumTraceClasses>> by_class(n);
    std::vector<std::vector<Interval>> cpu_classified(n), gpu_busy(n);
    std::vector<std::map<std::string, std::pair<int, std::vector<Interval>>>> coll(n);
    std::map<std::string, UnclassifiedEvents> unclassified;
    bool any_class = false;
    for (const auto& e : ev_) {
      if (e.cat != Cat::CpuRange) continue;
      const int parent_cls = e.parent >= 0 ? ev_[e.parent].cls : kNone;
      if (e.cls == kNone) {
        const bool top = e.parent < 0 || is_step_marker(ev_[e.parent]);
        if (top && !is_step_marker(e)) add_unclassified(unclassified, e);
        continue;
      }
      any_class = true;
      const int s = step_at(e.ts);
      if (e.cls == kForward && s >= 0) {
        if (e.name == "aten::layer_norm") ++t_.steps[s].layer_norms;
        if (parent_cls != kForward) ++t_.steps[s].forward_passes;
      }
      if (parent_cls == e.cls) continue;  // counted with its class root
      // A class root: its whole range, clipped to every step it overlaps.
      // Steps are sorted and disjoint: from the first that ends after the range starts.
      const auto first = std::partition_point(
          t_.steps.begin(), t_.steps.end(),
          [&](const TraceStep& st) { return st.start_s + st.duration_s <= e.ts; });
      for (auto k = static_cast<std::size_t>(first - t_.steps.begin());
           k < n && t_.steps[k].start_s < e.end; ++k) {
        const TraceStep& st = t_.steps[k];
        const double a = std::max(e.ts, st.start_s),
                     b = std::min(e.end, st.start_s + st.duration_s);
        if (b <= a) continue;
        cpu_classified[k].push_back({a, b});
        if (!t_.times_from_kernels) {
          by_class[k][e.cls].push_back({a, b});
          if (e.cls == kCollective) {
            auto& c = coll[k][collective_kind(e.name)];
            c.first += 1;
            c.second.push_back({a, b});
          }
        }
      }
    }
    for (const auto& e : ev_) {
      if (e.cat == Cat::Launch && e.cls == kNone && (e.parent < 0 || is_step_marker(ev_[e.parent])))
        add_unclassified(unclassified, e);
      if (e.cat != Cat::Kernel) continue;
      const auto l = launch_of_.find(e.correlation);
      const Event* launch = l == launch_of_.end() ? nullptr : &ev_[l->second];
      if (!launch) ++t_.kernels_without_launch;
      const int cls = e.nccl ? kCollective : launch ? launch->cls : kNone;
      const int s = step_at(launch ? launch->ts : e.ts);
      if (s >= 0) gpu_busy[s].push_back({e.ts, e.end});
      if (cls == kNone || s < 0) {
        add_unclassified(unclassified, e);
        continue;
      }
      any_class = true;
      by_class[s][cls].push_back({e.ts, e.end});
      if (cls == kCollective) {
        auto& c = coll[s][e.nccl ? collective_kind(e.name) : "other"];
        c.first += 1;
        c.second.push_back({e.ts, e.end});
      }
    }
    if (!any_class) {
      std::string unknown;
      for (const auto& [cat, count] : t_.unknown_categories)
        unknown +=
            (unknown.empty() ? "" : ", ") + clip(cat, 40) + " (" + std::to_string(count) + ")";
      throw ValidationError(
          t_.file, t_.format == "legacy" ? "$" : "$.traceEvents",
          std::to_string(t_.events) +
              " events, none of them forward, backward, optimizer or "
              "collective work" +
              (unknown.empty() ? "" : "; unknown categories: " + unknown),
          "a training step's trace: ranges annotated as torch does (\"## forward ##\" / "
          "record_function names with forward, backward, optimizer; Optimizer.step#...; "
          "autograd::engine::evaluate_function; nccl:...) or NCCL kernels");
    }
    for (std::size_t k = 0; k < n; ++k) {
      TraceStep& st = t_.steps[k];
      for (int c = 0; c < kNumTraceClasses; ++c) st.seconds[c] = union_length_s(by_class[k][c]);
      st.outside_classes_s = std::max(0.0, st.duration_s - union_length_s(cpu_classified[k]));
      st.gpu_busy_s = union_length_s(gpu_busy[k]);
      for (auto& [kind, c] : coll[k])
        st.collectives.push_back({kind, c.first, union_length_s(c.second)});
    }
    for (auto& [cat, u] : unclassified) {
      u.category = cat;
      t_.unclassified.push_back(u);
    }
  }
};

}  // namespace kineto_reader

double union_length_s(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, a = 0, b = -1;
  bool open = false;
  for (const auto& [x, y] : v) {
    if (y <= x) continue;
    if (open && x <= b) {
      b = std::max(b, y);
      continue;
    }
    if (open) total += b - a;
    a = x, b = y, open = true;
  }
  return open ? total + (b - a) : total;
}

std::string to_string(TraceClass c) {
  switch (c) {
    case TraceClass::Forward:
      return "forward";
    case TraceClass::Backward:
      return "backward";
    case TraceClass::Optimizer:
      return "optimizer";
    case TraceClass::Collective:
      return "collectives";
  }
  return "?";
}

const TraceStep& KinetoTrace::step(const std::string& name, const std::string& source,
                                   const std::string& option) const {
  for (const auto& s : steps)
    if (s.name == name || (s.number >= 0 && std::to_string(s.number) == name)) return s;
  std::string have;
  for (const auto& s : steps) have += (have.empty() ? "" : ", ") + s.name;
  throw ValidationError(source, option, "\"" + clip(name) + "\"",
                        "one of the " + std::to_string(steps.size()) + " steps of " + file +
                            " (ProfilerStep#N or N): " + clip(have, 400));
}

const TraceStep& KinetoTrace::median_step() const {
  std::vector<const TraceStep*> v;
  for (const auto& s : steps) v.push_back(&s);
  std::sort(v.begin(), v.end(),
            [](const TraceStep* a, const TraceStep* b) { return a->duration_s < b->duration_s; });
  return *v[(v.size() - 1) / 2];
}

bool looks_like_trace(const std::string& bytes) {
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b)
    return true;
  std::size_t i = bytes.find_first_not_of(" \t\r\n");
  if (i == std::string::npos) return false;
  if (bytes[i] == '[') return true;
  // An object whose text names traceEvents before any RunResult key would: cheap and enough
  // for telling the two apart (a RunResult never has the key).
  return bytes[i] == '{' && bytes.find("\"traceEvents\"") != std::string::npos;
}

bool named_gzip(const std::string& file) {
  if (file.size() < 3) return false;
  const char* end = file.data() + file.size() - 3;
  return end[0] == '.' && std::tolower(static_cast<unsigned char>(end[1])) == 'g' &&
         std::tolower(static_cast<unsigned char>(end[2])) == 'z';
}

KinetoTrace parse_kineto_trace(const std::string& bytes, const std::string& file,
                               std::uint64_t max_bytes) {
  KinetoTrace t;
  t.file = file;
  const bool gz = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
                  static_cast<unsigned char>(bytes[1]) == 0x8b;
  if (named_gzip(file) && !gz)
    throw ValidationError(
        file, "$",
        bytes.empty() ? "an empty file" : "bytes that do not start with gzip's magic 1f 8b",
        "gzip data (the file is named .gz)");
  t.gzip = gz;
  if (!gz && bytes.size() > max_bytes)
    throw ValidationError(file, "$", format_bytes(static_cast<double>(bytes.size())),
                          "a trace of at most " + format_bytes(static_cast<double>(max_bytes)));
  const Json root = parse_json_text(gz ? gunzip(bytes, file, max_bytes) : bytes, file);
  kineto_reader::Reader(root, t).run();
  return t;
}

KinetoTrace load_kineto_trace(const std::filesystem::path& file) {
  return parse_kineto_trace(read_input_file(file), file.string());
}

}  // namespace cephalo::traces

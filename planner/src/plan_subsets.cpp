// Leaving GPUs out: see plan_subsets.hpp and plan_request.hpp (PlanResult::faster_without).
#include "plan_subsets.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/traces/summarize.hpp"

namespace cephalo::planner::detail {

std::vector<NodeClass> node_classes(const Scenario& scenario) {
  std::map<std::string, NodeClass> by_key;
  const auto& nodes = scenario.cluster.nodes;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    std::vector<std::string> types;
    double slowest = std::numeric_limits<double>::infinity();
    for (const DeviceSlot& d : nodes[n].devices) {
      types.push_back(d.spec.name);
      slowest = std::min(slowest, d.spec.peak_flops(scenario.job.precision.compute) / d.slowdown);
    }
    std::sort(types.begin(), types.end());
    types.erase(std::unique(types.begin(), types.end()), types.end());
    std::string key;
    for (const auto& t : types) key += (key.empty() ? "" : "+") + t;
    NodeClass& c = by_key[key];
    c.gpus = key;
    c.peak_flops = slowest;
    c.nodes.push_back(static_cast<int>(n));
  }
  std::vector<NodeClass> out;
  for (auto& [key, c] : by_key) out.push_back(std::move(c));
  std::stable_sort(out.begin(), out.end(), [](const NodeClass& a, const NodeClass& b) {
    return a.peak_flops > b.peak_flops;
  });
  return out;
}

double answer_iteration_s(const PlanResult& r) {
  if (!r.fits() || r.simulated_oom) return std::numeric_limits<double>::infinity();
  return r.simulated_iteration_s.value_or(r.predicted_iteration_s);
}

namespace {

std::string gpus_of(const Scenario& s, const std::vector<int>& nodes) {
  std::vector<const Node*> of;
  for (int n : nodes) of.push_back(&s.cluster.nodes[static_cast<std::size_t>(n)]);
  return gpu_counts(of);
}

}  // namespace

std::optional<PlanResult> weigh_subsets(
    const Scenario& scenario, const PlanRequest& request, PlanResult& answer,
    double split_estimate_s,
    const std::function<PlanResult(const Scenario&, const PlanRequest&)>& plan) {
  const std::vector<NodeClass> classes = node_classes(scenario);
  if (classes.size() < 2) return {};  // one class: leaving some of it out only loses compute
  const double all_s = answer_iteration_s(answer);
  // A plan of every GPU that does not fit says where memory runs out; fewer GPUs hold less.
  if (!std::isfinite(all_s)) return {};
  PlanRequest q = request;
  q.use_all = true;
  q.options.progress = false;
  // A subset's split is weighed only where the search estimates it below every GPU's best
  // split: the same estimate prices both, and the subset's search stops (without its replays)
  // once its floors show none is. Its splits are the subset's costliest part to plan.
  if (std::isfinite(split_estimate_s)) q.split_ceiling_s = split_estimate_s;
  std::ostringstream log;
  log << "weighed leaving the slowest node classes idle (at most " << kMaxSubsetCandidates
      << " subsets of " << classes.size() << " classes by GPU type):";
  double best_s = all_s;
  const double model_flops =
      traces::model_flops_per_iteration(scenario.job, scenario.job.global_batch);
  std::optional<IdleAdvice> best;
  std::optional<PlanResult> best_answer;
  const int c = static_cast<int>(classes.size());
  for (int keep = c - 1; keep >= std::max(1, c - kMaxSubsetCandidates); --keep) {
    std::vector<int> kept, idle;
    for (int k = 0; k < c; ++k) {
      std::vector<int>& side = k < keep ? kept : idle;
      const std::vector<int>& nodes = classes[static_cast<std::size_t>(k)].nodes;
      side.insert(side.end(), nodes.begin(), nodes.end());
    }
    std::sort(kept.begin(), kept.end());
    std::sort(idle.begin(), idle.end());
    const std::string idle_gpus = gpus_of(scenario, idle);
    log << " without " << idle_gpus << ": ";
    // A bound prunes a candidate before it is planned: no plan runs the model's FLOPs faster
    // than its GPUs' dense peak (MFU <= 100 %), so a subset whose peak time is no better than
    // what it must beat cannot win.
    double peak = 0;
    for (int n : kept)
      for (const DeviceSlot& d : scenario.cluster.nodes[static_cast<std::size_t>(n)].devices)
        peak += d.spec.peak_flops(scenario.job.precision.compute) / d.slowdown;
    const double floor_s = model_flops / peak;
    if (floor_s >= best_s * (1 - kIdleGain)) {
      log << "not planned: at its GPUs' peak the model's FLOPs alone take "
          << format_seconds(floor_s) << ";";
      continue;
    }
    PlanResult sub;
    const Scenario cut = with_nodes(scenario, kept);
    try {
      sub = plan(cut, q);
    } catch (const SplitCeilingReached& e) {
      log << "not planned: " << e.what() << ", every GPU's best split's estimate;";
      continue;
    } catch (const InfeasibleError& e) {
      const std::string what = e.what();  // its first clause: the whole refusal is plan's own
      log << "no plan fits (" << what.substr(0, what.find(';')) << ");";
      continue;
    } catch (const ValidationError& e) {
      log << "not plannable with these options (" << e.what() << ");";
      continue;
    }
    const double t = answer_iteration_s(sub);
    if (t == std::numeric_limits<double>::infinity()) {
      log << "its plan does not fit;";
      continue;
    }
    std::string plan_words = sub.split ? "the split " + sub.split->search.estimate.split
                                       : "an FSDP plan of strategy " + sub.plan.strategy;
    if (!sub.split_ceiling.empty())
      plan_words += "; " + sub.split_ceiling + ", every GPU's best split's estimate";
    log << format_seconds(t) << " (" << plan_words << ");";
    if (t < best_s) {
      best_s = t;
      IdleAdvice a;
      for (int n : idle)
        a.nodes.push_back(scenario.cluster.nodes[static_cast<std::size_t>(n)].name);
      for (const RankDevice& rd : scenario.cluster.ranks())
        if (std::binary_search(idle.begin(), idle.end(), rd.node)) a.ranks.push_back(rd.rank);
      a.gpus = idle_gpus;
      a.used_nodes = cut.cluster.used_nodes;
      a.with_all_s = all_s;
      a.without_s = t;
      a.without_plan = plan_words;
      best = std::move(a);
      best_answer = std::move(sub);
    }
  }
  log << " every GPU: " << format_seconds(all_s);
  answer.subsets = log.str();
  if (!best || best->without_s >= all_s * (1 - kIdleGain)) return {};
  answer.faster_without = std::move(best);
  return best_answer;
}

}  // namespace cephalo::planner::detail

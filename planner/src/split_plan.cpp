// The search's split as a plan, replayed, and the choice between the two families on the
// simulator's scale; see split_plan.hpp.
#include "split_plan.hpp"

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/sim/class_replay.hpp"
#include "cephalo/traces/shard_layout.hpp"

namespace cephalo::planner {
namespace {

std::string oom_text(const traces::IterationReport& r) {
  if (!r.oom_detail) return r.oom ? "out of memory" : "";
  return traces::render_oom_detail(*r.oom_detail);
}

// Across the ranks: the largest share of the iteration a rank spends on the quantity.
template <typename F>
double worst_fraction(const traces::IterationReport& r, F of) {
  double worst = 0;
  if (r.iteration_time_s <= 0) return 0;
  for (const auto& k : r.ranks) worst = std::max(worst, of(k) / r.iteration_time_s);
  return worst;
}

std::string percent(double fraction) { return fixed(100.0 * fraction, 0) + " %"; }

// "bubble 31 %, tensor-parallel 6 %, transfers 2 %": what a split's slowest-waiting rank spends
// its iteration on besides compute.
std::string split_costs(const traces::IterationReport& r) {
  return "bubble " +
         percent(worst_fraction(r, [](const traces::RankReport& k) { return k.bubble_s; })) +
         ", tensor-parallel " +
         percent(worst_fraction(r, [](const traces::RankReport& k) { return k.exposed_tp_s; })) +
         ", transfers " +
         percent(worst_fraction(r, [](const traces::RankReport& k) { return k.exposed_pp_s; }));
}

}  // namespace

namespace {

// A finalist made into its plan and replayed. Only the one kept becomes a PlanResult, which
// holds the whole search (every finalist's estimate, each with per-rank allocations: at 100k
// ranks a copy per finalist cost more than its plan).
struct FinalistReplay {
  Plan plan;
  traces::IterationReport report;
};

// `rank_rows` false: the light replay (sim::SimOptions::rank_rows), its time, rates and
// out-of-memory verdict those of the full one; the report's per-rank rows, which the split's
// costs (split_costs) and text read, are left out.
FinalistReplay replay_finalist(const Scenario& scenario, const SplitCandidate& f,
                               const costmodels::CostModels& models, bool rank_rows) {
  FinalistReplay out;
  out.plan = even_split_plan(scenario, f.split, "<planner>");
  // Replicas balanced by speed: the samples, sub-steps and shares the estimate priced.
  apply_allocation(out.plan, f.estimate.allocation);
  out.plan.strategy = "3d";
  out.plan.activation_checkpointing.kind = f.checkpointing;
  traces::check_plan_for(out.plan, scenario, "<planner>");
  sim::SimOptions options;
  options.rank_rows = rank_rows;
  out.report =
      sim::simulate_plan(out.plan, scenario, *models.compute, *models.comm, options).report;
  return out;
}

// The search's answer with the finalist `f` as its split, and that finalist's replay.
PlanResult finalist_result(const SplitSearchResult& search, const SplitCandidate& f,
                           FinalistReplay replay) {
  PlanResult out;
  SplitDetail& d = out.split.emplace();
  d.search = search;
  d.search.split = f.split;
  d.search.checkpointing = f.checkpointing;
  d.search.replica_batches = f.replica_batches;
  d.search.estimate = f.estimate;
  out.plan = std::move(replay.plan);
  d.report = std::move(replay.report);
  out.predicted_iteration_s = d.report.iteration_time_s;
  out.simulated_iteration_s = d.report.iteration_time_s;
  out.model_iteration_s = f.estimate.iteration_s;
  out.rate = traces::report_throughput(d.report);
  out.simulated_oom = d.report.oom;
  out.simulated_oom_detail = oom_text(d.report);
  return out;
}

// By how many bytes the replay's tightest allocation overshoots its rank's capacity.
double shortfall(const traces::IterationReport& r) {
  return r.oom_detail ? r.oom_detail->bytes - r.oom_detail->capacity_bytes : 0.0;
}

}  // namespace

PlanResult plan_for_split(const Scenario& scenario, const SplitSearchResult& search,
                          const costmodels::CostModels& models) {
  // The estimate is a first-order model and its memory the replay's closed form
  // (costmodels::split_rank_memory_terms), but the replay follows every allocation in time: a
  // split the estimate fits at its margin can still run out there, and among near equals the
  // replay has the last word. So every finalist is replayed and the fastest that fits is kept.
  // Only the one kept needs the per-rank rows: the estimate's best (first) is replayed with
  // them, the others light, and one of those that turns out fastest again with them.
  std::vector<SplitCandidate> own;
  if (search.finalists.empty())
    own.push_back({search.split, search.checkpointing, search.replica_batches, search.estimate});
  const std::vector<SplitCandidate>& candidates = own.empty() ? search.finalists : own;
  // The fastest that fits and, while none fits, the closest to fitting (by its shortfall).
  std::optional<FinalistReplay> best, closest;
  std::size_t best_at = 0, closest_at = 0;
  std::vector<std::string> replays;
  std::vector<std::pair<double, std::string>> fitting;  // (time, split) of those that fit
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const SplitCandidate& f = candidates[i];
    FinalistReplay r = replay_finalist(scenario, f, models, i == 0);
    const double seconds = r.report.iteration_time_s;
    std::ostringstream line;  // with a stage's replicas' samples per micro-batch when they differ
    line << f.estimate.split;
    bool first = true;
    for (const auto& st : f.estimate.stages)
      if (std::adjacent_find(st.replica_micro_batches.begin(), st.replica_micro_batches.end(),
                             std::not_equal_to<>()) != st.replica_micro_batches.end()) {
        line << (first ? "; replica micro-batches " : ", ");
        first = false;
        for (std::size_t j = 0; j < st.replica_micro_batches.size(); ++j)
          line << (j ? "+" : "") << st.replica_micro_batches[j];
      }
    line << ": " << format_seconds(seconds) << (r.report.oom ? " (out of memory)" : "");
    replays.push_back(line.str());
    if (r.report.oom) {
      if (!closest || shortfall(r.report) < shortfall(closest->report)) {
        closest = std::move(r);
        closest_at = i;
      }
    } else {
      fitting.emplace_back(seconds, f.estimate.split);
      if (!best || seconds < best->report.iteration_time_s) {
        best = std::move(r);
        best_at = i;
      }
    }
  }
  if (!best)
    throw InfeasibleError(
        "every split the search ranked runs out of memory in its replay; the closest: " +
        candidates[closest_at].estimate.split + " is short by " +
        format_bytes(shortfall(closest->report)) + " (" + oom_text(closest->report) + ")");
  if (best_at != 0) *best = replay_finalist(scenario, candidates[best_at], models, true);
  PlanResult out = finalist_result(search, candidates[best_at], std::move(*best));
  // The search log `plan --explain` prints: every finalist's replay.
  std::ostringstream note;
  note << "replayed the estimate's best " << replays.size() << " split(s): ";
  for (std::size_t i = 0; i < replays.size(); ++i) note << (i ? "; " : "") << replays[i];
  out.note = note.str();
  out.split->replays = std::move(replays);
  // The runner-up: the fastest finalist that fits and is another split than the one kept
  // (finalists that differ only in their replicas' batches print alike).
  std::sort(fitting.begin(), fitting.end());
  for (const auto& [seconds, split] : fitting) {
    if (split == out.split->search.estimate.split) continue;
    out.runner_up = runner_up_text("the split " + split, seconds, out.predicted_iteration_s);
    break;
  }
  return out;
}

PlanResult plan_split(const Scenario& scenario, const SplitSearchOptions& options,
                      const costmodels::CostModels& models) {
  return plan_for_split(scenario, search_split(scenario, options, models), models);
}

Json split_plan_record(const PlanResult& r, PlanForm form) {
  const SplitDetail& d = *r.split;
  Json j = to_json(r.plan, form);
  // Written even when the search's best is the default split (one stage, T = 1, full), which a
  // plan reads as its FSDP plan: the record says what the search chose.
  j["model_split"] = to_json(d.search.split);
  Json predicted = to_json(d.search);
  predicted["simulated_iteration_s"] = r.predicted_iteration_s;
  predicted["simulated_oom"] = r.simulated_oom;
  traces::add_predicted_throughput(predicted, r.rate);
  predicted["runner_up"] = r.runner_up;
  if (r.simulated_oom) predicted["simulated_oom_detail"] = r.simulated_oom_detail;
  j["predicted"] = std::move(predicted);
  return j;
}

std::string render_split_plan(const PlanResult& r) {
  const SplitDetail& d = *r.split;
  std::ostringstream out;
  out << render_split_search(d.search);
  if (d.replays.size() > 1) {
    out << "replayed the estimate's best " << d.replays.size()
        << " splits, kept the fastest in simulation that fits:\n";
    for (const auto& line : d.replays) out << "  " << line << "\n";
  }
  out << "simulated " << format_seconds(r.predicted_iteration_s) << " ("
      << traces::render_throughput(r.rate) << "; the estimate's "
      << format_seconds(r.model_iteration_s) << "; " << split_costs(d.report) << ")";
  if (r.simulated_oom) out << "; out of memory in the replay: " << r.simulated_oom_detail;
  out << "\n";
  return out.str();
}

FamilyChoice choose_family(const Scenario& scenario, const std::optional<PlanResult>& fsdp_plan,
                           const std::string& fsdp_refusal, const std::optional<PlanResult>& split,
                           const std::string& split_refusal, const costmodels::CostModels& models) {
  if (!fsdp_plan) {
    if (!split) throw InfeasibleError("fsdp: " + fsdp_refusal + "; 3d: " + split_refusal);
    return {false, "fsdp lost: it has no plan here (" + fsdp_refusal + ")"};
  }
  const PlanResult& fsdp = *fsdp_plan;
  const double fsdp_s = fsdp.simulated_iteration_s.value_or(fsdp.predicted_iteration_s);
  const bool fsdp_fits = fsdp.fits() && !fsdp.simulated_oom;
  const bool split_fits = split && !split->simulated_oom;
  FamilyChoice c;
  c.fsdp = fsdp_fits ? !split_fits || fsdp_s <= split->predicted_iteration_s : !split_fits;
  std::ostringstream why;
  if (c.fsdp && split_fits) {
    why << "3d lost: its best split (" << split->split->search.estimate.split
        << ") is simulated at " << format_seconds(split->predicted_iteration_s) << " ("
        << split_costs(split->split->report) << ") against the FSDP plan's "
        << format_seconds(fsdp_s);
  } else if (c.fsdp) {
    why << "3d lost: "
        << (split ? "its best split runs out of memory in the replay (" +
                        split->simulated_oom_detail + ")"
                  : split_refusal);
  } else if (fsdp_fits) {
    // What costs the FSDP plan: the exposed gathers and reductions of the sharded state.
    const traces::IterationReport report =
        sim::simulate_plan(fsdp.plan, scenario, *models.compute, *models.comm).report;
    const double exposed =
        worst_fraction(report, [](const traces::RankReport& k) { return k.exposed_comm_s; });
    why << "fsdp lost: its plan is simulated at " << format_seconds(fsdp_s) << ", up to "
        << percent(exposed) << " of it exposed communication of the sharded state; the best split ("
        << split->split->search.estimate.split << ") is simulated at "
        << format_seconds(split->predicted_iteration_s) << " (" << split_costs(split->split->report)
        << ")";
  } else {
    why << "fsdp lost: its plan does not fit in memory"
        << (fsdp.simulated_oom ? " (" + fsdp.simulated_oom_detail + ")" : std::string());
  }
  c.why = why.str();
  return c;
}

}  // namespace cephalo::planner

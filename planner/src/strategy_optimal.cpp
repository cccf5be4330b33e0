// `optimal`: our exact optimizer (optimal_solver.hpp) on the project's cost models, checked
// and refined on the simulator. Per schedule candidate, four named steps:
//   1. solve_within_simulated_memory  solve the model; if the simulator finds the plan over
//                                     capacity, shrink that device type's budget and re-solve
//   2. replay_staircase               the other (τ, σ) breakpoints of the solver's walk
//   3. replay_phase_weighted          the best phase-weighted solution
//   4. replay_slowest_step            the solution with every share's step at the slowest GPU
// and the schedule that simulates faster wins (planner/README.md explains why each refinement
// exists). The plans keep the `auto` uneven-collective variant: the cost model prices each
// uneven collective both ways and runs the cheaper (costmodels::uneven_variant), in the
// prediction, the replay and the backend alike, so the planner makes no choice of its own.
#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/planner/strategies.hpp"
#include "plan_support.hpp"
#include "replay_outcome.hpp"
#include "strategy_functions.hpp"
#include "strategy_inputs.hpp"

namespace cephalo::planner::detail {
namespace {

// How many staircase breakpoints of the optimal model are replayed on the simulator.
constexpr std::size_t kOptimalCandidates = 8;
// Above this many ranks a schedule candidate whose model optimum is no faster than the best
// replay so far is not replayed. Not a proof: the model prices uneven collectives padded (an
// upper bound), so a pruned schedule's refined plan can replay faster (the quality report's
// llama-7b on 64 GPUs lost 0.5 % to it); below the threshold every candidate is replayed.
constexpr int kPruneAboveRanks = 4096;
// How many phase weights ρ (evenly spaced over the ranks' forward fractions) are solved.
constexpr int kPhaseWeights = 5;

// One offload mode's state while it is refined.
struct ModeSearch {
  Offload mode = Offload::None;
  ActivationCheckpointing checkpointing;
  Accumulation accumulation = Accumulation::Layered;
  OptimalProblem problem;
  std::vector<OptimalSolution> candidates;  // the model optimum first (solve_optimal_candidates)
  PlanResult res;                           // the best plan so far
  double simulated = -1;                    // its simulated iteration time; < 0: not simulated
  ReplayCache* replays = nullptr;           // shared by the modes: a plan is replayed once
};

std::vector<Offload> offload_modes(const PlannerOptions& opt) {
  std::vector<Offload> modes;
  if (opt.offload == "none" || opt.offload == "auto") modes.push_back(Offload::None);
  if (opt.offload == "host" || opt.offload == "auto") modes.push_back(Offload::Host);
  if (modes.empty()) throw ValidationError("", "offload", opt.offload, "one of none, host, auto");
  return modes;
}

Plan plan_of(const Scenario& s, const ModeSearch& m, const OptimalSolution& sol) {
  Plan plan = empty_plan(s, "optimal");
  plan.offload = m.mode;
  plan.activation_checkpointing = m.checkpointing;
  plan.accumulation = m.accumulation;
  apply_solution(plan, sol);
  return plan;
}

// The checkpointings to solve under accumulation `acc`: the user's, or with `auto` every
// candidate (each solved exactly, the fastest in simulation kept, as the offload mode is):
// none, selective, every:k for the largest k with which even's plan (equal batches and shares,
// micro-batches of one sample or the fixed size) fits every rank — the period at which memory just
// fits — and 4, 3, 2, then full.
std::vector<ActivationCheckpointing> checkpointings(const Scenario& s, const PlannerOptions& opt,
                                                    Accumulation acc) {
  if (!opt.choose_checkpointing)
    return {opt.activation_checkpointing.value_or(ActivationCheckpointing{})};
  Plan even = empty_plan(s, "optimal");
  even.accumulation = acc;
  set_even_batches(even, s.job.global_batch);
  for (auto& r : even.ranks) r.state_share = 1.0 / static_cast<double>(even.ranks.size());
  return checkpointing_candidates(s.job.model.num_layers,
                                  largest_fitting_every(s, even, opt.micro_batch));
}

// The accumulations to solve: the user's, or all three when it was left open.
std::vector<Accumulation> accumulations(const PlannerOptions& opt) {
  if (opt.accumulation) return {*opt.accumulation};
  if (!opt.choose_accumulation) return {Accumulation::Layered};
  return {Accumulation::Layered, Accumulation::Standard, Accumulation::NoSync};
}

// Step 1. The simulator is the judge of memory: when it finds the plan over capacity (its
// allocation order can peak above the memory model's sum), the device type that overflowed
// loses the overshoot from its budget and the model is solved again (at most 6 solves).
// Returns false with `why` when no verified plan was found.
bool solve_within_simulated_memory(const Scenario& s, const costmodels::CostModels& models,
                                   const PlannerOptions& opt, ModeSearch& m, std::string& why) {
  const auto& devices = s.cluster.ranks();
  for (int attempt = 0; attempt < 6; ++attempt) {
    try {
      // The first attempt's candidates are solved already (plan_optimal).
      if (attempt > 0 || m.candidates.empty()) m.candidates = solve_optimal_candidates(m.problem);
    } catch (const InfeasibleError& e) {
      why = e.what();
      return false;
    }
    m.res.plan = plan_of(s, m, m.candidates.front());
    if (!opt.verify_with_simulator) return true;
    const auto check = m.replays->outcome(m.res.plan, s, models);
    if (!check.oom) {
      m.simulated = check.iteration_s;
      return true;
    }
    std::map<std::string, double> overshoot;
    for (std::size_t i = 0; i < check.peak_bytes.size(); ++i) {
      const double over = check.peak_bytes[i] - check.capacity_bytes[i];
      if (over > 0) {
        auto& o = overshoot[devices[i].slot->spec.name];
        o = std::max(o, over);
      }
    }
    if (overshoot.empty()) overshoot[devices[check.oom_rank].slot->spec.name] = 0;
    // Once per model (a class of identical ranks shares one), by its first rank's device.
    std::vector<bool> shrunk(m.problem.ranks.size(), false);
    for (int i = 0; i < m.problem.num_ranks(); ++i) {
      const auto c = static_cast<std::size_t>(m.problem.class_of(i));
      if (shrunk[c]) continue;
      shrunk[c] = true;
      auto it = overshoot.find(devices[i].slot->spec.name);
      if (it != overshoot.end()) m.problem.ranks[c].usable_bytes -= it->second + kPlanHeadroomBytes;
    }
    why = "the simulator finds the plan out of memory (" + check.oom_detail + ")";
  }
  return false;
}

// A solution as a candidate of mode m: the current plan's schedule with the solution's rows.
PlanResult candidate_of(const ModeSearch& m, const OptimalSolution& sol, std::string note) {
  PlanResult alt;
  alt.plan = m.res.plan;
  apply_solution(alt.plan, sol);
  alt.note = std::move(note);
  return alt;
}

// Replays `alt` and keeps it as the mode's plan when it fits and simulates faster than the plan
// so far (only reached with the simulator verifying, so the plan is ranked by its replay).
void keep_if_faster(const Scenario& s, const costmodels::CostModels& models, ModeSearch& m,
                    PlanResult alt) {
  const auto o = m.replays->outcome(alt.plan, s, models);
  if (o.oom || (m.simulated > 0 && o.iteration_s >= m.simulated)) return;
  m.simulated = o.iteration_s;
  m.res = std::move(alt);
  // Replayed: ranked by its replay, and predicted only if it is the answer (plan_optimal).
}

// Step 2. Outside the model: the simulator synchronises every unit's forward and backward
// phases separately (Σ of per-phase maxima ≥ the model's max of per-rank sums), so the model's
// optimum is not always the fastest in simulation. The other breakpoints of the staircase walk
// (each the model's best plan for its largest share) are replayed as well and the fastest that
// fits is kept (the optimum's own replay is step 1's).
void replay_staircase(const Scenario& s, const costmodels::CostModels& models, ModeSearch& m) {
  const auto& sol = m.candidates.front();
  const std::size_t limit = std::min<std::size_t>(m.candidates.size(), kOptimalCandidates);
  for (std::size_t k = 1; k < limit; ++k)
    keep_if_faster(s, models, m,
                   candidate_of(m, m.candidates[k],
                                "staircase breakpoint " + std::to_string(k) + " of " +
                                    std::to_string(m.candidates.size()) + " (model " +
                                    format_seconds(m.candidates[k].iteration_seconds) +
                                    ", optimum " + format_seconds(sol.iteration_seconds) +
                                    "), offload " + to_string(m.mode)));
}

// The phase-synchronised time of a plan under the model: max(C(σ), max F + max K) + O.
double phase_synchronised_time(const OptimalProblem& problem, const Plan& plan) {
  double f_max = 0, k_max = 0, sigma = 0;
  std::vector<double> shares;
  shares.reserve(plan.ranks.size());
  // A rank's phase times depend on its model (one per class of identical ranks), batch and
  // micro-batch only: a run of ranks repeating the previous rank's is timed once (at 100k
  // ranks of one class the walk was a model evaluation per rank).
  int last_class = -1, last_batch = -1, last_micro = -1;
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    const auto& pr = plan.ranks[i];
    shares.push_back(pr.state_share);
    sigma = std::max(sigma, pr.state_share);
    const int c = problem.class_of(static_cast<int>(i));
    if (c == last_class && pr.batch == last_batch && pr.micro_batch == last_micro) continue;
    last_class = c;
    last_batch = pr.batch;
    last_micro = pr.micro_batch;
    const auto& rm = problem.model_of(static_cast<int>(i));
    const double f = optimal_forward_time(rm, pr.batch, pr.micro_batch);
    f_max = std::max(f_max, f);
    k_max = std::max(k_max, optimal_compute_time(rm, pr.batch, pr.micro_batch) - f);
  }
  const double c = problem.comm_seconds ? problem.comm_seconds(sigma) : 0.0;
  return std::max(c, f_max + k_max) + optimizer_step_seconds(problem, shares);
}

// Step 3. Phase-weighted candidates: the simulator waits, unit by unit, for the slowest rank
// of the forward phase and again of the backward phase, i.e. about max_i F_i + max_i K_i
// rather than the model's max_i (F_i + K_i). Solving the model exactly with a configuration's
// time max(F/ρ, K/(1 − ρ)) bounds F by ρτ and K by (1 − ρ)τ; the phase optimum is the best of
// these over ρ, so a few ρ between the ranks' forward fractions give candidates. The one with
// the smallest phase-synchronised time is replayed, and kept if it simulates faster.
void replay_phase_weighted(const Scenario& s, const costmodels::CostModels& models, ModeSearch& m) {
  const auto& problem = m.problem;
  double lo = 1, hi = 0;
  for (const auto& rm : problem.ranks) {
    if (rm.micro_batch_time.size() < 2 || rm.micro_batch_time[1] <= 0) continue;
    const double phi = rm.forward_time[1] / rm.micro_batch_time[1];
    lo = std::min(lo, phi);
    hi = std::max(hi, phi);
  }
  double best_phase = phase_synchronised_time(problem, m.res.plan);
  std::optional<PlanResult> pick;
  const int steps = hi - lo > 1e-9 ? kPhaseWeights : 1;
  for (int k = 0; k < steps && lo <= hi; ++k) {
    const double rho = steps == 1 ? lo : lo + (hi - lo) * k / (steps - 1);
    if (!(rho > 0 && rho < 1)) continue;
    OptimalProblem weighted = problem;
    for (auto& rm : weighted.ranks) rm.phase_weight = rho;
    OptimalSolution ws;
    try {
      ws = solve_optimal(weighted);
    } catch (const InfeasibleError&) {
      continue;
    }
    PlanResult alt = candidate_of(m, ws, "");
    const double pt = phase_synchronised_time(problem, alt.plan);
    if (pt < best_phase) {
      best_phase = pt;
      alt.note = "phase weight " + fixed(rho, 3) + " (phase-synchronised model " +
                 format_seconds(pt) + "), offload " + to_string(m.mode);
      pick = std::move(alt);
    }
  }
  if (pick) keep_if_faster(s, models, m, std::move(*pick));
}

// Step 4. The model times the optimizer step per device (faster devices may hold more state
// for the same step time) but takes communication as overlapped as a whole (max(C, τ)); the
// simulator overlaps it unit by unit, and a forward phase shorter than its gather exposes the
// gather, whose grouped time grows as the smallest share shrinks. So the plan of the model
// that charges every share at the slowest device's step (which keeps shares nearer even) is
// replayed too and kept if it simulates faster.
void replay_slowest_step(const Scenario& s, const costmodels::CostModels& models, ModeSearch& m) {
  OptimalProblem flat = m.problem;
  bool differs = false;
  for (auto& rm : flat.ranks) {
    differs |= rm.optimizer_seconds >= 0 && rm.optimizer_seconds != flat.optimizer_seconds;
    rm.optimizer_seconds = flat.optimizer_seconds;
  }
  if (!differs) return;
  flat.optimizer_fixed_seconds = 0;
  OptimalSolution sol;
  try {
    sol = solve_optimal(flat);
  } catch (const InfeasibleError&) {
    return;
  }
  // The plan's own model times the step per device (O_0 + max_i O_i·s_i); this candidate comes
  // from the variant that prices every share's step at the slowest device.
  keep_if_faster(
      s, models, m,
      candidate_of(m, sol,
                   "shares solved with every optimizer step priced at the slowest device (that "
                   "model " +
                       format_seconds(sol.iteration_seconds) +
                       ") simulate faster than the model optimum, which prices each device's own "
                       "step; offload " +
                       to_string(m.mode)));
}

}  // namespace

PlanResult plan_optimal(const Scenario& s, const costmodels::CostModels& models,
                        const PlannerOptions& opt) {
  check_batch(s, "optimal");
  const auto modes = offload_modes(opt);
  PlanResult best;
  double best_score = 0;
  bool have = false;
  std::string first_error;
  ReplayCache replays;
  // Every schedule left open (accumulation, checkpointing, offload) is a candidate: each one's
  // model is solved first (cheap), then they are refined on the simulator in the order of their
  // model optimum, and one whose model optimum is no faster than the best replay so far is not
  // replayed (the model does not see exposed communication or per-phase waits, which only add
  // to the replay; planner/README.md).
  std::vector<ModeSearch> searches;
  std::vector<std::string> verdicts;  // per schedule candidate, for the note
  // The best candidate not kept, for the summary (PlanResult::runner_up).
  std::string best_label, runner_label;
  double runner_score = 0;
  auto offer_runner_up = [&](const std::string& label, double score) {
    if (runner_label.empty() || score < runner_score) {
      runner_label = label;
      runner_score = score;
    }
  };
  auto schedule_label = [&](const ModeSearch& m) {
    return to_string(m.accumulation) + " / " + to_string(m.checkpointing) + " / offload " +
           to_string(m.mode);
  };
  // When nothing fits, the reason given is that of the leanest schedule tried (full
  // checkpointing: the least activation memory), else the first refusal.
  std::string lean_error;
  auto refused = [&](const ModeSearch& m, const std::string& why) {
    if (first_error.empty()) first_error = why;
    if (lean_error.empty() && m.checkpointing.is_full()) lean_error = why;
  };
  const bool several = accumulations(opt).size() * modes.size() > 1 || opt.choose_checkpointing;
  for (Accumulation acc : accumulations(opt))
    for (const ActivationCheckpointing& ckpt : checkpointings(s, opt, acc))
      for (Offload mode : modes) {
        const std::string which =
            "optimal (offload " + to_string(mode) +
            (ckpt.is_full() ? "" : ", activation checkpointing " + to_string(ckpt)) +
            (acc == Accumulation::Layered ? "" : ", " + to_string(acc) + " accumulation") + ")";
        if (schedule::offload_conflict(mode, ckpt)) {
          // Offload moves the checkpointed layer inputs (the plan validator's rule).
          if (first_error.empty())
            first_error = which +
                          ": host offload needs --activation-checkpointing full (or "
                          "--offload none)";
          continue;
        }
        ModeSearch m;
        m.mode = mode;
        m.checkpointing = ckpt;
        m.accumulation = acc;
        m.replays = &replays;
        m.problem =
            build_optimal_problem(s, models, mode, opt.max_micro_batch, ckpt, acc, opt.micro_batch);
        try {
          m.candidates = solve_optimal_candidates(m.problem);
        } catch (const InfeasibleError& e) {
          const std::string why = e.what();
          verdicts.push_back(schedule_label(m) + " does not fit");
          refused(m, why.rfind("optimal:", 0) == 0 ? why : which + ": " + why);
          continue;
        }
        m.res.note = which;  // until refined
        searches.push_back(std::move(m));
      }
  std::stable_sort(searches.begin(), searches.end(), [](const ModeSearch& a, const ModeSearch& b) {
    return a.candidates.front().iteration_seconds < b.candidates.front().iteration_seconds;
  });
  for (ModeSearch& m : searches) {
    const double model_optimum = m.candidates.front().iteration_seconds;
    if (have && opt.verify_with_simulator && s.cluster.num_ranks() > kPruneAboveRanks &&
        model_optimum >= best_score) {
      verdicts.push_back(schedule_label(m) + " not replayed (model " +
                         format_seconds(model_optimum) + ")");
      continue;
    }
    const std::string which = m.res.note;
    std::string why;
    if (!solve_within_simulated_memory(s, models, opt, m, why)) {
      verdicts.push_back(schedule_label(m) + " does not fit");
      refused(m, why.rfind("optimal:", 0) == 0 ? why : which + ": " + why);
      continue;
    }
    const auto& sol = m.candidates.front();
    // Without the simulator the model's prediction is the score; with it the replay is, and
    // only the schedule that wins is predicted (below): predict is a function of the plan alone.
    if (!opt.verify_with_simulator) predict(s, models, m.res);
    m.res.note = "model optimum " + format_seconds(sol.iteration_seconds) + " (" +
                 std::to_string(sol.feasibility_checks) + " feasibility checks, " +
                 std::to_string(sol.class_knapsack_runs) + " per-class and " +
                 std::to_string(sol.knapsack_runs) + " per-rank knapsacks" +
                 (sol.undecided_checks > 0
                      ? ", " + std::to_string(sol.undecided_checks) +
                            " checks undecided and taken as infeasible: within one sample's "
                            "share room of the exact optimum"
                      : std::string()) +
                 "), offload " + to_string(m.mode);
    if (opt.verify_with_simulator) {
      replay_staircase(s, models, m);
      if (!m.candidates.empty()) replay_phase_weighted(s, models, m);
      replay_slowest_step(s, models, m);
    }
    // The schedule is a discrete choice outside the model (host copies share the PCIe links
    // with the collectives in the simulator, rounds synchronise): keep what simulates faster.
    const double score = m.simulated > 0 ? m.simulated : m.res.predicted_iteration_s;
    verdicts.push_back(schedule_label(m) + " " + format_seconds(score));
    const std::string label = schedule_label(m);
    if (!have || score < best_score) {
      if (have) offer_runner_up(best_label, best_score);
      best = std::move(m.res);
      best_score = score;
      best_label = label;
      have = true;
    } else {
      offer_runner_up(label, score);
    }
  }
  if (have && opt.verify_with_simulator) predict(s, models, best);
  if (several && have) {
    std::string list;
    for (const auto& v : verdicts) list += (list.empty() ? "" : ", ") + v;
    best.note +=
        "; schedules (accumulation / checkpointing / offload) solved, then replayed in "
        "order of the model optimum: " +
        list + "; chose " + to_string(best.plan.accumulation) + " / " +
        to_string(best.plan.activation_checkpointing) + " / offload " +
        to_string(best.plan.offload);
  }
  // The model ranks the candidates above; the simulator is the judge. The equal-share plans of
  // even and proportional under the same schedule are candidates too, so optimal never
  // simulates slower than either on the same flags (the model's per-round synchronisation and
  // overlap are approximations; planner/README.md).
  std::string equal_share_error;
  if (opt.verify_with_simulator &&
      std::find(modes.begin(), modes.end(), Offload::None) != modes.end()) {
    using Fn =
        PlanResult (*)(const Scenario&, const costmodels::CostModels&, const PlannerOptions&);
    for (auto [name, fn] : {std::pair<const char*, Fn>{"even", plan_even},
                            std::pair<const char*, Fn>{"proportional", plan_proportional}}) {
      PlanResult alt;
      try {
        alt = fn(s, models, opt);
      } catch (const InfeasibleError& e) {
        // even's refusal names a rank, the bytes it needs and has, and what would fit.
        if (std::string(name) == "even") equal_share_error = e.what();
        continue;
      }
      const auto o = replays.outcome(alt.plan, s, models);
      if (o.oom || (have && o.iteration_s >= best_score)) continue;
      const std::string model_note = have ? best.note : std::string();
      if (have) offer_runner_up(best_label, best_score);
      best_label = std::string("the ") + name + " plan (equal shares)";
      best = std::move(alt);
      best.plan.strategy = "optimal";
      best.note = std::string("the ") + name + " plan (equal shares) simulates " +
                  format_seconds(o.iteration_s) +
                  (have ? ", faster than the model's candidates (" + format_seconds(best_score) +
                              "; " + model_note + ")"
                        : std::string(", and no model candidate fits"));
      best_score = o.iteration_s;
      have = true;
    }
  }
  if (have && !runner_label.empty())
    best.runner_up = runner_up_text(runner_label, runner_score, best_score) +
                     (best.runner_up.empty() ? std::string() : "; " + best.runner_up);
  if (!have)
    throw InfeasibleError((lean_error.empty() ? first_error : lean_error) +
                          (equal_share_error.empty()
                               ? std::string()
                               : "; with equal batches and shares: " + equal_share_error));
  return best;
}

}  // namespace cephalo::planner::detail

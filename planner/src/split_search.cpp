#include "cephalo/planner/split_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/planner/planner_options.hpp"
#include "split_search_impl.hpp"

namespace cephalo::planner {
namespace split_detail {

using costmodels::ComputePhase;

std::vector<double> Search::speeds(const std::vector<StageShape>& shapes, int m, bool recompute) {
  const Job& job = scenario_.job;
  std::vector<double> out;
  for (const auto& s : shapes) {
    if (s.by_speed) {
      // Replicas of several speeds share each micro-batch in proportion to their speed, so
      // the stage's speed is the sum of its replicas' samples per second (at an even cut).
      const int b = std::max(1, static_cast<int>(job.global_batch / m) / s.replicas);
      double rate = 0;
      // Replicas come in runs of one GPU type: price a type once per run, not per replica (the
      // runs are read once per stage; the replicas' rates still add one by one, as before).
      const DeviceSpec* last = nullptr;
      double replica_rate = 0;
      for (const auto& [run_spec, count] : shape_classes(s).type_runs) {
        const DeviceSpec& spec = *run_spec;
        if (last == nullptr || last->name != spec.name) {
          double t = models_.compute->unit_time(spec, job, 1, ComputePhase::Forward, b).seconds +
                     models_.compute->unit_time(spec, job, 1, ComputePhase::Backward, b).seconds;
          if (recompute)
            t += models_.compute->unit_time(spec, job, 1, ComputePhase::Recompute, b).seconds;
          replica_rate = t > 0 ? s.tensor_parallel * b / t : 1.0;
          last = &spec;
        }
        for (int i = 0; i < count; ++i) rate += replica_rate;
      }
      out.push_back(rate);
      continue;
    }
    const DeviceSpec& spec = *blocks_[static_cast<std::size_t>(s.type)].spec;
    const int b = static_cast<int>(job.global_batch / (static_cast<long long>(m) * s.replicas));
    double t = models_.compute->unit_time(spec, job, 1, ComputePhase::Forward, b).seconds +
               models_.compute->unit_time(spec, job, 1, ComputePhase::Backward, b).seconds;
    if (recompute)
      t += models_.compute->unit_time(spec, job, 1, ComputePhase::Recompute, b).seconds;
    out.push_back(t > 0 ? s.tensor_parallel / t : 1.0);
  }
  return out;
}

void Search::explore(const std::vector<StageShape>& shapes) {
  const Job& job = scenario_.job;
  const int layers = job.model.num_layers;
  const int p = static_cast<int>(shapes.size());
  bool any_tp = false, uniform_tp = true;
  for (const auto& s : shapes) {
    any_tp = any_tp || s.tensor_parallel > 1;
    uniform_tp = uniform_tp && s.tensor_parallel == shapes.front().tensor_parallel;
  }
  // Layouts check_model_split refuses whatever the boundaries: a tied model's word embedding
  // is all-reduced rank by rank between the first and the last stage, which therefore need the
  // same T and rank count.
  if (job.model.tied_embeddings && p > 1 &&
      (shapes.front().tensor_parallel != shapes.back().tensor_parallel ||
       shapes.front().ranks.size() != shapes.back().ranks.size())) {
    ++result_.pruned;
    return;
  }

  const auto shared_shapes = std::make_shared<const std::vector<StageShape>>(shapes);
  std::vector<int> layout;       // type and T of every stage
  std::vector<int> stage_ranks;  // every stage's rank count, for the unit-pass bound
  for (const auto& s : shapes) {
    layout.push_back(s.type);
    layout.push_back(s.tensor_parallel);
    stage_ranks.push_back(static_cast<int>(s.ranks.size()));
  }
  std::vector<int> ms;
  // A fixed count is the only candidate (check_fixed_dimensions: it divides the batch).
  for (int m : batch_divisors_) {
    if (options_.micro_batches && m != *options_.micro_batches) continue;
    bool ok = m >= p;
    // An even cut needs m x replicas to divide the batch; balanced replicas one sample each.
    for (const auto& s : shapes)
      ok = ok && (s.by_speed ? job.global_batch / m >= s.replicas
                             : job.global_batch % (static_cast<long long>(m) * s.replicas) == 0);
    if (ok)
      ms.push_back(m);
    else
      ++result_.pruned;
  }
  std::vector<pipeline::PipelineSchedule> schedules;
  using Kind = pipeline::PipelineSchedule::Kind;
  for (Kind k : {Kind::GPipe, Kind::OneFOneB}) schedules.push_back({k, 1});
  if (p >= 2)
    for (int v = 2; v * p <= layers && v <= pipeline::kMaxVirtualStages; ++v)
      if (layers % v == 0) schedules.push_back({Kind::Interleaved, v});
  const std::vector<ShardingKind> shardings =
      split_detail::candidate_shardings(scenario_, options_);
  // Sequence parallelism hands neighbours 1/T of the sequence: every stage the same T.
  std::vector<bool> sps = {false};
  if (any_tp && uniform_tp) sps.push_back(true);
  if (options_.sequence_parallel) {
    if (*options_.sequence_parallel && (!any_tp || !uniform_tp))
      return;  // refused by check_model_split
    sps = {*options_.sequence_parallel};
  }
  std::vector<bool> rcs = {false, true};
  if (options_.checkpointing)
    rcs = {*options_.checkpointing == ActivationCheckpointing::Kind::Full};

  // A floor on every stage's step per layer at each m, for the families' bounds.
  // Per m, without and with every layer recomputed.
  std::vector<double> floors[2] = {std::vector<double>(shapes.size()),
                                   std::vector<double>(shapes.size())};
  // The most layers each stage holds and fits (none: a one-stage split is an FSDP plan).
  std::vector<int> caps;  // per stage, at its place in the schedule's order
  std::vector<double> tails(shapes.size());
  std::vector<std::vector<Candidate>*> touched;  // the lists this layout's candidates entered
  std::vector<double> per_layer(shapes.size());  // the floor deal's busy time per layer
  std::vector<std::vector<int>> deals;
  for (std::size_t s = 0; s < shapes.size(); ++s) tails[s] = tail_floor(shapes[s]);
  for (int m : ms) {
    for (bool rc : rcs)
      for (std::size_t s = 0; s < shapes.size(); ++s) floors[rc][s] = stage_floor(shapes[s], m, rc);
    for (bool rc : rcs) {
      const auto speed = speeds(shapes, m, rc);
      for (const auto& schedule : schedules) {
        if (options_.schedule && !(schedule == *options_.schedule)) continue;
        const int v = schedule.virtual_stages;
        if (schedule.kind == Kind::Interleaved && m % p != 0) {
          ++result_.pruned;
          continue;
        }
        layout_caps(shapes, m, rc, schedule, caps);
        if (options_.bound &&
            schedule_floor(shapes, m, schedule, floors[rc], tails, caps) >= best_so_far_) {
          result_.bounded += static_cast<long long>(shardings.size() * sps.size());
          continue;
        }
        // Two first deals: by the compute model's speed (interleaved stages deal out units of V
        // layers, so every chunk has count / V layers), and by the floors, which see the TP
        // collectives, the DP tail and the memory caps the speeds do not (a deal by speed can
        // start far above its family's floor, where the climb stops in a local minimum).
        deals.assign(1, balanced_layer_counts(layers / v, speed));
        for (int& c : deals.front()) c *= v;
        for (std::size_t s = 0; s < shapes.size(); ++s) per_layer[s] = m * floors[rc][s] + tails[s];
        if (auto by_floor = floor_deal(per_layer, layers, v, caps);
            !by_floor.empty() && by_floor != deals.front())
          deals.push_back(std::move(by_floor));
        for (const std::vector<int>& counts : deals) {
          // A stage dealt more layers than its memory floor holds at its place refuses every
          // candidate (shardings, SP) of this deal: not priced once some split fits (until then a
          // refusal's text may be the one the search reports).
          if (options_.bound && std::isfinite(best_so_far_) && !caps.empty() &&
              !std::equal(counts.begin(), counts.end(), caps.begin(), std::less_equal<>())) {
            result_.pruned += static_cast<int>(shardings.size() * sps.size());
            continue;
          }
          // A split whose replay would build more unit passes than a plan may schedule is one
          // the plan reader refuses (core/plan.hpp): never a candidate.
          if (split_unit_passes(counts, stage_ranks, m) > kMaxScheduledUnitPasses) {
            result_.pruned += static_cast<int>(shardings.size() * sps.size());
            continue;
          }
          double deal_floor = -1;  // candidate_floor of this deal, once asked
          for (ShardingKind sharding : shardings)
            for (bool sp : sps) {
              Candidate c;
              c.split.tensor_parallel = shapes.front().tensor_parallel;
              c.split.sequence_parallel = sp;
              c.split.schedule = schedule;
              c.split.micro_batches = m;
              c.split.sharding = sharding;
              c.checkpointing =
                  rc ? ActivationCheckpointing::Kind::Full
                     : options_.checkpointing.value_or(ActivationCheckpointing::Kind::None);
              c.by_speed = shapes.front().by_speed;
              c.shapes = shared_shapes;
              c.counts = counts;
              if (backend_only_ && !backend_split_refusal(c.split).empty()) {
                ++result_.pruned;
                continue;
              }
              const std::tuple<int, int, int, std::vector<int>> key{
                  p, static_cast<int>(schedule.kind), schedule.virtual_stages, layout};
              const auto keep = static_cast<std::size_t>(std::max(1, options_.refine_per_stages));
              // A full list takes only a candidate faster than its last.
              const auto listed = fitting_.find(key);
              const double beat = listed != fitting_.end() && listed->second.size() >= keep
                                      ? listed->second.back().estimate.iteration_s
                                      : std::numeric_limits<double>::infinity();
              if (options_.bound && std::isfinite(beat)) {
                if (deal_floor < 0) deal_floor = candidate_floor(c);
                if (deal_floor >= beat) {
                  ++result_.bounded;
                  continue;
                }
              }
              price(c, beat);
              if (!c.estimate.fits || !c.estimate.complete) continue;
              auto& best = fitting_[key];
              if (std::find(touched.begin(), touched.end(), &best) == touched.end())
                touched.push_back(&best);
              const auto at = std::find_if(best.begin(), best.end(), [&](const Candidate& b) {
                return c.estimate.iteration_s < b.estimate.iteration_s;
              });
              if (best.size() < keep || at != best.end()) {
                best.insert(at, std::move(c));
                if (best.size() > keep) best.pop_back();
              }
            }
        }
      }
    }
  }
  // The layout's best climbed now, not only after every layout: the climb ends where it would
  // have ended later (it reads only its own candidate), but the best so far it leaves skips the
  // layouts whose floor it reaches. One climb per layout, its lowest list's head.
  if (!options_.bound) return;
  Candidate* lead = nullptr;
  for (auto* list : touched)
    if (!list->empty() && !list->front().refined &&
        (!lead || list->front().estimate.iteration_s < lead->estimate.iteration_s))
      lead = &list->front();
  if (lead && family_floor(*lead, best_so_far_) < best_so_far_) refine(*lead);
}

// Moves one boundary by one unit (V layers under interleaving) at a time, taking the first move
// that lowers the estimate of a fitting split, until none does.
void Search::refine(Candidate& c) {
  if (c.refined) return;
  if (c.climb) {
    // Climbed ahead (stop_at_ceiling): the same climb, counted now.
    const std::shared_ptr<Climb> climb = std::move(c.climb);
    count_climb(*climb);
    c = std::move(climb->end);
    ++result_.climbed_ahead;
    return;
  }
  c.refined = true;
  const std::size_t p = c.counts.size();
  const int unit = c.split.schedule.virtual_stages;
  bool improved = true;
  for (int round = 0; improved && round < 1000; ++round) {
    improved = false;
    for (std::size_t i = 0; i + 1 < p && !improved; ++i)
      for (int dir : {-1, 1}) {
        Candidate n = c;
        n.climb.reset();
        n.counts[i] += dir * unit;
        n.counts[i + 1] -= dir * unit;
        if (n.counts[i] < unit || n.counts[i + 1] < unit) continue;
        if (options_.bound && candidate_floor(n) >= c.estimate.iteration_s) continue;
        price(n, c.estimate.iteration_s);
        if (n.estimate.fits && n.estimate.complete &&
            n.estimate.iteration_s < c.estimate.iteration_s) {
          c = std::move(n);
          improved = true;
          break;
        }
      }
  }
}

bool Search::uneven(const SplitEstimate& e) {
  for (const auto& st : e.stages)
    if (std::adjacent_find(st.replica_micro_batches.begin(), st.replica_micro_batches.end(),
                           std::not_equal_to<>()) != st.replica_micro_batches.end())
      return true;
  return false;
}

double Search::family_floor(const Candidate& c, double enough) {
  const int m = c.split.micro_batches;
  const std::vector<StageShape>& shapes = *c.shapes;
  const std::size_t p = shapes.size();
  std::vector<double> step(p), tail(p);
  for (std::size_t s = 0; s < p; ++s) {
    step[s] = stage_floor(shapes[s], m, c.checkpointing == ActivationCheckpointing::Kind::Full);
    tail[s] = tail_floor(shapes[s]);
  }
  std::vector<int> caps;
  layout_caps(shapes, m, c.checkpointing == ActivationCheckpointing::Kind::Full, c.split.schedule,
              caps);
  return schedule_floor(shapes, m, c.split.schedule, step, tail, caps, enough);
}

// Refines every list's candidates, lowest estimate first. The answer reads of the refined
// candidates only the best few (the finalists), the best of each pipeline depth and the best
// with even and with uneven replicas; a climb ends no lower than its family's floor (the layout
// at its m and schedule over every placement), so with the bound a candidate whose floor is no
// lower than all of those found so far could change none of them and is left as it is.
void Search::refine_all() {
  std::vector<std::pair<int, Candidate*>> queue;  // (P, candidate)
  for (auto& [key, list] : fitting_)
    for (auto& c : list) queue.emplace_back(std::get<0>(key), &c);
  std::stable_sort(queue.begin(), queue.end(), [](const auto& a, const auto& b) {
    return a.second->estimate.iteration_s < b.second->estimate.iteration_s;
  });
  const double inf = std::numeric_limits<double>::infinity();
  const auto keep = static_cast<std::size_t>(std::max(1, options_.finalists));
  std::vector<double> top;  // the best refined estimates, ascending, at most `keep`
  std::map<int, double> best_of_p;
  double best_even = inf, best_uneven = inf;
  for (auto& [p, c] : queue) {
    if (options_.bound && !c->refined) {
      const auto at_p = best_of_p.find(p);
      double beat = std::max(top.size() >= keep ? top.back() : inf,
                             at_p == best_of_p.end() ? inf : at_p->second);
      beat = std::max(beat, best_even);
      if (c->by_speed) beat = std::max(beat, best_uneven);
      if (std::isfinite(beat) && family_floor(*c, beat) >= beat) {
        ++result_.bounded;
        continue;
      }
      // Past the budget it keeps its first deal, and the answer's stated gap its floor: its
      // climb could end no lower.
      if (over_budget()) {
        result_.unexplored_floor = std::min(result_.unexplored_floor, family_floor(*c, inf));
        ++result_.unexplored;
      } else {
        refine(*c);
      }
    } else {
      refine(*c);
    }
    const double t = c->estimate.iteration_s;
    top.insert(std::upper_bound(top.begin(), top.end(), t), t);
    if (top.size() > keep) top.pop_back();
    auto& bp = best_of_p.try_emplace(p, inf).first->second;
    bp = std::min(bp, t);
    double& side = uneven(c->estimate) ? best_uneven : best_even;
    side = std::min(side, t);
  }
}

void Search::climb_ahead(Candidate& c) {
  const long long evaluated = result_.evaluated, refused = result_.refused;
  // The best so far runs on through the climb (progress lines print it): a climb reads it
  // nowhere, and it only falls, so the climb's is applied later by its minimum.
  const double best = best_so_far_, over = closest_over_;
  std::string closest = std::move(closest_);
  closest_over_ = std::numeric_limits<double>::infinity();
  closest_.clear();
  auto climb = std::make_shared<Climb>();
  climb->end = c;
  refine(climb->end);
  climb->evaluated = result_.evaluated - evaluated;
  climb->refused = result_.refused - refused;
  climb->best = best_so_far_;
  climb->closest_over = closest_over_;
  climb->closest = std::move(closest_);
  result_.evaluated = evaluated;
  result_.refused = refused;
  best_so_far_ = best;
  closest_over_ = over;
  closest_ = std::move(closest);
  c.climb = std::move(climb);
}

void Search::count_climb(const Climb& climb) {
  result_.evaluated += climb.evaluated;
  result_.refused += climb.refused;
  best_so_far_ = std::min(best_so_far_, climb.best);
  // The first refusal of the least overshoot, as price_once keeps it refusal by refusal.
  if (climb.closest_over < closest_over_) {
    closest_over_ = climb.closest_over;
    closest_ = climb.closest;
  }
}

void Search::stop_at_ceiling() {
  const double ceiling = options_.ceiling;
  if (ceiling_asked_ || !options_.bound || !std::isfinite(ceiling) || best_so_far_ < ceiling)
    return;
  ceiling_asked_ = true;
  // A climb ends no lower than its family's floor (refine_all reads the same); the others are
  // climbed here ahead of their turn, as refine_all would climb them (a climb reads only its
  // candidate). Should one end below the ceiling, the search runs on from the state it had, as
  // without one, and takes each climb done here as its own when it comes to that candidate.
  std::vector<Candidate*> open;
  for (auto& [key, list] : fitting_)
    for (Candidate& c : list)
      if (!c.refined && family_floor(c, ceiling) < ceiling) open.push_back(&c);
  for (Candidate* c : open) {
    climb_ahead(*c);
    if (c->climb->end.estimate.iteration_s < ceiling) return;
  }
  // The search stops here: every climb counted, in the order done.
  for (Candidate* c : open) {
    count_climb(*c->climb);
    c->climb.reset();
  }
  std::ostringstream why;
  why << "no 3D split of these " << scenario_.cluster.num_ranks() << " ranks is estimated below "
      << format_seconds(ceiling) << " (";
  if (std::isfinite(best_so_far_))
    why << "the best of " << result_.evaluated << " candidates priced "
        << format_seconds(best_so_far_) << "; every family left floored at least that)";
  else
    why << "every family floored at least that; "
        << (result_.evaluated == 0 ? std::string("none priced")
                                   : std::to_string(result_.evaluated) + " priced, none fitting")
        << ")";
  throw SplitCeilingReached(why.str());
}

std::string Search::no_layout_message() const {
  // Which dimensions were fixed, spelt as the caller gave them (a flag or a keyword).
  const std::string& source = options_.options_source;
  std::vector<std::string> fixed;
  const auto given = [&](const char* name, const std::string& value) {
    fixed.push_back(spell_option(source, name) + (value.empty() ? "" : " " + value));
  };
  if (options_.tensor_parallel) given("tensor_parallel", std::to_string(*options_.tensor_parallel));
  if (options_.pipeline_stages) given("pipeline_stages", std::to_string(*options_.pipeline_stages));
  if (options_.micro_batches) given("micro_batches", std::to_string(*options_.micro_batches));
  if (options_.schedule) given("pipeline_schedule", pipeline::to_string(*options_.schedule));
  if (options_.sequence_parallel && *options_.sequence_parallel) given("sequence_parallel", "");
  if (options_.sharding) given("sharding", to_string(*options_.sharding));
  std::string text = "no 3D split of " + std::to_string(scenario_.cluster.num_ranks()) +
                     " ranks satisfies the fixed dimensions";
  if (!fixed.empty()) {
    text += " (";
    for (std::size_t i = 0; i < fixed.size(); ++i) text += (i ? ", " : "") + fixed[i];
    text += ")";
  }
  // The layouts the search has (split_search_layouts.cpp): what a fixed stage count must match.
  std::string types;
  for (std::size_t t = 0; t < blocks_.size(); ++t)
    types +=
        (t ? ", " : "") + blocks_[t].spec->name + " x" + std::to_string(blocks_[t].ranks.size());
  return text + " and the divisibility rules: its stages are runs of whole consecutive nodes (" +
         std::to_string(scenario_.cluster.nodes.size()) +
         " node(s) here) or of one GPU type each, a type's ranks cut into equal stages (" +
         std::to_string(blocks_.size()) + " type(s) here: " + types +
         "), each stage's tensor-parallel groups within a node and one GPU type";
}

SplitSearchResult Search::run() && {
  check_fixed_dimensions(scenario_, options_);
  const Job& job = scenario_.job;
  backend_only_ = backend_only(scenario_.cluster);
  batch_divisors_ = options_.micro_batches ? std::vector<int>{*options_.micro_batches}
                                           : divisors(job.global_batch);
  blocks_ = type_blocks(scenario_.cluster);
  index_rank_classes();
  const std::size_t types = blocks_.size();
  std::vector<std::vector<int>> tps(types);
  for (std::size_t t = 0; t < types; ++t) {
    tps[t] = tp_degrees(blocks_[t], job.model, options_.tensor_parallel);
    if (tps[t].empty()) {
      std::ostringstream v;
      v << (options_.tensor_parallel ? *options_.tensor_parallel : 0) << " on "
        << blocks_[t].spec->name;
      throw ValidationError(options_.options_source,
                            spell_option(options_.options_source, "tensor_parallel"), v.str(),
                            "a degree dividing the heads, the key/value heads and every node's "
                            "count of the GPU type");
    }
  }
  // The node stages first: they are few, and the best of them bounds the type-block layouts.
  if (options_.node_stages) explore_node_runs();
  if (options_.type_stages) explore_type_blocks(tps);
  explore_pending();
  // Whatever the queue left unexplored (the budget) the search would not price either.
  stop_at_ceiling();

  if (fitting_.empty()) {
    if (closest_.empty()) throw InfeasibleError(no_layout_message());
    throw InfeasibleError("no 3D split fits in memory; the tightest: " + closest_);
  }
  const Candidate* winner = nullptr;
  // Per P its best, copied once at the end (a candidate holds per-rank allocations).
  std::map<int, const Candidate*> by_p;
  std::vector<const Candidate*> refined;
  refine_all();
  if (result_.unexplored > 0) result_.budget = options_.budget;
  for (auto& [key, list] : fitting_)
    for (auto& c : list) {
      refined.push_back(&c);
      const int p = std::get<0>(key);
      const auto it = by_p.find(p);
      if (it == by_p.end() || c.estimate.iteration_s < it->second->estimate.iteration_s)
        by_p[p] = &c;
    }
  std::vector<Candidate> best_of_p;
  for (const auto& [p, c] : by_p) {
    best_of_p.push_back(*c);
    price_in_full(best_of_p.back());
  }
  for (const auto& c : best_of_p)
    if (!winner || c.estimate.iteration_s < winner->estimate.iteration_s) winner = &c;
  result_.split = winner->split;
  result_.checkpointing = winner->checkpointing;
  result_.replica_batches = winner->by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even;
  result_.estimate = winner->estimate;
  // The estimate's best few for the simulator (split_plan.hpp): its estimate is a first-order
  // model, so the replay, not the estimate, has the last word among near equals.
  std::stable_sort(refined.begin(), refined.end(), [](const Candidate* a, const Candidate* b) {
    return a->estimate.iteration_s < b->estimate.iteration_s;
  });
  // The best with even replicas and the best whose replicas differ in samples go too: the
  // estimate's errors differ between them.
  for (bool want : {false, true}) {
    const auto it = std::find_if(refined.begin(), refined.end(),
                                 [&](const Candidate* c) { return uneven(c->estimate) == want; });
    if (it != refined.end() && it - refined.begin() >= options_.finalists) {
      const Candidate* c = *it;
      refined.erase(it);
      refined.insert(refined.begin() + std::max(0, options_.finalists - 2), c);
    }
  }
  for (const Candidate* c : refined) {
    if (static_cast<int>(result_.finalists.size()) >= options_.finalists) break;
    Candidate f = *c;
    price_in_full(f);
    // A split balanced by speed that deals every replica the even cut writes the even plan:
    // one replay of it is enough.
    const auto same_plan = [&f](const SplitCandidate& o) {
      if (!(o.split == f.split) || o.checkpointing != f.checkpointing) return false;
      for (std::size_t s = 0; s < o.estimate.stages.size(); ++s) {
        const StageEstimate& a = o.estimate.stages[s];
        const StageEstimate& b = f.estimate.stages[s];
        if (a.replica_micro_batches != b.replica_micro_batches || a.memory.total != b.memory.total)
          return false;
      }
      return true;
    };
    if (std::any_of(result_.finalists.begin(), result_.finalists.end(), same_plan)) continue;
    result_.finalists.push_back({std::move(f.split), f.checkpointing,
                                 f.by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even,
                                 std::move(f.estimate)});
  }
  for (auto& c : best_of_p)
    result_.best_per_stages.push_back({std::move(c.split), c.checkpointing,
                                       c.by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even,
                                       std::move(c.estimate)});
  return std::move(result_);
}

}  // namespace split_detail

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options,
                               const costmodels::CostModels& models) {
  return split_detail::Search(scenario, options, models).run();
}

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options) {
  return search_split(scenario, options, costmodels::make_cost_models(scenario));
}

}  // namespace cephalo::planner

#pragma once
// The 3D split search's state (split_search.cpp: pricing, refining, the answer;
// split_search_layouts.cpp: the stage layouts it explores and their floors): internal to the
// planner.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/planner/split_search.hpp"
#include "split_search_bound.hpp"
#include "split_search_rules.hpp"

namespace cephalo::planner::split_detail {

// Stages of one GPU type each: per type its T and stage count, and the family's busy floor.
struct TypeFamily {
  std::vector<int> tp, k;
  double floor = 0;
  // Whether `floor` is busy_floor's (false: family_rate_floor's, cheaper and no higher; the
  // queue works busy_floor out only when the family comes up).
  bool exact = false;
};

struct Climb;

struct Candidate {
  ModelSplit split;
  ActivationCheckpointing::Kind checkpointing = ActivationCheckpointing::Kind::None;
  bool by_speed = false;
  bool refined = false;  // climbed (Search::refine): no move lowers it
  // The layout's stages, shared by every candidate of the layout (each holds every rank).
  std::shared_ptr<const std::vector<StageShape>> shapes;
  std::vector<int> counts;
  SplitEstimate estimate;
  // Its climb, done ahead (Search::stop_at_ceiling) and not yet counted: refine takes it as its
  // own when the search comes to climb this candidate.
  std::shared_ptr<Climb> climb;
};

// A climb done ahead of its turn: where it ended, and what it did to the search's counters,
// its best so far and its closest refusal, applied when the search climbs the candidate (as if
// it were climbed then: a climb reads only its candidate).
struct Climb {
  Candidate end;
  long long evaluated = 0, refused = 0;
  // The best so far when it ended (the least fitting estimate priced, the climb's included).
  double best = std::numeric_limits<double>::infinity();
  double closest_over = std::numeric_limits<double>::infinity();
  std::string closest;  // the first refusal of that overshoot
};

inline double overshoot(const SplitEstimate& e) {
  double worst = 0;
  for (const auto& s : e.stages)
    if (s.memory.capacity > 0) worst = std::max(worst, s.memory.total / s.memory.capacity);
  return worst;
}

class Search {
 public:
  Search(const Scenario& scenario, const SplitSearchOptions& options,
         const costmodels::CostModels& models)
      : scenario_(scenario), options_(options), models_(models), estimator_(scenario, models) {}

  // Once, on a search made for it: its answer moves out.
  SplitSearchResult run() &&;

 private:
  // Prices a candidate for the search: no texts, no schedule for a split that does not fit, and
  // none for one that cannot come in below `stop_above` (the time it has to beat). A stopped
  // candidate is one the search would have priced and passed over; the kept ones are priced in
  // full again at the end, so what the search returns is estimate_split's answer.
  void price(Candidate& c, double stop_above) {
    price_once(c, stop_above);
    // Left open, one that keeps every activation and just misses tries selective recompute: it
    // frees only the attention core's state.
    using Kind = ActivationCheckpointing::Kind;
    if (c.estimate.fits || c.checkpointing != Kind::None || options_.checkpointing ||
        overshoot(c.estimate) > 1.1)
      return;
    c.checkpointing = Kind::Selective;
    price_once(c, stop_above);
    if (!c.estimate.fits) c.checkpointing = Kind::None;
  }
  void price_once(Candidate& c, double stop_above) {
    SplitOptions o = options_.estimate;
    o.activation_checkpointing.kind = c.checkpointing;
    if (c.by_speed) o.replica_batches = ReplicaBatches::BySpeed;
    c.split.stages = lay_out(*c.shapes, c.counts, c.split.schedule.virtual_stages);
    EstimateLimits limits;
    limits.describe = false;
    limits.schedule_unfit = false;
    limits.stop_above = stop_above;
    c.estimate = estimator_.estimate(c.split, o, limits);
    ++result_.evaluated;
    if (c.estimate.fits && c.estimate.complete)
      best_so_far_ = std::min(best_so_far_, c.estimate.iteration_s);
    if (options_.progress && (result_.evaluated & 255) == 0) report_progress();
    if (!c.estimate.fits) {
      ++result_.refused;
      // A refusal without a rank over its bytes (a stage whose replicas cannot place the
      // samples with the state) names no bytes: the farthest from fitting, kept only until a
      // candidate over its bytes comes.
      const long long samples = scenario_.job.global_batch / c.split.micro_batches;
      bool placed = true;
      for (const auto& st : c.estimate.stages) {
        long long held = 0;
        for (int b : st.replica_micro_batches) held += b;
        placed = placed && (st.replica_micro_batches.empty() || held >= samples);
      }
      const double over = placed ? overshoot(c.estimate) : std::numeric_limits<double>::max();
      if (over < closest_over_) {
        closest_over_ = over;
        closest_ = c.estimate.refusal +
                   " (closest candidate: " + describe(c.split, scenario_.cluster.num_ranks()) + ")";
      }
    }
  }
  void price_in_full(Candidate& c) {
    SplitOptions o = options_.estimate;
    o.activation_checkpointing.kind = c.checkpointing;
    if (c.by_speed) o.replica_batches = ReplicaBatches::BySpeed;
    c.estimate = estimator_.estimate(c.split, o);
  }
  // Per-layer seconds of one micro-batch on each stage, over its T (the balancing weights).
  std::vector<double> speeds(const std::vector<StageShape>& shapes, int m, bool recompute);
  void explore(const std::vector<StageShape>& shapes);
  void refine(Candidate& c);
  // Whether the candidates priced reached SplitSearchOptions::budget (with the bound).
  bool over_budget() const {
    return options_.bound && options_.budget > 0 && result_.evaluated >= options_.budget;
  }
  // refine of every list's best, skipping those the bound shows cannot change the answer.
  void refine_all();
  // Throws SplitCeilingReached when SplitSearchOptions::ceiling holds: every split priced is
  // estimated at least the ceiling and no climb left can end below it (the caller knows the
  // families left are floored at least the ceiling). Asked once: after a climb below the
  // ceiling is possible, the search runs on as without one, and the climbs it did ahead are
  // kept with their candidates (Candidate::climb), not done again.
  void stop_at_ceiling();
  // The refusal when no layout of the search meets the fixed dimensions: the dimensions given
  // and the layouts the search has (node runs, type blocks) with this cluster's counts.
  std::string no_layout_message() const;
  // Climbs c ahead of its turn: the search's counters, best so far and closest refusal are
  // left as they were, the climb's own kept in c.climb (refine applies them).
  void climb_ahead(Candidate& c);
  // What a climb done ahead did to the search, now (as refine would have done it).
  void count_climb(const Climb& climb);
  bool ceiling_asked_ = false;
  // A floor on every split of c's layout at its m, schedule and recompute, over every
  // placement of the boundaries (schedule_floor; at least `enough` when none comes below it).
  double family_floor(const Candidate& c, double enough);
  // Whether some stage's replicas carry unequal micro-batches.
  static bool uneven(const SplitEstimate& e);
  // Stages of whole consecutive nodes (node_runs), every T that keeps each TP group on one node
  // and one GPU type.
  void explore_node_runs();

  // Ranks alike for the search (split_search_classes.cpp): on nodes of one class (every device,
  // link, NIC and switch feature equal; names aside) at one local index. What the floors read
  // of a TP group (its GPUs, its collectives on its node's links) is the same for every group
  // whose first rank is of one class, so each is worked out once per class, not per rank: a
  // homogeneous fleet has as many classes as a node has GPUs.
  void index_rank_classes();
  // The class of a TP group: its first rank's, or a key of its own where it leaves its node
  // (then nothing says two such groups are alike).
  long long group_class(const int* first, int T) const {
    const auto& ranks = scenario_.cluster.ranks();
    const int a = first[0], z = first[T - 1];
    if (ranks[static_cast<std::size_t>(a)].node != ranks[static_cast<std::size_t>(z)].node)
      return -1 - static_cast<long long>(a);
    return rank_class_[static_cast<std::size_t>(a)];
  }
  // A stage's TP groups by class, read once per stage (kept with the shape): the floors and
  // the balancing weights then cost O(classes).
  const ShapeClasses& shape_classes(const StageShape& shape);

  // A floor on one micro-batch of b samples through one layer of a stage whose first TP group
  // is `tp_group` (SplitEstimator::layer_step_floor), with every layer recomputed or none,
  // remembered per class of the group.
  double step_floor(const std::vector<int>& tp_group, int b, bool recompute = false) {
    const auto key =
        std::make_tuple(group_class(tp_group.data(), static_cast<int>(tp_group.size())),
                        static_cast<int>(tp_group.size()), b, recompute);
    auto it = step_floors_.find(key);
    if (it == step_floors_.end()) {
      SplitOptions o = options_.estimate;
      o.activation_checkpointing.kind =
          recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
      it = step_floors_.emplace(key, estimator_.layer_step_floor(tp_group, b, o)).first;
    }
    return it->second;
  }
  // The least step floor of type t's stages at T and b: over the first TP group of the type on
  // each of its nodes (the groups of one node are alike), one per class.
  double type_step_floor(std::size_t t, int T, int b, bool recompute);
  void explore_type_blocks(const std::vector<std::vector<int>>& tps);
  // A floor on every split of a family no higher than busy_floor's, cheap enough for every
  // family of a large cluster: the least over the micro-batch counts m >= p and recompute
  // choices of the layers over the family's summed rates (`rows`: per type, its stages' summed
  // layers per second per (m, recompute) slot, `choices` slots per m; negative: m not allowed).
  double family_rate_floor(std::span<const std::vector<double>* const> rows, int p,
                           std::size_t choices) const;
  // A floor on one micro-batch through one layer of a stage at m micro-batches: its replicas'
  // even cut, or for replicas balanced by speed the rate of all of them together, each at its
  // most efficient (the whole micro-batch: a step's time per sample does not grow with the
  // samples).
  double stage_floor(const StageShape& shape, int m, bool recompute = false);
  // A floor on the DP tail one layer adds to a stage of even replicas
  // (SplitEstimator::tail_floor_per_parameter over its parameters per TP rank); 0 for replicas
  // balanced by speed (their shares are uneven). Remembered by (first rank, T, ranks).
  double tail_floor(const StageShape& shape) {
    if (shape.by_speed) return 0;
    const auto key = std::make_tuple(shape.ranks.front(), shape.tensor_parallel,
                                     static_cast<int>(shape.ranks.size()));
    auto it = tail_floors_.find(key);
    if (it == tail_floors_.end()) {
      std::vector<int> group;
      for (std::size_t i = 0; i < shape.ranks.size();
           i += static_cast<std::size_t>(shape.tensor_parallel))
        group.push_back(shape.ranks[i]);
      const double per_parameter = estimator_.tail_floor_per_parameter(group, options_.estimate);
      it = tail_floors_
               .emplace(key, per_parameter * costmodels::layer_parameters(scenario_.job.model) /
                                 shape.tensor_parallel)
               .first;
    }
    return it->second;
  }
  // The most layers a stage of `shape` can hold at m micro-batches, with every layer
  // recomputed or none, its order beginning with the forwards `warmup` (an id of warmup_id or
  // forwards_id; -1: one forward, which every order begins with; split_search_memory.cpp):
  // above it no candidate fits, whatever its sharding or sequence parallelism. In whole chunks
  // of the warmup's schedule. Remembered.
  int layer_cap(const StageShape& shape, int m, bool recompute, int warmup = -1);
  // The forwards stage `stage` of p runs before its first backward under `schedule` at m
  // micro-batches (warmup_chunks of its stage_order), and `forwards` forwards of one chunk
  // (GPipe's m at any place): ids for layer_cap, each distinct prefix interned once.
  int warmup_id(int p, int m, const pipeline::PipelineSchedule& schedule, int stage);
  int forwards_id(int forwards);
  int intern_warmup(std::vector<int> chunks, int virtual_stages);
  // Per stage of a layout, its layer_cap at m under `schedule` (empty for one stage: an FSDP
  // plan, whose memory is another rule's).
  void layout_caps(const std::vector<StageShape>& shapes, int m, bool recompute,
                   const pipeline::PipelineSchedule& schedule, std::vector<int>& caps) {
    caps.clear();
    const int p = static_cast<int>(shapes.size());
    if (p < 2) return;
    for (int s = 0; s < p; ++s)
      caps.push_back(layer_cap(shapes[static_cast<std::size_t>(s)], m, recompute,
                               warmup_id(p, m, schedule, s)));
  }
  // Floors on the estimate's transfer time (split_search_transfers.cpp): a transfer of at
  // least `bytes`, the bytes a boundary puts on its node's NIC, a layout's slowest (`wraps`:
  // interleaved, the last stage sends to the first), a type family's in any order of its blocks
  // (`stages`: per type, its stages).
  double transfer_floor(int src, int dst, double bytes);  // remembered
  double boundary_bytes(const StageShape& from, int m);
  double layout_transfer_floor(const std::vector<StageShape>& shapes, int m, int virtual_stages);
  // Per stage, the floor of its boundary's transfer to the next (the last's to the first).
  void boundary_floors(const std::vector<StageShape>& shapes, int m, std::vector<double>& own);
  double family_transfer_floor(const TypeFamily& f,
                               const std::vector<std::vector<StageShape>>& stages, int m);
  // A floor on every split of a layout at m micro-batches and one schedule: busy_floor (whole
  // layers in whole chunks, its tail over m in each step) and pipeline_floor, and under a
  // schedule that chains round trips through every stage (not GPipe: it starts every forward
  // first) round_trip_floor with the layout's transfer floor. `step`, `tail` and `cap` per stage
  // (cap empty: none). Returns as soon as a part reaches `enough` (a value no lower).
  double schedule_floor(const std::vector<StageShape>& shapes, int m,
                        const pipeline::PipelineSchedule& schedule, std::span<const double> step,
                        std::span<const double> tail, std::span<const int> cap,
                        double enough = std::numeric_limits<double>::infinity()) {
    const int layers = scenario_.job.model.num_layers;
    const int p = static_cast<int>(shapes.size());
    const int v = schedule.virtual_stages;
    busy_step_.resize(step.size());
    for (std::size_t s = 0; s < step.size(); ++s) busy_step_[s] = step[s] + tail[s] / m;
    ones_.assign(step.size(), 1);
    double floor = split_detail::busy_floor(busy_step_, ones_, m, layers, cap, v);
    if (floor >= enough) return floor;
    floor = std::max(floor, pipeline_floor(step, tail, m, v, layers, cap));
    if (floor >= enough) return floor;
    if (p >= 2 && schedule.kind != pipeline::PipelineSchedule::Kind::GPipe) {
      const double p2p = layout_transfer_floor(shapes, m, v);
      floor = std::max(
          floor, round_trip_floor(step, trips(p, m, schedule), v, layers, p2p, tail.front(), cap));
      if (floor >= enough) return floor;
    }
    if (!std::isfinite(enough)) return floor;
    // Whole layers again, with the fill and drain and the transfers micro-batch 0 and the last
    // backward cross: no placement at or below `enough` means none of the family is.
    hops(shapes, m);
    return pipeline_feasible(step, tail, hop_, m, v, layers, cap, enough) ? floor : enough;
  }
  // placement_floor of a candidate's own boundaries: a candidate at or above the time it has
  // to beat is passed over without its estimate (which could only be as high).
  double candidate_floor(const Candidate& c) {
    const std::vector<StageShape>& shapes = *c.shapes;
    const std::size_t p = shapes.size();
    const int m = c.split.micro_batches;
    cand_step_.resize(p);
    cand_tail_.resize(p);
    for (std::size_t s = 0; s < p; ++s) {
      cand_step_[s] =
          stage_floor(shapes[s], m, c.checkpointing == ActivationCheckpointing::Kind::Full);
      cand_tail_[s] = tail_floor(shapes[s]);
    }
    hops(shapes, m);
    return placement_floor(cand_step_, cand_tail_, hop_, m, c.split.schedule.virtual_stages,
                           c.counts);
  }
  // hop_[s]: the transfer floors micro-batch 0's forward and the last backward cross between
  // stage 0 and stage s.
  void hops(const std::vector<StageShape>& shapes, int m) {
    boundary_floors(shapes, m, own_);
    hop_.assign(shapes.size(), 0.0);
    for (std::size_t s = 1; s < shapes.size(); ++s) hop_[s] = hop_[s - 1] + 2 * own_[s - 1];
  }
  // round_trips of stage 0's order, remembered per (p, m, schedule).
  int trips(int p, int m, const pipeline::PipelineSchedule& schedule);
  // The schedules explore tries at p stages and m micro-batches.
  std::vector<pipeline::PipelineSchedule> schedules_for(int p, int m) const {
    using Kind = pipeline::PipelineSchedule::Kind;
    std::vector<pipeline::PipelineSchedule> out;
    for (Kind k : {Kind::GPipe, Kind::OneFOneB}) out.push_back({k, 1});
    const int layers = scenario_.job.model.num_layers;
    if (p >= 2 && m % p == 0)
      for (int v = 2; v * p <= layers && v <= pipeline::kMaxVirtualStages; ++v)
        if (layers % v == 0) out.push_back({Kind::Interleaved, v});
    if (options_.schedule)
      out.erase(std::remove_if(out.begin(), out.end(),
                               [&](const auto& s) { return !(s == *options_.schedule); }),
                out.end());
    return out;
  }
  // Whether candidates with every layer recomputed (true) or none (false) are searched.
  std::vector<bool> recompute_choices() const {
    if (options_.checkpointing)
      return {*options_.checkpointing == ActivationCheckpointing::Kind::Full};
    return {false, true};
  }
  // A layout's least busy floor over the micro-batch counts explore would try.
  double layout_floor(const std::vector<StageShape>& shapes);
  // Queues a layout (or a type-block family: every order of its types) under its floor;
  // explore_pending explores them lowest floor first, skipping every one whose floor is no
  // better than the best split priced by then (all of them in order without the bound).
  void enqueue(std::vector<StageShape> shapes) {
    const double floor = options_.bound ? layout_floor(shapes) : 0;
    pending_.push_back({floor, std::move(shapes), {}});
  }
  void explore_pending();
  // A family's stages in one order of its type blocks.
  std::vector<StageShape> family_layout(const TypeFamily& f,
                                        const std::vector<std::size_t>& order) const;
  // A family's least busy floor over the micro-batch counts explore would try, with every
  // layer recomputed or none, each type's stages holding at most their layer_cap.
  // With `tau` finite, a micro-batch count and schedule no order of the family can bring to
  // `tau` (family_feasible: whole layers, the last stage's fill and drain) counts as `tau`.
  double busy_floor(const TypeFamily& f, int p,
                    double tau = std::numeric_limits<double>::infinity()) {
    const Job& job = scenario_.job;
    const std::size_t types = f.k.size();
    double least = std::numeric_limits<double>::infinity();
    std::vector<double> step(types), tail(types);
    std::vector<std::vector<StageShape>> stages(types);
    for (std::size_t t = 0; t < types; ++t) {
      // The least over the type's stages.
      const auto& ranks = blocks_[t].ranks;
      const std::size_t size = ranks.size() / static_cast<std::size_t>(f.k[t]);
      tail[t] = std::numeric_limits<double>::infinity();
      for (int i = 0; i < f.k[t]; ++i) {
        StageShape shape;
        shape.ranks.assign(ranks.begin() + static_cast<std::ptrdiff_t>(i * size),
                           ranks.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
        shape.tensor_parallel = f.tp[t];
        shape.replicas = static_cast<int>(size) / f.tp[t];
        tail[t] = std::min(tail[t], tail_floor(shape));
        stages[t].push_back(std::move(shape));
      }
    }
    std::vector<int> cap(types), gpipe_cap(types);
    std::vector<double> pure(types);  // the steps without the tail
    std::vector<double> stage_step;   // per stage (k copies of its type's)
    std::vector<int> stage_cap;
    for (int m : batch_divisors_) {
      if (m < p) continue;
      bool ok = true;
      for (std::size_t t = 0; ok && t < types; ++t)
        ok = job.global_batch % (static_cast<long long>(m) * stages[t].front().replicas) == 0;
      if (!ok) continue;
      const double p2p = family_transfer_floor(f, stages, m);
      for (bool rc : recompute_choices()) {
        for (std::size_t t = 0; t < types; ++t) {
          const int b = static_cast<int>(job.global_batch /
                                         (static_cast<long long>(m) * stages[t].front().replicas));
          pure[t] = type_step_floor(t, f.tp[t], b, rc);
          step[t] = pure[t] + tail[t] / m;
          // A one-stage split is an FSDP plan, whose memory is another rule's: no cap.
          cap[t] = gpipe_cap[t] = job.model.num_layers;
          if (p > 1) {
            cap[t] = gpipe_cap[t] = 0;
            for (const StageShape& shape : stages[t]) {
              cap[t] = std::max(cap[t], layer_cap(shape, m, rc));
              gpipe_cap[t] = std::max(gpipe_cap[t], layer_cap(shape, m, rc, forwards_id(m)));
            }
          }
        }
        stage_step.clear();
        stage_cap.clear();
        for (std::size_t t = 0; t < types; ++t)
          for (int i = 0; i < f.k[t]; ++i) {
            stage_step.push_back(pure[t]);
            stage_cap.push_back(cap[t]);
          }
        const double busy = split_detail::busy_floor(step, f.k, m, job.model.num_layers, cap);
        const auto refined = [&](double floor, const pipeline::PipelineSchedule& schedule,
                                 std::span<const int> caps) {
          const double at = std::min(tau, least);
          return floor < at && std::isfinite(at) &&
                         !family_feasible(pure, tail, f.k, m, schedule.virtual_stages,
                                          job.model.num_layers, caps, at)
                     ? at
                     : floor;
        };
        for (const auto& schedule : schedules_for(p, m)) {
          if (schedule.kind == pipeline::PipelineSchedule::Kind::GPipe) {
            least = std::min(least, refined(split_detail::busy_floor(
                                                step, f.k, m, job.model.num_layers, gpipe_cap),
                                            schedule, gpipe_cap));
            continue;
          }
          if (busy >= least) continue;
          least = std::min(
              least,
              refined(std::max(busy, round_trip_floor(stage_step, trips(p, m, schedule),
                                                      schedule.virtual_stages, job.model.num_layers,
                                                      p2p * schedule.virtual_stages, 0, stage_cap)),
                      schedule, cap));
        }
      }
    }
    return least;
  }

  void report_progress() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < std::chrono::seconds(2)) return;
    last_report_ = now;
    std::ostringstream line;
    line << "3D split search: " << result_.evaluated << " candidates priced in "
         << format_seconds(std::chrono::duration<double>(now - started_).count());
    if (std::isfinite(best_so_far_)) line << ", best so far " << format_seconds(best_so_far_);
    // The search ends when the floor of what is left reaches the best.
    if (frontier_ > 0 && std::isfinite(frontier_))
      line << ", the rest at least " << format_seconds(frontier_);
    // Before the queue opens: the type families floored so far.
    if (frontier_ == 0 && !pending_.empty()) line << ", " << pending_.size() << " layouts queued";
    options_.progress(line.str());
  }

  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_report_ = started_;
  double best_so_far_ = std::numeric_limits<double>::infinity();
  double frontier_ = 0;  // the floor of the layout or family explored last (lowest first)
  std::vector<double> busy_step_, own_, hop_;  // schedule_floor's scratch
  std::vector<double> cand_step_, cand_tail_;  // candidate_floor's
  std::vector<int> ones_;
  std::map<std::tuple<long long, int, int, bool>, double> step_floors_;  // (class, T, b, rc)
  std::vector<long long> rank_class_;  // per rank (index_rank_classes)
  std::vector<int> rank_block_;  // per rank: its GPU type's index in blocks_ (index_rank_classes)
  std::vector<std::vector<std::size_t>> block_leads_;  // per type block: type_step_floor's
  std::map<std::tuple<int, int, int>, double> tail_floors_;
  // (first rank, ranks, T, balanced by speed, samples, recompute, in flight)
  // The floors' memos are looked up millions of times on a large cluster: hashed, on keys
  // packed into two words.
  struct PairHash {
    std::size_t operator()(const std::pair<unsigned long long, unsigned long long>& k) const {
      return std::hash<unsigned long long>{}(k.first * 0x9E3779B97F4A7C15ULL ^ k.second);
    }
  };
  using Memo =
      std::unordered_map<std::pair<unsigned long long, unsigned long long>, double, PairHash>;
  Memo layer_caps_;  // (fits id, replicas, T, by speed, recompute), (samples, warmup id)
  std::map<std::vector<std::pair<std::string, double>>, int> fit_sets_;  // ShapeClasses::fits_id
  // warmup_id's ids per (p, m, kind, V), by stage; the interned prefixes (chunks, then −V);
  // forwards_id's ids by count.
  std::unordered_map<unsigned long long, std::vector<int>> warmups_;
  std::map<std::vector<int>, int> warmup_ids_;
  std::vector<const std::vector<int>*> warmup_of_;
  std::vector<int> forwards_ids_;
  Memo transfer_floors_;  // (from, to), bytes
  // family_transfer_floor's parts: a type's own boundaries ((type, T, stages), m·2) and two
  // types' least joint ((both), m·2 + 1).
  Memo family_transfers_;
  std::map<std::tuple<int, int, int, int>, int> trips_;  // (p, m, kind, V)
  const Scenario& scenario_;
  const SplitSearchOptions& options_;
  const costmodels::CostModels& models_;
  SplitEstimator estimator_;
  std::vector<TypeBlock> blocks_;
  // The micro-batch counts to try: the fixed one (check_fixed_dimensions: it divides the
  // batch), else the global batch's divisors, found once.
  std::vector<int> batch_divisors_;
  bool backend_only_ = false;  // plan only what the backend runs (backend_only)
  SplitSearchResult result_;
  struct Pending {
    double floor = 0;
    std::vector<StageShape> shapes;
    std::optional<TypeFamily> family;
  };
  std::vector<Pending> pending_;
  // Per (P, schedule kind, V, stage layout), best first, at most refine_per_stages: refining the
  // best of each schedule, not only of each P, because the rounding of the first deal can favour
  // one schedule's start over another's optimum. The key also holds the stages' types and T, so one
  // stage layout's many near-equal variants (shardings, micro-batch counts) do not crowd out
  // another layout.
  std::map<std::tuple<int, int, int, std::vector<int>>, std::vector<Candidate>> fitting_;
  double closest_over_ = std::numeric_limits<double>::infinity();
  std::string closest_;
};

}  // namespace cephalo::planner::split_detail

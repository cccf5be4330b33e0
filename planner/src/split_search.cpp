#include "cephalo/planner/split_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "split_search_rules.hpp"

namespace cephalo::planner {
namespace {

using costmodels::ComputePhase;
using split_detail::backend_only;
using split_detail::check_fixed_dimensions;
using split_detail::overshoot;

// The ranks of one GPU type, in rank order (node-major), and how many it has on each node.
struct TypeBlock {
  const DeviceSpec* spec = nullptr;
  std::vector<int> ranks;
  std::map<int, int> per_node;
};

std::vector<TypeBlock> type_blocks(const Cluster& cluster) {
  std::vector<TypeBlock> blocks;
  for (int r = 0; r < cluster.num_ranks(); ++r) {
    const auto& rank = cluster.ranks()[static_cast<std::size_t>(r)];
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const TypeBlock& b) {
      return b.spec->name == rank.slot->spec.name;
    });
    if (it == blocks.end()) {
      blocks.push_back({&rank.slot->spec, {}, {}});
      it = blocks.end() - 1;
    }
    it->ranks.push_back(r);
    ++it->per_node[rank.node];
  }
  return blocks;
}

// In ascending order, by trial division up to the square root: a global batch of 2^40 costs
// 2^20 steps, not 2^40. Divisors beyond `cap` are left out (no search dimension exceeds it).
std::vector<int> divisors(long long n, long long cap = std::numeric_limits<int>::max()) {
  std::vector<long long> low, high;
  for (long long i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      low.push_back(i);
      if (i != n / i) high.push_back(n / i);
    }
  std::vector<int> d;
  for (long long x : low)
    if (x <= cap) d.push_back(static_cast<int>(x));
  for (auto it = high.rbegin(); it != high.rend(); ++it)
    if (*it <= cap) d.push_back(static_cast<int>(*it));
  return d;
}

// TP degrees a type can use: dividing the heads and key/value heads and every node's count of
// the type, so the contiguous groups of T ranks stay inside one node.
std::vector<int> tp_degrees(const TypeBlock& block, const ModelSpec& model,
                            const std::optional<int>& fixed) {
  const int kv = model.kv_heads > 0 ? model.kv_heads : model.heads;
  std::vector<int> out;
  int smallest_node = std::numeric_limits<int>::max();
  for (const auto& [node, count] : block.per_node) smallest_node = std::min(smallest_node, count);
  for (int t = 1; t <= smallest_node; ++t) {
    if (fixed && t != *fixed) continue;
    if (model.heads % t != 0 || kv % t != 0) continue;
    bool fits = true;
    for (const auto& [node, count] : block.per_node) fits = fits && count % t == 0;
    if (fits) out.push_back(t);
  }
  return out;
}

// One stage before its layers are known.
struct StageShape {
  int type = 0;  // the GPU type's block; for a stage of whole nodes, -1 - its first node
  std::vector<int> ranks;
  int tensor_parallel = 1;
  int replicas = 1;
  // Whole nodes, possibly of several GPU types: its replicas' samples are balanced by speed
  // (ReplicaBatches::BySpeed) instead of cut evenly.
  bool by_speed = false;
};

// Every composition of `n` nodes into runs of consecutive nodes (run sizes in order); above
// kComposedNodes nodes only runs of one size dividing n (2^(n-1) compositions grow too fast).
constexpr int kComposedNodes = 10;
std::vector<std::vector<int>> node_runs(int n) {
  std::vector<std::vector<int>> out;
  if (n <= kComposedNodes) {
    for (unsigned mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<int> runs{1};
      for (int i = 1; i < n; ++i) {
        if (mask & (1u << (i - 1)))
          runs.push_back(1);
        else
          ++runs.back();
      }
      out.push_back(std::move(runs));
    }
    return out;
  }
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) out.push_back(std::vector<int>(static_cast<std::size_t>(n / k), k));
  return out;
}

// The stages' layer ranges from per-stage counts (in layers; a multiple of V when interleaved):
// virtual stage k = c·p + s holds count_s / V layers, the virtual stages tiling 0..L−1.
std::vector<PipelineStage> lay_out(const std::vector<StageShape>& shapes,
                                   const std::vector<int>& counts, int virtual_stages) {
  const std::size_t p = shapes.size();
  std::vector<PipelineStage> stages(p);
  int pos = 0;
  for (int c = 0; c < virtual_stages; ++c)
    for (std::size_t s = 0; s < p; ++s) {
      const int q = counts[s] / virtual_stages;
      stages[s].chunks.push_back({pos, pos + q});
      pos += q;
    }
  for (std::size_t s = 0; s < p; ++s) {
    stages[s].ranks = shapes[s].ranks;
    stages[s].tensor_parallel = shapes[s].tensor_parallel;
  }
  return stages;
}

struct Candidate {
  ModelSplit split;
  bool recompute = false;
  bool selective = false;
  bool by_speed = false;
  std::vector<StageShape> shapes;
  std::vector<int> counts;
  SplitEstimate estimate;
};

class Search {
 public:
  Search(const Scenario& scenario, const SplitSearchOptions& options,
         const costmodels::CostModels& models)
      : scenario_(scenario), options_(options), models_(models), estimator_(scenario, models) {}

  SplitSearchResult run();

 private:
  // Prices a candidate for the search: no texts, no schedule for a split that does not fit, and
  // none for one that cannot come in below `stop_above` (the time it has to beat). A stopped
  // candidate is one the search would have priced and passed over; the kept ones are priced in
  // full again at the end, so what the search returns is estimate_split's answer.
  void price(Candidate& c, double stop_above) {
    price_once(c, stop_above);
    // Left open, one that keeps every activation and just misses tries selective recompute: it
    // frees only the attention core's state (the log-sum-exps, ~1 % of a layer's activations).
    if (c.estimate.fits || c.recompute || c.selective || options_.recompute || options_.selective ||
        overshoot(c.estimate) > 1.1)
      return;
    c.selective = true;
    price_once(c, stop_above);
    c.selective = c.estimate.fits;
  }
  void price_once(Candidate& c, double stop_above) {
    SplitOptions o = options_.estimate;
    o.activation_checkpointing.kind = checkpointing_of(c.recompute, c.selective);
    if (c.by_speed) o.replica_batches = ReplicaBatches::BySpeed;
    c.split.stages = lay_out(c.shapes, c.counts, c.split.schedule.virtual_stages);
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
      const double over = overshoot(c.estimate);
      if (over < closest_over_) {
        closest_over_ = over;
        closest_ = c.estimate.refusal +
                   " (closest candidate: " + describe(c.split, scenario_.cluster.num_ranks()) + ")";
      }
    }
  }
  void price_in_full(Candidate& c) {
    SplitOptions o = options_.estimate;
    o.activation_checkpointing.kind = checkpointing_of(c.recompute, c.selective);
    if (c.by_speed) o.replica_batches = ReplicaBatches::BySpeed;
    c.estimate = estimator_.estimate(c.split, o);
  }
  // Per-layer seconds of one micro-batch on each stage, over its T (the balancing weights).
  std::vector<double> speeds(const std::vector<StageShape>& shapes, int m, bool recompute) const;
  void explore(const std::vector<StageShape>& shapes);
  void refine(Candidate& c);
  // Stages of whole consecutive nodes (node_runs), every T that keeps each TP group on one node
  // and one GPU type.
  void explore_node_runs();

  void report_progress() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < std::chrono::seconds(2)) return;
    last_report_ = now;
    std::ostringstream line;
    line << "3D split search: " << result_.evaluated << " candidates priced in "
         << format_seconds(std::chrono::duration<double>(now - started_).count());
    if (std::isfinite(best_so_far_)) line << ", best so far " << format_seconds(best_so_far_);
    options_.progress(line.str());
  }

  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_report_ = started_;
  double best_so_far_ = std::numeric_limits<double>::infinity();
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
  // Per (P, schedule kind, V, stage layout), best first, at most refine_per_stages: refining the
  // best of each schedule, not only of each P, because the rounding of the first deal can favour
  // one schedule's start over another's optimum. The key also holds the stages' types and T, so one
  // stage layout's many near-equal variants (shardings, micro-batch counts) do not crowd out
  // another layout.
  std::map<std::tuple<int, int, int, std::vector<int>>, std::vector<Candidate>> fitting_;
  double closest_over_ = std::numeric_limits<double>::infinity();
  std::string closest_;
};

std::vector<double> Search::speeds(const std::vector<StageShape>& shapes, int m,
                                   bool recompute) const {
  const Job& job = scenario_.job;
  std::vector<double> out;
  const auto& ranks = scenario_.cluster.ranks();
  for (const auto& s : shapes) {
    if (s.by_speed) {
      // Replicas of several speeds share each micro-batch in proportion to their speed, so
      // the stage's speed is the sum of its replicas' samples per second (at an even cut).
      const int b = std::max(1, static_cast<int>(job.global_batch / m) / s.replicas);
      double rate = 0;
      for (std::size_t j = 0; j < s.ranks.size();
           j += static_cast<std::size_t>(s.tensor_parallel)) {
        const DeviceSpec& spec = ranks[static_cast<std::size_t>(s.ranks[j])].slot->spec;
        double t = models_.compute->unit_time(spec, job, 1, ComputePhase::Forward, b).seconds +
                   models_.compute->unit_time(spec, job, 1, ComputePhase::Backward, b).seconds;
        if (recompute)
          t += models_.compute->unit_time(spec, job, 1, ComputePhase::Recompute, b).seconds;
        rate += t > 0 ? s.tensor_parallel * b / t : 1.0;
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

  std::vector<int> layout;  // type and T of every stage
  for (const auto& s : shapes) {
    layout.push_back(s.type);
    layout.push_back(s.tensor_parallel);
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
  std::vector<StageSharding> shardings = {StageSharding::Full, StageSharding::Hybrid,
                                          StageSharding::Optimizer, StageSharding::None};
  if (options_.sharding) shardings = {*options_.sharding};
  // Sequence parallelism hands neighbours 1/T of the sequence: every stage the same T.
  std::vector<bool> sps = {false};
  if (any_tp && uniform_tp) sps.push_back(true);
  if (options_.sequence_parallel) {
    if (*options_.sequence_parallel && (!any_tp || !uniform_tp))
      return;  // refused by check_model_split
    sps = {*options_.sequence_parallel};
  }
  std::vector<bool> rcs = {false, true};
  if (options_.recompute) rcs = {*options_.recompute};

  for (int m : ms)
    for (bool rc : rcs) {
      const auto speed = speeds(shapes, m, rc);
      for (const auto& schedule : schedules) {
        if (options_.schedule && !(schedule == *options_.schedule)) continue;
        const int v = schedule.virtual_stages;
        if (schedule.kind == Kind::Interleaved && m % p != 0) {
          ++result_.pruned;
          continue;
        }
        // Interleaved stages deal out units of V layers, so every chunk has count / V layers.
        std::vector<int> counts = balanced_layer_counts(layers / v, speed);
        for (int& c : counts) c *= v;
        for (StageSharding sharding : shardings)
          for (bool sp : sps) {
            Candidate c;
            c.split.tensor_parallel = shapes.front().tensor_parallel;
            c.split.sequence_parallel = sp;
            c.split.schedule = schedule;
            c.split.micro_batches = m;
            c.split.sharding = sharding;
            c.recompute = rc;
            c.selective = !rc && options_.selective;
            c.by_speed = shapes.front().by_speed;
            c.shapes = shapes;
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
            price(c, listed != fitting_.end() && listed->second.size() >= keep
                         ? listed->second.back().estimate.iteration_s
                         : std::numeric_limits<double>::infinity());
            if (!c.estimate.fits || !c.estimate.complete) continue;
            auto& best = fitting_[key];
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

// Moves one boundary by one unit (V layers under interleaving) at a time, taking the first move
// that lowers the estimate of a fitting split, until none does.
void Search::refine(Candidate& c) {
  const std::size_t p = c.counts.size();
  const int unit = c.split.schedule.virtual_stages;
  bool improved = true;
  for (int round = 0; improved && round < 1000; ++round) {
    improved = false;
    for (std::size_t i = 0; i + 1 < p && !improved; ++i)
      for (int dir : {-1, 1}) {
        Candidate n = c;
        n.counts[i] += dir * unit;
        n.counts[i + 1] -= dir * unit;
        if (n.counts[i] < unit || n.counts[i + 1] < unit) continue;
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

void Search::explore_node_runs() {
  const Cluster& cluster = scenario_.cluster;
  const ModelSpec& model = scenario_.job.model;
  const auto& ranks = cluster.ranks();
  std::vector<std::vector<int>> node_ranks;
  for (int r = 0; r < cluster.num_ranks(); ++r) {
    const auto node = static_cast<std::size_t>(ranks[static_cast<std::size_t>(r)].node);
    if (node_ranks.size() <= node) node_ranks.resize(node + 1);
    node_ranks[node].push_back(r);
  }
  // A node-run layout whose stages hold one GPU type each is a type-block layout already
  // searched (with even replicas); it is searched here too, with balanced ones.
  const int kv = model.kv_heads > 0 ? model.kv_heads : model.heads;
  const int max_p = std::min(model.num_layers, options_.max_pipeline_stages);
  for (const auto& runs : node_runs(static_cast<int>(node_ranks.size()))) {
    const int p = static_cast<int>(runs.size());
    const bool searched =
        p <= max_p && (!options_.pipeline_stages || p == *options_.pipeline_stages);
    const bool one_per_node = static_cast<std::size_t>(p) == node_ranks.size();
    if (!searched && !one_per_node) {
      ++result_.pruned;
      continue;
    }
    for (int t = 1; t <= 64; ++t) {
      if (options_.tensor_parallel && t != *options_.tensor_parallel) continue;
      if (model.heads % t != 0 || kv % t != 0) continue;
      // Every TP group of t consecutive ranks on one node and one GPU type.
      bool ok = true;
      for (const auto& nr : node_ranks) {
        ok = ok && nr.size() % static_cast<std::size_t>(t) == 0;
        for (std::size_t i = 0; ok && i < nr.size(); ++i)
          ok = ranks[static_cast<std::size_t>(nr[i])].slot->spec.name ==
               ranks[static_cast<std::size_t>(nr[i - i % static_cast<std::size_t>(t)])]
                   .slot->spec.name;
      }
      if (!ok) continue;
      std::vector<StageShape> shapes;
      std::size_t node = 0;
      for (int run : runs) {
        StageShape sh;
        sh.type = -1 - static_cast<int>(node);
        for (int k = 0; k < run; ++k, ++node)
          sh.ranks.insert(sh.ranks.end(), node_ranks[node].begin(), node_ranks[node].end());
        sh.tensor_parallel = t;
        sh.replicas = static_cast<int>(sh.ranks.size()) / t;
        sh.by_speed = true;
        shapes.push_back(std::move(sh));
      }
      if (searched) explore(shapes);
      // With one stage per node of several GPU types, also one stage per node and type, in
      // rank order: the slow GPUs get fewer layers instead of fewer samples (and hold only
      // their layers' state), and the pipeline still crosses each NIC once.
      if (!one_per_node) continue;
      std::vector<StageShape> typed;
      for (std::size_t n = 0; n < node_ranks.size(); ++n)
        for (int r : node_ranks[n]) {
          const std::string& gpu = ranks[static_cast<std::size_t>(r)].slot->spec.name;
          if (typed.empty() || typed.back().type != -1 - static_cast<int>(n) ||
              ranks[static_cast<std::size_t>(typed.back().ranks.front())].slot->spec.name != gpu) {
            typed.emplace_back();
            typed.back().type = -1 - static_cast<int>(n);
            typed.back().tensor_parallel = t;
            typed.back().by_speed = true;
          }
          typed.back().ranks.push_back(r);
        }
      if (typed.size() == shapes.size()) continue;  // nodes of one type: the node stages
      for (auto& sh : typed) sh.replicas = static_cast<int>(sh.ranks.size()) / t;
      // Or k stages per node, each with a k-th of every type run of the node (every run's TP
      // groups dealt out in turn): stages still of mixed speeds, each holding fewer layers.
      std::vector<std::size_t> runs_of_type;  // the typed stages' sizes
      for (const auto& sh : typed)
        runs_of_type.push_back(sh.ranks.size() / static_cast<std::size_t>(t));
      for (int k = 2; k <= 8; ++k) {
        bool divides = true;
        for (std::size_t g : runs_of_type)
          divides = divides && g % static_cast<std::size_t>(k) == 0;
        const int pk = k * static_cast<int>(node_ranks.size());
        if (!divides || pk > max_p || (options_.pipeline_stages && pk != *options_.pipeline_stages))
          continue;
        std::vector<StageShape> sliced(static_cast<std::size_t>(pk));
        for (std::size_t i = 0; i < sliced.size(); ++i) {
          sliced[i].type = -2000 - static_cast<int>(i);
          sliced[i].tensor_parallel = t;
          sliced[i].by_speed = true;
        }
        std::size_t n_first = 0;  // the node's first typed stage
        for (std::size_t n = 0; n < node_ranks.size(); ++n) {
          std::size_t n_end = n_first;
          while (n_end < typed.size() &&
                 ranks[static_cast<std::size_t>(typed[n_end].ranks.front())].node ==
                     static_cast<int>(n))
            ++n_end;
          for (std::size_t r = n_first; r < n_end; ++r) {
            const auto& rr = typed[r].ranks;
            const std::size_t per = rr.size() / static_cast<std::size_t>(k);
            for (int i = 0; i < k; ++i)
              sliced[n * static_cast<std::size_t>(k) + static_cast<std::size_t>(i)].ranks.insert(
                  sliced[n * static_cast<std::size_t>(k) + static_cast<std::size_t>(i)].ranks.end(),
                  rr.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(i)),
                  rr.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(i + 1)));
          }
          n_first = n_end;
        }
        for (auto& sh : sliced) sh.replicas = static_cast<int>(sh.ranks.size()) / t;
        explore(sliced);
      }
      const int pt = static_cast<int>(typed.size());
      if (pt > max_p || (options_.pipeline_stages && pt != *options_.pipeline_stages)) continue;
      // The layout key tells a node's type stages apart.
      for (std::size_t i = 0; i < typed.size(); ++i) typed[i].type = -1000 - static_cast<int>(i);
      explore(typed);
    }
  }
}

SplitSearchResult Search::run() {
  check_fixed_dimensions(scenario_, options_);
  const Job& job = scenario_.job;
  backend_only_ = backend_only(scenario_.cluster);
  batch_divisors_ = options_.micro_batches ? std::vector<int>{*options_.micro_batches}
                                           : divisors(job.global_batch);
  const int layers = job.model.num_layers;
  blocks_ = type_blocks(scenario_.cluster);
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
  // Every choice of T per type, stage count per type and order of the types' blocks.
  std::vector<std::size_t> tp_index(types, 0);
  for (; options_.type_stages;) {
    std::vector<int> tp(types);
    for (std::size_t t = 0; t < types; ++t) tp[t] = tps[t][tp_index[t]];
    std::vector<std::vector<int>> ks(types);
    for (std::size_t t = 0; t < types; ++t) {
      const int n = static_cast<int>(blocks_[t].ranks.size());
      for (int k : divisors(n))
        if ((n / k) % tp[t] == 0)
          ks[t].push_back(k);
        else
          ++result_.pruned;
    }
    std::vector<std::size_t> k_index(types, 0);
    bool k_done = false;
    for (std::size_t t = 0; t < types; ++t) k_done = k_done || ks[t].empty();
    while (!k_done) {
      int p = 0;
      for (std::size_t t = 0; t < types; ++t) p += ks[t][k_index[t]];
      const int max_p = std::min(layers, options_.max_pipeline_stages);
      if (p <= max_p && (!options_.pipeline_stages || p == *options_.pipeline_stages)) {
        std::vector<std::size_t> order(types);
        std::iota(order.begin(), order.end(), 0);
        do {
          std::vector<StageShape> shapes;
          for (std::size_t t : order) {
            const int k = ks[t][k_index[t]];
            const auto& ranks = blocks_[t].ranks;
            const std::size_t size = ranks.size() / static_cast<std::size_t>(k);
            for (int i = 0; i < k; ++i) {
              StageShape s;
              s.type = static_cast<int>(t);
              s.ranks.assign(ranks.begin() + static_cast<std::ptrdiff_t>(i * size),
                             ranks.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
              s.tensor_parallel = tp[t];
              s.replicas = static_cast<int>(size) / tp[t];
              shapes.push_back(std::move(s));
            }
          }
          explore(shapes);
        } while (std::next_permutation(order.begin(), order.end()));
      } else {
        ++result_.pruned;
      }
      std::size_t t = 0;
      while (t < types && ++k_index[t] == ks[t].size()) k_index[t++] = 0;
      k_done = t == types;
    }
    std::size_t t = 0;
    while (t < types && ++tp_index[t] == tps[t].size()) tp_index[t++] = 0;
    if (t == types) break;
  }

  if (options_.node_stages) explore_node_runs();

  if (fitting_.empty()) {
    if (closest_.empty())
      throw InfeasibleError("no 3D split of " + std::to_string(scenario_.cluster.num_ranks()) +
                            " ranks satisfies the fixed dimensions and the divisibility rules");
    throw InfeasibleError("no 3D split fits in memory; the tightest: " + closest_);
  }
  const Candidate* winner = nullptr;
  std::map<int, Candidate> by_p;
  std::vector<const Candidate*> refined;
  for (auto& [key, list] : fitting_)
    for (auto& c : list) {
      refine(c);
      refined.push_back(&c);
      const int p = std::get<0>(key);
      const auto it = by_p.find(p);
      if (it == by_p.end() || c.estimate.iteration_s < it->second.estimate.iteration_s) by_p[p] = c;
    }
  std::vector<Candidate> best_of_p;
  for (auto& [p, c] : by_p) {
    price_in_full(c);
    best_of_p.push_back(std::move(c));
  }
  for (const auto& c : best_of_p)
    if (!winner || c.estimate.iteration_s < winner->estimate.iteration_s) winner = &c;
  result_.split = winner->split;
  result_.recompute = winner->recompute;
  result_.selective = winner->selective;
  result_.replica_batches = winner->by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even;
  result_.estimate = winner->estimate;
  // The estimate's best few for the simulator (split_plan.hpp): its estimate is a first-order
  // model, so the replay, not the estimate, has the last word among near equals.
  std::stable_sort(refined.begin(), refined.end(), [](const Candidate* a, const Candidate* b) {
    return a->estimate.iteration_s < b->estimate.iteration_s;
  });
  // The best with even replicas and the best whose replicas differ in samples go too: the
  // estimate's errors differ between them.
  const auto uneven = [](const Candidate* c) {
    for (const auto& st : c->estimate.stages)
      if (std::adjacent_find(st.replica_micro_batches.begin(), st.replica_micro_batches.end(),
                             std::not_equal_to<>()) != st.replica_micro_batches.end())
        return true;
    return false;
  };
  for (bool want : {false, true}) {
    const auto it = std::find_if(refined.begin(), refined.end(),
                                 [&](const Candidate* c) { return uneven(c) == want; });
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
      if (!(o.split == f.split) || o.recompute != f.recompute) return false;
      if (o.selective != f.selective) return false;
      for (std::size_t s = 0; s < o.estimate.stages.size(); ++s) {
        const StageEstimate& a = o.estimate.stages[s];
        const StageEstimate& b = f.estimate.stages[s];
        if (a.replica_micro_batches != b.replica_micro_batches || a.memory.total != b.memory.total)
          return false;
      }
      return true;
    };
    if (std::any_of(result_.finalists.begin(), result_.finalists.end(), same_plan)) continue;
    result_.finalists.push_back({std::move(f.split), f.recompute,
                                 f.by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even,
                                 std::move(f.estimate), f.selective});
  }
  for (auto& c : best_of_p)
    result_.best_per_stages.push_back({std::move(c.split), c.recompute,
                                       c.by_speed ? ReplicaBatches::BySpeed : ReplicaBatches::Even,
                                       std::move(c.estimate), c.selective});
  return result_;
}

}  // namespace

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options,
                               const costmodels::CostModels& models) {
  return Search(scenario, options, models).run();
}

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options) {
  return search_split(scenario, options, costmodels::make_cost_models(scenario));
}

}  // namespace cephalo::planner

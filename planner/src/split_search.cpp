#include "cephalo/planner/split_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "cephalo/core/error.hpp"

namespace cephalo::planner {
namespace {

using costmodels::ComputePhase;

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

std::vector<int> divisors(long long n) {
  std::vector<int> d;
  for (long long i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
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
  int type = 0;
  std::vector<int> ranks;
  int tensor_parallel = 1;
  int replicas = 1;
};

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
  std::vector<StageShape> shapes;
  std::vector<int> counts;
  SplitEstimate estimate;
};

double overshoot(const SplitEstimate& e) {
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

  SplitSearchResult run();

 private:
  // Prices a candidate for the search: no texts, no schedule for a split that does not fit, and
  // none for one that cannot come in below `stop_above` (the time it has to beat). A stopped
  // candidate is one the search would have priced and passed over; the kept ones are priced in
  // full again at the end, so what the search returns is estimate_split's answer.
  void price(Candidate& c, double stop_above) {
    SplitOptions o = options_.estimate;
    o.activation_checkpointing.kind =
        c.recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
    c.split.stages = lay_out(c.shapes, c.counts, c.split.schedule.virtual_stages);
    EstimateLimits limits;
    limits.describe = false;
    limits.schedule_unfit = false;
    limits.stop_above = stop_above;
    c.estimate = estimator_.estimate(c.split, o, limits);
    ++result_.evaluated;
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
    o.activation_checkpointing.kind =
        c.recompute ? ActivationCheckpointing::Kind::Full : ActivationCheckpointing::Kind::None;
    c.estimate = estimator_.estimate(c.split, o);
  }
  // Per-layer seconds of one micro-batch on each stage, over its T (the balancing weights).
  std::vector<double> speeds(const std::vector<StageShape>& shapes, int m, bool recompute) const;
  void explore(const std::vector<StageShape>& shapes);
  void refine(Candidate& c);

  const Scenario& scenario_;
  const SplitSearchOptions& options_;
  const costmodels::CostModels& models_;
  SplitEstimator estimator_;
  std::vector<TypeBlock> blocks_;
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
  for (const auto& s : shapes) {
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
  for (int m : divisors(job.global_batch)) {
    if (options_.micro_batches && m != *options_.micro_batches) continue;
    bool ok = m >= p;
    for (const auto& s : shapes)
      ok = ok && job.global_batch % (static_cast<long long>(m) * s.replicas) == 0;
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
            c.shapes = shapes;
            c.counts = counts;
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

SplitSearchResult Search::run() {
  const Job& job = scenario_.job;
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
  for (;;) {
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

  if (fitting_.empty()) {
    if (closest_.empty())
      throw InfeasibleError("no 3D split of " + std::to_string(scenario_.cluster.num_ranks()) +
                            " ranks satisfies the fixed dimensions and the divisibility rules");
    throw InfeasibleError("no 3D split fits in memory; the tightest: " + closest_);
  }
  const Candidate* winner = nullptr;
  std::map<int, Candidate> by_p;
  std::vector<Candidate> refined;
  for (auto& [key, list] : fitting_)
    for (auto& c : list) {
      refine(c);
      const int p = std::get<0>(key);
      const auto it = by_p.find(p);
      if (it == by_p.end() || c.estimate.iteration_s < it->second.estimate.iteration_s) by_p[p] = c;
      refined.push_back(c);
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
  result_.estimate = winner->estimate;
  // The runners-up, fastest first: what the plan falls back on when the replay finds the
  // winner out of memory (split_plan.hpp).
  std::stable_sort(refined.begin(), refined.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate.iteration_s < b.estimate.iteration_s;
  });
  for (auto& c : refined) {
    if (result_.runners_up.size() >= SplitSearchResult::kRunnersUp) break;
    const auto same = [&c](const SplitCandidate& o) {
      return o.split == c.split && o.recompute == c.recompute;
    };
    if ((c.split == winner->split && c.recompute == winner->recompute) ||
        std::any_of(result_.runners_up.begin(), result_.runners_up.end(), same))
      continue;
    price_in_full(c);
    result_.runners_up.push_back({std::move(c.split), c.recompute, std::move(c.estimate)});
  }
  for (auto& c : best_of_p)
    result_.best_per_stages.push_back({std::move(c.split), c.recompute, std::move(c.estimate)});
  return result_;
}

}  // namespace

std::vector<int> balanced_layer_counts(int layers, const std::vector<double>& speed) {
  const std::size_t p = speed.size();
  if (p == 0 || layers < static_cast<int>(p))
    throw std::invalid_argument("balanced_layer_counts: fewer layers than stages");
  const double total = std::accumulate(speed.begin(), speed.end(), 0.0);
  // Each stage one layer first, the rest by largest remainder of its share.
  const int rest = layers - static_cast<int>(p);
  std::vector<int> counts(p, 1);
  std::vector<std::pair<double, std::size_t>> remainder;
  int dealt = 0;
  for (std::size_t s = 0; s < p; ++s) {
    const double share = total > 0 ? rest * speed[s] / total : static_cast<double>(rest) / p;
    const int whole = static_cast<int>(std::floor(share));
    counts[s] += whole;
    dealt += whole;
    remainder.push_back({share - whole, s});
  }
  std::sort(remainder.begin(), remainder.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int i = 0; dealt < rest; ++i, ++dealt)
    ++counts[remainder[static_cast<std::size_t>(i)].second];
  return counts;
}

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options,
                               const costmodels::CostModels& models) {
  return Search(scenario, options, models).run();
}

SplitSearchResult search_split(const Scenario& scenario, const SplitSearchOptions& options) {
  return search_split(scenario, options, costmodels::make_cost_models(scenario));
}

}  // namespace cephalo::planner

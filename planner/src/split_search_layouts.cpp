// The stage layouts the 3D split search explores (split_search_impl.hpp): stages of whole
// consecutive nodes, and stages of one GPU type each, with the floors that let it skip them.
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "split_search_impl.hpp"

namespace cephalo::planner::split_detail {

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
      if (searched) enqueue(shapes);
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
        enqueue(std::move(sliced));
      }
      const int pt = static_cast<int>(typed.size());
      if (pt > max_p || (options_.pipeline_stages && pt != *options_.pipeline_stages)) continue;
      // The layout key tells a node's type stages apart.
      for (std::size_t i = 0; i < typed.size(); ++i) typed[i].type = -1000 - static_cast<int>(i);
      enqueue(std::move(typed));
    }
  }
}

// Every choice of T per type and stage count per type (a family), queued to be explored in
// every order of the types' blocks under a floor (split_search_bound.hpp: the floor does not
// depend on the order). A large cluster has hundreds of thousands of families (1,024 GPUs of 4
// types: 270,656 at P <= 40), and busy_floor walks every micro-batch count, recompute choice
// and schedule with the memory caps and transfers: each is queued under the rate floor instead
// (family_rate_floor, from a table per type, T and stage count), and busy_floor is worked out
// only for the families the queue comes to (explore_pending), most never.
void Search::explore_type_blocks(const std::vector<std::vector<int>>& tps) {
  const Job& job = scenario_.job;
  const int layers = job.model.num_layers;
  const std::size_t types = blocks_.size();
  const int max_p = std::min(layers, options_.max_pipeline_stages);
  const std::vector<bool> rcs = recompute_choices();
  const std::size_t slots = batch_divisors_.size() * rcs.size();
  // Per type, T (its index) and stage count: per (m, recompute) the layers per second a
  // family's stages of the type take at most together (k over a stage's least busy time per
  // layer, m steps and its tail), negative where m does not cut the type's replicas evenly.
  std::vector<std::map<std::pair<std::size_t, int>, std::vector<double>>> rates(types);
  const auto rate_row = [&](std::size_t t, std::size_t i, int k) -> const std::vector<double>& {
    auto [it, fresh] = rates[t].try_emplace({i, k});
    if (!fresh) return it->second;
    std::vector<double>& row = it->second;
    row.assign(slots, -1.0);
    const int T = tps[t][i];
    const auto& ranks = blocks_[t].ranks;
    const std::size_t size = ranks.size() / static_cast<std::size_t>(k);
    const int replicas = static_cast<int>(size) / T;
    double tail = std::numeric_limits<double>::infinity();
    if (options_.bound)
      for (int s = 0; s < k; ++s) {
        StageShape shape;
        shape.ranks.assign(ranks.begin() + static_cast<std::ptrdiff_t>(s * size),
                           ranks.begin() + static_cast<std::ptrdiff_t>((s + 1) * size));
        shape.tensor_parallel = T;
        shape.replicas = replicas;
        tail = std::min(tail, tail_floor(shape));
      }
    for (std::size_t j = 0; j < batch_divisors_.size(); ++j) {
      const long long per = static_cast<long long>(batch_divisors_[j]) * replicas;
      if (job.global_batch % per != 0) continue;
      const int b = static_cast<int>(job.global_batch / per);
      for (std::size_t r = 0; r < rcs.size(); ++r) {
        const double busy =
            batch_divisors_[j] * type_step_floor(t, T, b, rcs[r]) + (options_.bound ? tail : 0.0);
        row[j * rcs.size() + r] = busy > 0 ? k / busy : std::numeric_limits<double>::infinity();
      }
    }
    return row;
  };
  std::vector<const std::vector<double>*> rows(types);
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
      TypeFamily f{tp, std::vector<int>(types), 0};
      int p = 0;
      for (std::size_t t = 0; t < types; ++t) p += f.k[t] = ks[t][k_index[t]];
      if (p <= max_p && (!options_.pipeline_stages || p == *options_.pipeline_stages)) {
        if (options_.bound) {
          for (std::size_t t = 0; t < types; ++t) rows[t] = &rate_row(t, tp_index[t], f.k[t]);
          f.floor = family_rate_floor(rows, p, rcs.size());
        }
        pending_.push_back({f.floor, {}, std::move(f)});
        if (options_.progress && (pending_.size() & 4095) == 0) report_progress();
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
}

double Search::family_rate_floor(std::span<const std::vector<double>* const> rows, int p,
                                 std::size_t choices) const {
  // At any m and recompute choice, stage s holding l_s layers is busy at least l_s over its
  // rate, and the busiest of them holds the iteration up: with every layer placed, that is at
  // least the layers over the rates' sum (busy_floor's level, whole layers and caps aside).
  const int layers = scenario_.job.model.num_layers;
  double least = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < batch_divisors_.size(); ++j) {
    if (batch_divisors_[j] < p) continue;
    for (std::size_t r = 0; r < choices; ++r) {
      double sum = 0;
      bool ok = true;
      for (const std::vector<double>* row : rows) {
        const double rate = (*row)[j * choices + r];
        ok = ok && rate >= 0;
        sum += rate;
      }
      if (ok && sum > 0) least = std::min(least, layers / sum);
    }
  }
  return least;
}

double Search::stage_floor(const StageShape& shape, int m, bool recompute) {
  const long long batch = scenario_.job.global_batch;
  const auto T = static_cast<std::size_t>(shape.tensor_parallel);
  if (!shape.by_speed)
    return step_floor({shape.ranks.begin(), shape.ranks.begin() + shape.tensor_parallel},
                      static_cast<int>(batch / (static_cast<long long>(m) * shape.replicas)),
                      recompute);
  const int total = static_cast<int>(batch / m);
  double rate = 0;
  // Alike groups have one floor: each class's once, times its groups.
  for (const auto& [j, count] : shape_classes(shape).groups) {
    const double step = step_floor({shape.ranks.begin() + static_cast<std::ptrdiff_t>(j),
                                    shape.ranks.begin() + static_cast<std::ptrdiff_t>(j + T)},
                                   total, recompute);
    rate += step > 0 ? count / step : std::numeric_limits<double>::infinity();
  }
  return rate > 0 ? 1 / rate : 0;
}

double Search::layout_floor(const std::vector<StageShape>& shapes) {
  const Job& job = scenario_.job;
  const int p = static_cast<int>(shapes.size());
  double least = std::numeric_limits<double>::infinity();
  const std::size_t n = shapes.size();
  std::vector<double> pure(n), tail(n);
  std::vector<int> cap;
  for (std::size_t s = 0; s < n; ++s) tail[s] = tail_floor(shapes[s]);
  for (int m : batch_divisors_) {
    bool ok = m >= p;
    for (const auto& s : shapes)
      ok = ok && (s.by_speed ? job.global_batch / m >= s.replicas
                             : job.global_batch % (static_cast<long long>(m) * s.replicas) == 0);
    if (!ok) continue;
    for (bool rc : recompute_choices()) {
      for (std::size_t s = 0; s < n; ++s) {
        pure[s] = stage_floor(shapes[s], m, rc);
      }
      // Each schedule's caps hold the micro-batches its order puts in flight at each place.
      for (const auto& schedule : schedules_for(p, m)) {
        layout_caps(shapes, m, rc, schedule, cap);
        least = std::min(least, schedule_floor(shapes, m, schedule, pure, tail, cap,
                                               std::min(least, best_so_far_)));
      }
    }
  }
  return least;
}

std::vector<StageShape> Search::family_layout(const TypeFamily& f,
                                              const std::vector<std::size_t>& order) const {
  std::vector<StageShape> shapes;
  for (std::size_t t : order) {
    const int k = f.k[t];
    const auto& ranks = blocks_[t].ranks;
    const std::size_t size = ranks.size() / static_cast<std::size_t>(k);
    for (int i = 0; i < k; ++i) {
      StageShape s;
      s.type = static_cast<int>(t);
      s.ranks.assign(ranks.begin() + static_cast<std::ptrdiff_t>(i * size),
                     ranks.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
      s.tensor_parallel = f.tp[t];
      s.replicas = static_cast<int>(size) / f.tp[t];
      shapes.push_back(std::move(s));
    }
  }
  return shapes;
}

void Search::explore_pending() {
  const std::size_t types = blocks_.size();
  std::vector<std::size_t> first(types);
  std::iota(first.begin(), first.end(), 0);
  if (!options_.bound) {
    // Everything in the order queued, every family's orders in turn.
    for (const Pending& next : pending_) {
      if (!next.family) {
        explore(next.shapes);
        continue;
      }
      std::vector<std::size_t> order = first;
      do explore(family_layout(*next.family, order));
      while (std::next_permutation(order.begin(), order.end()));
    }
    pending_.clear();
    return;
  }
  // Lowest floor first. A family's floor holds for every order of its blocks, whose transfers
  // it can floor only by the least over pairs of types; taken from the queue, the family is
  // split into its orders, each queued under its own layout's floor (the transfers of its
  // boundaries as they lie), so an order that cannot beat the best is skipped whole. Ties leave
  // in the order queued (`seq`), so the search does not depend on the heap's order.
  struct Entry {
    double floor;
    std::size_t seq;
    Pending item;
  };
  const auto later = [](const Entry& a, const Entry& b) {
    return a.floor != b.floor ? a.floor > b.floor : a.seq > b.seq;
  };
  std::vector<Entry> heap;
  std::size_t seq = 0;
  for (Pending& next : pending_) heap.push_back({next.floor, seq++, std::move(next)});
  pending_.clear();
  std::make_heap(heap.begin(), heap.end(), later);
  std::size_t orders = 1;
  for (std::size_t t = 2; t <= types; ++t) orders *= t;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Entry next = std::move(heap.back());
    heap.pop_back();
    frontier_ = next.floor;
    if (options_.progress) report_progress();
    // Lowest floor first: what is left is at least this one's.
    if (next.floor >= options_.ceiling) stop_at_ceiling();
    if (next.floor < best_so_far_ && over_budget()) {
      // Lowest floor first: what is left is at least this one's.
      result_.unexplored_floor = next.floor;
      result_.unexplored += next.item.family ? static_cast<long long>(orders) : 1;
      for (const Entry& e : heap)
        if (e.floor < best_so_far_)
          result_.unexplored += e.item.family ? static_cast<long long>(orders) : 1;
        else
          result_.bounded += e.item.family ? static_cast<long long>(orders) : 1;
      heap.clear();
      break;
    }
    if (next.floor >= best_so_far_) {
      result_.bounded += static_cast<long long>(next.item.family ? orders : 1);
      continue;
    }
    if (!next.item.family) {
      explore(next.item.shapes);
      continue;
    }
    // Before its orders are laid out: the family again, with whole layers and the last
    // stage's fill and drain tested against the best so far. A family queued under its rate
    // floor goes back under this one where it is higher, behind the lower floors now first.
    {
      TypeFamily& f = *next.item.family;
      int p = 0;
      for (int k : f.k) p += k;
      const double floor = busy_floor(f, p, best_so_far_);
      if (floor >= best_so_far_) {
        result_.bounded += static_cast<long long>(orders);
        continue;
      }
      if (!f.exact) {
        f.exact = true;
        if (floor > next.floor) {
          f.floor = floor;
          next.item.floor = floor;
          heap.push_back({floor, seq++, std::move(next.item)});
          std::push_heap(heap.begin(), heap.end(), later);
          continue;
        }
      }
    }
    std::vector<std::size_t> order = first;
    do {
      std::vector<StageShape> shapes = family_layout(*next.item.family, order);
      const double floor = std::max(next.floor, layout_floor(shapes));
      heap.push_back({floor, seq++, {floor, std::move(shapes), {}}});
      std::push_heap(heap.begin(), heap.end(), later);
    } while (std::next_permutation(order.begin(), order.end()));
  }
  // What is left now is the hill climb of every layout's best: no floor to report.
  frontier_ = std::numeric_limits<double>::infinity();
}

}  // namespace cephalo::planner::split_detail

#include "split_search_bound.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace cephalo::planner::split_detail {

namespace {

// The least of Σ_j l_j·a_j over l_j = least + x_j, 0 <= x_j <= room[j], Σ x_j = free: the free
// layers on the smallest a_j first. `by_a` is scratch of a's size.
double least_sum(std::span<const double> a, int least, int free, std::span<const int> room,
                 std::vector<std::size_t>& by_a) {
  double sum = 0;
  for (double x : a) sum += x * least;
  std::iota(by_a.begin(), by_a.end(), std::size_t{0});
  std::sort(by_a.begin(), by_a.end(), [&](std::size_t i, std::size_t j) { return a[i] < a[j]; });
  for (std::size_t i : by_a) {
    const int take = std::min(free, room[i]);
    sum += a[i] * take;
    free -= take;
    if (free == 0) break;
  }
  return sum;
}

// Each stage's room above its least layers (whole chunks up to its cap); false when the caps
// cannot hold every layer.
bool rooms(std::span<const int> cap, std::size_t p, int least, int free, std::vector<int>& room) {
  room.assign(p, free);
  if (cap.empty()) return free >= 0;
  long long all = 0;
  for (std::size_t s = 0; s < p; ++s) {
    const int most = cap[s] / least * least;
    if (most < least) return false;
    room[s] = std::min(free, most - least);
    all += room[s];
  }
  return free >= 0 && all >= free;
}

}  // namespace

double pipeline_floor(std::span<const double> step, std::span<const double> tail, int m,
                      int virtual_stages, int layers, std::span<const int> cap) {
  const std::size_t p = step.size();
  if (p == 0) return 0;
  const double V = virtual_stages;
  const int least_layers = virtual_stages;  // every chunk holds at least one layer
  const int free_layers = layers - static_cast<int>(p) * least_layers;
  const double inf = std::numeric_limits<double>::infinity();
  if (free_layers < 0) return inf;
  // The free layers each stage may take above its least: whole chunks up to its cap.
  std::vector<int> room;
  if (!rooms(cap, p, least_layers, free_layers, room)) return inf;
  // For weights λ^A_s, λ^B_s >= 0 summing to 1 the largest sum is at least the weighted sum of
  // the sums, Σ_j l_j·a_j, and that is at least its least over the boundary placements: every
  // stage at its least layers, the free layers on the smallest a_j (each up to its room).
  std::vector<double> a(p);
  std::vector<std::size_t> by_a(p);
  const auto bound_for = [&](const std::vector<double>& la, const std::vector<double>& lb) {
    double after = 0, all_a = 0;
    for (std::size_t j = p; j-- > 0;) {
      a[j] = step[j] * (m * la[j] + after / V) + (m * step[j] + tail[j]) * lb[j];
      after += la[j];
      all_a += la[j];
    }
    a[0] += tail[0] * all_a;
    return least_sum(a, least_layers, free_layers, room, by_a);
  };
  // The B sums balanced (λ^B_s ∝ 1 / their per-layer rate), the A sums balanced likewise, the
  // last stage's A sum alone, and mixes of these.
  const auto balanced = [&](auto per_layer) {
    std::vector<double> w(p, 0.0);
    double total = 0;
    for (std::size_t s = 0; s < p; ++s) total += per_layer(s) > 0 ? 1 / per_layer(s) : 0;
    if (total > 0)
      for (std::size_t s = 0; s < p; ++s) w[s] = per_layer(s) > 0 ? 1 / per_layer(s) / total : 0;
    return w;
  };
  const auto b_bal = balanced([&](std::size_t s) { return m * step[s] + tail[s]; });
  const auto a_bal = balanced([&](std::size_t s) { return m * step[s]; });
  std::vector<double> last(p, 0.0), la(p), lb(p);
  last.back() = 1;
  double best = 0;
  for (double alpha : {0.0, 0.25, 0.5, 0.75, 1.0})
    for (double t : {0.0, 0.5, 0.9, 1.0}) {
      for (std::size_t s = 0; s < p; ++s) {
        la[s] = (1 - alpha) * ((1 - t) * a_bal[s] + t * last[s]);
        lb[s] = alpha * b_bal[s];
      }
      best = std::max(best, bound_for(la, lb));
    }
  // Every stage holds at least its least layers, after the chunks before it.
  double before = 0;
  for (std::size_t s = 0; s < p; ++s) {
    best = std::max(best, (m * step[s] + tail[s]) * least_layers);
    best = std::max(best, m * step[s] * least_layers + before + tail[0] * least_layers);
    before += step[s] * least_layers / V;
  }
  return best;
}

double busy_floor(std::span<const double> step, std::span<const int> count, int m, int layers,
                  std::span<const int> cap, int unit) {
  const double inf = std::numeric_limits<double>::infinity();
  unit = std::max(1, unit);
  // In units of `unit` layers: every stage holds at least one, at most its cap's whole units.
  struct Group {
    double per_unit;  // a stage's busy time per unit
    int count, units, most;
  };
  std::vector<Group> groups;
  long long held = 0;
  double level = 0;
  for (std::size_t s = 0; s < step.size(); ++s) {
    if (count[s] <= 0) continue;
    const int most = cap.empty() ? layers / unit : cap[s] / unit;
    if (most < 1) return inf;
    groups.push_back({m * step[s] * unit, count[s], 1, most});
    held += count[s];
    level = std::max(level, groups.back().per_unit);
  }
  const long long needed = layers / unit;
  if (held > needed) return inf;  // more stages than units: no placement
  // The least level at which the stages, each holding the most whole units whose busy time is
  // within it (up to its cap), hold every unit: raise the group whose next unit costs least,
  // one unit on each of its stages at a time (a level reached by one stage is reached).
  const auto later = [&](std::size_t a, std::size_t b) {
    return groups[a].per_unit * (groups[a].units + 1) > groups[b].per_unit * (groups[b].units + 1);
  };
  std::vector<std::size_t> heap;
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (groups[g].units < groups[g].most) heap.push_back(g);
  std::make_heap(heap.begin(), heap.end(), later);
  while (held < needed) {
    if (heap.empty()) return inf;  // the caps hold fewer than the layers
    std::pop_heap(heap.begin(), heap.end(), later);
    Group& g = groups[heap.back()];
    ++g.units;
    held += g.count;
    level = std::max(level, g.per_unit * g.units);
    if (g.units < g.most)
      std::push_heap(heap.begin(), heap.end(), later);
    else
      heap.pop_back();
  }
  return level;
}

std::vector<int> floor_deal(std::span<const double> per_layer, int layers, int unit,
                            std::span<const int> cap) {
  unit = std::max(1, unit);
  const std::size_t p = per_layer.size();
  const int units = layers / unit;
  if (p == 0 || units < static_cast<int>(p)) return {};
  std::vector<int> held(p, 1), most(p, units);
  for (std::size_t s = 0; s < p; ++s) {
    if (!cap.empty()) most[s] = cap[s] / unit;
    if (most[s] < 1) return {};
  }
  // Each next unit to the stage whose busy sum it raises least: a heap of (sum it would
  // reach, stage), the lowest stage first on a tie.
  using Next = std::pair<double, std::size_t>;
  std::vector<Next> heap;
  const auto after = [&](std::size_t s) { return per_layer[s] * (held[s] + 1); };
  for (std::size_t s = 0; s < p; ++s)
    if (held[s] < most[s]) heap.emplace_back(after(s), s);
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (int left = units - static_cast<int>(p); left > 0; --left) {
    if (heap.empty()) return {};
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const std::size_t s = heap.back().second;
    heap.pop_back();
    if (++held[s] < most[s]) {
      heap.emplace_back(after(s), s);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  for (int& h : held) h *= unit;
  return held;
}

bool pipeline_feasible(std::span<const double> step, std::span<const double> tail,
                       std::span<const double> hop, int m, int virtual_stages, int layers,
                       std::span<const int> cap, double tau) {
  const std::size_t p = step.size();
  if (p == 0) return true;
  const int V = std::max(1, virtual_stages);
  const int units = layers / V;
  const auto stages = static_cast<int>(p);
  if (units < stages) return false;
  const double inf = std::numeric_limits<double>::infinity();
  // g[u]: the least G after the stages so far hold u units (G: stage 0's tail plus the
  // chunk-0 steps of the stages before, per micro-batch), every constraint so far met.
  std::vector<double> g(static_cast<std::size_t>(units) + 1, inf), next(g.size());
  g[0] = 0;
  for (int s = 0; s < stages; ++s) {
    const auto i = static_cast<std::size_t>(s);
    std::fill(next.begin(), next.end(), inf);
    const int most = std::min(cap.empty() ? units : cap[i] / V, units - (stages - 1 - s));
    const double busy = m * step[i] + tail[i];  // per layer
    const double before = s == 0 ? 0.0 : hop[i];
    for (int u = s; u + 1 <= units; ++u) {  // every earlier stage holds at least one unit
      const double at = g[static_cast<std::size_t>(u)];
      if (!std::isfinite(at)) continue;
      for (int k = 1; k <= most && u + k <= units - (stages - 1 - s); ++k) {
        const double l = static_cast<double>(k) * V;
        if (busy * l > tau || m * step[i] * l + at + before > tau) break;  // grows with k
        const double after = at + step[i] * k + (s == 0 ? tail[i] * l : 0.0);
        auto& slot = next[static_cast<std::size_t>(u + k)];
        slot = std::min(slot, after);
      }
    }
    g.swap(next);
  }
  return std::isfinite(g[static_cast<std::size_t>(units)]);
}

bool family_feasible(std::span<const double> step, std::span<const double> tail,
                     std::span<const int> count, int m, int virtual_stages, int layers,
                     std::span<const int> cap, double tau) {
  const std::size_t groups = step.size();
  const int V = std::max(1, virtual_stages);
  const long long units = layers / V;
  // Per group, the most units a stage holds with its busy sum at or below tau (and its cap).
  std::vector<long long> most(groups, 0);
  long long least_units = 0, most_units = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    if (count[g] <= 0) continue;
    const double per_unit = (m * step[g] + tail[g]) * V;
    long long u = per_unit > 0 ? static_cast<long long>(std::floor(tau / per_unit)) : units;
    u = std::min({u, units, cap.empty() ? units : static_cast<long long>(cap[g] / V)});
    if (u < 1) return false;
    most[g] = u;
    least_units += count[g];
    most_units += count[g] * u;
  }
  if (least_units > units || most_units < units) return false;
  // Groups by step, for the least chunk-0 steps of the stages before the last.
  std::vector<std::size_t> by_step;
  for (std::size_t g = 0; g < groups; ++g)
    if (count[g] > 0) by_step.push_back(g);
  std::sort(by_step.begin(), by_step.end(),
            [&](std::size_t a, std::size_t b) { return step[a] < step[b]; });
  for (std::size_t last : by_step)
    for (long long l = 1; l <= most[last]; ++l) {
      const double own = m * step[last] * static_cast<double>(l * V);
      if (own > tau) break;
      // The other stages: one unit each, the rest on the smallest steps first.
      long long left = units - l, stages = 0, room = 0;
      double before = 0;
      for (std::size_t g : by_step) {
        const long long n = count[g] - (g == last ? 1 : 0);
        stages += n;
        room += n * (most[g] - 1);
        before += static_cast<double>(n) * step[g];
      }
      left -= stages;
      if (left < 0) break;  // more layers on the last only leave less
      if (left > room) continue;
      for (std::size_t g : by_step) {
        const long long n = count[g] - (g == last ? 1 : 0);
        const long long take = std::min(left, n * (most[g] - 1));
        before += static_cast<double>(take) * step[g];
        left -= take;
      }
      if (own + before <= tau) return true;
    }
  return false;
}

double placement_floor(std::span<const double> step, std::span<const double> tail,
                       std::span<const double> hop, int m, int virtual_stages,
                       std::span<const int> layers) {
  const double V = std::max(1, virtual_stages);
  double worst = 0, before = 0;
  for (std::size_t s = 0; s < step.size(); ++s) {
    const double l = layers[s];
    worst = std::max(worst, (m * step[s] + tail[s]) * l);
    if (s == 0) {
      before = tail[0] * l;
    } else {
      worst = std::max(worst, m * step[s] * l + before + hop[s]);
    }
    before += step[s] * l / V;
  }
  return worst;
}

int round_trips(std::span<const pipeline::Step> order) {
  // depth[i]: the round trips micro-batch i's first forward on chunk 0 waits for at least.
  std::vector<int> depth;
  int done = 0;  // the most round trips ended by the backwards of chunk 0 seen so far
  for (const pipeline::Step& step : order) {
    if (step.chunk != 0) continue;
    const auto i = static_cast<std::size_t>(step.micro_batch);
    if (depth.size() <= i) depth.resize(i + 1, 0);
    if (step.pass == pipeline::Pass::Forward)
      depth[i] = done;
    else
      done = std::max(done, depth[i] + 1);
  }
  return done;
}

double round_trip_floor(std::span<const double> step, int trips, int virtual_stages, int layers,
                        double p2p, double tail0, std::span<const int> cap) {
  const std::size_t p = step.size();
  if (p < 2 || trips <= 0) return 0;
  const int free_layers = layers - static_cast<int>(p) * virtual_stages;
  std::vector<int> room;
  if (!rooms(cap, p, virtual_stages, free_layers, room))
    return std::numeric_limits<double>::infinity();
  std::vector<std::size_t> by_a(p);
  const double compute = least_sum(step, virtual_stages, free_layers, room, by_a);
  const double transfers = 2.0 * p2p;
  return trips * (compute + transfers) + tail0 * virtual_stages;
}

}  // namespace cephalo::planner::split_detail

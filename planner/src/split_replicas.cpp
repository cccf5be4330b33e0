#include "split_replicas.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>

namespace cephalo::planner {

namespace {

// The greedy's deal for n alike replicas of one cap: it hands out the pairs (time(L), j, L),
// replica j going to L samples, smallest first; with times nondecreasing in L every replica's
// pairs come in order, so the greedy's order is the sorted one. Levels of one time form a run:
// below the run every replica takes all of it; within the run replica 0 takes all of its levels
// first, then replica 1, and so on. Empty when a time falls with L (the greedy then runs).
std::vector<int> alike_deal(int total, int cap, std::size_t n,
                            const std::function<double(std::size_t, int)>& time) {
  long long left = total - static_cast<long long>(n);  // samples past one each
  int level = 1;                                       // every replica's samples so far
  double last = -std::numeric_limits<double>::infinity();
  while (left > 0 && level < cap) {
    // The run of levels level + 1 .. end with one time.
    const double t = time(0, level + 1);
    if (t < last) return {};
    int end = level + 1;
    while (end < cap && time(0, end + 1) == t) ++end;
    // A replica done with the run would take its next level before the others finish theirs.
    if (end < cap && time(0, end + 1) < t) return {};
    last = t;
    const long long g = end - level;
    if (left >= g * static_cast<long long>(n)) {
      left -= g * static_cast<long long>(n);
      level = end;
      continue;
    }
    // Within the run: replicas 0 .. q - 1 take all g levels, replica q takes r.
    std::vector<int> b(n, level);
    const auto q = static_cast<std::size_t>(left / g);
    for (std::size_t j = 0; j < q; ++j) b[j] = end;
    if (q < n) b[q] += static_cast<int>(left % g);
    return b;
  }
  return std::vector<int>(n, level);
}

}  // namespace

std::vector<int> balance_samples(int total, const std::vector<int>& caps,
                                 const std::function<double(std::size_t, int)>& time, bool alike) {
  const std::size_t n = caps.size();
  if (n == 0 || total < static_cast<int>(n)) return {};
  long long room = 0;
  for (int c : caps) {
    if (c < 1) return {};
    room += c;
  }
  if (room < total) return {};
  if (alike && std::adjacent_find(caps.begin(), caps.end(), std::not_equal_to<>()) == caps.end())
    if (auto b = alike_deal(total, caps.front(), n, time); !b.empty()) return b;
  std::vector<int> b(n, 1);
  // (time with one more sample, replica), smallest first, lowest replica on ties.
  using Next = std::pair<double, std::size_t>;
  std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
  for (std::size_t j = 0; j < n; ++j)
    if (caps[j] > 1) next.push({time(j, 2), j});
  for (int dealt = static_cast<int>(n); dealt < total; ++dealt) {
    const std::size_t j = next.top().second;
    next.pop();
    ++b[j];
    if (b[j] < caps[j]) next.push({time(j, b[j] + 1), j});
  }
  return b;
}

}  // namespace cephalo::planner

#include "split_replicas.hpp"

#include <algorithm>
#include <queue>
#include <tuple>

namespace cephalo::planner {

std::vector<int> balance_samples(int total, const std::vector<int>& caps,
                                 const std::function<double(std::size_t, int)>& time) {
  const std::size_t n = caps.size();
  if (n == 0 || total < static_cast<int>(n)) return {};
  long long room = 0;
  for (int c : caps) {
    if (c < 1) return {};
    room += c;
  }
  if (room < total) return {};
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

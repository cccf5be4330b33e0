#pragma once
// The order std::stable_sort gives the indices 0..n-1 of a list by a key, without the sort
// when the keys already ascend: the graph builder's pipeline transfers are laid out replica
// after replica, so their senders (and receivers) mostly come in order already, and a
// 100k-rank split plan has millions of them per replay.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace cephalo::traces::detail {

// Indices 0..n-1 ordered by key(i) ascending, equal keys in index order: exactly what
// std::stable_sort of the identity by key returns.
template <typename Key>
std::vector<std::uint32_t> stable_order(std::uint32_t n, Key key) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), std::uint32_t{0});
  bool ascending = true;
  for (std::uint32_t i = 1; i < n && ascending; ++i) ascending = !(key(i) < key(i - 1));
  if (!ascending)
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return key(x) < key(y); });
  return order;
}

}  // namespace cephalo::traces::detail

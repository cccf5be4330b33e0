// detail::stable_order (traces/src/stable_order.hpp) against std::stable_sort of the identity:
// the pipeline transfers' index must be the same order bit for bit whether its keys came in
// order (the sort skipped) or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "stable_order.hpp"

namespace cephalo::traces {
namespace {

std::vector<std::uint32_t> sorted_by(const std::vector<int>& keys) {
  std::vector<std::uint32_t> order(keys.size());
  std::iota(order.begin(), order.end(), std::uint32_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t x, std::uint32_t y) { return keys[x] < keys[y]; });
  return order;
}

TEST(StableOrder, IsStableSortOfTheIdentity) {
  std::mt19937 rng(43);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = std::uniform_int_distribution<int>(0, 60)(rng);
    const int range = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<int> keys(static_cast<std::size_t>(n));
    for (int& k : keys) k = std::uniform_int_distribution<int>(0, range)(rng);
    // Half the lists ascending already (ties kept), a few with one step back at the end: the
    // skip must take exactly the lists the sort leaves alone.
    if (trial % 2 == 0) std::sort(keys.begin(), keys.end());
    if (trial % 8 == 2 && n > 1) keys.back() = keys.front() - 1;
    const auto got = detail::stable_order(static_cast<std::uint32_t>(keys.size()),
                                          [&](std::uint32_t i) { return keys[i]; });
    EXPECT_EQ(got, sorted_by(keys)) << "trial " << trial;
  }
}

TEST(StableOrder, DescendingKeysAreReordered) {
  const std::vector<int> keys{3, 3, 2, 1, 1, 0};
  const auto got = detail::stable_order(6, [&](std::uint32_t i) { return keys[i]; });
  EXPECT_EQ(got, (std::vector<std::uint32_t>{5, 3, 4, 2, 0, 1}));
}

}  // namespace
}  // namespace cephalo::traces

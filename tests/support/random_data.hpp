#pragma once
// Reproducible normal(0, scale) test data: the same seed gives the same vector everywhere.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace cephalo::test_support {

inline std::vector<float> randn(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace cephalo::test_support

#pragma once
// Small helpers shared by the calibrated compute model's files (fit, prediction, stacks,
// validation, inconsistent rows); private to costmodels/src.
#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"

namespace cephalo::costmodels::detail {

inline int dtype_class(Dtype d) { return (d == Dtype::FP16 || d == Dtype::BF16) ? 1 : 0; }

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

inline std::string fmt(double x, int digits = 2) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << x;
  return s.str();
}

// The FLOP features (GEMM, attention) at a sustained fraction of the datasheet peak.
inline PhaseFeatures at_fraction(PhaseFeatures x, double fraction) {
  for (auto* f : {&x.forward, &x.backward}) {
    (*f)[0] /= fraction;
    (*f)[1] /= fraction;
  }
  return x;
}

inline double predict_s(const OpFeatures& theta, const OpFeatures& x) {
  double t = 0;
  for (std::size_t k = 0; k < kNumFeatures; ++k) t += theta[k] * x[k];
  return t;
}

}  // namespace cephalo::costmodels::detail

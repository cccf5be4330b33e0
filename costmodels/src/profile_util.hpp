#pragma once
// Helpers shared by the profile files (tables, readers, memory curves); private to
// costmodels/src.
#include <algorithm>
#include <cctype>
#include <string>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/profile.hpp"

namespace cephalo::costmodels::detail {

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

inline LinearFit read_pair(JsonReader r) {
  if (!r.is_array() || r.size() != 2) r.fail("[slope_ms, intercept_ms]");
  LinearFit f{r.element(0).as_number(), r.element(1).as_number()};
  return f;
}

}  // namespace cephalo::costmodels::detail

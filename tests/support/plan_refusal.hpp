#pragma once
// Plans parsed from JSON built in a test, and the check that a plan is refused with a message
// naming the file ("plan.json") and every given fragment (JSON path, value, expectation).
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::test_support {

inline Plan parse_plan_json(const Json& j) {
  JsonReader r(j, "plan.json");
  return parse_plan(r);
}

inline void expect_plan_refusal(const Json& j, std::initializer_list<std::string> fragments) {
  try {
    parse_plan_json(j);
    ADD_FAILURE() << "accepted; expected a refusal containing " << *fragments.begin();
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("plan.json"), std::string::npos) << what;
    for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << what;
  }
}

}  // namespace cephalo::test_support

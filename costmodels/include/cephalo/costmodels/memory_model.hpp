#pragma once
// Per-rank memory of a plan, term by term.
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"

namespace cephalo::costmodels {

struct MemoryTerm {
  std::string name;   // "training_state", "gathered_params", "grad_accumulator", ...
  double bytes = 0;
};

struct MemoryBreakdown {
  int rank = 0;
  std::vector<MemoryTerm> terms;
  double total = 0;
  double capacity = 0;   // device memory
  double usable = 0;     // capacity the model allows the job to use
  double headroom() const { return usable - total; }
};

MemoryBreakdown predict_memory(const Scenario& scenario, const Plan& plan, int rank);

}  // namespace cephalo::costmodels

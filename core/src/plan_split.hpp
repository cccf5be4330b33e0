#pragma once
// A plan's model_split against its rows (core/plan.hpp; DESIGN §4, "A split in the plan and the
// graph"). plan.cpp reads the plan and calls these; plan_split.cpp owns the checks of the rows
// under a split, in the order that names a fault's first cause.
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::detail {

// The default split written out (one stage of every rank, tensor_parallel 1, full sharding):
// what its FSDP plan does not read must say what it runs (the stage's ranks, schedule and
// micro-batches), or it is refused naming the key.
void check_default_split(const Plan& plan, JsonReader& split);
// A plan's rows under a split: the keys only FSDP plans have, the split's rank lists, every
// rank's micro-batches, a stage's tensor-parallel degree before the samples it regroups, equal
// rows inside a tensor-parallel group, the same samples per micro-batch on every stage, shares
// per data-parallel domain.
void check_split_plan(const Plan& plan, JsonReader& root, JsonReader& split, JsonReader& ranks);

}  // namespace cephalo::detail

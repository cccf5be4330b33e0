#pragma once
// The rows of a plan as a file writes them (core/plan.hpp): one object per rank ("ranks") or
// one per class of ranks ("rank_classes", the compact form). plan.cpp reads the plan's other
// keys and calls these; plan_rows.cpp owns both forms of the rows.
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::detail {

// Reads the per-rank rows ("ranks": [...]) into plan.ranks, checking each row as it is read.
void read_rank_rows(JsonReader& ranks, Plan& plan);
// Reads the compact rows ("rank_classes": [...]) into plan.ranks and plan.rank_classes: every
// class's range, node rule and counts are bounded and the ranges checked to cover 0..n-1 in
// order before any rank is expanded.
void read_rank_classes(JsonReader& classes, Plan& plan);
// The reader of the object rank r was written in: its element of "ranks", or its class's element
// of "rank_classes" (messages about a rank then name where it was written).
JsonReader row_reader(const JsonReader& rows, const Plan& plan, int rank);

// The plan's rows against the cluster it runs on (`scenario`, already cut to the plan's
// "nodes"): one row per device. A compact plan's refusal names the class whose range runs past
// the cluster (or the last class, when the classes end short of it) with its range and the
// cluster's size. Called before any sum over the rows: rows for another cluster throw the
// state shares' sum off, and the sum would be blamed for what the range did.
void check_row_count(const Plan& plan, const Scenario& scenario, const std::string& plan_file);

// The "rank_classes" value of a plan: maximal runs of consecutive ranks with the same row (GPU,
// batch, micro-batches, share) whose nodes follow one rule (one node, or a node every k ranks).
Json rank_classes_json(const Plan& plan);

}  // namespace cephalo::detail

#pragma once
// The 3D search's rules that look at the request and the cluster before any candidate is
// priced, and the stage layouts it builds from the cluster (split_search.cpp runs them):
// internal to the planner.
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cephalo/core/scenario.hpp"
#include "cephalo/planner/split_search.hpp"

namespace cephalo::planner::split_detail {

// A cluster of CPU devices is one only the execution backend runs: a split planned for it must
// be one `cephalo run` runs (core's backend_split_refusal).
bool backend_only(const Cluster& cluster);

// The fixed dimensions against each other and the scenario, before any search: a value no
// split can have is named with its rule (ValidationError: a bad command line, exit 2), rather
// than left for the search to find nothing.
void check_fixed_dimensions(const Scenario& scenario, const SplitSearchOptions& o);

// The data-parallel shardings a stage may take: the fixed one, else every one the job's
// framework can run (a replicating framework, DDP, keeps each stage's whole training state on
// every replica: none only). check_fixed_dimensions refuses a fixed one it cannot run.
std::vector<ShardingKind> candidate_shardings(const Scenario& scenario,
                                              const SplitSearchOptions& o);

// The ranks of one GPU type, in rank order (node-major), and how many it has on each node.
struct TypeBlock {
  const DeviceSpec* spec = nullptr;
  std::vector<int> ranks;
  std::map<int, int> per_node;
};
std::vector<TypeBlock> type_blocks(const Cluster& cluster);

// In ascending order, by trial division up to the square root: a global batch of 2^40 costs
// 2^20 steps, not 2^40. Divisors beyond `cap` are left out (no search dimension exceeds it).
std::vector<int> divisors(long long n, long long cap = std::numeric_limits<int>::max());

// TP degrees a type can use: dividing the heads and key/value heads and every node's count of
// the type, so the contiguous groups of T ranks stay inside one node.
std::vector<int> tp_degrees(const TypeBlock& block, const ModelSpec& model,
                            const std::optional<int>& fixed);

// One stage before its layers are known.
// A stage's TP groups by class of alike ranks (split_search_impl.hpp, Search::shape_classes).
struct ShapeClasses {
  int tensor_parallel = 0;  // what they were read for
  std::size_t ranks = 0;
  // Per class of TP group, first seen first: where its first group starts in the stage's
  // ranks, and how many of the stage's groups are of it.
  std::vector<std::pair<std::size_t, int>> groups;
  // The replicas in order as runs of one GPU type (by name): the balancing weights' sum.
  std::vector<std::pair<const DeviceSpec*, int>> type_runs;
  // Every distinct (GPU type, usable bytes of the group's tightest rank), first seen first.
  std::vector<std::pair<const DeviceSpec*, double>> fits;
  // The set of fits as an id that stages with the same set share (what the memory cap reads
  // of a stage's GPUs; two stages of one first rank and size can hold different GPUs).
  int fits_id = -1;
};

struct StageShape {
  int type = 0;  // the GPU type's block; for a stage of whole nodes, -1 - its first node
  std::vector<int> ranks;
  int tensor_parallel = 1;
  int replicas = 1;
  // Whole nodes, possibly of several GPU types: its replicas' samples are balanced by speed
  // (ReplicaBatches::BySpeed) instead of cut evenly.
  bool by_speed = false;
  // Its classes, read on first use and kept with the shape (its copies share them): two
  // stages can share first rank, size and T yet not their ranks (a node's type runs and its
  // k-th slices), so no key short of the rank list tells them apart.
  mutable std::shared_ptr<const ShapeClasses> classes;
  // Its ranks on its first rank's node (what a boundary from it puts on that node's NIC),
  // counted on first use: the transfer floors ask for it per micro-batch count and schedule.
  mutable int first_node_ranks = -1;
};

// Every composition of `n` nodes into runs of consecutive nodes (run sizes in order); above
// kComposedNodes nodes only runs of one size dividing n (2^(n-1) compositions grow too fast).
constexpr int kComposedNodes = 10;
std::vector<std::vector<int>> node_runs(int n);

// The stages' layer ranges from per-stage counts (in layers; a multiple of V when interleaved):
// virtual stage k = c·p + s holds count_s / V layers, the virtual stages tiling 0..L−1.
std::vector<PipelineStage> lay_out(const std::vector<StageShape>& shapes,
                                   const std::vector<int>& counts, int virtual_stages);

}  // namespace cephalo::planner::split_detail

#pragma once
// Lower bounds on the iteration of whole families of splits, before any of them is priced:
// internal to the planner (split_search.cpp prunes with them). A family is a stage layout
// (which ranks serve each stage, in pipeline order, with their T) at one micro-batch count and
// schedule, over every placement of the layer boundaries. The bounds read only floors of what
// estimate_split prices (SplitEstimator::layer_step_floor), so no split of a family is priced
// below its bound: pruning the families whose bound is no better than a split already priced
// leaves the search's best unchanged.
#include <span>
#include <vector>

#include "cephalo/core/pipeline_schedule.hpp"
#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/planner/split_search.hpp"

namespace cephalo::planner::split_detail {

// `step[s]`: a floor on one micro-batch's forward + backward through one layer on stage s;
// `tail[s]`: on the DP tail (collectives and optimizer step) one layer adds after its last
// backward. Whatever the boundaries (stage s holds l_s >= V layers, Σ l_s = layers):
//  - stage s runs its m·step[s]·l_s of steps one after another (its busy time) and then its
//    tail: B_s = (m·step[s] + tail[s])·l_s;
//  - it cannot start before micro-batch 0's forward has passed chunk 0 of every stage before
//    it, and stage 0 cannot end before the last micro-batch's backward of chunk 0 has passed
//    back from s, nor finish before its own tail after that:
//    A_s = m·step[s]·l_s + Σ_{j<s} step[j]·l_j / V + tail[0]·l_0.
// The iteration is at least the largest of these; the bound is the least that largest can be
// over every boundary placement, from below (weighted averages of the sums).
// `cap[s]` (empty: none) is the most layers stage s can hold and fit in memory (the search's
// layer_cap): a placement past it is refused, so only placements with l_s <= cap[s] (rounded
// down to whole chunks) are bounded; infinity when no placement is left.
double pipeline_floor(std::span<const double> step, std::span<const double> tail, int m,
                      int virtual_stages, int layers, std::span<const int> cap = {});

// The B sums alone, with stage s's floor per layer and micro-batch `step[s]` (its tail over m
// included) shared by `count[s]` identical stages (the order of the stages does not enter): the
// least, over every placement of whole layers in whole units of `unit` layers (V under
// interleaving; each stage at least one, at most cap[s], cap empty: none), of the largest
// m·step[s]·l_s: layers come whole, so a stage that holds one layer too few for the balance
// holds one too many elsewhere. Infinity when the caps hold fewer than `layers` or the stages
// more units than there are.
double busy_floor(std::span<const double> step, std::span<const int> count, int m, int layers,
                  std::span<const int> cap = {}, int unit = 1);

// A first deal of `layers` layers in whole units of `unit` (V under interleaving) to stages
// whose busy time per layer is `per_layer[s]` (floors: m·step[s] + tail[s]): each stage one
// unit, then every next unit to the stage whose busy sum it raises least (the lowest stage on a
// tie), none past cap[s] (empty: none). The placement busy_floor's level is reached by, so its
// busiest stage is at that floor. Empty when the caps hold fewer than the layers or the stages
// more units than there are.
std::vector<int> floor_deal(std::span<const double> per_layer, int layers, int unit,
                            std::span<const int> cap = {});

// Whether some placement of whole layers in whole chunks (stage s holding l_s: at least V, at
// most cap[s], cap empty: none) keeps every stage's busy sum B_s and fill-and-drain sum A_s (as
// pipeline_floor, with `hop[s]` added to A_s for s >= 1: the transfers micro-batch 0's forward
// and the last backward must cross between stage 0 and stage s, at least their floors) at or
// below `tau`. Exact over the placements (a walk over the stages, remembering per count of
// layers placed the least chunk-0 steps of the stages before plus stage 0's tail), so "no"
// means every split of the layout at m and this schedule takes longer than `tau`.
bool pipeline_feasible(std::span<const double> step, std::span<const double> tail,
                       std::span<const double> hop, int m, int virtual_stages, int layers,
                       std::span<const int> cap, double tau);

// The same question for a family whose order is open: `count[g]` stages of group g (a GPU
// type's stages at its T), each with the floors `step[g]` and `tail[g]` and at most `cap[g]`
// layers. A relaxation of pipeline_feasible over every order: every stage's busy sum, and the
// fill and drain of whichever stage is last (after the chunk-0 steps of all the others, the
// least those can be; no transfers, no tail of stage 0). "No" means no order, placement or
// boundary of the family at m and this schedule comes in at or below `tau`.
bool family_feasible(std::span<const double> step, std::span<const double> tail,
                     std::span<const int> count, int m, int virtual_stages, int layers,
                     std::span<const int> cap, double tau);

// The largest B_s and A_s (as pipeline_feasible) of one placement, `layers[s]` on stage s: a
// floor on the estimate of every candidate with those boundaries.
double placement_floor(std::span<const double> step, std::span<const double> tail,
                       std::span<const double> hop, int m, int virtual_stages,
                       std::span<const int> layers);

// How many round trips stage 0's `order` chains one after another: its forward of a
// micro-batch on chunk 0 starts after every step before it in the order has ended, and the
// backward of micro-batch j on chunk 0 ends no earlier than one round trip after its forward
// there began (through every virtual stage and back). 1F1B: ⌈m / p⌉; GPipe: 1.
int round_trips(std::span<const pipeline::Step> order);

// A floor on the iteration from those round trips: each at least one micro-batch's forward +
// backward through every stage's layers (step[s] per layer, the least over the placements of
// the layers up to `cap`, as pipeline_floor) plus, forward and back, one pass's transfers
// (`p2p`: at least the sum over the p·V − 1 boundaries crossed, each boundary's transfer taking
// at least its own bytes' time on its link: the estimate's per-boundary transfers, which may
// also wait for a busy NIC), then stage 0's tail over its least layers. 0 for one stage.
double round_trip_floor(std::span<const double> step, int trips, int virtual_stages, int layers,
                        double p2p, double tail0, std::span<const int> cap = {});

// Floors on the estimate's pipeline transfers (split_search_transfers.cpp). The bytes a
// boundary from a stage of ranks `from` (at T, `samples` per micro-batch on each replica at
// least) puts on its first node's NIC; that boundary's time to a stage whose first rank is `to`
// (0 when both first ranks share a node); and a layout's one pass, its stages in pipeline order
// under V virtual stages (the sum over the p·V − 1 boundaries crossed).
double boundary_bytes_floor(const Scenario& scenario, std::span<const int> from, int T,
                            long long samples);
double boundary_transfer_floor(const Scenario& scenario, const costmodels::CostModels& models,
                               std::span<const int> from, int T, long long samples, int to);
double layout_transfer_floor(const Scenario& scenario, const costmodels::CostModels& models,
                             std::span<const std::vector<int>> stages, std::span<const int> tp,
                             std::span<const long long> samples, int virtual_stages);

// The chunk of every forward a stage's `order` runs before its first backward: the
// micro-batches (and chunks) it surely holds at once, whatever its layers, its sharding and
// its times (1F1B: min(m, p − s) forwards of chunk 0; GPipe: all m).
std::vector<int> warmup_chunks(std::span<const pipeline::Step> order);

// A floor on the memory estimate_split reports for a rank of `spec` (with usable capacity
// compared by the caller) in a stage of `layers` layers at T, `b` samples per micro-batch and
// state share `share` (of its sharding group), in any pipeline of more than one stage whose
// order for the stage begins with the forwards `warmup` (warmup_chunks: the chunk of each; empty:
// one forward of chunk 0, which every order begins with), the layers split into
// `virtual_stages` chunks of layers / virtual_stages each, and the least over the shardings,
// sequence parallelism and (with `recompute` false) selective or no recompute that `options`
// leave open (split_search_memory.cpp). It grows with `layers`, so a stage holds at most the
// layers whose floor fits.
double stage_memory_floor(const Scenario& scenario, const SplitSearchOptions& options,
                          const DeviceSpec& spec, int layers, int T, int b, double share,
                          bool recompute, std::span<const int> warmup = {}, int virtual_stages = 1);

}  // namespace cephalo::planner::split_detail

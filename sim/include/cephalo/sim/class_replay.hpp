#pragma once
// Class-representative replay (so that 100k-GPU clusters simulate in seconds): ranks that run on
// the same device type (spec and emulation slowdown), carry the same plan row (batch and
// micro-batch split), own slices of the same sizes in every unit and sit in the same kind of node
// (intra-node link) do exactly the same thing in the replay: the same ops with the same durations
// and allocations, in the same collectives, on links that carry the same flows. So one
// representative per class is replayed, together with the collectives that couple them (priced over
// every rank, as in the full replay), and the others take their representative's record. Results
// equal the full replay (tests/sim/class_replay_test.cpp: summaries and per-op times over random
// clusters).
//
// Where classes do not apply the full replay runs: when per-op records or memory timelines
// are asked for (they are per rank), or when no two ranks share a class.
// Hybrid sharding: a rank's class also includes its group's kind (the members' classes, node
// offsets and node links, in group order), not its position: every member of a group sees the
// group's collectives at the same times, so alike members replay alike wherever they sit. A
// group sharing a node with another group is built whole (its node's NIC carries both groups'
// collectives). Each collective is priced over its full membership (its group, or every rank
// with the pieces for the cross-group reduction).
// Split plans: a class is a place (lane position, stage, TP rank) in alike components of
// pipeline lanes (replica j of every stage; lanes sharing a node are one component), where every
// stage has as many replicas laid out alike so transfers stay in their lane; else the replay
// is the full one and SimResult::full_replay_reason says why (sim/README.md, "Class replay of
// split plans").
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/costmodels/comm_model.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/sim/replay.hpp"

namespace cephalo::sim {

struct RankClasses {
  std::vector<int> representative;   // per rank: the lowest rank of its class
  std::vector<int> representatives;  // ascending: one rank per class
};

// Classes of the plan's ranks; `graph` is any graph of the plan (only its sharding is read).
// A split plan's are its pipeline lanes' (sim/README.md, "Class replay of split plans"), or
// every rank its own where those cannot be formed.
RankClasses rank_classes(const traces::TrainingGraph& graph, const Scenario& scenario,
                         const Plan& plan);
// The same from the plan's sharding alone (traces::shard_layout_of).
RankClasses rank_classes(const traces::ShardLayout& layout, const Scenario& scenario,
                         const Plan& plan);

// Per node of `cluster`: a number shared by the nodes whose links the comm model reads alike
// (intra-node link, NIC, NIC count, NVLS, SHARP), first seen first. Members of two collectives
// on alike devices, at the same node offsets from the first member and on nodes of the same
// link class, in the same order with the same shard bytes, are priced alike: the rule by which
// alike hybrid groups replay alike here and the split estimator prices one group per kind.
std::vector<int> node_link_classes(const Cluster& cluster);

// The request of collective `c` over its full membership (every rank of its group, or every rank
// for the cross-group reduction, with the layout's pieces), as the full replay prices it, from a
// graph built for any subset of the ranks (build_training_graph_of_ranks): its members are only
// the built ranks, the slices and pieces are the whole plan's. Under a split the group and the
// ranks are those of the member's data-parallel domain; a tensor-parallel, pipeline or tied
// collective is asked as the graph holds it (its lane is built whole).
costmodels::CollectiveRequest full_collective_request(const traces::TrainingGraph& graph,
                                                      const traces::Collective& c,
                                                      bool overlaps_compute = false);

// A replay refused by SimOptions::most_replayed_ranks: it would build `ranks()` ranks.
class ReplayTooLarge : public Error {
 public:
  ReplayTooLarge(int ranks, int most);
  int ranks() const { return ranks_; }

 private:
  int ranks_;
};

// Builds the graph(s) and replays `plan`: by class where that applies, else in full. The report
// is complete either way; in class mode `start_ns`, `end_ns` and `arrive_ns` are indexed by the
// ops of build_training_graph_of_ranks(plan, scenario, representatives) and `replayed_ranks`
// says how many ranks were replayed.
SimResult simulate_plan(const Plan& plan, const Scenario& scenario,
                        const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                        const SimOptions& options = {});

// simulate_plan, keeping the graph of a full replay: `graph` is the whole plan's graph (built
// with `comm`) when the replay ran in full, which it does whenever per-op records or memory
// timelines are asked for, so a caller can name the ops or write a trace
// (replay.hpp's trace_input); empty after a class replay. `cephalo simulate` and the Python
// module replay through it, so they make the same choice.
struct PlanReplay {
  SimResult result;
  std::optional<traces::TrainingGraph> graph;
};
PlanReplay replay_plan(const Plan& plan, const Scenario& scenario,
                       const costmodels::ComputeModel& compute, const costmodels::CommModel& comm,
                       const SimOptions& options = {});

// What `cephalo simulate` and the Python module's simulate do with a scenario and a plan, one
// sequence so that neither skips a check: the plan checked for the scenario
// (traces::check_plan_for, messages naming `plan_label`), the cost models made with
// `compute_model`, the trace file's location checked (`trace`, an empty file for none) before
// the replay, the replay (replay_plan, memory recorded when there is a trace, timed in `wall_s`)
// and the scenario's prediction warnings in the report. The caller writes the trace
// (write_simulation_trace) and prints.
struct Simulation {
  PlanReplay replay;
  costmodels::CostModels models;
  double wall_s = 0;  // the replay's wall time
};
Simulation simulate_checked(const Scenario& scenario, const Plan& plan,
                            const std::string& plan_label, const std::string& compute_model,
                            SimOptions options, const OutputTarget& trace);
// The simulation's Chrome/Perfetto trace (trace_input: every rank's ops and memory) written to
// `file`, as `cephalo simulate --trace` and the Python module's simulate(trace=...) write it.
// It needs the full replay's graph, which simulate_checked keeps whenever it is given a trace
// file; false, and nothing written, without one.
bool write_simulation_trace(const Simulation& run, const Scenario& scenario,
                            const std::string& file);

// What `cephalo simulate` prints of a simulation: on stderr, what was replayed ("simulated 812
// ops, 2301 events in 4.1 ms; implementation ..."); on stdout, a line naming the plan's
// choices, the compute model and the implementation, the report's table (a row per run of
// alike ranks, or with `per_rank` per rank) and, with `ops`, a row per op (name, start, end).
std::string render_replay_summary(const Simulation& run, const Scenario& scenario,
                                  const Plan& plan);
// The summary's notes alone ("note: every rank replayed (why)" when a plan that has ranks to
// replay by class could not be): what the Python module raises as warnings.
std::vector<std::string> replay_notices(const Simulation& run);
std::string render_simulation(const Simulation& run, const Scenario& scenario, const Plan& plan,
                              const std::string& plan_label, bool ops, bool per_rank = false);

}  // namespace cephalo::sim

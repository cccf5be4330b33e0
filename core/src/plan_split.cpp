#include "plan_split.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/model_split.hpp"
#include "cephalo/core/table.hpp"
#include "plan_rows.hpp"

namespace cephalo::detail {

namespace {

// A stage's tensor-parallel degree groups its ranks into replicas, so a degree unlike the other
// stages' makes the stage run another number of samples per micro-batch than they do (or pairs
// rows that differ): the degree is the first cause, not the rows it regroups. It is blamed, at
// the stage's key, when the stage's own rows grouped by a degree the agreeing stages have run
// exactly the samples every stage must (`want`: the majority's, else stage 0's).
void blame_a_stages_tensor_parallel(const Plan& plan, const SplitTopology& topo,
                                    const JsonReader& split, long long want) {
  const int m = plan.model_split.micro_batches;
  const int p = topo.stages();
  // Samples per micro-batch of stage s with its ranks in groups of t; -1 when the ranks do not
  // form such groups (a count not a multiple of t, or a group whose rows differ).
  const auto samples_of = [&](int s, int t) -> long long {
    const auto& list = topo.stage_ranks(s);
    const auto size = static_cast<std::size_t>(t);
    if (list.size() % size != 0) return -1;
    long long sum = 0;
    for (std::size_t i = 0; i < list.size(); i += size) {
      const PlanRank& head = plan.ranks[static_cast<std::size_t>(list[i])];
      for (std::size_t k = 1; k < size; ++k) {
        const PlanRank& pr = plan.ranks[static_cast<std::size_t>(list[i + k])];
        if (pr.micro_batch != head.micro_batch || pr.micro_batches != head.micro_batches) return -1;
      }
      sum += head.share_per_micro_batch(m);
    }
    return sum;
  };
  if (want < 0) want = samples_of(0, topo.tensor_parallel(0));
  if (want < 0) return;
  std::map<int, int> agreeing;  // degree -> stages at that degree running `want`
  for (int s = 0; s < p; ++s)
    if (samples_of(s, topo.tensor_parallel(s)) == want) ++agreeing[topo.tensor_parallel(s)];
  std::vector<std::pair<int, int>> degrees(agreeing.begin(), agreeing.end());
  std::stable_sort(degrees.begin(), degrees.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const ModelSplit& ms = plan.model_split;
  for (int s = 0; s < p; ++s) {
    const int t = topo.tensor_parallel(s);
    const long long got = samples_of(s, t);
    if (got == want) continue;
    for (const auto& [d, count] : degrees) {
      if (d == t || samples_of(s, d) != want) continue;
      const auto n = static_cast<int>(topo.stage_ranks(s).size());
      const bool own_key =
          !ms.stages.empty() && ms.stages[static_cast<std::size_t>(s)].tensor_parallel != 0;
      const std::string what =
          got >= 0
              ? "its " + std::to_string(n) + " ranks are " + std::to_string(n / t) +
                    " replica(s) running " + std::to_string(got) + " samples of every micro-batch"
              : "its groups of " + std::to_string(t) + " pair ranks of unlike rows";
      throw ValidationError(
          split.file(), split.where() + ".stages[" + std::to_string(s) + "].tensor_parallel",
          std::to_string(t) + (own_key ? "" : " (absent: the split's tensor_parallel)"),
          std::to_string(d) + ", as " + std::to_string(count) + " of the " + std::to_string(p) +
              " stages have: with " + std::to_string(t) + " " + what + "; in groups of " +
              std::to_string(d) + " its ranks run the " + std::to_string(want) +
              " samples of every micro-batch that every stage runs");
    }
  }
}

}  // namespace

// The default split written out (one stage of every rank, tensor_parallel 1, full sharding) is
// the FSDP plan beside its own FSDP keys (DESIGN §4, "A split in the plan and the graph"). What
// the FSDP plan does not read must then say what it runs, or it would be dropped unread: the
// stage's ranks, a schedule (one stage has no virtual stages to interleave; 1f1b or gpipe,
// which the 3D search writes, leave FSDP's order by its accumulation) and micro_batches (each
// rank's row counts them: 1, the default, or what every rank runs). The stage's layers are checked
// against the model with the scenario (check_plan_for).
void check_default_split(const Plan& plan, JsonReader& split) {
  const int n = static_cast<int>(plan.ranks.size());
  check_split_ranks(plan.model_split, n, split.file(), split.where());
  const std::string why =
      " (this model_split is one stage of every rank at tensor_parallel 1 with full sharding: "
      "the FSDP plan, which its rows and \"accumulation\" schedule)";
  if (plan.model_split.schedule.kind == pipeline::PipelineSchedule::Kind::Interleaved)
    split.child("schedule").fail("\"1f1b\", \"gpipe\" or no \"schedule\" key" + why);
  const int m = plan.model_split.micro_batches;
  if (m != 1 && !std::all_of(plan.ranks.begin(), plan.ranks.end(),
                             [m](const PlanRank& pr) { return pr.micro_batches == m; }))
    split.child("micro_batches")
        .fail("1, no \"micro_batches\" key, or the micro_batches every rank runs" + why);
}

// A plan's ranks under a split (DESIGN §4, "A split in the plan and the graph"): the keys that
// only FSDP plans have, the split's rank lists, every rank's micro-batches, equal batches inside
// a tensor-parallel group, the same samples per micro-batch on every stage, shares per
// data-parallel domain.
void check_split_plan(const Plan& plan, JsonReader& root, JsonReader& split, JsonReader& ranks) {
  const std::string why =
      " (under a model_split the split's pipeline schedule orders the work "
      "and its sharding shards each stage)";
  if (root.has("sharding"))
    root.child("sharding").fail("no \"sharding\" key: the model_split's \"sharding\" rules" + why);
  if (plan.accumulation != Accumulation::Layered)
    root.child("accumulation").fail("\"layered\" or no \"accumulation\" key" + why);
  if (plan.offload != Offload::None)
    root.child("offload").fail("\"none\": host offload is not defined for split plans" + why);
  const int n = static_cast<int>(plan.ranks.size());
  check_split_ranks(plan.model_split, n, root.file(), split.where());
  const SplitTopology topo(plan.model_split, n);
  const int m = plan.model_split.micro_batches;
  auto rank_at = [&](int r) { return detail::row_reader(ranks, plan, r); };
  // Every rank running one other count than the split's, and no multiple of it — or, with the
  // split's count absent (1), any other count: the split's count is the fault, not each rank's.
  // (A pipeline of one micro-batch whose every rank runs it in sub-steps says so with its key.)
  const auto multiple = [m](int count) { return count >= m && count % m == 0; };
  const int runs = n > 0 ? plan.ranks.front().micro_batches : m;
  if (std::all_of(plan.ranks.begin(), plan.ranks.end(),
                  [&](const PlanRank& pr) { return pr.micro_batches == runs; }) &&
      (!multiple(runs) || (!split.has("micro_batches") && runs != m))) {
    const std::string got = std::to_string(m) + (split.has("micro_batches") ? "" : " (absent)");
    throw ValidationError(root.file(), split.where() + ".micro_batches", got,
                          std::to_string(runs) + ", the micro-batches every rank runs");
  }
  // A rank runs its share of every pipeline micro-batch as k >= 1 sub-steps of `micro_batch`
  // samples: m·k micro-batches, m·k·micro_batch samples.
  for (int r = 0; r < n; ++r) {
    const PlanRank& pr = plan.ranks[static_cast<std::size_t>(r)];
    if (!multiple(pr.micro_batches) || pr.micro_batch < 1)
      rank_at(r)
          .child("micro_batches")
          .fail_value(std::to_string(pr.micro_batches) + " micro-batches of " +
                          std::to_string(pr.micro_batch),
                      "a multiple of the split's " + std::to_string(m) +
                          " micro-batches (m x k sub-steps), of at least 1 sample (every rank of "
                          "a pipeline stage runs its share of every micro-batch, in k equal "
                          "sub-steps)");
    const long long full = static_cast<long long>(pr.micro_batches) * pr.micro_batch;
    if (pr.batch != full)
      rank_at(r).child("batch").fail_value(
          std::to_string(pr.batch),
          std::to_string(pr.micro_batches) + " x " + std::to_string(pr.micro_batch) + " = " +
              std::to_string(full) +
              " (micro_batches x micro_batch: a split's micro-batches and sub-steps are all "
              "alike)");
  }
  // The samples per micro-batch every stage must run: the value most stages run (a stage that
  // differs from the others is at fault, stage 0 included); with no majority, stage 0's.
  std::map<long long, int> votes;
  for (int s = 0; s < topo.stages(); ++s) {
    long long samples = 0;
    for (int j = 0; j < topo.replicas(s); ++j)
      samples +=
          plan.ranks[static_cast<std::size_t>(topo.rank_at(s, j, 0))].share_per_micro_batch(m);
    ++votes[samples];
  }
  long long per_micro_batch = -1;
  int most = 0;
  for (const auto& [samples, count] : votes)
    if (count > most) {
      most = count;
      per_micro_batch = samples;
    }
  if (most * 2 <= topo.stages()) per_micro_batch = -1;  // no majority
  blame_a_stages_tensor_parallel(plan, topo, split, per_micro_batch);
  for (int s = 0; s < topo.stages(); ++s) {
    long long samples = 0;
    for (int j = 0; j < topo.replicas(s); ++j) {
      const int first = topo.rank_at(s, j, 0);
      const PlanRank& head = plan.ranks[static_cast<std::size_t>(first)];
      for (int t = 1; t < topo.tensor_parallel(s); ++t) {
        const int r = topo.rank_at(s, j, t);
        const PlanRank& pr = plan.ranks[static_cast<std::size_t>(r)];
        // The T ranks of a group run the same samples in the same sub-steps (their
        // tensor-parallel collectives pair up op by op).
        const auto differs = [&](const char* key, int got, int want) {
          if (got != want)
            rank_at(r).child(key).fail_value(
                std::to_string(got),
                std::to_string(want) + ", as rank " + std::to_string(first) +
                    " has: the ranks of one tensor-parallel group run the same samples in the "
                    "same sub-steps");
        };
        differs("micro_batch", pr.micro_batch, head.micro_batch);
        differs("micro_batches", pr.micro_batches, head.micro_batches);
      }
      samples += head.share_per_micro_batch(m);
    }
    if (per_micro_batch < 0) per_micro_batch = samples;
    if (samples != per_micro_batch)
      split.fail_value("stage " + std::to_string(s) + "'s replicas running " +
                           std::to_string(samples) + " samples of every micro-batch",
                       std::to_string(per_micro_batch) +
                           (most * 2 > topo.stages() ? ", as most stages'" : ", as stage 0's") +
                           " do: every stage runs every sample");
    if (per_micro_batch * m > kMaxGlobalBatch)
      split.fail_value(std::to_string(per_micro_batch * m) + " samples per iteration",
                       "at most " + std::to_string(kMaxGlobalBatch));
    for (int t = 0; t < topo.tensor_parallel(s); ++t) {
      double sum = 0;
      for (int r : topo.domain(s, t)) sum += plan.ranks[static_cast<std::size_t>(r)].state_share;
      if (std::fabs(sum - 1.0) > kShareSumTolerance)
        ranks.fail_value(
            "state shares summing to " + std::to_string(sum) + " over stage " + std::to_string(s) +
                "'s data-parallel domain " + std::to_string(t) + " (ranks " +
                format_int_list(topo.domain(s, t)) + ")",
            "shares summing to 1 over every data-parallel domain of a split (the ranks at "
            "one position of a stage's tensor-parallel groups)");
    }
  }
}

}  // namespace cephalo::detail

// A stage's replica deal by speed (planner/README.md, "3D plans: stages that mix GPU types" and
// "sub-steps"): the samples of every micro-batch each replica runs and in how many sub-steps,
// the sharded state dealt after (split_estimate.cpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "plan_support.hpp"
#include "split_estimator_impl.hpp"
#include "split_replicas.hpp"

namespace cephalo::planner {

void SplitEstimator::Impl::deal_by_speed(
    Replicas& rep, ReplicaMemory& memory_of, bool sub_steps, bool sharded,
    const std::function<const StagePass&(std::size_t, int, int)>& pass_of) {
  // The most samples each replica holds with none of the sharded state (dealt after): the
  // rule's bytes at share 0 grow by the same bytes per sample (activations and boundaries),
  // in one step (`whole`) or, past that, in sub-steps of one sample (`caps`; not for an
  // FSDP plan, whose micro-batches its own planner chooses), worked out once per run of alike
  // replicas (Replicas::run_end). `kind`: per replica, its run's first.
  const std::size_t n = rep.class_of.size();
  std::vector<int> caps(n), whole(n);
  std::vector<std::size_t> kind(n);
  for (std::size_t k = 0, j = 0; k < rep.run_end.size(); j = rep.run_end[k++]) {
    const auto cap_of = [&](int k2) {
      const double one = memory_of.total(rep, j, 1, 1, 0.0);
      const double per_sample = std::max(1.0, memory_of.total(rep, j, 2, k2, 0.0) - one);
      const double room = rep.capacity[j] - (one - per_sample);
      return room <= 0 ? 0 : static_cast<int>(std::min(1e9, std::floor(room / per_sample)));
    };
    const int w = cap_of(1);
    const std::size_t end = rep.run_end[k];
    std::fill(whole.begin() + static_cast<std::ptrdiff_t>(j),
              whole.begin() + static_cast<std::ptrdiff_t>(end), w);
    std::fill(caps.begin() + static_cast<std::ptrdiff_t>(j),
              caps.begin() + static_cast<std::ptrdiff_t>(end),
              sub_steps ? std::max(w, cap_of(2)) : w);
    std::fill(kind.begin() + static_cast<std::ptrdiff_t>(j),
              kind.begin() + static_cast<std::ptrdiff_t>(end), j);
  }
  // A replica's step at b samples: one step while it fits, else the fewest sub-steps (a
  // count dividing b) whose memory fits: the compute models' time per sample does not rise
  // with the samples of an op, so fewer, larger sub-steps are never slower.
  std::map<std::pair<std::size_t, int>, int> chosen;
  const auto sub_of = [&](std::size_t j, int b) {
    if (b <= whole[j]) return 1;
    const auto key = std::make_pair(kind[j], b);
    if (const auto it = chosen.find(key); it != chosen.end()) return it->second;
    int k = 2;
    while (k < b && (b % k != 0 || memory_of.total(rep, kind[j], b, k, 0.0) > rep.capacity[j])) ++k;
    chosen.emplace(key, k);
    return k;
  };
  rep.size = balance_samples(
      rep.total, caps,
      [&](std::size_t j, int b) { return pass_of(rep.class_of[j], b, sub_of(j, b)).total(); },
      rep.classes.size() == 1);
  if (rep.size.empty()) rep.size.assign(rep.class_of.size(), 0);
  rep.sub.resize(rep.size.size());
  // Within a run, a replica at its predecessor's samples takes its sub-steps.
  for (std::size_t k = 0, begin = 0; k < rep.run_end.size(); begin = rep.run_end[k++])
    for (std::size_t j = begin; j < rep.run_end[k]; ++j)
      rep.sub[j] = j > begin && rep.size[j] == rep.size[j - 1] ? rep.sub[j - 1]
                   : rep.size[j] < 1                           ? 1
                                                               : sub_of(j, rep.size[j]);

  // State shares: given, equal, or by the memory each rank of a sharding group has free
  // after everything but the sharded state (shares_by_free_memory, the FSDP hybrid rule).
  if (sharded) {
    // Hybrid's node groups come in runs of alike ones: the same free bytes, the same shares.
    // A replica alike its predecessor (in its group or, priced by runs, the group before) at
    // the same samples and sub-steps has its free bytes: ReplicaMemory's key is what
    // alike_memory compares. Replica by replica (the tests' reference) a group starts afresh.
    std::vector<double> free, last_free, share;
    bool have_prev = false;
    std::size_t prev = 0;
    double prev_free = 0;
    for (const auto& group : rep.groups) {
      free.clear();
      have_prev = have_prev && by_runs;
      for (std::size_t j : group) {
        if (!(have_prev && rep.alike_memory(j, prev) && rep.size[j] == rep.size[prev] &&
              rep.sub[j] == rep.sub[prev]))
          prev_free = std::max(
              0.0, rep.capacity[j] - memory_of.total(rep, j, rep.size[j], rep.sub[j], 0.0));
        free.push_back(prev_free);
        prev = j;
        have_prev = true;
      }
      if (free != last_free) {
        share = detail::shares_by_free_memory(free);
        std::swap(free, last_free);
      }
      for (std::size_t i = 0; i < group.size(); ++i) rep.share[group[i]] = share[i];
    }
  }
  // A replica that the state its share adds does not let fit runs its samples in more
  // sub-steps, the fewest that fit with that share (none: it stays, and the stage is refused).
  if (!sub_steps) return;
  int chosen_before = 0;  // the previous replica's sub-steps before this step
  for (std::size_t j = 0; j < rep.size.size(); ++j) {
    const int b = rep.size[j];
    // An alike replica at its predecessor's samples, sub-steps and share: the same answer.
    if (j > 0 && rep.alike_memory(j, j - 1) && b == rep.size[j - 1] &&
        rep.share[j] == rep.share[j - 1] && rep.sub[j] == chosen_before) {
      rep.sub[j] = rep.sub[j - 1];
      continue;
    }
    chosen_before = rep.sub[j];
    if (b < 2 || memory_of.total(rep, j, b, rep.sub[j], rep.share[j]) <= rep.capacity[j]) continue;
    for (int k = rep.sub[j] + 1; k <= b; ++k)
      if (b % k == 0 && memory_of.total(rep, j, b, k, rep.share[j]) <= rep.capacity[j]) {
        rep.sub[j] = k;
        break;
      }
  }
}

void apply_allocation(Plan& plan, const ReplicaAllocation& a) {
  if (a.empty()) return;
  for (PlanRank& r : plan.ranks) {
    const auto i = static_cast<std::size_t>(r.rank);
    const int k = a.sub_steps_of(i);
    r.micro_batch = a.micro_batch[i] / k;
    r.micro_batches = plan.model_split.micro_batches * k;
    r.batch = r.micro_batch * r.micro_batches;
    r.state_share = a.state_share[i];
  }
}

}  // namespace cephalo::planner

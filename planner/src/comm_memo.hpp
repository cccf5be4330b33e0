#pragma once
// One planning call's collective prices, each asked once (private to planner/src). The
// default search replays ~36 candidate plans (schedules, sharding groupings, the optimal's
// refinements) and builds their graphs; most price the same collectives over the same
// members and shard sizes, and the comm model's price walks every member's device (at 100k
// ranks a cache miss each). The memo keys a request by its content, exactly: the members as
// runs of consecutive ranks and the shard sizes as runs of equal values (a group's request is
// a few runs), so a key is small where the request is regular; a request whose runs would
// make a key of more than kMostKeyRuns runs is priced afresh every time, never approximated.
#include <memory>
#include <string>
#include <unordered_map>

#include "cephalo/core/scenario.hpp"
#include "cephalo/costmodels/comm_model.hpp"

namespace cephalo::planner::detail {

class CommMemo final : public costmodels::CommModel {
 public:
  // Requests for `cluster` (this object, as the planning call holds it) are remembered;
  // requests for any other cluster go to `inner` as they are.
  CommMemo(std::shared_ptr<const costmodels::CommModel> inner, const Cluster& cluster)
      : inner_(std::move(inner)), cluster_(&cluster) {}

  costmodels::CollectiveEstimate collective(
      const Cluster& cluster, const costmodels::CollectiveRequest& request) const override;
  double copy_time(const Cluster& cluster, int rank, double bytes) const override {
    return inner_->copy_time(cluster, rank, bytes);
  }

 private:
  std::shared_ptr<const costmodels::CommModel> inner_;
  const Cluster* cluster_;
  mutable std::unordered_map<std::string, costmodels::CollectiveEstimate> memo_;
};

}  // namespace cephalo::planner::detail

#pragma once
// Collective and copy times on a modelled cluster (NCCL-like ring/tree, α-β per link).
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/plan.hpp"

namespace cephalo::costmodels {

enum class CollectiveKind { AllGather, ReduceScatter, AllReduce, Broadcast };
std::string to_string(CollectiveKind kind);

// One piece of a hybrid plan's cross-group gradient reduction (traces::ShardLayout): an
// element range owned by one rank of every group, all-reduced in place over those owners.
struct ReductionPiece {
  std::vector<int> owners;  // one rank per group
  double bytes = 0;
};

struct CollectiveRequest {
  CollectiveKind kind = CollectiveKind::AllGather;
  std::vector<int> ranks;           // participants (global ranks of the cluster)
  std::vector<double> shard_bytes;  // per participant: bytes it owns (even: all equal)
  // Used when shards differ (all-gather / reduce-scatter): Grouped, Padded, or Auto (the
  // cheaper of the two, the estimate's `variant` says which).
  UnevenCollective uneven = UnevenCollective::Auto;
  // The collective runs while a participant's compute stream is busy (prefetch, overlapped
  // reduce-scatter). A model calibrated under compute load uses that fit for it; otherwise the
  // flag changes nothing.
  bool overlaps_compute = false;
  // Non-empty: the cross-group reduction of hybrid sharding (kind AllReduce): every piece's
  // all-reduce runs concurrently over its owners, the pieces of one node sharing its NIC.
  // `ranks` / `shard_bytes` then list every rank taking part and its slice.
  std::vector<ReductionPiece> pieces;
  // A parameter gather or gradient reduction of the training state (not a tensor-parallel or
  // pipeline transfer of activations): the job's framework copies its buffers around it
  // (framework_buffers.hpp), priced on top of the collective on GPU ranks.
  bool training_state = false;
};

struct CollectiveEstimate {
  double seconds = 0;
  double total_bytes = 0;  // size of the gathered / reduced buffer
  double algbw = 0;        // total_bytes / seconds
  double busbw = 0;        // algbw × nccl-tests factor
  // How it ran (the chooser of costmodels/src/nccl_tuning.hpp): the algorithm ("ring", "tree",
  // "pat", "nvls", "collnet", "padded-ring", "grouped-broadcast", "cross-group-ring", ...),
  // the protocol ("LL", "LL128", "Simple"; "host" for the CPU backend's MPI; empty where no
  // protocol was chosen) and the channels (0 where none were).
  std::string algorithm;
  std::string protocol;
  int channels = 0;
  // The algorithm's busiest link: the bytes it carries and the bandwidth it can carry them at
  // (after efficiencies); 0 where not known. seconds >= link_bytes / link_bandwidth.
  double link_bytes = 0;
  double link_bandwidth = 0;
  // Uneven all-gather / reduce-scatter: the variant priced (Grouped or Padded, never Auto);
  // empty for an even collective.
  std::optional<UnevenCollective> variant;
  // Of `seconds`: the framework's own buffer copies around a training-state collective
  // (framework_buffers.hpp); 0 for a request that is not one, or on CPU ranks.
  double framework_seconds = 0;
};

// nccl-tests bus-bandwidth factor: (n−1)/n for all-gather/reduce-scatter, 2(n−1)/n all-reduce,
// 1 for broadcast.
double bus_bandwidth_factor(CollectiveKind kind, int n);

class CommModel {
 public:
  virtual ~CommModel() = default;
  virtual CollectiveEstimate collective(const Cluster& cluster,
                                        const CollectiveRequest& request) const = 0;
  // Host<->device copy of `bytes` on a rank (pinned memory over its PCIe link).
  virtual double copy_time(const Cluster& cluster, int rank, double bytes) const = 0;
};

// The one decision of how an uneven collective runs: the variant `model` prices lower for this
// request (Padded on a tie, and for a request whose shards are equal). The graph builder
// resolves a plan's `uneven_collective: auto` with it, so the simulator prices and the backend
// runs the same variant.
UnevenCollective uneven_variant(const CommModel& model, const Cluster& cluster,
                                CollectiveRequest request);

}  // namespace cephalo::costmodels

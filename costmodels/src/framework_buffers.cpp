#include "framework_buffers.hpp"

#include <algorithm>
#include <numeric>

namespace cephalo::costmodels {

FrameworkBufferPasses framework_buffer_passes(Framework framework) {
  switch (framework) {
    case Framework::FSDP2:
      // fully_shard gathers every parameter of a module into one flat output and copies it
      // out into the parameters (torch.split_with_sizes_copy, foreach_all_gather_copy_out);
      // before the reduce-scatter the gradients are copied into one flat input
      // (torch._chunk_cat, foreach_reduce_scatter_copy_in). Its divide uses ReduceOp.AVG for
      // fp32 / bf16 reductions: no pass.
      return {2, 2, 0};
    case Framework::FSDP1:
      // The FlatParameter is gathered in place and the parameters are views into it
      // (_all_gather_flat_param, _use_unsharded_views): no copy-out. The flat gradient is
      // divided in place by the pre-divide factor before the reduce-scatter (_reduce_grad,
      // _div_if_needed with _gradient_predivide_factor > 1 for every world size >= 2); the
      // post-divide runs on the shard (1/n of it, not counted).
      return {0, 2, 0};
    case Framework::DeepSpeedZero3:
      // Gathered into one flat tensor the parameters are narrowed views of: no copy-out. Each
      // gradient is copied into the contiguous reduce bucket (contiguous_gradients, default
      // true), reduce_scatter_coalesced concatenates the padded partitions into one flat
      // input (torch.cat) and divides it by the world size in place (div_): three read-write
      // passes.
      return {0, 6, 0};
    case Framework::DDP:
      // gradient_as_bucket_view=False (the default): each gradient is copied into its
      // all-reduce bucket and the reduced bucket copied back (DistributedDataParallel docs).
      return {0, 0, 4};
  }
  return {};
}

double framework_buffer_seconds(const Cluster& cluster, Framework framework,
                                const CollectiveRequest& request) {
  // One rank shards nothing: no collective runs, and the runtimes skip the buffers with it
  // (FSDP1 switches itself to NO_SHARD at world size 1).
  if (!request.training_state || request.ranks.size() < 2) return 0;
  const FrameworkBufferPasses p = framework_buffer_passes(framework);
  const double total = std::accumulate(request.shard_bytes.begin(), request.shard_bytes.end(), 0.0);
  const auto& ranks = cluster.ranks();
  double worst = 0;
  for (std::size_t i = 0; i < request.ranks.size(); ++i) {
    const int r = request.ranks[i];
    if (r < 0 || static_cast<std::size_t>(r) >= ranks.size()) continue;  // the model refuses it
    const DeviceSpec& d = ranks[static_cast<std::size_t>(r)].slot->spec;
    if (d.kind == "cpu" || !(d.memory_bandwidth > 0)) continue;
    double bytes = 0;
    switch (request.kind) {
      case CollectiveKind::AllGather:
        bytes = p.gather * total;
        break;
      case CollectiveKind::ReduceScatter:
        bytes = p.reduce * total;
        break;
      case CollectiveKind::AllReduce:
        bytes = i < request.shard_bytes.size() ? p.all_reduce * request.shard_bytes[i] : 0;
        break;
      case CollectiveKind::Broadcast:
        break;
    }
    worst = std::max(worst, bytes / (kCopyBandwidthFraction * d.memory_bandwidth));
  }
  return worst;
}

}  // namespace cephalo::costmodels

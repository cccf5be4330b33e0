// Names and classes of op kinds and streams, and the sharding rule (shard_offsets): the small
// vocabulary every consumer of the TrainingGraph shares.
#include <algorithm>
#include <cmath>

#include "cephalo/traces/training_graph.hpp"

namespace cephalo::traces {

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Forward:
      return "forward";
    case OpKind::Backward:
      return "backward";
    case OpKind::Recompute:
      return "recompute";
    case OpKind::OptimizerStep:
      return "optimizer_step";
    case OpKind::AllGather:
      return "all_gather";
    case OpKind::AllGatherV:
      return "all_gather_v";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
    case OpKind::ReduceScatterV:
      return "reduce_scatter_v";
    case OpKind::AllReduce:
      return "all_reduce";
    case OpKind::CopyD2H:
      return "copy_d2h";
    case OpKind::CopyH2D:
      return "copy_h2d";
    case OpKind::TpAllReduce:
      return "tp_all_reduce";
    case OpKind::TpGatherScatter:
      return "tp_gather_scatter";
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::TiedAllReduce:
      return "tied_all_reduce";
    case OpKind::WeightGradient:
      return "weight_gradient";
  }
  return "?";
}

std::string short_name(OpKind kind) {
  switch (kind) {
    case OpKind::Forward:
      return "F";
    case OpKind::Backward:
      return "B";
    case OpKind::Recompute:
      return "RC";
    case OpKind::OptimizerStep:
      return "OPT";
    case OpKind::AllGather:
      return "AG";
    case OpKind::AllGatherV:
      return "AGv";
    case OpKind::ReduceScatter:
      return "RS";
    case OpKind::ReduceScatterV:
      return "RSv";
    case OpKind::AllReduce:
      return "AR";
    case OpKind::CopyD2H:
      return "D2H";
    case OpKind::CopyH2D:
      return "H2D";
    case OpKind::TpAllReduce:
      return "TP";
    case OpKind::TpGatherScatter:
      return "TPsp";
    case OpKind::Send:
      return "SEND";
    case OpKind::Recv:
      return "RECV";
    case OpKind::TiedAllReduce:
      return "TIED";
    case OpKind::WeightGradient:
      return "W";
  }
  return "?";
}

std::string to_string(Stream stream) {
  switch (stream) {
    case Stream::Compute:
      return "compute";
    case Stream::Comm:
      return "comm";
    case Stream::D2H:
      return "d2h";
    case Stream::H2D:
      return "h2d";
    case Stream::Send:
      return "send";
    case Stream::Recv:
      return "recv";
  }
  return "?";
}

bool is_collective(OpKind k) {
  return is_data_parallel(k) || is_tensor_parallel(k) || is_pipeline_transfer(k) ||
         k == OpKind::TiedAllReduce;
}
bool is_data_parallel(OpKind k) {
  return k == OpKind::AllGather || k == OpKind::AllGatherV || k == OpKind::ReduceScatter ||
         k == OpKind::ReduceScatterV || k == OpKind::AllReduce;
}
bool is_tensor_parallel(OpKind k) {
  return k == OpKind::TpAllReduce || k == OpKind::TpGatherScatter;
}
bool is_pipeline_transfer(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }
bool is_compute(OpKind k) {
  return k == OpKind::Forward || k == OpKind::Backward || k == OpKind::Recompute ||
         k == OpKind::OptimizerStep || k == OpKind::WeightGradient;
}
bool is_copy(OpKind k) { return k == OpKind::CopyD2H || k == OpKind::CopyH2D; }

Stream stream_of(OpKind k) {
  // Megatron's tensor-parallel collectives block the compute they sit inside.
  if (is_tensor_parallel(k)) return Stream::Compute;
  if (k == OpKind::Send) return Stream::Send;
  if (k == OpKind::Recv) return Stream::Recv;
  if (is_collective(k)) return Stream::Comm;
  if (k == OpKind::CopyD2H) return Stream::D2H;
  if (k == OpKind::CopyH2D) return Stream::H2D;
  return Stream::Compute;
}

std::string to_string(CollectiveVariant v) {
  switch (v) {
    case CollectiveVariant::Even:
      return "even";
    case CollectiveVariant::Grouped:
      return "grouped";
    case CollectiveVariant::Padded:
      return "padded";
  }
  return "?";
}

std::vector<std::int64_t> shard_offsets(std::int64_t numel, const std::vector<double>& shares) {
  std::vector<std::int64_t> off(shares.size() + 1, 0);
  double prefix = 0;
  for (std::size_t r = 0; r < shares.size(); ++r) {
    prefix += shares[r];
    off[r + 1] =
        r + 1 == shares.size()
            ? numel
            : std::clamp<std::int64_t>(
                  static_cast<std::int64_t>(std::floor(static_cast<double>(numel) * prefix + 0.5)),
                  off[r], numel);
  }
  return off;
}

}  // namespace cephalo::traces

#pragma once
// backend::Communicator over NCCL, for device buffers of a CUDA device. The NCCL unique id is
// created on rank 0 and sent to every rank through a bootstrap communicator (the MPI one:
// DESIGN §7, "NCCL's unique id travels over MPI"), which also serves the blocking host-side
// helpers (barrier, host all-reduce / broadcast, abort).
#include <memory>
#include <string>

#include "cephalo/backend/communicator.hpp"

namespace cephalo::cuda {

// How uneven shards (all_gather_v / reduce_scatter_v) are moved. The cost model must model the
// one that ran (uneven_algorithm_of reports it).
enum class UnevenAlgorithm {
  // One ncclBroadcast (all-gather-v) or ncclReduce (reduce-scatter-v) per rank, rooted at the
  // shard's owner, all inside one ncclGroupStart/End: no padding traffic, but size() separate
  // tree/ring operations whose latencies overlap only as far as NCCL schedules them together.
  GroupedBroadcastReduce,
  // Pad every shard to the largest one and run the even ring collective on a scratch buffer,
  // then compact: one bandwidth-optimal collective, plus (max - count) padding per rank.
  PaddedRing,
};

const char* to_string(UnevenAlgorithm a);  // "grouped", "padded"

struct NcclOptions {
  // `cephalo run` sets it from the plan's uneven_collective, the variant the cost model priced.
  UnevenAlgorithm uneven = UnevenAlgorithm::GroupedBroadcastReduce;
};

// The variant an NCCL communicator uses for uneven collectives (Error for other communicators),
// so run results can name it for the cost model.
UnevenAlgorithm uneven_algorithm_of(const backend::Communicator& comm);

// `device` must be a CUDA device (make_cuda_device); collectives take its streams. `bootstrap`
// is kept by reference and must outlive the result. Collective: every rank calls it.
std::unique_ptr<backend::Communicator> make_nccl_communicator(backend::Device& device,
                                                              backend::Communicator& bootstrap,
                                                              const NcclOptions& options = {});

}  // namespace cephalo::cuda

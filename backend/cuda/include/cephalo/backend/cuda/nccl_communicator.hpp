#pragma once
// backend::Communicator over NCCL, for device buffers of a CUDA device. The NCCL unique id is
// created on rank 0 and sent to every rank through a bootstrap communicator (the MPI one:
// DESIGN §7, "NCCL's unique id travels over MPI"), which also serves the blocking host-side
// helpers (barrier, host all-reduce / broadcast, abort).
#include <memory>
#include <string>

#include "cephalo/backend/communicator.hpp"

namespace cephalo::cuda {

// Uneven shards (all_gather_v / reduce_scatter_v) move as each call says (the graph's variant):
//  * Grouped: one ncclBroadcast (all-gather-v) or ncclReduce (reduce-scatter-v) per rank, rooted
//    at the shard's owner, all inside one ncclGroupStart/End: no padding traffic, but size()
//    separate tree/ring operations whose latencies overlap only as far as NCCL schedules them;
//  * Padded: every shard padded to the largest one and the even collective (NCCL's own ring /
//    tree choice) run on a scratch buffer, then compacted: (max - count) padding per rank.
//
// `device` must be a CUDA device (make_cuda_device); collectives take its streams. `bootstrap`
// is kept by reference and must outlive the result. Collective: every rank calls it.
std::unique_ptr<backend::Communicator> make_nccl_communicator(backend::Device& device,
                                                              backend::Communicator& bootstrap);

}  // namespace cephalo::cuda

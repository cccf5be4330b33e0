#pragma once
// A Communicator for a job of exactly one rank, with no MPI underneath: every collective over
// one rank is a copy (or nothing). It lets the executor run one device in a process that never
// initialises MPI — a single GPU on a machine without an MPI installation, and the in-process
// GPU executor check (tests/backend_cuda/) — with the same code path as a multi-rank job.
#include <memory>

#include "cephalo/backend/communicator.hpp"

namespace cephalo::backend {

// Collectives are ordered on the given stream of `device` (copies through Device::copy);
// `device` must outlive the communicator. abort() ends the process with the exit code.
std::unique_ptr<Communicator> make_single_rank_communicator(Device& device);

}  // namespace cephalo::backend

#pragma once
// MPI implementation of Communicator (the CPU backend's collectives, and the bootstrap of
// every backend). MpiRuntime owns MPI_Init_thread / MPI_Finalize for the process. Both come
// from the MPI plugin (mpi_plugin.hpp), loaded the first time either is used: a process that
// never asks for MPI loads no MPI library; RuntimeFailure when the plugin cannot be loaded.
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

// Initialises MPI with MPI_THREAD_MULTIPLE (the comm stream is a separate thread that issues
// collectives while the main thread may call host-side helpers) and finalises it on exit.
// With `only_under_launcher`, a process that no MPI launcher started does not initialise MPI
// at all: it is rank 0 of 1 and uses the single-rank communicator (single_rank_communicator.hpp),
// so one process runs where no MPI runtime is installed (a lone GPU machine).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv, bool only_under_launcher = false);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  bool initialized() const { return initialized_; }
  // True when this process was started by an MPI launcher (mpirun sets OMPI_/PMI_ variables).
  static bool launched_by_mpirun();
  // Collective over MPI_COMM_WORLD: every rank's string, in rank order, on rank 0 (an empty
  // vector on the others). Without MPI (one process) just {mine}. For small host-side results
  // such as `cephalo sweep`'s rows; the total must stay below 2 GiB (MPI counts are int).
  std::vector<std::string> gather_strings_to_root(const std::string& mine) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  bool initialized_ = false;
};

// Collectives over MPI_COMM_WORLD. Device-buffer collectives must use host-addressable memory
// (the CPU device); they run on the given stream's thread. Uneven collectives, per call: Grouped
// = MPI's own -v collectives (MPI_Allgatherv, MPI_Reduce_scatter), Padded = every shard padded
// to the largest one around the even collectives (MPI_Allgather, MPI_Reduce_scatter_block) and
// compacted afterwards.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace cephalo::backend

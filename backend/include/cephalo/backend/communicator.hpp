#pragma once
// The communication API of the execution backend (DESIGN §7). Header-only abstract class: the
// MPI communicator (this library, CPU) and the NCCL communicator (backend/cuda/) implement it.
//
// Collectives on device memory are ordered on a Stream of the device that owns the buffers
// (normally the Comm stream, so all-gathers prefetch while the compute stream works); they
// return once enqueued. Failures surface as RuntimeFailure at the stream's next synchronize().
// Host-side calls (suffix _host) are blocking and must not be issued from a stream callback.
//
// Shard layout (DESIGN §4 "Sharding"): a unit's flat buffer of N elements is split into
// contiguous slices in rank order; rank r owns counts[r] elements starting at
// sum(counts[0..r)). all_gather_v fills the full buffer from every rank's slice;
// reduce_scatter_v sums full-size buffers element-wise and leaves rank r its summed slice.
// `how` says which uneven algorithm runs (the graph's CollectiveVariant of the unit, which the
// cost model priced and, under the plan's auto, chose): Grouped = one broadcast / reduce per
// owner (MPI's -v collectives), Padded = every shard padded to the largest around the even
// collective, then compacted. Auto is refused: the graph builder resolves it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/device.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

enum class ReduceOp { Sum, Max, Min };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string kind() const = 0;  // "mpi", "nccl"

  // Even: send has n elements, recv has size()*n (rank r's block at r*n).
  virtual void all_gather(Stream& s, TensorRef send, TensorRef recv) = 0;
  // Even: send has size()*n, recv has n (the sum of every rank's block r).
  virtual void reduce_scatter(Stream& s, TensorRef send, TensorRef recv, ReduceOp op) = 0;
  // Uneven: counts[r] elements from rank r; send has counts[rank()], recv has sum(counts).
  // Ranks with a zero count are allowed.
  virtual void all_gather_v(Stream& s, TensorRef send, TensorRef recv,
                            const std::vector<std::int64_t>& counts, UnevenCollective how) = 0;
  // Uneven: send has sum(counts), recv has counts[rank()].
  virtual void reduce_scatter_v(Stream& s, TensorRef send, TensorRef recv,
                                const std::vector<std::int64_t>& counts, ReduceOp op,
                                UnevenCollective how) = 0;
  // In place over all ranks (small tensors: loss, norms).
  virtual void all_reduce(Stream& s, TensorRef data, ReduceOp op) = 0;
  virtual void broadcast(Stream& s, TensorRef data, int root) = 0;

  // Point to point (the pipeline's activation and gradient transfers, DESIGN §4): `send` ships
  // `data` to rank `peer` of this communicator, `recv` fills `data` from `peer` (the same
  // element type and count on both sides). Transfers between one ordered pair of ranks match
  // in the order they are issued, so a rank issues all its sends from one stream and all its
  // receives from another (the executor: StreamKind::Send and StreamKind::Recv); then two ranks
  // may each send first without deadlock, and neither direction waits for the other. Enqueued
  // on the stream; a send completes once its data has left (it may wait for the receive).
  // NCCL: the transfers to higher and to lower ranks run on two separate NCCL communicators, so
  // a two-rank communicator's send and receive streams never share one (see backend/cuda).
  virtual void send(Stream& s, TensorRef data, int peer) {
    (void)s;
    (void)data;
    (void)peer;
    throw RuntimeFailure(kind() + " communicator: point-to-point send is not supported");
  }
  virtual void recv(Stream& s, TensorRef data, int peer) {
    (void)s;
    (void)data;
    (void)peer;
    throw RuntimeFailure(kind() + " communicator: point-to-point recv is not supported");
  }

  // Blocking host-side helpers (startup checks, metrics, checkpoints).
  virtual void all_reduce_host(double* values, int count, ReduceOp op) = 0;
  virtual void broadcast_host(std::string& bytes, int root) = 0;  // resized on receivers
  virtual void barrier() = 0;
  // A communicator over the ranks of this one that pass the same `color` >= 0, numbered by
  // `key` (MPI_Comm_split semantics; the NCCL communicator splits its bootstrap the same way
  // and builds a NCCL communicator over the part); nullptr where color < 0. Collective: every
  // rank of this communicator calls it, in the same order, from the host thread with no
  // collective in flight. Hybrid sharding runs its group and cross-group collectives on these.
  virtual std::unique_ptr<Communicator> split(int color, int key) {
    (void)color;
    (void)key;
    throw RuntimeFailure(kind() + " communicator: split (sub-communicators) is not supported");
  }
  // Ends every rank of the job now (MPI_Abort / ncclCommAbort + MPI_Abort). The caller prints
  // its message (naming the rank and the cause) first. Never returns.
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// The -v calls' check of `how`: Grouped or Padded, never the plan's unresolved Auto.
inline void expect_resolved(UnevenCollective how, const char* call) {
  if (how == UnevenCollective::Auto)
    throw Error(std::string(call) +
                ": uneven variant auto is the graph builder's to resolve (grouped or padded)");
}

}  // namespace cephalo::backend

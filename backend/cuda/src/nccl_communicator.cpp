#include "cephalo/backend/cuda/nccl_communicator.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/core/error.hpp"
#include "check_private.hpp"

namespace cephalo::cuda {

using backend::ElemType;
using backend::ReduceOp;
using backend::TensorRef;

namespace {

ncclDataType_t nccl_type(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return ncclFloat32;
    case ElemType::F16:
      return ncclFloat16;
    case ElemType::BF16:
      return ncclBfloat16;
    case ElemType::I32:
      return ncclInt32;
  }
  throw Error("nccl: unknown element type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  throw Error("nccl: unknown reduce op");
}

void nccl_expect(bool ok, const std::string& what) {
  if (!ok) throw Error("nccl communicator: " + what);
}

class NcclCommunicator final : public backend::Communicator {
 public:
  NcclCommunicator(backend::Device& device, backend::Communicator& bootstrap)
      : device_(device), bootstrap_(bootstrap) {
    rank_ = bootstrap.rank();
    size_ = bootstrap.size();
    CEPHALO_CUDA_CHECK(cudaSetDevice(native_device(device)));
    ncclUniqueId id;
    std::string bytes;
    if (rank_ == 0) {
      CEPHALO_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
      bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    bootstrap_.broadcast_host(bytes, 0);
    nccl_expect(bytes.size() == sizeof(id), "bootstrap delivered a unique id of the wrong size");
    std::memcpy(&id, bytes.data(), sizeof(id));
    CEPHALO_NCCL_CHECK(nullptr, ncclCommInitRank(&comm_, size_, id, rank_));
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    for (Scratch& s : scratch_)
      if (s.ptr) cudaFree(s.ptr);  // cudaFree synchronises the device first
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "nccl"; }

  // Hybrid sharding's group and cross-group communicators: the bootstrap splits
  // (MPI_Comm_split) and the part builds its own NCCL communicator over it (a fresh unique id
  // broadcast within the part), which needs no ncclCommSplit (NCCL >= 2.18).
  std::unique_ptr<backend::Communicator> split(int color, int key) override {
    auto part = bootstrap_.split(color, key);
    if (!part) return nullptr;
    auto out = std::make_unique<NcclCommunicator>(device_, *part);
    out->owned_bootstrap_ = std::move(part);
    return out;
  }

  void all_gather(backend::Stream& s, TensorRef send, TensorRef recv) override {
    nccl_expect(send.type == recv.type, "all_gather: send and recv types differ");
    nccl_expect(recv.numel == send.numel * size_, "all_gather: recv must hold size() * send");
    check(ncclAllGather(send.data, recv.data, std::size_t(send.numel), nccl_type(send.type), comm_,
                        stream(s)),
          "ncclAllGather", __LINE__);
  }

  void reduce_scatter(backend::Stream& s, TensorRef send, TensorRef recv, ReduceOp op) override {
    nccl_expect(send.type == recv.type, "reduce_scatter: send and recv types differ");
    nccl_expect(send.numel == recv.numel * size_, "reduce_scatter: send must hold size() * recv");
    check(ncclReduceScatter(send.data, recv.data, std::size_t(recv.numel), nccl_type(send.type),
                            nccl_op(op), comm_, stream(s)),
          "ncclReduceScatter", __LINE__);
  }

  void all_gather_v(backend::Stream& s, TensorRef send, TensorRef recv,
                    const std::vector<std::int64_t>& counts, UnevenCollective how) override {
    backend::expect_resolved(how, "all_gather_v");
    const auto displs = displacements(counts, send, recv, true);
    const cudaStream_t st = stream(s);
    const ncclDataType_t t = nccl_type(send.type);
    const std::size_t es = backend::element_size(send.type);
    if (how == UnevenCollective::Grouped) {
      group_start();
      ncclResult_t status = ncclSuccess;
      for (int r = 0; r < size_ && status == ncclSuccess; ++r) {
        if (counts[r] == 0) continue;
        void* dst = static_cast<char*>(recv.data) + displs[r] * es;
        // Out of place on the root: its own shard is copied into place by the broadcast.
        status = ncclBroadcast(r == rank_ ? send.data : dst, dst, std::size_t(counts[r]), t, r,
                               comm_, st);
      }
      group_end(status, "ncclBroadcast");
      return;
    }
    // Padded ring: every rank contributes max(counts) elements; the gathered blocks are then
    // compacted into recv in rank order.
    const std::int64_t pad = *std::max_element(counts.begin(), counts.end());
    if (pad == 0) return;
    void* block = scratch(std::size_t(pad) * es, st, 0);
    void* gathered = scratch(std::size_t(pad) * es * size_, st, 1);
    if (counts[rank_] > 0)
      CEPHALO_CUDA_CHECK(cudaMemcpyAsync(block, send.data, std::size_t(counts[rank_]) * es,
                                         cudaMemcpyDeviceToDevice, st));
    check(ncclAllGather(block, gathered, std::size_t(pad), t, comm_, st), "ncclAllGather",
          __LINE__);
    for (int r = 0; r < size_; ++r)
      if (counts[r] > 0)
        CEPHALO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv.data) + displs[r] * es,
                                           static_cast<char*>(gathered) + std::size_t(r) * pad * es,
                                           std::size_t(counts[r]) * es, cudaMemcpyDeviceToDevice,
                                           st));
  }

  void reduce_scatter_v(backend::Stream& s, TensorRef send, TensorRef recv,
                        const std::vector<std::int64_t>& counts, ReduceOp op,
                        UnevenCollective how) override {
    backend::expect_resolved(how, "reduce_scatter_v");
    const auto displs = displacements(counts, recv, send, false);
    const cudaStream_t st = stream(s);
    const ncclDataType_t t = nccl_type(send.type);
    const std::size_t es = backend::element_size(send.type);
    if (how == UnevenCollective::Grouped) {
      const ncclRedOp_t red = nccl_op(op);
      group_start();
      ncclResult_t status = ncclSuccess;
      for (int r = 0; r < size_ && status == ncclSuccess; ++r) {
        if (counts[r] == 0) continue;
        const void* src = static_cast<const char*>(send.data) + displs[r] * es;
        // recvbuff matters only on the root; the others pass their (valid) recv pointer.
        status = ncclReduce(src, recv.data, std::size_t(counts[r]), t, red, r, comm_, st);
      }
      group_end(status, "ncclReduce");
      return;
    }
    const std::int64_t pad = *std::max_element(counts.begin(), counts.end());
    if (pad == 0) return;
    void* padded = scratch(std::size_t(pad) * es * size_, st, 0);
    void* mine = scratch(std::size_t(pad) * es, st, 1);
    // Zero padding is neutral for Sum only; Max/Min over padding never reaches a real element
    // because padding positions are dropped when compacting.
    CEPHALO_CUDA_CHECK(cudaMemsetAsync(padded, 0, std::size_t(pad) * es * size_, st));
    for (int r = 0; r < size_; ++r)
      if (counts[r] > 0)
        CEPHALO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(padded) + std::size_t(r) * pad * es,
                                           static_cast<const char*>(send.data) + displs[r] * es,
                                           std::size_t(counts[r]) * es, cudaMemcpyDeviceToDevice,
                                           st));
    check(ncclReduceScatter(padded, mine, std::size_t(pad), t, nccl_op(op), comm_, st),
          "ncclReduceScatter", __LINE__);
    if (counts[rank_] > 0)
      CEPHALO_CUDA_CHECK(cudaMemcpyAsync(recv.data, mine, std::size_t(counts[rank_]) * es,
                                         cudaMemcpyDeviceToDevice, st));
  }

  void all_reduce(backend::Stream& s, TensorRef data, ReduceOp op) override {
    check(ncclAllReduce(data.data, data.data, std::size_t(data.numel), nccl_type(data.type),
                        nccl_op(op), comm_, stream(s)),
          "ncclAllReduce", __LINE__);
  }

  void broadcast(backend::Stream& s, TensorRef data, int root) override {
    nccl_expect(root >= 0 && root < size_, "broadcast: root out of range");
    check(ncclBroadcast(data.data, data.data, std::size_t(data.numel), nccl_type(data.type), root,
                        comm_, stream(s)),
          "ncclBroadcast", __LINE__);
  }

  // ncclSend / ncclRecv on the stream. NCCL runs a communicator's kernels in the order they
  // were issued and a p2p kernel holds its SMs until the peer arrives, so a communicator must
  // not carry transfers on two streams at once where the order could cross (a rank sending on
  // one stream while receiving on another from the same peer): the executor gives every
  // direction of a pipeline link its own two-rank communicator (split), so each of them has
  // one sending and one receiving stream.
  void send(backend::Stream& s, TensorRef data, int peer) override {
    expect_peer(peer, "send");
    check(
        ncclSend(data.data, std::size_t(data.numel), nccl_type(data.type), peer, comm_, stream(s)),
        "ncclSend", __LINE__);
  }
  void recv(backend::Stream& s, TensorRef data, int peer) override {
    expect_peer(peer, "recv");
    check(
        ncclRecv(data.data, std::size_t(data.numel), nccl_type(data.type), peer, comm_, stream(s)),
        "ncclRecv", __LINE__);
  }

  void all_reduce_host(double* values, int count, ReduceOp op) override {
    bootstrap_.all_reduce_host(values, count, op);
  }
  void broadcast_host(std::string& bytes, int root) override {
    bootstrap_.broadcast_host(bytes, root);
  }
  void barrier() override { bootstrap_.barrier(); }

  [[noreturn]] void abort(int exit_code) override {
    // Tear NCCL down first so that peers blocked in a collective with us see an error rather
    // than waiting forever, then end the job through the bootstrap (MPI_Abort).
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    bootstrap_.abort(exit_code);
    std::abort();  // unreachable: Communicator::abort never returns
  }

 private:
  cudaStream_t stream(backend::Stream& s) {
    nccl_expect(comm_ != nullptr, "used after an NCCL failure aborted it");
    return native_stream(s);
  }
  void expect_peer(int peer, const char* what) const {
    nccl_expect(peer >= 0 && peer < size_ && peer != rank_,
                std::string(what) + ": peer " + std::to_string(peer) + " is not another rank of " +
                    std::to_string(size_) + " (this is rank " + std::to_string(rank_) + ")");
  }
  // Throws RuntimeFailure with NCCL's error string after aborting the communicator.
  void check(ncclResult_t status, const char* what, int line) {
    if (status == ncclSuccess) return;
    ncclComm_t comm = comm_;
    comm_ = nullptr;  // aborted below: the destructor must not destroy it again
    detail::throw_nccl_error(status, comm, what, __FILE__, line);
  }
  void group_start() { check(ncclGroupStart(), "ncclGroupStart", __LINE__); }
  // Closes the group even when a call inside it failed (`inside` is that call's status): an
  // exception thrown with the group still open would leave this thread's NCCL group depth
  // raised, so every later NCCL call on the thread (another communicator too) would be queued
  // and never launched. ncclGroupEnd after a failed call cleans the group up and reports it.
  void group_end(ncclResult_t inside, const char* what) {
    const ncclResult_t end = ncclGroupEnd();
    if (inside != ncclSuccess) check(inside, what, __LINE__);
    check(end, "ncclGroupEnd", __LINE__);
  }

  // Element offsets of each rank's shard; validates counts against the flat and shard views.
  std::vector<std::int64_t> displacements(const std::vector<std::int64_t>& counts,
                                          const TensorRef& shard, const TensorRef& full,
                                          bool gather) const {
    const char* name = gather ? "all_gather_v" : "reduce_scatter_v";
    nccl_expect(static_cast<int>(counts.size()) == size_,
                std::string(name) + ": counts has " + std::to_string(counts.size()) +
                    " entries for " + std::to_string(size_) + " ranks");
    nccl_expect(shard.type == full.type, std::string(name) + ": element types differ");
    std::vector<std::int64_t> displs(counts.size(), 0);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      nccl_expect(counts[r] >= 0, std::string(name) + ": negative count");
      displs[r] = total;
      total += counts[r];
    }
    nccl_expect(full.numel >= total, std::string(name) + ": full buffer has " +
                                         std::to_string(full.numel) + " elements, counts sum to " +
                                         std::to_string(total));
    nccl_expect(shard.numel >= counts[rank_], std::string(name) + ": shard buffer too small");
    return displs;
  }

  // Scratch for the padded variant, kept between calls (grown on demand) and ordered on the
  // stream that uses it: a reallocation waits for that stream first.
  void* scratch(std::size_t bytes, cudaStream_t st, int which) {
    Scratch& s = scratch_[which];
    if (s.bytes < bytes) {
      if (s.ptr) {
        CEPHALO_CUDA_CHECK(cudaStreamSynchronize(st));
        CEPHALO_CUDA_CHECK(cudaFree(s.ptr));
      }
      s.ptr = nullptr;
      CEPHALO_CUDA_CHECK(cudaMalloc(&s.ptr, bytes));
      s.bytes = bytes;
    }
    return s.ptr;
  }
  struct Scratch {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };

  backend::Device& device_;
  backend::Communicator& bootstrap_;
  std::unique_ptr<backend::Communicator> owned_bootstrap_;  // a split's part (bootstrap_)
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  Scratch scratch_[2];
};

}  // namespace

std::unique_ptr<backend::Communicator> make_nccl_communicator(backend::Device& device,
                                                              backend::Communicator& bootstrap) {
  return std::make_unique<NcclCommunicator>(device, bootstrap);
}

}  // namespace cephalo::cuda

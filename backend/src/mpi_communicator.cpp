// MPI communicator. Every MPI return code is checked (errors are set to return, not abort, so
// that the failing rank can name the call before the job is torn down).
#include "cephalo/backend/mpi_communicator.hpp"

// The C API only (CMake defines OMPI_SKIP_MPICXX): the C++ bindings are not warning-free.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <numeric>

#include "cephalo/core/error.hpp"

#define CEPHALO_MPI(call) ::cephalo::backend::check_mpi((call), #call, __FILE__, __LINE__)

namespace cephalo::backend {

void check_mpi(int rc, const char* what, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RuntimeFailure(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + std::string(text, static_cast<std::size_t>(len)));
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  CEPHALO_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  CEPHALO_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  if (provided < MPI_THREAD_MULTIPLE)
    throw RuntimeFailure(
        "MPI_Init_thread: the MPI library does not provide MPI_THREAD_MULTIPLE (provided level " +
        std::to_string(provided) + "); the backend's comm thread needs it");
  CEPHALO_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CEPHALO_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool MpiRuntime::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

namespace {

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return MPI_FLOAT;
    case ElemType::I32:
      return MPI_INT32_T;
    case ElemType::F16:
    case ElemType::BF16:
      break;
  }
  throw RuntimeFailure(std::string("mpi communicator: element type ") + to_string(t) +
                       " unsupported (the CPU backend communicates fp32)");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(std::int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw RuntimeFailure(std::string("mpi communicator: ") + what + " count " + std::to_string(n) +
                         " outside MPI's int range");
  return static_cast<int>(n);
}

void expect(bool ok, const std::string& message) {
  if (!ok) throw RuntimeFailure("mpi communicator: " + message);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    // Separate communicators for stream collectives (comm thread) and host helpers (main
    // thread) so that concurrent calls from the two threads never interleave on one context.
    CEPHALO_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &stream_comm_));
    CEPHALO_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &host_comm_));
    CEPHALO_MPI(MPI_Comm_set_errhandler(stream_comm_, MPI_ERRORS_RETURN));
    CEPHALO_MPI(MPI_Comm_set_errhandler(host_comm_, MPI_ERRORS_RETURN));
    CEPHALO_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    CEPHALO_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      MPI_Comm_free(&stream_comm_);
      MPI_Comm_free(&host_comm_);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }

  void all_gather(Stream& s, TensorRef send, TensorRef recv) override {
    expect(recv.numel == send.numel * size_ && recv.type == send.type,
           "all_gather: recv must hold size() * send elements of the same type");
    MPI_Comm c = stream_comm_;
    s.enqueue_host([=] {
      int n = to_int(send.numel, "all_gather");
      CEPHALO_MPI(
          MPI_Allgather(send.data, n, mpi_type(send.type), recv.data, n, mpi_type(recv.type), c));
    });
  }
  void reduce_scatter(Stream& s, TensorRef send, TensorRef recv, ReduceOp op) override {
    expect(send.numel == recv.numel * size_ && recv.type == send.type,
           "reduce_scatter: send must hold size() * recv elements of the same type");
    MPI_Comm c = stream_comm_;
    s.enqueue_host([=] {
      int n = to_int(recv.numel, "reduce_scatter");
      CEPHALO_MPI(
          MPI_Reduce_scatter_block(send.data, recv.data, n, mpi_type(send.type), mpi_op(op), c));
    });
  }
  void all_gather_v(Stream& s, TensorRef send, TensorRef recv,
                    const std::vector<std::int64_t>& counts) override {
    auto [c32, displs, total] = layout(counts, "all_gather_v");
    expect(send.numel == counts[static_cast<std::size_t>(rank_)],
           "all_gather_v: send has " + std::to_string(send.numel) + " elements, counts[rank] " +
               std::to_string(counts[static_cast<std::size_t>(rank_)]));
    expect(recv.numel == total, "all_gather_v: recv must hold sum(counts) elements");
    MPI_Comm c = stream_comm_;
    const std::size_t me = static_cast<std::size_t>(rank_);
    s.enqueue_host([=, c32 = c32, displs = displs] {
      CEPHALO_MPI(MPI_Allgatherv(send.data, c32[me], mpi_type(send.type), recv.data, c32.data(),
                                 displs.data(), mpi_type(recv.type), c));
    });
  }
  void reduce_scatter_v(Stream& s, TensorRef send, TensorRef recv,
                        const std::vector<std::int64_t>& counts, ReduceOp op) override {
    auto [c32, displs, total] = layout(counts, "reduce_scatter_v");
    expect(send.numel == total, "reduce_scatter_v: send must hold sum(counts) elements");
    expect(recv.numel == counts[static_cast<std::size_t>(rank_)],
           "reduce_scatter_v: recv must hold counts[rank] elements");
    MPI_Comm c = stream_comm_;
    s.enqueue_host([=, c32 = c32] {
      CEPHALO_MPI(
          MPI_Reduce_scatter(send.data, recv.data, c32.data(), mpi_type(send.type), mpi_op(op), c));
    });
  }
  void all_reduce(Stream& s, TensorRef data, ReduceOp op) override {
    MPI_Comm c = stream_comm_;
    s.enqueue_host([=] {
      CEPHALO_MPI(MPI_Allreduce(MPI_IN_PLACE, data.data, to_int(data.numel, "all_reduce"),
                                mpi_type(data.type), mpi_op(op), c));
    });
  }
  void broadcast(Stream& s, TensorRef data, int root) override {
    MPI_Comm c = stream_comm_;
    s.enqueue_host([=] {
      CEPHALO_MPI(
          MPI_Bcast(data.data, to_int(data.numel, "broadcast"), mpi_type(data.type), root, c));
    });
  }

  void all_reduce_host(double* values, int count, ReduceOp op) override {
    CEPHALO_MPI(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, mpi_op(op), host_comm_));
  }
  void broadcast_host(std::string& bytes, int root) override {
    long long n = static_cast<long long>(bytes.size());
    CEPHALO_MPI(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, host_comm_));
    bytes.resize(static_cast<std::size_t>(n));
    CEPHALO_MPI(MPI_Bcast(bytes.data(), to_int(n, "broadcast_host"), MPI_CHAR, root, host_comm_));
  }
  void barrier() override { CEPHALO_MPI(MPI_Barrier(host_comm_)); }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return; make sure this rank ends anyway
  }

 private:
  struct Layout {
    std::vector<int> counts;
    std::vector<int> displs;
    std::int64_t total;
  };
  Layout layout(const std::vector<std::int64_t>& counts, const char* what) const {
    expect(static_cast<int>(counts.size()) == size_,
           std::string(what) + ": " + std::to_string(counts.size()) + " counts for " +
               std::to_string(size_) + " ranks");
    Layout l{{}, {}, 0};
    for (auto n : counts) {
      l.counts.push_back(to_int(n, what));
      l.displs.push_back(to_int(l.total, what));
      l.total += n;
    }
    return l;
  }

  MPI_Comm stream_comm_ = MPI_COMM_NULL;
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace cephalo::backend

// The MPI plugin (libcephalo_mpi.so, mpi_plugin.hpp): MPI's start and end for the process, the
// gather of strings to rank 0, and the MPI communicator. The one file that calls MPI; the
// backend loads it only when MPI is needed. Every MPI return code is checked (errors are set to
// return, not abort, so that the failing rank can name the call before the job is torn down).
//
// bf16 / fp16: MPI has no 16-bit floating types, so each communicator commits one 2-byte
// datatype per format (moving bytes is all that gathers and broadcasts need) and creates
// commutative user reduction ops for them that widen to fp32, combine and round back. A sum
// therefore rounds once per pairwise combine (R-1 roundings over R ranks, in MPI's order), not
// once at the end as an fp32 reduction followed by one cast would.
#include "mpi_plugin.hpp"

// The C API only (CMake defines OMPI_SKIP_MPICXX): the C++ bindings are not warning-free.
#include <mpi.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "cephalo/core/error.hpp"
#include "half.hpp"

#define CEPHALO_MPI(call) check_mpi((call), #call, __FILE__, __LINE__)

namespace cephalo::backend {

namespace {

// Throws RuntimeFailure "<what> failed at file:line: <MPI_Error_string>" when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* what, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RuntimeFailure(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + std::string(text, static_cast<std::size_t>(len)));
}

void init_mpi(int* argc, char*** argv, int& rank, int& size) {
  int provided = 0;
  CEPHALO_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  CEPHALO_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  if (provided < MPI_THREAD_MULTIPLE)
    throw RuntimeFailure(
        "MPI_Init_thread: the MPI library does not provide MPI_THREAD_MULTIPLE (provided level " +
        std::to_string(provided) + "); the backend's comm thread needs it");
  CEPHALO_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CEPHALO_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
}

void finalize_mpi() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::vector<std::string> gather_strings(const std::string& mine, int rank, int size) {
  if (mine.size() > static_cast<std::size_t>(INT_MAX))
    throw RuntimeFailure("gather_strings_to_root: " + std::to_string(mine.size()) +
                         " bytes on rank " + std::to_string(rank) + " exceed an MPI count");
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(size)), offsets(lens.size());
  CEPHALO_MPI(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (rank == 0) {
    long long total = 0;
    for (std::size_t r = 0; r < lens.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += lens[r];
      if (total > INT_MAX)
        throw RuntimeFailure("gather_strings_to_root: the ranks' strings exceed an MPI count");
    }
    all.resize(static_cast<std::size_t>(total));
  }
  CEPHALO_MPI(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(),
                          MPI_CHAR, 0, MPI_COMM_WORLD));
  if (rank != 0) return {};
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lens.size(); ++r)
    out.push_back(
        all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lens[r])));
  return out;
}

// The fp32 combine of two already-widened elements. Max and Min propagate NaN from either side
// (a NaN gradient must not be hidden by a reduction).
struct SumOf {
  float operator()(float a, float b) const { return a + b; }
};
struct MaxOf {
  float operator()(float a, float b) const { return a > b || std::isnan(a) ? a : b; }
};
struct MinOf {
  float operator()(float a, float b) const { return a < b || std::isnan(a) ? a : b; }
};

// MPI_User_function for a 2-byte floating format: inout[i] = round(in[i] (op) inout[i]).
template <float (*Widen)(std::uint16_t), std::uint16_t (*Round)(float), class Combine>
void combine_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  const Combine combine;
  for (int i = 0; i < *len; ++i) b[i] = Round(combine(Widen(a[i]), Widen(b[i])));
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

// Completes a nonblocking collective started by `start` on the calling (comm stream) thread
// without spinning on a core: a blocking MPI collective busy-polls until every peer arrives,
// which on a CPU rank steals the core its compute thread needs (the collective then waits for
// the peer's comm thread to be scheduled, and the rank's compute slows down too). Polls hot
// for a few tries (a collective about to finish), then sleeps 5 us between tests (a small
// fraction of a core while waiting); the thread's timer slack is cut to 1 us so that the sleep
// is not rounded up to the default 50 us. The request's status is kept (a receive's length).
//
// The slack is set before the first sleep of each waiting collective (one system call beside
// dozens of sleeps), not once per thread through a thread_local: this plugin is dlopen()ed, so
// a thread_local here is dynamic TLS, a small block glibc mallocs per thread, and clang 14's
// LeakSanitizer (the sanitizer job's) takes any such block that starts 16 bytes into a page for
// a glibc 2.19 block and reads its bounds from the allocator's chunk header: the leak check at
// exit then scans from a garbage address and dies ("Tracer caught signal 11"), in whichever run
// the heap puts the block there (LLVM fixed the guess in 17). The plugin keeps no TLS at all.
template <class Start>
void complete_with_status(Start&& start, MPI_Request& request, MPI_Status& status) {
  start(&request);
  int done = 0;
  for (int tries = 0;; ++tries) {
    CEPHALO_MPI(MPI_Test(&request, &done, &status));
    if (done) return;
    // Never a longer sleep after a long wait: once the last peer arrives, each round of the
    // collective's algorithm progresses only inside MPI_Test, so the polling interval is
    // paid per round.
    if (tries < 64) continue;
#ifdef __linux__
    if (tries == 64) (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
    std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
}
template <class Start>
void complete(Start&& start) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Status status;
  complete_with_status(std::forward<Start>(start), request, status);
}

class MpiCommunicator final : public Communicator {
 public:
  // Over `parent` (MPI_COMM_WORLD, or the part a split returned; the caller keeps ownership).
  explicit MpiCommunicator(MPI_Comm parent) {
    // Separate communicators for stream collectives (comm thread) and host helpers (main
    // thread) so that concurrent calls from the two threads never interleave on one context.
    CEPHALO_MPI(MPI_Comm_dup(parent, &stream_comm_));
    CEPHALO_MPI(MPI_Comm_dup(parent, &host_comm_));
    // Point-to-point transfers get their own context too: their send and receive threads run
    // beside the comm stream's collectives, and a context of their own keeps the matching of
    // their messages apart from anything else.
    CEPHALO_MPI(MPI_Comm_dup(parent, &p2p_comm_));
    for (MPI_Comm c : {stream_comm_, host_comm_, p2p_comm_})
      CEPHALO_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    CEPHALO_MPI(MPI_Comm_rank(parent, &rank_));
    CEPHALO_MPI(MPI_Comm_size(parent, &size_));
    for (MPI_Datatype* t : {&bf16_type_, &f16_type_}) {
      CEPHALO_MPI(MPI_Type_contiguous(1, MPI_UINT16_T, t));
      CEPHALO_MPI(MPI_Type_commit(t));
    }
    create_ops<bf16_to_float, float_to_bf16>(bf16_ops_);
    create_ops<f16_to_float, float_to_f16>(f16_ops_);
  }
  ~MpiCommunicator() override {
    // After MPI_Finalize every handle is gone already (and freeing one would be an error).
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      for (auto* ops : {&bf16_ops_, &f16_ops_})
        for (MPI_Op& op : *ops) MPI_Op_free(&op);
      MPI_Type_free(&bf16_type_);
      MPI_Type_free(&f16_type_);
      MPI_Comm_free(&stream_comm_);
      MPI_Comm_free(&host_comm_);
      MPI_Comm_free(&p2p_comm_);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }

  void all_gather(Stream& s, TensorRef send, TensorRef recv) override {
    expect(recv.numel == send.numel * size_ && recv.type == send.type,
           "all_gather: recv must hold size() * send elements of the same type");
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(send.type);
    s.enqueue_host([=] {
      int n = to_int(send.numel, "all_gather");
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(MPI_Iallgather(send.data, n, t, recv.data, n, t, c, r));
      });
    });
  }
  void reduce_scatter(Stream& s, TensorRef send, TensorRef recv, ReduceOp op) override {
    expect(send.numel == recv.numel * size_ && recv.type == send.type,
           "reduce_scatter: send must hold size() * recv elements of the same type");
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(send.type);
    MPI_Op o = reduction(send.type, op);
    s.enqueue_host([=] {
      int n = to_int(recv.numel, "reduce_scatter");
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(MPI_Ireduce_scatter_block(send.data, recv.data, n, t, o, c, r));
      });
    });
  }
  void all_gather_v(Stream& s, TensorRef send, TensorRef recv,
                    const std::vector<std::int64_t>& counts, UnevenCollective how) override {
    expect_resolved(how, "all_gather_v");
    auto [c32, displs, total] = layout(counts, "all_gather_v");
    expect(send.numel == counts[static_cast<std::size_t>(rank_)],
           "all_gather_v: send has " + std::to_string(send.numel) + " elements, counts[rank] " +
               std::to_string(counts[static_cast<std::size_t>(rank_)]));
    expect(recv.numel == total, "all_gather_v: recv must hold sum(counts) elements");
    expect(recv.type == send.type, "all_gather_v: send and recv must share an element type");
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(send.type);
    const std::size_t me = static_cast<std::size_t>(rank_);
    if (how == UnevenCollective::Padded) {
      const std::size_t es = element_size(send.type);
      const int pad = *std::max_element(c32.begin(), c32.end());
      s.enqueue_host([=, c32 = c32, displs = displs] {
        // Every rank sends `pad` elements (its shard, zero-filled); the blocks land at r * pad
        // and are compacted to the shard offsets.
        std::vector<char> out(static_cast<std::size_t>(pad) * es, 0);
        std::vector<char> in(static_cast<std::size_t>(pad) * es * c32.size());
        copy_host_bytes(out.data(), send.data, static_cast<std::size_t>(c32[me]) * es);
        complete([&](MPI_Request* r) {
          CEPHALO_MPI(MPI_Iallgather(out.data(), pad, t, in.data(), pad, t, c, r));
        });
        for (std::size_t r = 0; r < c32.size(); ++r)
          copy_host_bytes(static_cast<char*>(recv.data) + static_cast<std::size_t>(displs[r]) * es,
                          in.data() + r * static_cast<std::size_t>(pad) * es,
                          static_cast<std::size_t>(c32[r]) * es);
      });
      return;
    }
    s.enqueue_host([=, c32 = c32, displs = displs] {
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(
            MPI_Iallgatherv(send.data, c32[me], t, recv.data, c32.data(), displs.data(), t, c, r));
      });
    });
  }
  void reduce_scatter_v(Stream& s, TensorRef send, TensorRef recv,
                        const std::vector<std::int64_t>& counts, ReduceOp op,
                        UnevenCollective how) override {
    expect_resolved(how, "reduce_scatter_v");
    auto [c32, displs, total] = layout(counts, "reduce_scatter_v");
    expect(send.numel == total, "reduce_scatter_v: send must hold sum(counts) elements");
    expect(recv.numel == counts[static_cast<std::size_t>(rank_)],
           "reduce_scatter_v: recv must hold counts[rank] elements");
    expect(recv.type == send.type, "reduce_scatter_v: send and recv must share an element type");
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(send.type);
    MPI_Op o = reduction(send.type, op);
    if (how == UnevenCollective::Padded) {
      const std::size_t es = element_size(send.type);
      const int pad = *std::max_element(c32.begin(), c32.end());
      const std::size_t me = static_cast<std::size_t>(rank_);
      s.enqueue_host([=, c32 = c32, displs = displs] {
        // Rank r's block is placed at r * pad with a zero tail (zeros are neutral for Sum; for
        // Max/Min the tail is never read back), reduced with the even collective, and the
        // first counts[rank] elements of this rank's padded block are its result.
        std::vector<char> out(static_cast<std::size_t>(pad) * es * c32.size(), 0);
        std::vector<char> in(static_cast<std::size_t>(pad) * es);
        for (std::size_t r = 0; r < c32.size(); ++r)
          copy_host_bytes(
              out.data() + r * static_cast<std::size_t>(pad) * es,
              static_cast<const char*>(send.data) + static_cast<std::size_t>(displs[r]) * es,
              static_cast<std::size_t>(c32[r]) * es);
        complete([&](MPI_Request* r) {
          CEPHALO_MPI(MPI_Ireduce_scatter_block(out.data(), in.data(), pad, t, o, c, r));
        });
        copy_host_bytes(recv.data, in.data(), static_cast<std::size_t>(c32[me]) * es);
      });
      return;
    }
    s.enqueue_host([=, c32 = c32] {
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(MPI_Ireduce_scatter(send.data, recv.data, c32.data(), t, o, c, r));
      });
    });
  }
  void all_reduce(Stream& s, TensorRef data, ReduceOp op) override {
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(data.type);
    MPI_Op o = reduction(data.type, op);
    s.enqueue_host([=] {
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(
            MPI_Iallreduce(MPI_IN_PLACE, data.data, to_int(data.numel, "all_reduce"), t, o, c, r));
      });
    });
  }
  void broadcast(Stream& s, TensorRef data, int root) override {
    MPI_Comm c = stream_comm_;
    MPI_Datatype t = datatype(data.type);
    s.enqueue_host([=] {
      complete([&](MPI_Request* r) {
        CEPHALO_MPI(MPI_Ibcast(data.data, to_int(data.numel, "broadcast"), t, root, c, r));
      });
    });
  }

  // Nonblocking send / receive completed by polling on the stream's thread (as the
  // collectives), tag 0 on the point-to-point context: MPI's non-overtaking rule matches the
  // transfers of one ordered pair in the order one thread posts them.
  void send(Stream& s, TensorRef data, int peer) override {
    expect_peer(peer, "send");
    MPI_Comm c = p2p_comm_;
    MPI_Datatype t = datatype(data.type);
    s.enqueue_host([=] {
      const int n = to_int(data.numel, "send");
      complete([&](MPI_Request* r) { CEPHALO_MPI(MPI_Isend(data.data, n, t, peer, 0, c, r)); });
    });
  }
  void recv(Stream& s, TensorRef data, int peer) override {
    expect_peer(peer, "recv");
    MPI_Comm c = p2p_comm_;
    MPI_Datatype t = datatype(data.type);
    s.enqueue_host([=] {
      const int n = to_int(data.numel, "recv");
      MPI_Status status;
      MPI_Request request = MPI_REQUEST_NULL;
      complete_with_status(
          [&](MPI_Request* r) { CEPHALO_MPI(MPI_Irecv(data.data, n, t, peer, 0, c, r)); }, request,
          status);
      // A message of another length is a broken schedule (the two sides disagree on the
      // transfer): MPI truncation or a short message, refused naming both counts.
      int got = 0;
      CEPHALO_MPI(MPI_Get_count(&status, t, &got));
      expect(got == n, "recv from rank " + std::to_string(peer) + ": expected " +
                           std::to_string(n) + " elements, the sender sent " + std::to_string(got));
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
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    CEPHALO_MPI(MPI_Comm_split(host_comm_, color < 0 ? MPI_UNDEFINED : color, key, &part));
    if (part == MPI_COMM_NULL) return nullptr;
    CEPHALO_MPI(MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN));
    std::unique_ptr<Communicator> out;
    try {
      out = std::make_unique<MpiCommunicator>(part);
    } catch (...) {
      MPI_Comm_free(&part);
      throw;
    }
    CEPHALO_MPI(MPI_Comm_free(&part));  // the new communicator holds its own duplicates
    return out;
  }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return; make sure this rank ends anyway
  }

 private:
  // Created once per communicator (after MPI_Init, freed before MPI_Finalize by the destructor)
  // and indexed by ReduceOp (Sum, Max, Min). Commutative: MPI may combine in any order.
  template <float (*Widen)(std::uint16_t), std::uint16_t (*Round)(float)>
  static void create_ops(std::array<MPI_Op, 3>& ops) {
    CEPHALO_MPI(MPI_Op_create(&combine_16bit<Widen, Round, SumOf>, 1,
                              &ops[static_cast<std::size_t>(ReduceOp::Sum)]));
    CEPHALO_MPI(MPI_Op_create(&combine_16bit<Widen, Round, MaxOf>, 1,
                              &ops[static_cast<std::size_t>(ReduceOp::Max)]));
    CEPHALO_MPI(MPI_Op_create(&combine_16bit<Widen, Round, MinOf>, 1,
                              &ops[static_cast<std::size_t>(ReduceOp::Min)]));
  }
  MPI_Datatype datatype(ElemType t) const {
    switch (t) {
      case ElemType::F32:
        return MPI_FLOAT;
      case ElemType::I32:
        return MPI_INT32_T;
      case ElemType::F16:
        return f16_type_;
      case ElemType::BF16:
        return bf16_type_;
    }
    throw RuntimeFailure("mpi communicator: unknown element type " +
                         std::to_string(static_cast<int>(t)));
  }
  // MPI's built-in ops for f32/i32; the widening user ops for the 16-bit formats.
  MPI_Op reduction(ElemType t, ReduceOp op) const {
    if (t == ElemType::BF16) return bf16_ops_[static_cast<std::size_t>(op)];
    if (t == ElemType::F16) return f16_ops_[static_cast<std::size_t>(op)];
    return mpi_op(op);
  }

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

  void expect_peer(int peer, const char* what) const {
    expect(peer >= 0 && peer < size_ && peer != rank_,
           std::string(what) + ": peer " + std::to_string(peer) + " is not another rank of " +
               std::to_string(size_) + " (this is rank " + std::to_string(rank_) + ")");
  }

  MPI_Comm stream_comm_ = MPI_COMM_NULL;
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Datatype f16_type_ = MPI_DATATYPE_NULL;
  std::array<MPI_Op, 3> bf16_ops_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::array<MPI_Op, 3> f16_ops_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int rank_ = 0;
  int size_ = 1;
};

class MpiLibraryImpl final : public MpiLibrary {
 public:
  void init(int* argc, char*** argv, int& rank, int& size) const override {
    init_mpi(argc, argv, rank, size);
  }
  void finalize() const noexcept override { finalize_mpi(); }
  std::vector<std::string> gather_strings_to_root(const std::string& mine, int rank,
                                                  int size) const override {
    return gather_strings(mine, rank, size);
  }
  std::unique_ptr<Communicator> make_communicator() const override {
    return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  }
};

}  // namespace

}  // namespace cephalo::backend

extern "C" __attribute__((visibility("default"))) int cephalo_mpi_plugin_abi() {
  return cephalo::backend::kMpiPluginAbi;
}

extern "C" __attribute__((visibility("default"))) const cephalo::backend::MpiLibrary*
cephalo_mpi_plugin_library() {
  static const cephalo::backend::MpiLibraryImpl library;
  return &library;
}

// nccl_ranks_check: run under `mpirun -np N` (N >= 2 GPUs). Every NCCL collective of the
// Communicator interface across real ranks, with uneven shard counts that include an empty
// shard, for both uneven algorithms. Rank 0 prints one line per check; exit 0 when all agree
// with the expected values on every rank, 1 otherwise, 77 when there are too few GPUs.
#include <cstdio>
#include <string>
#include <vector>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/cuda_device.hpp"
#include "cephalo/backend/cuda/nccl_communicator.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/core/error.hpp"

using namespace cephalo;
using backend::ElemType;
using backend::ReduceOp;
using backend::StreamKind;

namespace {

int check_all(backend::Device& dev, backend::Communicator& comm, UnevenCollective how) {
  const int R = comm.size(), me = comm.rank();
  auto& s = dev.stream(StreamKind::Comm);
  int bad = 0;
  auto expect = [&](const std::vector<float>& got, const std::vector<float>& want) {
    if (got != want) ++bad;
  };
  // Uneven counts with one empty shard (rank 1) and distinct sizes.
  std::vector<std::int64_t> counts(R);
  for (int r = 0; r < R; ++r) counts[r] = r == 1 ? 0 : 1000 + 37 * r;
  std::int64_t total = 0;
  std::vector<std::int64_t> displ(R);
  for (int r = 0; r < R; ++r) {
    displ[r] = total;
    total += counts[r];
  }
  auto upload = [&](const std::vector<float>& v) {
    auto b = dev.allocate(v.size() ? v.size() : 1, ElemType::F32);
    if (!v.empty()) dev.upload(b.ref(), v.data(), v.size() * 4);
    return b;
  };
  auto download = [&](const backend::Buffer& b, std::size_t n) {
    std::vector<float> v(n);
    if (n) dev.download(v.data(), b.ref(), n * 4);
    return v;
  };
  // all_gather_v: rank r's shard holds r * 10000 + i.
  {
    std::vector<float> mine(counts[me]), want(total);
    for (std::int64_t i = 0; i < counts[me]; ++i) mine[i] = float(me * 10000 + i);
    for (int r = 0; r < R; ++r)
      for (std::int64_t i = 0; i < counts[r]; ++i) want[displ[r] + i] = float(r * 10000 + i);
    auto send = upload(mine);
    auto recv = upload(std::vector<float>(total, -1.0f));
    comm.all_gather_v(s, send.slice(0, counts[me]), recv.ref(), counts, how);
    s.synchronize();
    expect(download(recv, total), want);
  }
  // reduce_scatter_v: every rank sends (rank + 1) * j; rank r keeps sum over ranks of its slice.
  {
    std::vector<float> full(total), want(counts[me]);
    for (std::int64_t j = 0; j < total; ++j) full[j] = float((me + 1) * (j % 97));
    for (std::int64_t i = 0; i < counts[me]; ++i)
      want[i] = float((R * (R + 1) / 2) * ((displ[me] + i) % 97));
    auto send = upload(full);
    auto recv = upload(std::vector<float>(counts[me] ? counts[me] : 1, -1.0f));
    comm.reduce_scatter_v(s, send.ref(), recv.slice(0, counts[me]), counts, ReduceOp::Sum, how);
    s.synchronize();
    expect(download(recv, counts[me]), want);
  }
  // Even all-gather, reduce-scatter, all-reduce, broadcast.
  {
    const std::int64_t n = 4099;
    std::vector<float> mine(n), want(n * R);
    for (std::int64_t i = 0; i < n; ++i) mine[i] = float(me * 3 + i % 5);
    for (int r = 0; r < R; ++r)
      for (std::int64_t i = 0; i < n; ++i) want[r * n + i] = float(r * 3 + i % 5);
    auto send = upload(mine);
    auto recv = upload(std::vector<float>(n * R, -1.0f));
    comm.all_gather(s, send.ref(), recv.ref());
    s.synchronize();
    expect(download(recv, n * R), want);
    auto rs_out = upload(std::vector<float>(n, -1.0f));
    comm.reduce_scatter(s, recv.ref(), rs_out.ref(), ReduceOp::Sum);
    s.synchronize();
    std::vector<float> rs_want(n);
    for (std::int64_t i = 0; i < n; ++i) rs_want[i] = float(R * (me * 3 + i % 5));
    expect(download(rs_out, n), rs_want);
    comm.all_reduce(s, send.ref(), ReduceOp::Max);
    s.synchronize();
    std::vector<float> mx(n);
    for (std::int64_t i = 0; i < n; ++i) mx[i] = float((R - 1) * 3 + i % 5);
    expect(download(send, n), mx);
    comm.broadcast(s, rs_out.ref(), R - 1);
    s.synchronize();
    std::vector<float> bc(n);
    for (std::int64_t i = 0; i < n; ++i) bc[i] = float(R * ((R - 1) * 3 + i % 5));
    expect(download(rs_out, n), bc);
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  backend::MpiRuntime mpi_runtime(&argc, &argv);
  auto mpi = backend::make_mpi_communicator();
  std::string why;
  const int gpus = cuda::device_count(&why);
  double too_few = gpus < mpi->size() ? 1.0 : 0.0;
  mpi->all_reduce_host(&too_few, 1, ReduceOp::Max);
  if (too_few > 0) {
    if (mpi->rank() == 0)
      std::printf("SKIP: %d ranks need as many GPUs on this node, found %d (%s)\n", mpi->size(),
                  gpus, why.c_str());
    return 77;
  }
  try {
    auto dev = cuda::make_cuda_device({cuda::local_device_index()});
    int failures = 0;
    auto nccl = cuda::make_nccl_communicator(*dev, *mpi);
    for (auto alg : {UnevenCollective::Grouped, UnevenCollective::Padded}) {
      double bad = check_all(*dev, *nccl, alg);
      mpi->all_reduce_host(&bad, 1, ReduceOp::Sum);
      if (mpi->rank() == 0)
        std::printf("%s %s: %d ranks, %g mismatching checks\n", bad == 0 ? "OK" : "FAIL",
                    to_string(alg).c_str(), mpi->size(), bad);
      failures += bad > 0;
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", mpi->rank(), e.what());
    mpi->abort(4);
  }
}

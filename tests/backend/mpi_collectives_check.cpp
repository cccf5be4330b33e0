// mpi_collectives_check: run under `mpirun -np N` (N >= 2; the test uses 3). The MPI
// communicator's collectives on bf16 and fp16 tensors of the CPU device, issued on its comm
// stream (a worker thread), against fp32 references that every rank computes from every rank's
// inputs: all_gather / all_gather_v (uneven counts with an empty shard) and broadcast bit for
// bit; reduce_scatter / reduce_scatter_v / all_reduce Max and Min bit for bit, Sum within the
// rounding of the N-1 pairwise combines. A rank that sees a mismatch prints it; rank 0 prints
// one summary line. Exit 0 when every check holds on every rank, 1 on a mismatch, 2 on a
// runtime failure. `--corrupt` makes rank 1 alter one received element before comparing, so
// the test can see that a mismatch is reported.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "half.hpp"

using namespace cephalo::backend;
using cephalo::UnevenCollective;

namespace {

// Deterministic input of `rank` at element `j`, uniform in [-4, 4), rounded to `type`: every
// rank can compute every other rank's inputs.
float input(int rank, std::int64_t j, int salt, ElemType type) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 40) ^
                    (static_cast<std::uint64_t>(j) << 8) ^ static_cast<std::uint64_t>(salt);
  z += 0x9e3779b97f4a7c15ull;  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
  return round_to(8.0f * u - 4.0f, type);
}

// Unit roundoff of the 16-bit formats (8 and 11 significant bits).
float unit_roundoff(ElemType t) { return t == ElemType::BF16 ? 0x1p-8f : 0x1p-11f; }

class Checker {
 public:
  Checker(Device& dev, Communicator& comm, bool corrupt, UnevenCollective how)
      : dev_(dev), comm_(comm), how_(how), corrupt_(corrupt && comm.rank() == 1) {}

  Buffer upload(const std::vector<float>& v, ElemType t) {
    Buffer b = dev_.allocate(std::max<std::size_t>(v.size(), 1), t);
    std::vector<std::uint8_t> bytes(v.size() * element_size(t));
    store_f32(v.data(), bytes.data(), t, v.size());
    if (!v.empty()) dev_.upload(b.ref(), bytes.data(), bytes.size());
    return b;
  }
  std::vector<float> download(const Buffer& b, std::size_t n) {
    std::vector<std::uint8_t> bytes(n * element_size(b.type()));
    if (n) dev_.download(bytes.data(), b.ref(), bytes.size());
    std::vector<float> v(n);
    load_f32(bytes.data(), b.type(), v.data(), n);
    if (corrupt_ && n) {
      v[n / 2] += 1000.0f;  // inputs are in [-4, 4): far outside any tolerance
      corrupt_ = false;
    }
    return v;
  }

  // got[i] == want[i] bit for bit when tol is empty, else |got - want| <= tol[i]; NaN fails.
  void expect(const std::string& what, const std::vector<float>& got,
              const std::vector<float>& want, const std::vector<float>& tol = {}) {
    ++checks_;
    std::size_t differ = 0, first = 0;
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      const bool ok = tol.empty() ? std::memcmp(&got[i], &want[i], sizeof(float)) == 0
                                  : std::fabs(got[i] - want[i]) <= tol[i];
      if (!ok && differ++ == 0) first = i;
    }
    if (got.size() != want.size() || differ) {
      ++bad_;
      // One write per line, so the ranks' messages do not interleave mid-line.
      std::string line = "rank " + std::to_string(comm_.rank()) + ": mismatch in " + what + ": " +
                         std::to_string(differ) + " of " + std::to_string(want.size()) +
                         " elements differ";
      if (differ)
        line += " (first " + std::to_string(first) + ": got " + std::to_string(got[first]) +
                ", want " + std::to_string(want[first]) + ")";
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

  void run(ElemType t) {
    const int R = comm_.size(), me = comm_.rank();
    const std::string tn = to_string(t);
    auto& s = dev_.stream(StreamKind::Comm);
    // Uneven shards: rank 1 owns nothing, the others distinct sizes.
    std::vector<std::int64_t> counts(static_cast<std::size_t>(R)), displ(counts.size());
    std::int64_t total = 0;
    for (int r = 0; r < R; ++r) {
      counts[r] = r == 1 ? 0 : 50 + 37 * r;
      displ[r] = total;
      total += counts[r];
    }
    const std::int64_t mine = counts[static_cast<std::size_t>(me)];

    {  // all_gather_v: rank r contributes input(r, i) for its shard.
      std::vector<float> send(static_cast<std::size_t>(mine)), want(total);
      for (std::int64_t i = 0; i < mine; ++i) send[i] = input(me, i, 1, t);
      for (int r = 0; r < R; ++r)
        for (std::int64_t i = 0; i < counts[r]; ++i) want[displ[r] + i] = input(r, i, 1, t);
      auto sb = upload(send, t);
      auto rb = upload(std::vector<float>(total, NAN), t);
      comm_.all_gather_v(s, sb.slice(0, mine), rb.ref(), counts, how_);
      s.synchronize();
      expect("all_gather_v " + tn, download(rb, total), want);
    }
    {  // even all_gather
      const std::int64_t n = 33;
      std::vector<float> send(n), want(n * R);
      for (std::int64_t i = 0; i < n; ++i) send[i] = input(me, i, 2, t);
      for (int r = 0; r < R; ++r)
        for (std::int64_t i = 0; i < n; ++i) want[r * n + i] = input(r, i, 2, t);
      auto sb = upload(send, t);
      auto rb = upload(std::vector<float>(n * R, NAN), t);
      comm_.all_gather(s, sb.ref(), rb.ref());
      s.synchronize();
      expect("all_gather " + tn, download(rb, n * R), want);
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      const std::string on = op == ReduceOp::Sum ? "sum" : (op == ReduceOp::Max ? "max" : "min");
      const int salt = 10 + static_cast<int>(op);
      // Reference of element j over all ranks' inputs, rounded to t, with the Sum tolerance:
      // each of the R-1 pairwise combines rounds once, by at most u * (sum of magnitudes), and
      // rounding the fp32 reference adds at most one more such error.
      auto reference = [&](std::int64_t j, float& tol) {
        float acc = input(0, j, salt, t), mag = std::fabs(acc);
        for (int r = 1; r < R; ++r) {
          const float x = input(r, j, salt, t);
          mag += std::fabs(x);
          acc = op == ReduceOp::Sum ? acc + x
                                    : (op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x));
        }
        tol = static_cast<float>(R) * unit_roundoff(t) * mag;
        return round_to(acc, t);  // exact for Max and Min: acc is one of the inputs
      };
      std::vector<float> full(total);
      for (std::int64_t j = 0; j < total; ++j) full[j] = input(me, j, salt, t);
      {  // reduce_scatter_v: rank r keeps its shard of the reduction.
        std::vector<float> want(static_cast<std::size_t>(mine)), tol(want.size());
        for (std::int64_t i = 0; i < mine; ++i)
          want[i] = reference(displ[static_cast<std::size_t>(me)] + i, tol[i]);
        auto sb = upload(full, t);
        auto rb = upload(std::vector<float>(static_cast<std::size_t>(mine), NAN), t);
        comm_.reduce_scatter_v(s, sb.ref(), rb.slice(0, mine), counts, op, how_);
        s.synchronize();
        expect("reduce_scatter_v " + on + " " + tn, download(rb, static_cast<std::size_t>(mine)),
               want, op == ReduceOp::Sum ? tol : std::vector<float>{});
      }
      {  // even reduce_scatter over the first R * n elements
        const std::int64_t n = total / R;
        std::vector<float> want(static_cast<std::size_t>(n)), tol(want.size());
        for (std::int64_t i = 0; i < n; ++i) want[i] = reference(me * n + i, tol[i]);
        auto sb = upload(std::vector<float>(full.begin(), full.begin() + n * R), t);
        auto rb = upload(std::vector<float>(static_cast<std::size_t>(n), NAN), t);
        comm_.reduce_scatter(s, sb.ref(), rb.ref(), op);
        s.synchronize();
        expect("reduce_scatter " + on + " " + tn, download(rb, static_cast<std::size_t>(n)), want,
               op == ReduceOp::Sum ? tol : std::vector<float>{});
      }
      {  // all_reduce in place
        std::vector<float> want(static_cast<std::size_t>(total)), tol(want.size());
        for (std::int64_t j = 0; j < total; ++j) want[j] = reference(j, tol[j]);
        auto b = upload(full, t);
        comm_.all_reduce(s, b.ref(), op);
        s.synchronize();
        expect("all_reduce " + on + " " + tn, download(b, static_cast<std::size_t>(total)), want,
               op == ReduceOp::Sum ? tol : std::vector<float>{});
      }
    }
    {  // broadcast from the last rank
      const std::int64_t n = 41;
      const int root = R - 1;
      std::vector<float> data(n), want(n);
      for (std::int64_t i = 0; i < n; ++i) {
        data[i] = me == root ? input(root, i, 20, t) : NAN;
        want[i] = input(root, i, 20, t);
      }
      auto b = upload(data, t);
      comm_.broadcast(s, b.ref(), root);
      s.synchronize();
      expect("broadcast " + tn, download(b, n), want);
    }
  }

  int checks() const { return checks_; }
  int bad() const { return bad_; }

 private:
  Device& dev_;
  Communicator& comm_;
  UnevenCollective how_;
  bool corrupt_;
  int checks_ = 0, bad_ = 0;
};

// Every check for both 16-bit formats; the exit code (0 or 1) agreed by all ranks.
int run_checks(Communicator& comm, bool corrupt, UnevenCollective how) {
  const std::string name = to_string(how);
  const char* uneven = name.c_str();
  auto dev = make_cpu_device({});
  Checker checker(*dev, comm, corrupt, how);
  for (ElemType t : {ElemType::BF16, ElemType::F16}) checker.run(t);
  double bad = checker.bad();
  comm.all_reduce_host(&bad, 1, ReduceOp::Sum);
  if (comm.rank() == 0) {
    if (bad == 0)
      std::printf("mpi_collectives_check (%s uneven): %d checks on %d ranks, all agree\n", uneven,
                  checker.checks(), comm.size());
    else
      std::printf("mpi_collectives_check (%s uneven): %d checks on %d ranks, %d mismatches\n",
                  uneven, checker.checks(), comm.size(), static_cast<int>(bad));
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool corrupt = argc > 1 && std::string(argv[1]) == "--corrupt";
  try {
    MpiRuntime mpi(&argc, &argv);
    // Both ways of running uneven collectives (MPI's -v calls, padding around the even ones).
    int status = 0;
    auto comm = make_mpi_communicator();
    for (cephalo::UnevenCollective uneven :
         {cephalo::UnevenCollective::Grouped, cephalo::UnevenCollective::Padded}) {
      try {
        status |= run_checks(*comm, corrupt, uneven);
      } catch (const std::exception& e) {
        // The other ranks may be blocked in a collective this rank will never join.
        std::fprintf(stderr, "mpi_collectives_check: rank %d: error: %s\n", comm->rank(), e.what());
        comm->abort(2);
      }
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_collectives_check: error: %s\n", e.what());
    return 2;
  }
}

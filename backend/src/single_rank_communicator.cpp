#include "single_rank_communicator.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  explicit SingleRankCommunicator(Device& device) : device_(device) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "single-rank"; }

  // With one rank, the gathered buffer is this rank's shard and the reduced shard is the sum
  // over one contribution: a copy each, the shapes checked as a real communicator would.
  void all_gather(Stream& s, TensorRef send, TensorRef recv) override {
    copy(s, "all_gather", send, recv);
  }
  void reduce_scatter(Stream& s, TensorRef send, TensorRef recv, ReduceOp) override {
    copy(s, "reduce_scatter", send, recv);
  }
  void all_gather_v(Stream& s, TensorRef send, TensorRef recv,
                    const std::vector<std::int64_t>& counts, UnevenCollective how) override {
    expect_resolved(how, "all_gather_v");
    expect_one_count(counts, send.numel, "all_gather_v");
    copy(s, "all_gather_v", send, recv);
  }
  void reduce_scatter_v(Stream& s, TensorRef send, TensorRef recv,
                        const std::vector<std::int64_t>& counts, ReduceOp,
                        UnevenCollective how) override {
    expect_resolved(how, "reduce_scatter_v");
    expect_one_count(counts, recv.numel, "reduce_scatter_v");
    copy(s, "reduce_scatter_v", send, recv);
  }
  void all_reduce(Stream&, TensorRef, ReduceOp) override {}
  void broadcast(Stream&, TensorRef, int root) override { expect_root(root, "broadcast"); }

  void all_reduce_host(double*, int, ReduceOp) override {}
  void broadcast_host(std::string&, int root) override { expect_root(root, "broadcast_host"); }
  void barrier() override {}
  // The only part of one rank is itself.
  std::unique_ptr<Communicator> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_unique<SingleRankCommunicator>(device_);
  }
  [[noreturn]] void abort(int exit_code) override {
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  void copy(Stream& s, const char* what, TensorRef send, TensorRef recv) {
    if (send.numel != recv.numel || send.type != recv.type)
      throw RuntimeFailure(std::string("single-rank communicator: ") + what + " of " +
                           std::to_string(send.numel) + " " + to_string(send.type) + " into " +
                           std::to_string(recv.numel) + " " + to_string(recv.type) +
                           " (one rank: send and recv must match)");
    if (send.numel > 0 && send.data != recv.data) device_.copy(s, recv, send);
  }
  static void expect_one_count(const std::vector<std::int64_t>& counts, std::int64_t n,
                               const char* what) {
    if (counts.size() != 1 || counts[0] != n)
      throw RuntimeFailure(std::string("single-rank communicator: ") + what + " needs counts {" +
                           std::to_string(n) + "} for its one rank, got " +
                           std::to_string(counts.size()) + " counts");
  }
  static void expect_root(int root, const char* what) {
    if (root != 0)
      throw RuntimeFailure(std::string("single-rank communicator: ") + what + " from root " +
                           std::to_string(root) + " (the only rank is 0)");
  }

  Device& device_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator(Device& device) {
  return std::make_unique<SingleRankCommunicator>(device);
}

}  // namespace cephalo::backend

// The backend executes exactly the collectives the TrainingGraph says, for awkward shapes:
// equal shares of units whose size does not divide by the rank count (the -v call, not the
// even one), a rank owning nothing and a rank computing nothing, a tied head (its phases move
// unit 0 and the head as two segments), host offload, padded uneven collectives, an untied head.
// Each rank of each plan runs one step in this process over a recording communicator that
// plays that rank; every call's kind, sizes and element type are checked against the graph's
// collective segments and the op's full and shard bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/backend/executor.hpp"
#include "cephalo/costmodels/catalog.hpp"

using namespace cephalo;
using namespace cephalo::backend;

namespace {

const std::string kSrc = CEPHALO_SOURCE_DIR;

struct Call {
  bool gather = true;  // all-gather (else reduce-scatter)
  bool v = false;      // the -v call
  std::int64_t full = 0, shard = 0;
  double bytes = 0, shard_bytes = 0;
};

// Rank `rank` of `size`: records every device-buffer collective and returns zeros (the step's
// numbers are not the point here, its traffic is). Host reductions are identities.
class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(Device& dev, int rank, int size) : dev_(dev), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "recording"; }
  void all_gather(Stream& s, TensorRef send, TensorRef recv) override {
    record(true, false, recv, send);
    dev_.fill(s, recv, 0.0f);
  }
  void reduce_scatter(Stream& s, TensorRef send, TensorRef recv, ReduceOp) override {
    record(false, false, send, recv);
    if (recv.numel) dev_.fill(s, recv, 0.0f);
  }
  void all_gather_v(Stream& s, TensorRef send, TensorRef recv,
                    const std::vector<std::int64_t>& counts, UnevenCollective how) override {
    EXPECT_NE(how, UnevenCollective::Auto);
    EXPECT_EQ(counts.at(static_cast<std::size_t>(rank_)), send.numel);
    record(true, true, recv, send);
    dev_.fill(s, recv, 0.0f);
  }
  void reduce_scatter_v(Stream& s, TensorRef send, TensorRef recv,
                        const std::vector<std::int64_t>& counts, ReduceOp,
                        UnevenCollective how) override {
    EXPECT_NE(how, UnevenCollective::Auto);
    EXPECT_EQ(counts.at(static_cast<std::size_t>(rank_)), recv.numel);
    record(false, true, send, recv);
    if (recv.numel) dev_.fill(s, recv, 0.0f);
  }
  void all_reduce(Stream&, TensorRef, ReduceOp) override {}
  void broadcast(Stream&, TensorRef, int) override {}
  void all_reduce_host(double*, int, ReduceOp) override {}
  void broadcast_host(std::string&, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int) override { std::abort(); }

  std::vector<Call> calls;

 private:
  void record(bool gather, bool v, TensorRef full, TensorRef shard) {
    calls.push_back({gather, v, full.numel, shard.numel,
                     static_cast<double>(full.numel * element_size(full.type)),
                     static_cast<double>(shard.numel * element_size(shard.type))});
  }
  Device& dev_;
  int rank_, size_;
};

// What the graph says rank r's program moves, segment by segment, in issue order.
std::vector<Call> expected_calls(const traces::TrainingGraph& g, int r) {
  std::vector<Call> out;
  for (const auto& op : g.program(r)) {
    if (!traces::is_collective(op.kind)) continue;
    const auto& c = g.collectives().at(static_cast<std::size_t>(op.collective));
    const bool gather =
        op.kind == traces::OpKind::AllGather || op.kind == traces::OpKind::AllGatherV;
    for (const auto& seg : g.segments(c))
      out.push_back({gather, seg.variant != traces::CollectiveVariant::Even, seg.numel,
                     g.slice(seg.unit, r).count, static_cast<double>(seg.numel) * c.element_bytes,
                     static_cast<double>(g.slice(seg.unit, r).count) * c.element_bytes});
  }
  return out;
}

// Every rank of the plan, one step each.
void expect_graph_bytes(Scenario sc, Plan plan, const std::string& what) {
  validate_plan_for(plan, sc, what);
  const auto graph = traces::build_training_graph(plan, sc);
  const auto cfg = GptConfig::from_spec(sc.job.model, sc.job.sequence_length);
  for (int r = 0; r < graph.num_ranks(); ++r) {
    auto dev = make_cpu_device({});
    RecordingCommunicator comm(*dev, r, graph.num_ranks());
    Executor exec(sc, plan, graph, cfg, *dev, comm, {});
    exec.run_step();
    const auto want = expected_calls(graph, r);
    ASSERT_EQ(comm.calls.size(), want.size()) << what << ", rank " << r;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const auto &got = comm.calls[i], &w = want[i];
      EXPECT_EQ(got.gather, w.gather) << what << ", rank " << r << ", call " << i;
      EXPECT_EQ(got.v, w.v) << what << ", rank " << r << ", call " << i;
      EXPECT_EQ(got.full, w.full) << what << ", rank " << r << ", call " << i;
      EXPECT_EQ(got.shard, w.shard) << what << ", rank " << r << ", call " << i;
      EXPECT_DOUBLE_EQ(got.bytes, w.bytes) << what << ", rank " << r << ", call " << i;
    }
    // And per op, the graph's own totals (what the simulator prices): the segments of an op add
    // up to its full buffer and this rank's shard.
    std::size_t k = 0;
    for (const auto& op : graph.program(r)) {
      if (!traces::is_collective(op.kind)) continue;
      double full = 0, shard = 0;
      const auto& c = graph.collectives().at(static_cast<std::size_t>(op.collective));
      for (std::size_t n = 0; n < graph.segments(c).size(); ++n, ++k) {
        full += comm.calls.at(k).bytes;
        shard += comm.calls.at(k).shard_bytes;
      }
      EXPECT_DOUBLE_EQ(full, op.bytes) << what << ": " << graph.op_name(op.id);
      EXPECT_DOUBLE_EQ(shard, op.shard_bytes) << what << ": " << graph.op_name(op.id);
    }
  }
}

Scenario scenario(int ranks) {
  return costmodels::load_scenario(kSrc + "/scenarios/cpu-" + std::to_string(ranks) + "rank.json");
}
Plan plan(const std::string& name) {
  return load_plan(kSrc + "/scenarios/plans/" + name + ".json");
}

}  // namespace

TEST(GraphBytes, EqualSharesOfUnitsThatDoNotDivideTakeTheVCall) {
  Plan p = plan("cpu-3rank-uneven-layered");
  for (auto& r : p.ranks) r.state_share = 1.0 / 3.0;
  // gpt-tiny's embedding has 256 x 64 + 64 x 64 = 20480 elements: not a multiple of 3.
  expect_graph_bytes(scenario(3), p, "3 equal shares");
}

TEST(GraphBytes, UnevenTiedHeadOffloadPaddedAndIdleRanks) {
  expect_graph_bytes(scenario(3), plan("cpu-3rank-uneven-layered"), "uneven layered");
  expect_graph_bytes(scenario(3), plan("cpu-3rank-uneven-offload"), "uneven offload");
  expect_graph_bytes(scenario(3), plan("cpu-3rank-uneven-padded"), "uneven padded");
  expect_graph_bytes(scenario(2), plan("cpu-2rank-idle-rank"), "zero share / zero batch");
  expect_graph_bytes(scenario(4), plan("cpu-4rank-even"), "even");
}

TEST(GraphBytes, UntiedHeadMovesOnlyItsOwnUnit) {
  Scenario sc = scenario(3);
  sc.job.model.tied_embeddings = false;
  expect_graph_bytes(sc, plan("cpu-3rank-uneven-layered"), "untied head");
}

// The planning call's collective memo (planner/src/comm_memo.hpp): a request is priced by the
// wrapped model once per distinct content, any difference in kind, variant, overlap, members,
// shard sizes or cross-group pieces is a new price, and other clusters are never remembered.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "comm_memo.hpp"

namespace cephalo::planner::detail {
namespace {

// Prices a request by a digest of everything in it, and counts the calls.
class Counting final : public costmodels::CommModel {
 public:
  mutable int calls = 0;
  costmodels::CollectiveEstimate collective(const Cluster&,
                                            const costmodels::CollectiveRequest& r) const override {
    ++calls;
    double x = 1 + static_cast<int>(r.kind) * 3 + static_cast<int>(r.uneven) * 7 +
               (r.overlaps_compute ? 11 : 0);
    for (std::size_t i = 0; i < r.ranks.size(); ++i)
      x = x * 1.0001 + r.ranks[i] * 13 + r.shard_bytes[i] * 1e-9;
    for (const auto& p : r.pieces) {
      x += p.bytes * 1e-9 + p.owners.size();
      for (int o : p.owners) x = x * 1.0001 + o * 17;
    }
    costmodels::CollectiveEstimate e;
    e.seconds = x;
    return e;
  }
  double copy_time(const Cluster&, int, double bytes) const override { return bytes; }
};

costmodels::CollectiveRequest request(int n) {
  costmodels::CollectiveRequest r;
  r.ranks.resize(static_cast<std::size_t>(n));
  std::iota(r.ranks.begin(), r.ranks.end(), 0);
  r.shard_bytes.assign(static_cast<std::size_t>(n), 1e6);
  return r;
}

TEST(CommMemo, PricesEachDistinctRequestOnce) {
  auto inner = std::make_shared<Counting>();
  const Cluster cluster, other;
  const CommMemo memo(inner, cluster);
  const auto base = request(1000);
  const double price = memo.collective(cluster, base).seconds;
  EXPECT_EQ(memo.collective(cluster, base).seconds, price);
  EXPECT_EQ(inner->calls, 1);
  std::vector<costmodels::CollectiveRequest> changed(8, base);
  changed[0].kind = costmodels::CollectiveKind::ReduceScatter;
  changed[1].uneven = UnevenCollective::Padded;
  changed[2].overlaps_compute = true;
  changed[3].ranks[500] = 1000;  // one member moved: a run split in two
  changed[4].shard_bytes[999] = 2e6;
  changed[5].ranks.pop_back();
  changed[5].shard_bytes.pop_back();
  changed[6].pieces.push_back({{0, 1}, 5e5});
  changed[7].shard_bytes[0] = std::nextafter(1e6, 2e6);  // the last bit of one size
  for (std::size_t i = 0; i < changed.size(); ++i) {
    const int before = inner->calls;
    EXPECT_EQ(memo.collective(cluster, changed[i]).seconds,
              Counting().collective(cluster, changed[i]).seconds)
        << i;
    EXPECT_EQ(inner->calls, before + 1) << "change " << i << " reused a price";
    memo.collective(cluster, changed[i]);
    EXPECT_EQ(inner->calls, before + 1) << "change " << i << " priced twice";
  }
  // Another cluster (a copy at another address, say) is priced by the model every time.
  const int before = inner->calls;
  memo.collective(other, base);
  memo.collective(other, base);
  EXPECT_EQ(inner->calls, before + 2);
  EXPECT_EQ(memo.copy_time(cluster, 0, 42.0), 42.0);
}

// Cross-group pieces are keyed by runs of owners a step apart: owner lists that differ in one
// owner, in a step, in where a run ends or only in length are told apart, and every answer is
// the wrapped model's own, on random strided, broken and irregular lists.
TEST(CommMemo, PieceOwnersByStridedRunsAreExact) {
  auto inner = std::make_shared<Counting>();
  const Cluster cluster;
  const CommMemo memo(inner, cluster);
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng); };
  std::vector<std::vector<int>> lists;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int> o;
    const int n = pick(0, 40);
    const int step = pick(-3, 9);
    int at = pick(0, 50);
    for (int i = 0; i < n; ++i) {
      o.push_back(at);
      at += pick(0, 5) == 0 ? pick(-20, 20) : step;  // a broken run now and then
    }
    if (pick(0, 3) == 0 && !o.empty()) o[static_cast<std::size_t>(pick(0, n - 1))] += 1;
    lists.push_back(std::move(o));
  }
  // Pairs that only a careless run key would confuse.
  lists.push_back({0, 8, 16, 24});
  lists.push_back({0, 8, 16});
  lists.push_back({0, 8, 16, 25});
  lists.push_back({0, 8, 17, 26});
  lists.push_back({0, 9, 18, 27});
  lists.push_back({8, 16, 24});
  lists.push_back({0});
  lists.push_back({});
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < lists.size(); ++i) {
      auto r = request(50);
      r.kind = costmodels::CollectiveKind::AllReduce;
      r.pieces.push_back({lists[i], 1e6});
      EXPECT_EQ(memo.collective(cluster, r).seconds, Counting().collective(cluster, r).seconds)
          << "list " << i << ", pass " << pass;
    }
  // Each distinct list priced once, on the first pass only.
  std::set<std::vector<int>> distinct(lists.begin(), lists.end());
  EXPECT_EQ(inner->calls, static_cast<int>(distinct.size()));
}

}  // namespace
}  // namespace cephalo::planner::detail

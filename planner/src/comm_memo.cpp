// One planning call's collective prices, each asked once (comm_memo.hpp).
#include "comm_memo.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace cephalo::planner::detail {

namespace {

// Most runs (of ranks, of shard sizes, of piece owners) a remembered request's key may hold:
// 64k runs is a key of ~1 MB; a request that irregular is priced afresh.
constexpr std::size_t kMostKeyRuns = 1 << 16;

template <typename T>
void put(std::string& key, const T& v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  key.append(bytes, sizeof(T));
}

// The request's content as bytes, runs of consecutive ranks and of bitwise-equal sizes each
// written as (first value, length); false when it would hold more than kMostKeyRuns runs.
bool key_of(const costmodels::CollectiveRequest& r, std::string& key) {
  std::size_t runs = 0;
  put(key, static_cast<int>(r.kind));
  put(key, static_cast<int>(r.uneven));
  put(key, r.overlaps_compute);
  put(key, r.training_state);  // the framework's copies are priced with it
  put(key, r.ranks.size());
  for (std::size_t i = 0; i < r.ranks.size();) {
    std::size_t j = i + 1;
    while (j < r.ranks.size() && r.ranks[j] == r.ranks[j - 1] + 1) ++j;
    put(key, r.ranks[i]);
    put(key, j - i);
    if (++runs > kMostKeyRuns) return false;
    i = j;
  }
  put(key, r.shard_bytes.size());
  for (std::size_t i = 0; i < r.shard_bytes.size();) {
    const auto bits = [&](std::size_t k) {
      std::uint64_t b = 0;
      std::memcpy(&b, &r.shard_bytes[k], sizeof b);
      return b;
    };
    std::size_t j = i + 1;
    while (j < r.shard_bytes.size() && bits(j) == bits(i)) ++j;
    put(key, bits(i));
    put(key, j - i);
    if (++runs > kMostKeyRuns) return false;
    i = j;
  }
  put(key, r.pieces.size());
  for (const auto& p : r.pieces) {
    put(key, p.bytes);
    // The owners (one rank per group) as runs of one step, (first owner, step, length) each:
    // groups of alike size put a piece's owners a group apart, so a cross-group reduction over
    // 100k ranks is a few runs, not 100k owners to write, hash and compare on every lookup.
    // Each run extends while the step holds; the runs give back the owners, so the key is
    // exact.
    const std::vector<int>& o = p.owners;
    put(key, o.size());
    for (std::size_t i = 0; i < o.size();) {
      std::size_t j = i + 1;
      const std::int64_t step =
          j < o.size() ? std::int64_t{o[j]} - std::int64_t{o[i]} : std::int64_t{0};
      while (j < o.size() && std::int64_t{o[j]} - std::int64_t{o[j - 1]} == step) ++j;
      put(key, o[i]);
      put(key, step);
      put(key, j - i);
      if (++runs > kMostKeyRuns) return false;
      i = j;
    }
  }
  return true;
}

}  // namespace

costmodels::CollectiveEstimate CommMemo::collective(
    const Cluster& cluster, const costmodels::CollectiveRequest& request) const {
  if (&cluster != cluster_) return inner_->collective(cluster, request);
  std::string key;
  if (!key_of(request, key)) return inner_->collective(cluster, request);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  costmodels::CollectiveEstimate est = inner_->collective(cluster, request);
  memo_.emplace(std::move(key), est);
  return est;
}

}  // namespace cephalo::planner::detail

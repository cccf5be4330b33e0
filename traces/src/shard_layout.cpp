// The one place slices, groups and cross-group pieces are cut (shard_layout.hpp).
#include "cephalo/traces/shard_layout.hpp"

#include <algorithm>
#include <stdexcept>

#include "cephalo/traces/training_graph.hpp"  // shard_offsets

namespace cephalo::traces {

ShardLayout::ShardLayout(const Sharding& sharding, const std::vector<double>& shares,
                         const std::vector<std::int64_t>& unit_numel)
    : numel_(unit_numel) {
  const int ranks = static_cast<int>(shares.size());
  const auto groups = shard_groups(sharding, ranks);
  group_of_.assign(static_cast<std::size_t>(ranks), -1);
  position_.assign(static_cast<std::size_t>(ranks), -1);
  group_begin_.push_back(0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      const int r = groups[g][i];
      if (r < 0 || r >= ranks || group_of_[static_cast<std::size_t>(r)] >= 0)
        throw std::logic_error(
            "ShardLayout: sharding groups are not a partition of the ranks "
            "(validate the plan first)");
      group_of_[static_cast<std::size_t>(r)] = static_cast<int>(g);
      position_[static_cast<std::size_t>(r)] = static_cast<int>(i);
      group_ranks_.push_back(r);
    }
    group_begin_.push_back(static_cast<std::uint32_t>(group_ranks_.size()));
  }
  if (static_cast<int>(group_ranks_.size()) != ranks)
    throw std::logic_error("ShardLayout: a rank is in no sharding group");

  // Per row, every group's bounds back to back (group g's at group_begin_[g] + g): half the
  // memory of a begin and an end per (unit, rank), written once without a zero fill first.
  // Units of one element count are cut alike (the bounds follow from the count and the shares
  // alone), so they share a row and its pieces: a model's repeated layers are one row, not one
  // each (at 100k ranks × 34 units the layout was tens of MB, built for every replay).
  const std::size_t units = numel_.size();
  stride_ = static_cast<std::size_t>(ranks) + groups.size();
  std::vector<std::int64_t> row_numel;  // per row
  std::vector<std::int64_t> row_units;  // per row: how many units it stands for
  row_of_.reserve(units);
  for (std::size_t u = 0; u < units; ++u) {
    const auto it = std::find(row_numel.begin(), row_numel.end(), numel_[u]);
    row_of_.push_back(static_cast<std::uint32_t>(it - row_numel.begin()));
    if (it == row_numel.end()) {
      row_numel.push_back(numel_[u]);
      row_units.push_back(0);
    }
    ++row_units[row_of_.back()];
  }
  bounds_.reserve(row_numel.size() * stride_);
  owned_.assign(static_cast<std::size_t>(ranks), 0);
  std::vector<std::vector<double>> group_shares(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (int r : groups[g]) group_shares[g].push_back(shares[static_cast<std::size_t>(r)]);
  piece_begin_.push_back(0);
  std::vector<std::vector<std::int64_t>> bounds(groups.size());
  for (std::size_t row = 0; row < row_numel.size(); ++row) {
    const std::int64_t numel = row_numel[row];
    for (std::size_t g = 0; g < groups.size(); ++g) {
      bounds[g] = shard_offsets(numel, group_shares[g]);
      bounds_.insert(bounds_.end(), bounds[g].begin(), bounds[g].end());
      // Each rank's state summed here, row by row (times the units the row stands for), so
      // owned_elements is a lookup rather than a walk over every unit.
      for (std::size_t i = 0; i < groups[g].size(); ++i)
        owned_[static_cast<std::size_t>(groups[g][i])] +=
            row_units[row] * (bounds[g][i + 1] - bounds[g][i]);
    }
    // Pieces: sweep the union of every group's bounds; between two consecutive bounds each
    // group has one owner (the rank whose slice holds the range).
    if (groups.size() > 1) {
      std::vector<std::size_t> at(groups.size(), 0);
      std::int64_t x = 0;
      while (x < numel) {
        std::int64_t next = numel;
        for (std::size_t g = 0; g < groups.size(); ++g) {
          while (bounds[g][at[g] + 1] <= x) ++at[g];
          next = std::min(next, bounds[g][at[g] + 1]);
        }
        CrossPiece p;
        p.offset = x;
        p.count = next - x;
        p.owners_begin = static_cast<std::uint32_t>(owners_.size());
        for (std::size_t g = 0; g < groups.size(); ++g) owners_.push_back(groups[g][at[g]]);
        pieces_.push_back(p);
        x = next;
      }
    }
    piece_begin_.push_back(static_cast<std::uint32_t>(pieces_.size()));
  }
}

std::span<const int> ShardLayout::group(int g) const {
  return {group_ranks_.data() + group_begin_[static_cast<std::size_t>(g)],
          group_ranks_.data() + group_begin_[static_cast<std::size_t>(g) + 1]};
}

UnitSlice ShardLayout::slice(int unit, int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  const auto g = static_cast<std::size_t>(group_of_[r]);
  const std::size_t at = row_of_[static_cast<std::size_t>(unit)] * stride_ + group_begin_[g] + g +
                         static_cast<std::size_t>(position_[r]);
  return {bounds_[at], bounds_[at + 1] - bounds_[at]};
}

std::vector<std::int64_t> ShardLayout::group_counts(int unit, int g) const {
  std::vector<std::int64_t> counts;
  for (int r : group(g)) counts.push_back(slice(unit, r).count);
  return counts;
}

std::int64_t ShardLayout::owned_elements(int rank) const {
  return owned_[static_cast<std::size_t>(rank)];
}

std::span<const CrossPiece> ShardLayout::pieces(int unit) const {
  const std::size_t row = row_of_[static_cast<std::size_t>(unit)];
  return {pieces_.data() + piece_begin_[row], pieces_.data() + piece_begin_[row + 1]};
}

std::span<const int> ShardLayout::owners(const CrossPiece& piece) const {
  return {owners_.data() + piece.owners_begin, static_cast<std::size_t>(num_groups())};
}

std::vector<std::int64_t> ShardLayout::checkpoint_offsets(int unit) const {
  std::vector<std::int64_t> off;
  std::int64_t at = 0;
  for (int r = 0; r < num_ranks(); ++r) {
    off.push_back(at);
    if (group_of(r) == 0) at += slice(unit, r).count;
  }
  off.push_back(at);
  return off;
}

}  // namespace cephalo::traces

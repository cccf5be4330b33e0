#include "cephalo/core/sharding.hpp"

#include <cmath>

#include "cephalo/core/plan.hpp"
#include "cephalo/core/table.hpp"

namespace cephalo {

std::optional<ShardingKind> parse_sharding_kind(std::string_view text) {
  for (ShardingKind s :
       {ShardingKind::Full, ShardingKind::Hybrid, ShardingKind::Optimizer, ShardingKind::None})
    if (text == to_string(s)) return s;
  return std::nullopt;
}

std::string to_string(ShardingKind sharding) {
  switch (sharding) {
    case ShardingKind::Full:
      return "full";
    case ShardingKind::Hybrid:
      return "hybrid";
    case ShardingKind::Optimizer:
      return "optimizer";
    case ShardingKind::None:
      return "none";
  }
  return "full";
}

std::vector<std::vector<int>> shard_groups(const Sharding& sharding, int num_ranks) {
  if (sharding.hybrid()) return sharding.groups;
  std::vector<int> all(static_cast<std::size_t>(num_ranks));
  for (int r = 0; r < num_ranks; ++r) all[static_cast<std::size_t>(r)] = r;
  return {all};
}

namespace {

const char* const kShardingAllowed =
    "\"full\" or {\"kind\": \"hybrid\", \"groups\": [[ranks], ...]} (every rank in exactly one "
    "group)";

}  // namespace

Sharding replica_sharding(int num_ranks) {
  Sharding s;
  s.kind = ShardingKind::Hybrid;
  for (int r = 0; r < num_ranks; ++r) s.groups.push_back({r});
  return s;
}

Sharding parse_sharding(JsonReader r) {
  Sharding s;
  if (r.is_string()) {
    const std::string v = r.as_string();
    if (v == "full") return s;
    r.fail_value("\"" + v + "\"", kShardingAllowed);
  }
  if (!r.is_object()) r.fail(kShardingAllowed);
  r.child("kind").as_enum({"hybrid"});
  s.kind = ShardingKind::Hybrid;
  auto groups = r.child("groups");
  if (!groups.is_array() || groups.size() == 0)
    groups.fail("a non-empty array of groups, each a non-empty array of ranks");
  if (groups.size() > static_cast<std::size_t>(kMaxDevices))
    groups.fail_value(std::to_string(groups.size()) + " groups",
                      "at most " + std::to_string(kMaxDevices) + " groups");
  // A group is a list of ranks, or {"ranks": [first, last]} for the run first..last (what a
  // compact plan writes: 3,125 groups of 32 ranks in 100 KB). The members of every group are
  // counted before any is expanded.
  std::int64_t members_total = 0;
  for (auto& g : groups.elements()) {
    if (g.is_object()) {
      auto range = g.child("ranks");
      if (!range.is_array() || range.size() != 2)
        range.fail("[first, last]: the group's ranks, both included");
      const auto first = range.element(0).as_integer(0, kMaxDevices - 1);
      const auto last = range.element(1).as_integer(0, kMaxDevices - 1);
      if (last < first)
        range.fail_value("[" + std::to_string(first) + ", " + std::to_string(last) + "]",
                         "[first, last] with last >= first");
      g.finish();
      members_total += last - first + 1;
    } else if (!g.is_array() || g.size() == 0) {
      g.fail("a non-empty array of ranks, or {\"ranks\": [first, last]}");
    } else {
      members_total += static_cast<std::int64_t>(g.size());
    }
    if (members_total > kMaxDevices)
      g.fail_value(std::to_string(members_total) + " members in the groups up to this one",
                   "at most " + std::to_string(kMaxDevices) + " (each rank in one group)");
  }
  for (auto& g : groups.elements()) {
    std::vector<int> members;
    if (g.is_object()) {
      auto range = g.child("ranks");
      const int first = static_cast<int>(range.element(0).as_integer());
      const int last = static_cast<int>(range.element(1).as_integer());
      for (int x = first; x <= last; ++x) members.push_back(x);
    } else {
      for (auto& x : g.elements())
        members.push_back(static_cast<int>(x.as_integer(0, kMaxDevices - 1)));
    }
    s.groups.push_back(std::move(members));
  }
  r.finish();
  return s;
}

void check_sharding(const Sharding& sharding, const std::vector<double>& shares,
                    const JsonReader& sharding_reader, const JsonReader& ranks_reader) {
  const int n = static_cast<int>(shares.size());
  const auto groups = shard_groups(sharding, n);
  const std::string file = sharding_reader.file();
  const std::string at = sharding_reader.where() + ".groups";
  std::vector<int> group_of(static_cast<std::size_t>(n), -1);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      const int r = groups[g][i];
      const std::string where = at + "[" + std::to_string(g) + "][" + std::to_string(i) + "]";
      if (r >= n)
        throw ValidationError(file, where, std::to_string(r),
                              "a rank of the plan (0.." + std::to_string(n - 1) + ")");
      // Ascending order: a group's slices then follow rank order, so its copy of the state is
      // also a partition in rank order (the one a checkpoint records).
      if (i > 0 && r <= groups[g][i - 1] && group_of[static_cast<std::size_t>(r)] < 0)
        throw ValidationError(file, where, std::to_string(r),
                              "a rank above " + std::to_string(groups[g][i - 1]) +
                                  " (a group lists its ranks in ascending order)");
      int& owner = group_of[static_cast<std::size_t>(r)];
      if (owner >= 0)
        throw ValidationError(file, where, "rank " + std::to_string(r),
                              "a rank in no other group (rank " + std::to_string(r) +
                                  " is already in group " + std::to_string(owner) + " " +
                                  format_int_list(groups[static_cast<std::size_t>(owner)]) +
                                  "; groups must not overlap)");
      owner = static_cast<int>(g);
    }
  }
  for (int r = 0; r < n; ++r)
    if (group_of[static_cast<std::size_t>(r)] < 0)
      throw ValidationError(
          file, at, "no group containing rank " + std::to_string(r),
          "groups that together list every rank 0.." + std::to_string(n - 1) + " exactly once");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    double sum = 0;
    for (int r : groups[g]) sum += shares[static_cast<std::size_t>(r)];
    if (std::fabs(sum - 1.0) > kShareSumTolerance) {
      const std::string value =
          "state shares summing to " + format_quantity(sum, Quantity::Dimensionless);
      // The rank count beside the sum: rows for another cluster throw the sum off, and without
      // the scenario (validate PLAN) the count is what tells the reader so.
      if (!sharding.hybrid())
        ranks_reader.fail_value(value + " over " + std::to_string(n) + " ranks",
                                "state shares summing to 1 (within 1e-9)");
      throw ValidationError(file, ranks_reader.where() + "[*].state_share",
                            value + " over group " + std::to_string(g) + " " +
                                format_int_list(groups[g]) + " (" + at + "[" + std::to_string(g) +
                                "])",
                            "state shares summing to 1 (within 1e-9) within every group: each "
                            "group holds one full copy of the training state");
    }
  }
}

Json to_json(const Sharding& sharding, bool ranges) {
  if (!sharding.hybrid()) return "full";
  Json groups = Json::array();
  for (const auto& g : sharding.groups) {
    bool run = ranges && g.size() > 1;
    for (std::size_t i = 1; run && i < g.size(); ++i) run = g[i] == g[i - 1] + 1;
    if (run)
      groups.push_back(Json{{"ranks", {g.front(), g.back()}}});
    else
      groups.push_back(g);
  }
  return Json{{"kind", "hybrid"}, {"groups", groups}};
}

std::string describe(const Sharding& sharding) {
  if (!sharding.hybrid()) return "full";
  // Up to 8 groups each size is listed ("4+4"); more are runs of equal sizes ("3125 x 32"), so
  // a 100k-rank plan's line stays short.
  const auto& groups = sharding.groups;
  std::string sizes;
  if (groups.size() <= 8) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (g) sizes += "+";
      sizes += std::to_string(groups[g].size());
    }
  } else {
    for (std::size_t g = 0; g < groups.size();) {
      std::size_t end = g;
      while (end < groups.size() && groups[end].size() == groups[g].size()) ++end;
      if (!sizes.empty()) sizes += " + ";
      sizes += std::to_string(end - g) + " x " + std::to_string(groups[g].size());
      g = end;
    }
  }
  return "hybrid (" + std::to_string(groups.size()) + " groups: " + sizes + " ranks)";
}

}  // namespace cephalo

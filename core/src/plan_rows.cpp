#include "plan_rows.hpp"

#include <algorithm>
#include <string>

#include "cephalo/core/checked.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/table.hpp"

namespace cephalo::detail {

namespace {

// The fields a rank row and a class row share: device type, batch and its micro-batches, and
// the state share when it is a number ("even" is the caller's: it needs the rank count).
// Returns false when the share was "even" (compact rows only).
bool read_row_fields(JsonReader& r, PlanRank& pr, bool even_allowed) {
  pr.gpu = r.string("gpu");
  pr.batch = static_cast<int>(r.integer("batch", 0, kMaxGlobalBatch));
  pr.micro_batch = static_cast<int>(r.integer("micro_batch", 0, 1 << 24));
  pr.micro_batches = static_cast<int>(r.integer("micro_batches", 0, kMaxMicroBatchesPerRank));
  if (pr.batch == 0) {
    if (pr.micro_batch != 0 || pr.micro_batches != 0)
      r.child("micro_batches").fail("0 micro-batches of size 0 for a rank with batch 0");
  } else {
    if (pr.micro_batch < 1) r.child("micro_batch").fail("a micro-batch size >= 1");
    if (pr.micro_batches < 1) r.child("micro_batches").fail("a micro-batch count >= 1");
    long long full = static_cast<long long>(pr.micro_batch) * pr.micro_batches;
    long long before_last = full - pr.micro_batch;
    if (!(before_last < pr.batch && pr.batch <= full))
      r.child("batch").fail_value(
          std::to_string(pr.batch),
          "a batch that " + std::to_string(pr.micro_batches) + " micro-batches of size " +
              std::to_string(pr.micro_batch) + " cover with only the last one smaller (" +
              std::to_string(before_last + 1) + " to " + std::to_string(full) + ")");
  }
  auto share = r.child("state_share");
  if (even_allowed && share.is_string()) {
    if (share.as_string() != "even")
      share.fail_value("\"" + share.as_string() + "\"",
                       "a state share from 0 to 1, or \"even\" (1 / the plan's ranks)");
    return false;
  }
  pr.state_share = share.as_number();
  if (pr.state_share < 0 || pr.state_share > 1) share.fail("a state share from 0 to 1");
  return true;
}

}  // namespace

void read_rank_rows(JsonReader& ranks, Plan& plan) {
  if (!ranks.is_array() || ranks.size() == 0) ranks.fail("a non-empty array of ranks");
  if (ranks.size() > static_cast<std::size_t>(kMaxDevices))
    ranks.fail_value(std::to_string(ranks.size()) + " ranks",
                     "at most " + std::to_string(kMaxDevices) + " ranks (one per device)");
  std::int64_t batch_total = 0;
  plan.ranks.reserve(ranks.size());
  for (auto& r : ranks.elements()) {
    if (!r.is_object()) r.fail("an object describing one rank");
    PlanRank pr;
    pr.rank = static_cast<int>(r.integer("rank", 0, kMaxDevices - 1));
    if (pr.rank != static_cast<int>(plan.ranks.size()))
      r.child("rank").fail("rank " + std::to_string(plan.ranks.size()) +
                           " (ranks are listed once each, in order from 0)");
    pr.node = static_cast<int>(r.integer("node", 0, kMaxDevices - 1));
    read_row_fields(r, pr, false);
    // Plan::global_batch sums in int: the running sum is bounded where each batch is read
    // (under a split every stage runs every sample: the split's checks bound a stage's sum).
    if (!plan.has_split())
      batch_total = checked_sum(r.child("batch"), "the plan's global batch (summed over ranks)",
                                {{"batches of the ranks before", batch_total}, {"batch", pr.batch}},
                                kMaxGlobalBatch);
    r.finish();
    plan.ranks.push_back(pr);
  }
}

void read_rank_classes(JsonReader& classes, Plan& plan) {
  const std::string shape =
      "a non-empty array of rank classes {\"ranks\": [first, last], \"node\": N or "
      "{\"first\": N, \"ranks_per_node\": K}, \"gpu\", \"batch\", \"micro_batch\", "
      "\"micro_batches\", \"state_share\"}, listed in rank order";
  if (!classes.is_array() || classes.size() == 0) classes.fail(shape);
  if (classes.size() > static_cast<std::size_t>(kMaxDevices))
    classes.fail_value(std::to_string(classes.size()) + " classes",
                       "at most " + std::to_string(kMaxDevices) + " classes (one per device)");
  struct Row {
    PlanRank row;
    bool even = false;
    int first = 0, last = 0, node = 0, ranks_per_node = 0;
  };
  std::vector<Row> rows;
  rows.reserve(classes.size());
  std::int64_t next = 0, batch_total = 0;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    JsonReader cls = classes.element(c);
    if (!cls.is_object()) cls.fail("an object describing one class of ranks");
    Row row;
    auto range = cls.child("ranks");
    if (!range.is_array() || range.size() != 2)
      range.fail("[first, last]: the class's ranks, both included");
    row.first = static_cast<int>(range.element(0).as_integer(0, kMaxDevices - 1));
    row.last = static_cast<int>(range.element(1).as_integer(0, kMaxDevices - 1));
    if (row.last < row.first)
      range.fail_value("[" + std::to_string(row.first) + ", " + std::to_string(row.last) + "]",
                       "[first, last] with last >= first");
    // "rank 4" / "ranks 4-7": a range of one rank read as one.
    const auto span = [](std::int64_t first, std::int64_t last) {
      return (first == last ? "rank " : "ranks ") +
             format_rank_range(static_cast<int>(first), static_cast<int>(last));
    };
    if (row.first < next) {
      const Row& before = rows.back();
      range.fail_value(span(row.first, row.last),
                       "ranks from " + std::to_string(next) + ": the class overlaps " +
                           classes.element(c - 1).where() + " (" + span(before.first, before.last) +
                           "); classes are listed in rank order, each rank in one class");
    }
    if (row.first > next)
      range.fail_value(span(row.first, row.last),
                       "ranks from " + std::to_string(next) + ": " + span(next, row.first - 1) +
                           (next == row.first - 1 ? " is" : " are") +
                           " in no class (every rank from 0 is in exactly one)");
    next = std::int64_t{row.last} + 1;
    const std::int64_t count = std::int64_t{row.last} - row.first + 1;
    auto node = cls.child("node");
    if (node.is_object()) {
      row.node = static_cast<int>(node.integer("first", 0, kMaxDevices - 1));
      row.ranks_per_node = static_cast<int>(node.integer("ranks_per_node", 1, kMaxDevices));
      node.finish();
    } else if (node.is_array() || node.is_string() || !node.value().is_number_integer()) {
      node.fail(
          "a node number, or {\"first\": N, \"ranks_per_node\": K} (rank first + i on "
          "node N + i / K)");
    } else {
      row.node = static_cast<int>(node.as_integer(0, kMaxDevices - 1));
      row.ranks_per_node = static_cast<int>(std::min<std::int64_t>(count, kMaxDevices));
    }
    const std::int64_t last_node = row.node + (count - 1) / row.ranks_per_node;
    if (last_node > kMaxDevices - 1)
      node.fail_value("node " + std::to_string(last_node) + " for rank " + std::to_string(row.last),
                      "nodes up to " + std::to_string(kMaxDevices - 1));
    row.even = !read_row_fields(cls, row.row, true);
    if (row.even && (plan.sharding.hybrid() || plan.has_split()))
      cls.child("state_share")
          .fail_value("\"even\"",
                      "a number: \"even\" (1 / the plan's ranks) is defined for full sharding "
                      "without a model_split");
    if (!plan.has_split())
      batch_total = checked_sum(
          cls.child("batch"), "the plan's global batch (summed over ranks)",
          {{"batches of the ranks before", batch_total},
           {"batch x the class's ranks",
            checked_product(cls.child("batch"), "the class's samples",
                            {{"batch", row.row.batch}, {"ranks", count}}, kMaxGlobalBatch)}},
          kMaxGlobalBatch);
    cls.finish();
    rows.push_back(std::move(row));
  }
  // Bounded and covering 0..next-1: expand.
  const int n = static_cast<int>(next);
  plan.ranks.clear();
  plan.ranks.reserve(static_cast<std::size_t>(n));
  plan.rank_classes.clear();
  plan.rank_classes.reserve(rows.size());
  for (const Row& row : rows) {
    PlanRank pr = row.row;
    if (row.even) pr.state_share = 1.0 / n;
    for (int r = row.first; r <= row.last; ++r) {
      pr.rank = r;
      pr.node = row.node + (r - row.first) / row.ranks_per_node;
      plan.ranks.push_back(pr);
    }
    plan.rank_classes.push_back({row.first, row.last});
  }
}

JsonReader row_reader(const JsonReader& rows, const Plan& plan, int rank) {
  if (plan.rank_classes.empty()) return rows.element(static_cast<std::size_t>(rank));
  const auto it = std::upper_bound(plan.rank_classes.begin(), plan.rank_classes.end(), rank,
                                   [](int r, const PlanRankClass& c) { return r < c.first; });
  return rows.element(static_cast<std::size_t>(it - plan.rank_classes.begin() - 1));
}

void check_row_count(const Plan& plan, const Scenario& scenario, const std::string& plan_file) {
  const std::size_t devices = scenario.cluster.ranks().size();
  const std::size_t rows = plan.ranks.size();
  if (rows == devices) return;
  const std::vector<int>& used = scenario.cluster.used_nodes;
  const std::string cluster =
      "cluster \"" + scenario.cluster.name + "\"" +
      (used.empty() ? std::string()
                    : " on the plan's \"nodes\" " + format_index_ranges(used) + " (" +
                          std::to_string(used.size()) + " of its " +
                          std::to_string(used.size() + scenario.cluster.idle.size()) + " nodes)");
  const std::string size =
      cluster + " has " + std::to_string(devices) + " device(s)" +
      (devices > 0 ? ", ranks " + format_rank_range(0, static_cast<int>(devices) - 1)
                   : std::string());
  if (plan.rank_classes.empty())
    throw ValidationError(plan_file, "ranks", std::to_string(rows) + " ranks",
                          std::to_string(devices) + " ranks, one per device: " + size);
  // The class holding the first rank past the cluster; when the classes end short, the last.
  std::size_t c = plan.rank_classes.size() - 1;
  if (rows > devices)
    for (std::size_t i = 0; i < plan.rank_classes.size(); ++i)
      if (static_cast<std::size_t>(plan.rank_classes[i].last) >= devices) {
        c = i;
        break;
      }
  const PlanRankClass& k = plan.rank_classes[c];
  const std::string value = "[" + std::to_string(k.first) + ", " + std::to_string(k.last) +
                            "] (class " + std::to_string(c) + " of " +
                            std::to_string(plan.rank_classes.size()) + "; the classes cover " +
                            std::to_string(rows) + " ranks)";
  throw ValidationError(plan_file, "rank_classes[" + std::to_string(c) + "].ranks", value,
                        rows > devices
                            ? "ranks up to " + std::to_string(static_cast<int>(devices) - 1) +
                                  ": " + size + " (a compact plan for another cluster?)"
                            : "classes that run to rank " +
                                  std::to_string(static_cast<int>(devices) - 1) + ": " + size);
}

Json rank_classes_json(const Plan& plan) {
  Json out = Json::array();
  const auto& rows = plan.ranks;
  const std::size_t n = rows.size();
  auto same_row = [](const PlanRank& a, const PlanRank& b) {
    return a.gpu == b.gpu && a.batch == b.batch && a.micro_batch == b.micro_batch &&
           a.micro_batches == b.micro_batches && a.state_share == b.state_share;
  };
  std::size_t i = 0;
  while (i < n) {
    const PlanRank& head = rows[i];
    // The ranks on the class's first node fix the rule: a node every k ranks.
    std::size_t k = 1;
    while (i + k < n && rows[i + k].node == head.node && same_row(rows[i + k], head)) ++k;
    std::size_t end = i + k;
    while (end < n && same_row(rows[end], head) &&
           static_cast<std::size_t>(rows[end].node) ==
               static_cast<std::size_t>(head.node) + (end - i) / k)
      ++end;
    Json& o = out.emplace_back(Json::value_t::object);
    o["ranks"] = Json::array({static_cast<int>(i), static_cast<int>(end - 1)});
    if (end - i <= k)
      o["node"] = head.node;
    else
      o["node"] = Json{{"first", head.node}, {"ranks_per_node", static_cast<int>(k)}};
    o["gpu"] = head.gpu;
    o["batch"] = head.batch;
    o["micro_batch"] = head.micro_batch;
    o["micro_batches"] = head.micro_batches;
    o["state_share"] = head.state_share;
    i = end;
  }
  return out;
}

}  // namespace cephalo::detail

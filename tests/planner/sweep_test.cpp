// Sweep space: count_mixes / enumerate_mixes against a plain odometer over every combination
// (the definition), the refusal above --max-mixes before enumerating, and the rows' JSON
// round trip that carries rows between MPI ranks, and the spec's link defaults.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/planner/sweep.hpp"
#include "sweep_spec_fixture.hpp"

namespace cephalo::planner {
namespace {

// Every combination of counts, the first entry fastest, filtered as the spec says.
std::vector<std::vector<int>> odometer(const SweepSpec& spec, int batch) {
  std::vector<std::vector<int>> out;
  std::vector<int> c(spec.pool.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = spec.pool[i].min_count;
  for (;;) {
    int total = 0;
    double cost = 0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      total += c[i];
      cost += c[i] * spec.pool[i].price_per_hour;
    }
    const bool within = spec.max_cost_per_hour < 0 || cost <= spec.max_cost_per_hour + 1e-9;
    if (total > 0 && (batch == 0 || total <= batch) && within) out.push_back(c);
    std::size_t k = 0;
    for (; k < c.size(); ++k) {
      c[k] += spec.pool[k].step;
      if (c[k] <= spec.pool[k].max_count) break;
      c[k] = spec.pool[k].min_count;
    }
    if (k == c.size()) break;
  }
  return out;
}

SweepSpec random_spec(std::mt19937& rng, int* batch) {
  SweepSpec spec;
  spec.file = "random-sweep.json";
  std::uniform_int_distribution<int> types(1, 4), count(0, 7), step(1, 3), coin(0, 3);
  std::uniform_real_distribution<double> price(0.0, 5.0);
  const int n = types(rng);
  for (int i = 0; i < n; ++i) {
    PoolEntry p;
    p.max_count = count(rng);
    p.min_count = std::min(p.max_count, coin(rng) == 0 ? count(rng) : 0);
    p.step = step(rng);
    // Some prices are exact multiples so that mixes land on the budget itself.
    p.price_per_hour = coin(rng) == 0 ? 0.5 * (1 + coin(rng)) : price(rng);
    spec.pool.push_back(p);
  }
  spec.max_cost_per_hour = coin(rng) == 0 ? -1 : std::uniform_real_distribution<>(0, 20)(rng);
  if (coin(rng) == 1) spec.max_cost_per_hour = 2.0;  // on the grid of the exact prices
  *batch = coin(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 20)(rng);
  if (*batch > 0) spec.job["global_batch"] = *batch;
  return spec;
}

TEST(SweepSpace, EnumerationAndCountMatchTheOdometerOnRandomSpecs) {
  std::mt19937 rng(20261201);
  int nonempty = 0, pruned = 0;
  for (int trial = 0; trial < 400; ++trial) {
    int batch = 0;
    const SweepSpec spec = random_spec(rng, &batch);
    const auto expected = odometer(spec, batch);
    const auto got = enumerate_mixes(spec, 1u << 20);
    ASSERT_EQ(got, expected) << "trial " << trial;
    const auto count = count_mixes(spec, 1u << 20);
    EXPECT_EQ(count.mixes, expected.size()) << "trial " << trial;
    EXPECT_GE(count.unfiltered, count.mixes) << "trial " << trial;
    nonempty += !expected.empty();
    pruned += count.unfiltered > count.mixes;
    // Capped counting: exactly limit + 1 when there are more.
    if (expected.size() > 2) {
      EXPECT_EQ(count_mixes(spec, 2).mixes, 3u) << "trial " << trial;
      EXPECT_THROW(enumerate_mixes(spec, 2), ValidationError) << "trial " << trial;
    }
  }
  EXPECT_GT(nonempty, 200);  // the random specs exercise the filters, not only empty spaces
  EXPECT_GT(pruned, 100);
}

TEST(SweepSpace, AHugePoolIsRefusedAtOnceWithItsCount) {
  SweepSpec spec;
  spec.file = "huge-sweep.json";
  for (int i = 0; i < 4; ++i) {
    PoolEntry p;
    p.max_count = 4096;  // the spec reader's bound per entry: 4097^4 - 1 ≈ 2.8e14 combinations
    p.price_per_hour = 1.0 + i;
    spec.pool.push_back(p);
  }
  const auto count = count_mixes(spec, kDefaultMaxMixes);
  EXPECT_EQ(count.unfiltered, 4097ull * 4097 * 4097 * 4097 - 1);
  EXPECT_EQ(count.mixes, kDefaultMaxMixes + 1);
  try {
    enumerate_mixes(spec);
    FAIL() << "a 2.8e14-mix space was enumerated";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("huge-sweep.json"), std::string::npos) << what;
    EXPECT_NE(what.find("$.pool"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(count.unfiltered)), std::string::npos) << what;
    EXPECT_NE(what.find("--max-mixes"), std::string::npos) << what;
  }
  // (Counting is bounded by the limit, not by the space: the walk stops after 5001 mixes;
  // the old enumeration would not finish, so this test would time out in ctest.)
  // A budget that cuts the same pool down to a few mixes is accepted.
  spec.max_cost_per_hour = 3.0;
  // (Prices 1, 2, 3, 4 $/h: every mix costing at most 3, the first entry varying fastest.)
  const std::vector<std::vector<int>> expected = {{1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0},
                                                  {0, 1, 0, 0}, {1, 1, 0, 0}, {0, 0, 1, 0}};
  EXPECT_EQ(enumerate_mixes(spec), expected);
}

TEST(SweepRows, JsonRoundTripPutsRowsBackInPlace) {
  SweepRow a;
  a.counts = {1, 2};
  a.mix = "1x A + 2x B";
  a.gpus = 3;
  a.cost_per_hour = 4.5;
  a.feasible = true;
  a.meets_constraints = true;
  a.samples_per_s = 12.25;
  a.predicted_samples_per_s = 13.5;
  a.samples_per_dollar = 9800;
  a.tokens_per_dollar = 9800.0 * 2048;
  a.planning_s = 0.01;
  SweepRow b = a;
  b.counts = {0, 1};
  b.feasible = false;
  b.error = "too small";
  std::vector<SweepRow> all(3);
  place_rows(rows_to_json({a, b}, {2, 0}), all);
  EXPECT_EQ(all[2].counts, a.counts);
  EXPECT_EQ(all[2].samples_per_s, a.samples_per_s);
  EXPECT_EQ(all[2].tokens_per_dollar, a.tokens_per_dollar);
  EXPECT_EQ(all[0].error, "too small");
  EXPECT_TRUE(all[1].counts.empty());
  EXPECT_THROW(place_rows(rows_to_json({a}, {3}), all), ValidationError);
}

// Rows as a sweep of long mix names and long errors produces them.
std::vector<SweepRow> table_rows() {
  std::vector<SweepRow> rows(4);
  const double tokens[] = {3e6, 0, 9e6, 5e6};
  const double speed[] = {40, 0, 10, 80};
  const double cost[] = {20, 1, 8, 45.5};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].mix = std::to_string(i) + "x A100-SXM4-80GB + 8x L4-24GB + 8x H100-SXM5-80GB";
    rows[i].gpus = 16;
    rows[i].cost_per_hour = cost[i];
    rows[i].feasible = i != 1;
    rows[i].meets_constraints = rows[i].feasible;
    rows[i].samples_per_s = speed[i];
    rows[i].tokens_per_dollar = tokens[i];
  }
  rows[1].error = "infeasible: rank 3 (L4-24GB) needs 31.7 GiB of state, 21.2 GiB usable";
  return rows;
}

// The first column of each data row (after the header and the rule).
std::vector<char> mix_order(const std::string& table) {
  std::vector<char> out;
  std::istringstream in(table);
  std::string line;
  for (int n = 0; std::getline(in, line); ++n)
    if (n >= 2) out.push_back(line.at(0));
  return out;
}

TEST(SweepTable, FitsOneHundredColumnsWhenTheMixesDo) {
  auto rows = table_rows();
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i].mix = std::to_string(i) + "x A100-80GB + 8x L4";
  const auto narrow = sweep_table(rows);
  std::istringstream in(narrow);
  for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(narrow.find("Mtokens/$"), std::string::npos);
  EXPECT_NE(narrow.find("9.00"), std::string::npos) << narrow;  // 9e6 tokens per dollar
  const auto wide = sweep_table(rows, {.sort = "mix", .wide = true});
  EXPECT_NE(wide.find(rows[1].error), std::string::npos) << wide;
  EXPECT_NE(wide.find("samples/$"), std::string::npos);
  // With a network swept, its column still fits.
  auto on_networks = rows;
  for (std::size_t i = 0; i < on_networks.size(); ++i) {
    on_networks[i].network = static_cast<int>(i % 2);
    on_networks[i].network_name = i % 2 ? "IB-400G" : "Eth-25G";
    on_networks[i].family = i % 2 ? "3d" : "fsdp";
  }
  const auto with_networks = sweep_table(on_networks);
  std::istringstream lines(with_networks);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(with_networks.find("Eth-25G"), std::string::npos) << with_networks;
  EXPECT_NE(with_networks.find("3d"), std::string::npos) << with_networks;
}

// A mix or network clipped to fit read alike on every row that begins the same way ("1x
// A100-80GB + 2x RTX-A60..."): they are the rows' names, whole in every table.
TEST(SweepTable, EveryRowKeepsTheNamesThatTellItApart) {
  const auto rows = table_rows();  // mixes of 50 characters that differ in their first
  auto on_networks = rows;
  for (std::size_t i = 0; i < on_networks.size(); ++i) {
    on_networks[i].network = static_cast<int>(i % 2);
    on_networks[i].network_name = i % 2 ? "InfiniBand-400G" : "InfiniBand-200G";
  }
  for (const auto& table : {sweep_table(rows), sweep_table(on_networks)})
    for (const auto& r : on_networks) EXPECT_NE(table.find(r.mix), std::string::npos) << table;
  const auto with_networks = sweep_table(on_networks);
  EXPECT_NE(with_networks.find("InfiniBand-400G"), std::string::npos) << with_networks;
  EXPECT_NE(with_networks.find("InfiniBand-200G"), std::string::npos) << with_networks;
}

// A column empty on every row is one a reader reads past: the note column is there only when
// a row has a note.
TEST(SweepTable, NoNoteColumnWhenNoRowHasANote) {
  auto rows = table_rows();
  EXPECT_NE(sweep_table(rows).find("note"), std::string::npos);
  rows[1].error.clear();
  rows[1].feasible = true;
  rows[1].meets_constraints = true;
  const auto table = sweep_table(rows);
  EXPECT_EQ(table.find("note"), std::string::npos) << table;
  // A row below the throughput constraint brings the column back.
  rows[2].meets_constraints = false;
  EXPECT_NE(sweep_table(rows).find("below the thr"), std::string::npos);
}

TEST(SweepTable, SortsBestFirstWithInfeasibleMixesLast) {
  const auto rows = table_rows();
  EXPECT_EQ(mix_order(sweep_table(rows)), (std::vector<char>{'2', '3', '0', '1'}));
  EXPECT_EQ(mix_order(sweep_table(rows, {.sort = "throughput"})),
            (std::vector<char>{'3', '0', '2', '1'}));
  EXPECT_EQ(mix_order(sweep_table(rows, {.sort = "cost"})),
            (std::vector<char>{'2', '0', '3', '1'}));
  EXPECT_EQ(mix_order(sweep_table(rows, {.sort = "mix"})), (std::vector<char>{'0', '1', '2', '3'}));
  EXPECT_THROW(sweep_table(rows, {.sort = "price"}), ValidationError);
}

}  // namespace
}  // namespace cephalo::planner

namespace cephalo::planner {
namespace {

// A spec that gives no intra-node link inherits the cluster format's default (each GPU type's
// own PCIe), while a pool entry's own link still wins; the NIC stays required.
TEST(SweepSpec, NodesWithoutAnIntraLinkUseTheirGpusPcie) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cephalo-sweep-" + std::to_string(::getpid()) + "-links");
  std::filesystem::create_directories(dir);
  const auto file = dir / "spec.json";
  Json doc = Json::parse(R"({
    "name": "links",
    "pool": [{"gpu": "a100x80", "max_count": 2,
              "intra_link": {"kind": "nvlink", "bandwidth": "300GB/s", "latency": "2us"}},
             {"gpu": "l4", "max_count": 2}],
    "node": {"gpus_per_node": 2, "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s"}},
    "job": {"model": "gpt-1.3b", "sequence_length": 512, "global_batch": 16}})");
  std::ofstream(file) << doc.dump();
  const SweepSpec spec = load_sweep_spec(file);
  const Scenario mix = mix_scenario(spec, {2, 2});
  ASSERT_EQ(mix.cluster.nodes.size(), 2u);
  const auto& a100 = mix.cluster.nodes[0];
  const auto& l4 = mix.cluster.nodes[1];
  EXPECT_EQ(a100.intra_link.kind, "nvlink");
  EXPECT_DOUBLE_EQ(a100.intra_link.bandwidth, 300e9);
  EXPECT_EQ(l4.intra_link.kind, "pcie");
  EXPECT_DOUBLE_EQ(l4.intra_link.bandwidth, l4.devices.front().spec.pcie_bandwidth());

  doc["node"].erase("nic");
  std::ofstream(file) << doc.dump();
  try {
    load_sweep_spec(file);
    ADD_FAILURE() << "a spec without a NIC was accepted";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("nic"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(SweepShareOut, DealsRoundRobin) {
  EXPECT_EQ(dealt_mixes(7, 1, 3), (std::vector<std::size_t>{1, 4}));
  EXPECT_EQ(dealt_mixes(7, 0, 1), (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(dealt_mixes(2, 3, 4).empty());
}

// Two processes sharing a sweep give process 0 the rows one process computes, in mix order;
// the other process gets none.
TEST(SweepShareOut, GatheredRowsEqualOneProcessRows) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cephalo_sweep_share_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  test_support::write_small_sweep_spec(dir / "spec.json", "even");
  const SweepInput input = load_sweep(dir / "spec.json", "");
  ASSERT_EQ(input.mixes.size(), 8u);
  const auto alone = run_sweep(input);
  std::string from_rank1;
  const SweepShare rank1{1, 2, [&](const std::string& mine) {
                           from_rank1 = mine;
                           return std::vector<std::string>{};
                         }};
  EXPECT_TRUE(run_sweep(input, rank1).empty());
  const SweepShare rank0{0, 2, [&](const std::string& mine) {
                           return std::vector<std::string>{from_rank1, mine};
                         }};
  const auto shared = run_sweep(input, rank0);
  ASSERT_EQ(shared.size(), alone.size());
  for (std::size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(shared[i].counts, alone[i].counts);
    EXPECT_EQ(shared[i].samples_per_s, alone[i].samples_per_s);
    EXPECT_EQ(shared[i].pareto, alone[i].pareto);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cephalo::planner

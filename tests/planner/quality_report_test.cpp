// The planner's quality report (planner/README.md carries the table this prints): on 22
// heterogeneous scenarios, every strategy's plan is simulated; `cephalo` must plan exactly
// the cases that say it does; `optimal` (which never sees cephalo's plan) must be at least as
// fast as `cephalo` wherever `cephalo` planned; `search` too (by construction: cephalo's plan is
// one of its seeds, so this checks its seeding); neither may return a plan the simulator finds
// out of memory. Gains over `even` and `proportional`
// are reported as measured (median and worst).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/strategies.hpp"
#include "scenario_fixture.hpp"
#include "search.hpp"

namespace cephalo::planner {
namespace {

struct Case {
  std::string model;
  int seq;
  int batch;
  std::vector<std::pair<std::string, int>> gpus;  // type, count
  // Whether the published optimizer plans this case (a plan the simulator accepts): false
  // where the shipped profiles or memory curves lack the model or a GPU, or its memory cap
  // refuses. Asserted, so a cephalo that stops planning fails the report instead of leaving
  // the comparisons with it vacuous.
  bool cephalo_plans = true;
};

Json link_for(const std::string& gpu) {
  if (gpu == "a100x40" || gpu == "a100x80" || gpu == "v100x16" || gpu == "v100x32")
    return {{"kind", "nvlink"}, {"bandwidth", "150GB/s"}, {"latency", "2us"}};
  return {{"kind", "pcie"}, {"generation", 4}, {"lanes", 16}};
}

Scenario make_case(const Case& c, std::string* label) {
  Json nodes = Json::array();
  std::string mix;
  for (const auto& [gpu, count] : c.gpus) {
    for (int left = count, k = 0; left > 0; left -= 8, ++k) {
      std::string name = gpu;
      name += std::to_string(k);
      nodes.push_back(
          {{"name", name},
           {"gpus", Json::array({{{"type", gpu}, {"count", std::min(8, left)}}})},
           {"intra_link", link_for(gpu)},
           {"nic", {{"kind", "ethernet"}, {"bandwidth", "100Gbit/s"}, {"latency", "10us"}}}});
    }
    mix += (mix.empty() ? "" : "+") + std::to_string(count) + "x" + gpu;
  }
  *label = c.model + " s" + std::to_string(c.seq) + " b" + std::to_string(c.batch) + " " + mix;
  return test_support::inline_scenario(*label, mix, nodes, c.model, c.seq, c.batch,
                                       "<quality report>");
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"gpt-1.3b", 512, 32, {{"a6000", 1}, {"p40", 1}}},
      {"gpt-1.3b", 512, 64, {{"l4", 2}, {"a6000", 1}, {"p40", 1}}},
      {"gpt-1.3b", 512, 128, {{"v100x32", 4}, {"l4", 4}}},
      {"gpt-2.7b", 512, 64, {{"l4", 2}, {"a6000", 1}, {"p40", 1}}},
      {"gpt-2.7b", 512, 128, {{"l4", 2}, {"a6000", 1}, {"p40", 1}}},
      {"gpt-2.7b", 512, 48, {{"a10g", 1}, {"t4", 1}, {"a6000", 1}}},
      {"gpt-2.7b", 512, 64, {{"t4", 4}, {"a6000", 4}}},
      {"gpt-2.7b", 512, 128, {{"v100x16", 8}, {"l4", 8}}},
      {"gpt-6.7b", 512, 32, {{"a10g", 2}, {"a6000", 2}, {"l4", 2}}},
      {"gpt-6.7b", 512, 64, {{"v100x32", 4}, {"t4", 4}}, false},
      {"gpt-6.7b", 512, 128, {{"a10g", 8}, {"v100x16", 8}}},
      {"gpt-6.7b", 512, 128, {{"a10g", 8}, {"a6000", 8}, {"l4", 8}, {"t4", 8}}},
      {"gpt-6.7b", 512, 128, {{"a10g", 16}, {"a6000", 16}, {"l4", 16}, {"v100x32", 16}}},
      {"llama-7b", 512, 32, {{"a100x40", 2}, {"a10g", 2}}, false},
      {"llama-7b", 512, 64, {{"a10g", 4}, {"l4", 2}, {"t4", 2}}, false},
      {"llama-7b", 2048, 32, {{"a100x40", 4}, {"v100x16", 4}}},
      {"llama-7b", 2048, 64, {{"v100x16", 8}, {"a10g", 8}}},
      {"llama-7b", 2048, 128, {{"a100x40", 16}, {"a10g", 16}, {"l4", 16}, {"t4", 16}}},
      {"llama-13b", 2048, 64, {{"a100x40", 8}, {"a10g", 8}}, false},
      // Was 4xa100x40+4xl4, which fitted LLaMA-13B only with host offload and a narrow margin:
      // with the backward's input-gradient temporaries and the collectives' in-flight shards
      // in the memory model (~0.27 GiB more per GPU) no batch fits there. One more L4.
      {"llama-13b", 512, 64, {{"a100x40", 4}, {"l4", 5}}, false},
      {"llama-13b", 2048, 128, {{"a100x80", 16}, {"l4", 16}}, false},
      {"gpt-13b", 2048, 64, {{"a100x80", 8}, {"v100x32", 8}}, false},
  };
  return all;
}

struct Outcome {
  bool planned = false;
  bool oom = false;
  double samples_per_s = 0;  // simulated; 0 when no plan or OOM
  double planning_s = 0;
  std::string error;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TEST(QualityReport, OptimalAndSearchBeatCephaloAndNeverOom) {
  const std::vector<std::string> strategies = {"even", "proportional", "cephalo", "optimal",
                                               "search"};
  TextTable table({"scenario", "gpus", "even", "proportional", "cephalo", "optimal", "search",
                   "plan cephalo", "plan optimal", "plan search"});
  table.set_align(0, TextTable::Align::Left);
  std::ostringstream md;
  md << "| scenario | GPUs | even | proportional | cephalo | optimal | search | plan time cephalo "
        "| optimal | search |\n|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::string, std::vector<double>> gains;  // "optimal/even" -> ratios
  int cephalo_compared = 0;
  std::map<std::string, int> below_cephalo;
  std::map<std::string, double> worst_vs_cephalo;
  for (const auto& c : cases()) {
    std::string label;
    const Scenario s = make_case(c, &label);
    const auto models = costmodels::make_cost_models(s);
    std::map<std::string, Outcome> out;
    for (const auto& strategy : strategies) {
      PlannerOptions opt;
      opt.strategy = strategy;
      opt.search_neighbours = 8;
      Outcome o;
      try {
        const auto res = make_plan(s, opt);
        o.planned = true;
        o.planning_s = res.planning_s;
        const auto sim = replay_outcome(res.plan, s, models);
        // search reports the simulated time of the plan it returns: the same replay.
        if (res.simulated_iteration_s) {
          EXPECT_EQ(*res.simulated_iteration_s, sim.iteration_s) << label << ": " << strategy;
        }
        o.oom = sim.oom;
        o.samples_per_s = sim.oom ? 0 : sim.samples_per_s;
        if (sim.oom) o.error = sim.oom_detail;
      } catch (const InfeasibleError& e) {
        o.error = e.what();
      }
      out[strategy] = o;
    }
    auto cell = [&](const std::string& k) {
      const auto& o = out[k];
      if (!o.planned) return std::string("n/a");
      if (o.oom) return std::string("OOM");
      return fixed(o.samples_per_s, 2);
    };
    auto ptime = [&](const std::string& k) {
      return out[k].planned ? format_seconds(out[k].planning_s) : std::string("-");
    };
    const int gpus = s.cluster.num_ranks();
    table.add_row({label, std::to_string(gpus), cell("even"), cell("proportional"), cell("cephalo"),
                   cell("optimal"), cell("search"), ptime("cephalo"), ptime("optimal"),
                   ptime("search")});
    md << "| " << label << " | " << gpus << " | " << cell("even") << " | " << cell("proportional")
       << " | " << cell("cephalo") << " | " << cell("optimal") << " | " << cell("search") << " | "
       << ptime("cephalo") << " | " << ptime("optimal") << " | " << ptime("search") << " |\n";
    const bool cephalo_ok = out["cephalo"].planned && !out["cephalo"].oom;
    EXPECT_EQ(cephalo_ok, c.cephalo_plans)
        << label << ": cephalo " << (cephalo_ok ? "planned" : "found no plan: ")
        << out["cephalo"].error << " (the case says it " << (c.cephalo_plans ? "plans" : "does not")
        << ")";
    for (const std::string ours : {"optimal", "search"}) {
      const auto& o = out[ours];
      EXPECT_TRUE(o.planned) << label << ": " << ours << " found no plan: " << o.error;
      EXPECT_FALSE(o.oom) << label << ": " << ours << " plan is out of memory: " << o.error;
      const auto& ceph = out["cephalo"];
      if (ceph.planned && !ceph.oom) {
        // `optimal` replays its model optimum, the staircase breakpoints and the best
        // phase-weighted solution (see planner/README.md) and keeps the fastest; it never sees
        // cephalo's plan, so this is the quality claim. `search` simulates cephalo's plan
        // among its seeds, so for search this holds by construction: it checks only that the
        // seeding and the bookkeeping work (cephalo_plans above keeps it from being vacuous).
        // Both must be at least as fast, up to floating-point rounding.
        const double floor = ceph.samples_per_s * (1 - 1e-6);
        EXPECT_GE(o.samples_per_s, floor)
            << label << ": " << ours << " " << std::setprecision(10) << o.samples_per_s
            << " vs cephalo " << ceph.samples_per_s;
        if (o.samples_per_s < floor) ++below_cephalo[ours];
        auto [w, fresh] = worst_vs_cephalo.emplace(ours, o.samples_per_s / ceph.samples_per_s);
        if (!fresh) w->second = std::min(w->second, o.samples_per_s / ceph.samples_per_s);
      }
      for (const std::string base : {"even", "proportional"}) {
        const auto& b = out[base];
        if (b.planned && !b.oom && b.samples_per_s > 0 && o.samples_per_s > 0)
          gains[ours + " / " + base].push_back(o.samples_per_s / b.samples_per_s);
      }
    }
    if (out["cephalo"].planned && !out["cephalo"].oom) ++cephalo_compared;
  }
  std::ostringstream summary;
  summary << "cephalo produced a plan the simulator accepts on " << cephalo_compared << " of "
          << cases().size() << " scenarios\n";
  summary << "optimal below cephalo (simulated) on " << below_cephalo["optimal"]
          << " scenarios, search on " << below_cephalo["search"] << "\n";
  for (const auto& [ours, w] : worst_vs_cephalo)
    summary << "worst " << ours << " / cephalo: " << std::setprecision(9) << w << "\n";
  for (const auto& [k, v] : gains)
    summary << "gain " << k << ": median " << fixed(median(v), 2) << "x, worst "
            << fixed(*std::min_element(v.begin(), v.end()), 2) << "x, best "
            << fixed(*std::max_element(v.begin(), v.end()), 2) << "x over " << v.size()
            << " scenarios\n";
  std::cout << "simulated samples/s per strategy (n/a: no plan; OOM: simulator out of memory)\n"
            << table.render() << summary.str();
  std::ofstream(std::string(CEPHALO_BINARY_DIR) + "/quality_report.md") << md.str() << "\n"
                                                                        << summary.str();
  EXPECT_GE(cases().size(), 20u);
  int expected_cephalo = 0;
  for (const auto& c : cases()) expected_cephalo += c.cephalo_plans;
  EXPECT_EQ(cephalo_compared, expected_cephalo);
}

}  // namespace
}  // namespace cephalo::planner

// What-if sweeps over cluster mixes; see sweep.hpp.
#include "cephalo/planner/sweep.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/search.hpp"
#include "cephalo/planner/strategies.hpp"

namespace cephalo::planner {
namespace {

Json link_json(JsonReader r) {
  if (!r.is_object())
    r.fail("a link object such as {\"kind\": \"pcie\", \"generation\": 4, \"lanes\": 16}");
  return r.value();
}

// Under mpirun (Open MPI, MPICH/PMI) the launcher sets these; a plain run skips MPI entirely.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

Json row_json(const SweepRow& r, std::size_t index) {
  return {{"index", index},
          {"counts", r.counts},
          {"mix", r.mix},
          {"gpus", r.gpus},
          {"cost_per_hour", r.cost_per_hour},
          {"feasible", r.feasible},
          {"meets_constraints", r.meets_constraints},
          {"samples_per_s", r.samples_per_s},
          {"predicted_samples_per_s", r.predicted_samples_per_s},
          {"samples_per_dollar", r.samples_per_dollar},
          {"pareto", r.pareto},
          {"planning_s", r.planning_s},
          {"error", r.error}};
}

SweepRow row_from_json(const Json& j) {
  SweepRow r;
  r.counts = j.at("counts").get<std::vector<int>>();
  r.mix = j.at("mix").get<std::string>();
  r.gpus = j.at("gpus").get<int>();
  r.cost_per_hour = j.at("cost_per_hour").get<double>();
  r.feasible = j.at("feasible").get<bool>();
  r.meets_constraints = j.at("meets_constraints").get<bool>();
  r.samples_per_s = j.at("samples_per_s").get<double>();
  r.predicted_samples_per_s = j.at("predicted_samples_per_s").get<double>();
  r.samples_per_dollar = j.at("samples_per_dollar").get<double>();
  r.planning_s = j.at("planning_s").get<double>();
  r.error = j.at("error").get<std::string>();
  return r;
}

}  // namespace

SweepSpec load_sweep_spec(const std::filesystem::path& file) {
  const Json doc = read_json_file(file);
  JsonReader root(doc, file.string());
  if (!root.is_object()) root.fail("a sweep spec object with \"pool\", \"node\" and \"job\"");
  SweepSpec spec;
  spec.file = file;
  spec.name = root.string_or("name", file.stem().string());
  root.allow({"description", "_comment"});
  const auto& gpus = costmodels::GpuCatalog::builtin();
  auto pool = root.child("pool");
  if (!pool.is_array() || pool.size() == 0) pool.fail("a non-empty array of GPU types");
  for (auto& e : pool.elements()) {
    PoolEntry p;
    p.gpu = e.string("gpu");
    auto spec_found = gpus.find(p.gpu);
    if (!spec_found)
      e.child("gpu").fail_value("\"" + p.gpu + "\"",
                                "a GPU of the catalog (cephalo describe gpus)");
    p.spec = *spec_found;
    p.max_count = static_cast<int>(e.integer("max_count", 0, 4096));
    p.min_count = static_cast<int>(e.integer_or("min_count", 0, 0, p.max_count));
    p.step = static_cast<int>(e.integer_or("step", 1, 1, 4096));
    p.price_per_hour =
        e.has("price_per_hour") ? e.child("price_per_hour").as_number() : p.spec.price_per_hour;
    if (e.has("price_per_hour") && p.price_per_hour < 0)
      e.child("price_per_hour").fail("a price >= 0 in USD per GPU-hour");
    p.gpus_per_node = static_cast<int>(e.integer_or("gpus_per_node", 0, 1, 64));
    if (auto l = e.optional_child("intra_link")) p.intra_link = link_json(*l);
    e.finish();
    spec.pool.push_back(std::move(p));
  }
  auto node = root.child("node");
  spec.gpus_per_node = static_cast<int>(node.integer_or("gpus_per_node", 8, 1, 64));
  spec.intra_link = link_json(node.child("intra_link"));
  spec.nic = link_json(node.child("nic"));
  node.finish();
  auto job = root.child("job");
  if (job.is_string()) {
    std::filesystem::path p = job.as_string();
    if (p.is_relative()) p = file.parent_path() / p;
    try {
      spec.job = read_json_file(p);
    } catch (const IoError& e) {
      job.fail_value("\"" + job.as_string() + "\" (" + e.what() + ")", "a readable job file");
    }
  } else {
    spec.job = job.value();
  }
  spec.strategy = root.string_or("strategy", "optimal");
  const auto& names = strategy_names();
  if (std::find(names.begin(), names.end(), spec.strategy) == names.end())
    root.child("strategy")
        .fail_value("\"" + spec.strategy + "\"",
                    "one of even, proportional, cephalo, optimal, search");
  if (auto c = root.optional_child("constraints")) {
    spec.max_cost_per_hour = c->number_or("max_cost_per_hour", -1);
    spec.min_samples_per_s = c->number_or("min_samples_per_s", 0);
    c->finish();
  }
  root.finish();
  // Price needed for $/hour: refuse unknown prices up front rather than print nonsense.
  for (std::size_t i = 0; i < spec.pool.size(); ++i)
    if (spec.pool[i].price_per_hour < 0)
      throw ValidationError(file.string(), "$.pool[" + std::to_string(i) + "].price_per_hour",
                            "(none in the catalog for " + spec.pool[i].spec.name + ")",
                            "a price in USD per GPU-hour");
  // Check the links and the job once, so errors name the spec rather than a generated mix.
  std::vector<int> one(spec.pool.size(), 1);
  try {
    mix_scenario(spec, one);
  } catch (const ValidationError& e) {
    throw ValidationError(file.string(),
                          "$.node / $.pool[*].intra_link / $.job (" + e.json_path() + ")",
                          e.value(), e.expected());
  }
  return spec;
}

std::vector<std::vector<int>> enumerate_mixes(const SweepSpec& spec) {
  std::vector<std::vector<int>> out;
  std::vector<int> c(spec.pool.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = spec.pool[i].min_count;
  int batch = 0;
  if (spec.job.contains("global_batch") && spec.job["global_batch"].is_number_integer())
    batch = spec.job["global_batch"].get<int>();
  for (;;) {
    int total = 0;
    double cost = 0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      total += c[i];
      cost += c[i] * spec.pool[i].price_per_hour;
    }
    const bool within_budget = spec.max_cost_per_hour < 0 || cost <= spec.max_cost_per_hour + 1e-9;
    if (total > 0 && (batch == 0 || total <= batch) && within_budget) out.push_back(c);
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

Scenario mix_scenario(const SweepSpec& spec, const std::vector<int>& counts) {
  Json nodes = Json::array();
  std::string name;
  for (std::size_t i = 0; i < spec.pool.size(); ++i) {
    const auto& p = spec.pool[i];
    const int per = p.gpus_per_node > 0 ? p.gpus_per_node : spec.gpus_per_node;
    for (int left = counts[i], k = 0; left > 0; left -= per, ++k) {
      std::string node_name = p.spec.name;
      node_name += "-";
      node_name += std::to_string(k);
      nodes.push_back({{"name", node_name},
                       {"gpus", Json::array({{{"type", p.gpu}, {"count", std::min(per, left)}}})},
                       {"intra_link", p.intra_link.is_null() ? spec.intra_link : p.intra_link},
                       {"nic", spec.nic}});
    }
    if (counts[i] > 0) {
      name += name.empty() ? "" : " + ";
      name += std::to_string(counts[i]);
      name += "x ";
      name += p.spec.name;
    }
  }
  Json doc = {{"name", spec.name + ": " + name},
              {"cluster", {{"name", name}, {"nodes", nodes}}},
              {"job", spec.job}};
  JsonReader reader(doc, spec.file.string() + " (mix " + name + ")");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), spec.file.parent_path());
}

SweepRow evaluate_mix(const SweepSpec& spec, const std::vector<int>& counts) {
  SweepRow row;
  row.counts = counts;
  for (std::size_t i = 0; i < spec.pool.size(); ++i) {
    row.gpus += counts[i];
    row.cost_per_hour += counts[i] * spec.pool[i].price_per_hour;
    if (counts[i] > 0) {
      row.mix += row.mix.empty() ? "" : " + ";
      row.mix += std::to_string(counts[i]) + "x " + spec.pool[i].spec.name;
    }
  }
  try {
    const Scenario s = mix_scenario(spec, counts);
    PlannerOptions opt;
    opt.strategy = spec.strategy;
    const auto result = make_plan(s, opt);
    row.planning_s = result.planning_s;
    row.predicted_samples_per_s = s.job.global_batch / result.predicted_iteration_s;
    const auto models = costmodels::make_cost_models(s);
    const auto sim = simulate_plan(s, models, result.plan);
    if (sim.oom) {
      row.error = "simulated out of memory: " + sim.oom_detail;
    } else {
      row.feasible = true;
      row.samples_per_s = sim.samples_per_s;
      row.samples_per_dollar =
          row.cost_per_hour > 0 ? row.samples_per_s * 3600.0 / row.cost_per_hour : 0.0;
      row.meets_constraints =
          row.samples_per_s >= spec.min_samples_per_s &&
          (spec.max_cost_per_hour < 0 || row.cost_per_hour <= spec.max_cost_per_hour + 1e-9);
    }
  } catch (const InfeasibleError& e) {
    row.error = e.what();
  }
  return row;
}

void mark_pareto(std::vector<SweepRow>& rows) {
  for (auto& r : rows) {
    r.pareto = false;
    if (!r.feasible || !r.meets_constraints) continue;
    bool dominated = false;
    for (const auto& o : rows) {
      if (&o == &r || !o.feasible || !o.meets_constraints) continue;
      const bool no_worse =
          o.cost_per_hour <= r.cost_per_hour && o.samples_per_s >= r.samples_per_s;
      const bool better = o.cost_per_hour < r.cost_per_hour || o.samples_per_s > r.samples_per_s;
      if (no_worse && better) {
        dominated = true;
        break;
      }
    }
    r.pareto = !dominated;
  }
}

std::vector<SweepRow> run_sweep(const SweepSpec& spec, bool progress) {
  const auto mixes = enumerate_mixes(spec);
  int rank = 0, size = 1;
  bool we_initialised = false;
  const bool mpi = launched_by_mpi();
  if (mpi) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      MPI_Init(nullptr, nullptr);
      we_initialised = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (progress && rank == 0)
    std::cerr << "sweep " << spec.name << ": " << mixes.size() << " mixes, strategy "
              << spec.strategy << (size > 1 ? ", " + std::to_string(size) + " MPI ranks" : "")
              << "\n";
  Json mine = Json::array();
  std::vector<SweepRow> rows(mixes.size());
  std::size_t done = 0;
  for (std::size_t i = static_cast<std::size_t>(rank); i < mixes.size();
       i += static_cast<std::size_t>(size)) {
    rows[i] = evaluate_mix(spec, mixes[i]);
    mine.push_back(row_json(rows[i], i));
    ++done;
    if (progress)
      std::cerr << "sweep" << (size > 1 ? " [rank " + std::to_string(rank) + "]" : "") << " "
                << done << "/" << (mixes.size() + size - 1 - rank) / size << ": " << rows[i].mix
                << ": "
                << (rows[i].feasible ? fixed(rows[i].samples_per_s, 2) + " samples/s"
                                     : "infeasible")
                << "\n";
  }
  if (size > 1) {
    const std::string text = mine.dump();
    int len = static_cast<int>(text.size());
    std::vector<int> lens(size), offsets(size);
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string all;
    if (rank == 0) {
      int total = 0;
      for (int r = 0; r < size; ++r) {
        offsets[r] = total;
        total += lens[r];
      }
      all.resize(static_cast<std::size_t>(total));
    }
    MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    if (rank == 0) {
      for (int r = 1; r < size; ++r) {
        const Json part = Json::parse(all.substr(offsets[r], lens[r]));
        for (const auto& j : part) rows[j.at("index").get<std::size_t>()] = row_from_json(j);
      }
    }
  }
  if (we_initialised) MPI_Finalize();
  if (rank != 0) return {};
  mark_pareto(rows);
  return rows;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::ostringstream out;
  out << "mix,gpus,cost_per_hour,feasible,meets_constraints,samples_per_s,"
         "predicted_samples_per_s,samples_per_dollar,pareto,planning_s,error\n";
  for (const auto& r : rows) {
    std::string err = r.error;
    std::replace(err.begin(), err.end(), '"', '\'');
    out << '"' << r.mix << "\"," << r.gpus << ',' << r.cost_per_hour << ',' << r.feasible << ','
        << r.meets_constraints << ',' << r.samples_per_s << ',' << r.predicted_samples_per_s << ','
        << r.samples_per_dollar << ',' << r.pareto << ',' << r.planning_s << ",\"" << err << "\"\n";
  }
  return out.str();
}

Json sweep_json(const SweepSpec& spec, const std::vector<SweepRow>& rows) {
  Json out = {{"sweep", spec.name}, {"strategy", spec.strategy}};
  Json list = Json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) list.push_back(row_json(rows[i], i));
  out["mixes"] = list;
  return out;
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  TextTable t({"mix", "gpus", "$/hour", "samples/s (sim)", "samples/$", "pareto", "note"});
  t.set_align(6, TextTable::Align::Left);
  for (const auto& r : rows) {
    std::string note = r.error;
    if (note.size() > 60) note = note.substr(0, 57) + "...";
    if (r.feasible && !r.meets_constraints) note = "below the throughput constraint";
    t.add_row({r.mix, std::to_string(r.gpus), fixed(r.cost_per_hour, 2),
               r.feasible ? fixed(r.samples_per_s, 2) : "-",
               r.feasible ? fixed(r.samples_per_dollar, 0) : "-", r.pareto ? "*" : "", note});
  }
  return t.render();
}

}  // namespace cephalo::planner

// What-if sweeps over cluster mixes; see sweep.hpp.
#include "cephalo/planner/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/strategies.hpp"
#include "search.hpp"

namespace cephalo::planner {

void set_stack(SweepSpec& spec, const std::filesystem::path& file) {
  load_stack_calibration(file);  // refused here, naming the file, not in every mix
  if (!spec.job.contains("implementation") || !spec.job["implementation"].is_object())
    spec.job["implementation"] = Json::object();
  spec.job["implementation"]["stack"] = std::filesystem::absolute(file).string();
}

namespace {

Json link_json(JsonReader r) {
  if (!r.is_object())
    r.fail("a link object such as {\"kind\": \"pcie\", \"generation\": 4, \"lanes\": 16}");
  return r.value();
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
          {"tokens_per_dollar", r.tokens_per_dollar},
          {"pareto", r.pareto},
          {"planning_s", r.planning_s},
          {"error", r.error}};
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
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
  r.tokens_per_dollar = j.at("tokens_per_dollar").get<double>();
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
    // One entry per GPU type: a second would enumerate the same mixes twice under two counts.
    for (std::size_t k = 0; k < spec.pool.size(); ++k)
      if (spec.pool[k].spec.name == p.spec.name)
        e.child("gpu").fail_value("\"" + p.gpu + "\" (also pool[" + std::to_string(k) + "], \"" +
                                      spec.pool[k].gpu + "\")",
                                  "each GPU type once in the pool (give its max_count once)");
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
  // Absent, a node's devices talk over PCIe at their own generation, as in cluster files.
  if (auto l = node.optional_child("intra_link")) spec.intra_link = link_json(*l);
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
  // A stack named by a relative path is read where the job was written, not where the mixes'
  // scenarios are parsed.
  if (spec.job.is_object() && spec.job.contains("implementation") &&
      spec.job["implementation"].is_object() && spec.job["implementation"].contains("stack") &&
      spec.job["implementation"]["stack"].is_string()) {
    std::filesystem::path p = spec.job["implementation"]["stack"].get<std::string>();
    const std::filesystem::path from =
        job.is_string() ? std::filesystem::path(job.as_string()) : std::filesystem::path();
    if (p.is_relative()) p = (file.parent_path() / from.parent_path() / p).lexically_normal();
    spec.job["implementation"]["stack"] = p.string();
  }
  spec.strategy = root.string_or("strategy", "optimal");
  const auto& names = strategy_names();
  if (std::find(names.begin(), names.end(), spec.strategy) == names.end())
    root.child("strategy").fail_value("\"" + spec.strategy + "\"", "one of " + join_names(names));
  if (root.has("sharding"))
    spec.sharding = root.child("sharding").as_enum({"full", "hybrid", "auto"});
  if (auto c = root.optional_child("constraints")) {
    // Absent means no limit; a limit given must be >= 0 (a negative one would filter nothing
    // or everything by accident of the sentinel).
    for (const char* key : {"max_cost_per_hour", "min_samples_per_s"})
      if (auto v = c->optional_child(key); v && !(v->as_number() >= 0))
        v->fail("a limit >= 0 (leave the key out for no limit)");
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

namespace {

int spec_global_batch(const SweepSpec& spec) {
  if (spec.job.contains("global_batch") && spec.job["global_batch"].is_number_integer())
    return spec.job["global_batch"].get<int>();
  return 0;  // unknown here: parse_scenario judges it per mix
}

// Calls visit(counts) for every mix that passes the filters, the first pool entry varying
// fastest, until visit returns false. Only partial mixes that can still be completed are
// extended: prices and counts are ≥ 0, so the cost and the GPU total only grow with a count,
// and a partial mix over the budget (or the batch) with the remaining entries at their
// minimum stays over. Each visited partial mix therefore leads to a mix that passes (or to the
// all-zero one), and the walk costs O(pool size) per mix visited.
template <class Visit>
void walk_mixes(const SweepSpec& spec, Visit&& visit) {
  const std::size_t n = spec.pool.size();
  const int batch = spec_global_batch(spec);
  const double budget = spec.max_cost_per_hour < 0 ? std::numeric_limits<double>::infinity()
                                                   : spec.max_cost_per_hour + 1e-9;
  // Cost and total of entries [0, k) at their minimum (what the inner entries add at least).
  std::vector<double> min_cost(n + 1, 0.0);
  std::vector<long long> min_total(n + 1, 0);
  for (std::size_t k = 0; k < n; ++k) {
    min_cost[k + 1] = min_cost[k] + spec.pool[k].min_count * spec.pool[k].price_per_hour;
    min_total[k + 1] = min_total[k] + spec.pool[k].min_count;
  }
  // Tolerance for the pruning only (sums in another order than the final check's).
  const double slack = 1e-6 * std::max(1.0, std::abs(budget));
  std::vector<int> c(n);
  bool go = true;
  // Entries are chosen from the last (slowest varying) to the first.
  auto rec = [&](auto&& self, std::size_t k, double cost, long long total) -> void {
    if (!go) return;
    if (k == 0) {
      long long gpus = 0;
      double exact = 0;
      for (std::size_t i = 0; i < n; ++i) {  // the filters exactly as stated, in pool order
        gpus += c[i];
        exact += c[i] * spec.pool[i].price_per_hour;
      }
      const bool within_budget = spec.max_cost_per_hour < 0 || exact <= budget;
      if (gpus > 0 && (batch == 0 || gpus <= batch) && within_budget) go = visit(c);
      return;
    }
    const auto& p = spec.pool[k - 1];
    for (int v = p.min_count; v <= p.max_count && go; v += p.step) {
      const double at_least = cost + v * p.price_per_hour + min_cost[k - 1];
      const long long gpus_at_least = total + v + min_total[k - 1];
      if (at_least > budget + slack || (batch > 0 && gpus_at_least > batch)) break;
      c[k - 1] = v;
      self(self, k - 1, cost + v * p.price_per_hour, total + v);
    }
  };
  rec(rec, n, 0.0, 0);
}

}  // namespace

MixCount count_mixes(const SweepSpec& spec, std::uint64_t limit) {
  MixCount count;
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t product = 1;
  for (const auto& p : spec.pool) {
    const auto choices = static_cast<std::uint64_t>((p.max_count - p.min_count) / p.step + 1);
    product = product > kMax / choices ? kMax : product * choices;
  }
  bool zero_allowed = true;
  for (const auto& p : spec.pool) zero_allowed = zero_allowed && p.min_count == 0;
  count.unfiltered = product == kMax ? kMax : product - (zero_allowed ? 1 : 0);
  walk_mixes(spec, [&](const std::vector<int>&) { return ++count.mixes <= limit; });
  return count;
}

std::vector<std::vector<int>> enumerate_mixes(const SweepSpec& spec, std::uint64_t max_mixes) {
  const MixCount count = count_mixes(spec, max_mixes);
  if (count.mixes > max_mixes)
    throw ValidationError(
        spec.file.string(), "$.pool",
        "more than " + std::to_string(max_mixes) + " mixes (" + std::to_string(count.unfiltered) +
            " combinations of counts before the budget and global-batch filters)",
        "a sweep of at most " + std::to_string(max_mixes) +
            " mixes (--max-mixes): raise a pool entry's step, lower its max_count, set "
            "constraints.max_cost_per_hour, or raise --max-mixes");
  std::vector<std::vector<int>> out;
  out.reserve(static_cast<std::size_t>(count.mixes));
  walk_mixes(spec, [&](const std::vector<int>& c) {
    out.push_back(c);
    return true;
  });
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
      Json node = {{"name", node_name},
                   {"gpus", Json::array({{{"type", p.gpu}, {"count", std::min(per, left)}}})},
                   {"nic", spec.nic}};
      const Json& link = p.intra_link.is_null() ? spec.intra_link : p.intra_link;
      if (!link.is_null()) node["intra_link"] = link;
      nodes.push_back(std::move(node));
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
    opt.options_source = spec.file.string();  // the options are the spec's keys
    opt.strategy = spec.strategy;
    // hybrid / auto: groups of nodes (sharding_choice.hpp); unset: full sharding, or the
    // replicas a replicating framework plans itself
    opt.sharding =
        !spec.sharding.empty() || schedule::replicates_state(s.job.implementation.framework)
            ? spec.sharding
            : "full";
    // Mixes are compared under one schedule (the spec has no schedule fields): layered
    // accumulation and full checkpointing, what every strategy takes by default, so a sweep of
    // thousands of mixes does not run `optimal`'s schedule search for each.
    opt.accumulation = Accumulation::Layered;
    opt.activation_checkpointing = ActivationCheckpointing{};
    const auto result = make_plan(s, opt);
    row.planning_s = result.planning_s;
    // make_plan's prediction is the replay of its plan (the model's time is kept apart).
    row.predicted_samples_per_s = s.job.global_batch / result.model_iteration_s;
    if (result.simulated_oom) {
      row.error = "simulated out of memory: " + result.simulated_oom_detail;
    } else {
      row.feasible = true;
      row.samples_per_s = s.job.global_batch / result.predicted_iteration_s;
      row.samples_per_dollar =
          row.cost_per_hour > 0 ? row.samples_per_s * 3600.0 / row.cost_per_hour : 0.0;
      row.tokens_per_dollar = row.samples_per_dollar * s.job.sequence_length;
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

std::vector<SweepRow> evaluate_mixes(const SweepSpec& spec,
                                     const std::vector<std::vector<int>>& mixes,
                                     const SweepProgress& progress) {
  std::vector<SweepRow> rows;
  rows.reserve(mixes.size());
  for (const auto& m : mixes) {
    rows.push_back(evaluate_mix(spec, m));
    if (progress) progress(rows.size(), mixes.size(), rows.back());
  }
  return rows;
}

SweepInput load_sweep(const std::filesystem::path& spec_file, const std::string& stack_file,
                      std::uint64_t max_mixes) {
  SweepInput in{load_sweep_spec(spec_file), {}};
  if (!stack_file.empty()) set_stack(in.spec, stack_file);
  in.mixes = enumerate_mixes(in.spec, max_mixes);
  return in;
}

std::vector<std::size_t> dealt_mixes(std::size_t mixes, int rank, int size) {
  std::vector<std::size_t> out;
  for (std::size_t i = static_cast<std::size_t>(rank); i < mixes;
       i += static_cast<std::size_t>(size))
    out.push_back(i);
  return out;
}

std::vector<SweepRow> run_sweep(const SweepInput& input, const SweepShare& share,
                                const SweepProgress& progress) {
  const auto mine = dealt_mixes(input.mixes.size(), share.rank, share.size);
  std::vector<std::vector<int>> my_mixes;
  for (auto i : mine) my_mixes.push_back(input.mixes[i]);
  const auto my_rows = evaluate_mixes(input.spec, my_mixes, progress);
  std::vector<SweepRow> rows;
  if (!share.gather && share.size == 1) {
    rows = my_rows;
  } else {
    const std::string text = rows_to_json(my_rows, mine).dump();
    const auto parts = share.gather ? share.gather(text) : std::vector<std::string>{text};
    if (share.rank != 0) return {};
    rows.resize(input.mixes.size());
    for (const auto& part : parts) place_rows(Json::parse(part), rows);
  }
  mark_pareto(rows);
  return rows;
}

Json rows_to_json(const std::vector<SweepRow>& rows, const std::vector<std::size_t>& indices) {
  if (rows.size() != indices.size())
    throw ValidationError("", "indices", std::to_string(indices.size()) + " indices",
                          "one index per row (" + std::to_string(rows.size()) + ")");
  Json out = Json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) out.push_back(row_json(rows[i], indices[i]));
  return out;
}

void place_rows(const Json& rows, std::vector<SweepRow>& all) {
  for (const auto& j : rows) {
    const auto index = j.at("index").get<std::size_t>();
    if (index >= all.size())
      throw ValidationError("", "index", std::to_string(index),
                            "a row index below " + std::to_string(all.size()));
    all[index] = row_from_json(j);
  }
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::ostringstream out;
  out << "mix,gpus,cost_per_hour,feasible,meets_constraints,samples_per_s,"
         "predicted_samples_per_s,samples_per_dollar,tokens_per_dollar,pareto,planning_s,error\n";
  for (const auto& r : rows) {
    std::string err = r.error;
    std::replace(err.begin(), err.end(), '"', '\'');
    out << '"' << r.mix << "\"," << r.gpus << ',' << r.cost_per_hour << ',' << r.feasible << ','
        << r.meets_constraints << ',' << r.samples_per_s << ',' << r.predicted_samples_per_s << ','
        << r.samples_per_dollar << ',' << r.tokens_per_dollar << ',' << r.pareto << ','
        << r.planning_s << ",\"" << err << "\"\n";
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

void write_sweep_file(const std::string& file, const SweepSpec& spec,
                      const std::vector<SweepRow>& rows) {
  const bool csv = file.ends_with(".csv");
  write_file_atomically(file, csv ? sweep_csv(rows) : sweep_json(spec, rows).dump(2) + "\n");
}

const std::vector<std::string>& sweep_sort_keys() {
  static const std::vector<std::string> keys{"tokens-per-dollar", "throughput", "cost", "mix"};
  return keys;
}

namespace {

// `text` cut to `width` characters with "..." when longer (narrow table only).
std::string clipped(const std::string& text, std::size_t width, bool wide) {
  if (wide || text.size() <= width) return text;
  return text.substr(0, width - 3) + "...";
}

// Millions of tokens per dollar: the magnitude a sweep of training clusters lands in.
std::string mega(double value) { return fixed(value / 1e6, 2); }

}  // namespace

std::string sweep_table(const std::vector<SweepRow>& rows, const SweepTableOptions& options) {
  const auto& keys = sweep_sort_keys();
  if (std::find(keys.begin(), keys.end(), options.sort) == keys.end())
    throw ValidationError("command line", "--sort", options.sort, "one of " + join_names(keys));
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Best first; infeasible mixes after every feasible one, in the sweep's order.
  const auto better = [&](std::size_t a, std::size_t b) {
    const SweepRow &x = rows[a], &y = rows[b];
    if (options.sort == "mix") return false;
    if (x.feasible != y.feasible) return x.feasible;
    if (!x.feasible) return false;
    if (options.sort == "throughput") return x.samples_per_s > y.samples_per_s;
    if (options.sort == "cost") return x.cost_per_hour < y.cost_per_hour;
    return x.tokens_per_dollar > y.tokens_per_dollar;
  };
  std::stable_sort(order.begin(), order.end(), better);

  std::vector<std::string> head{"mix", "gpus", "$/hour", "samples/s", "Mtokens/$", "pareto"};
  if (options.wide) head.insert(head.end(), {"planner est.", "samples/$", "planned in"});
  head.push_back("note");
  TextTable t(head);
  t.set_align(0, TextTable::Align::Left);
  t.set_align(head.size() - 1, TextTable::Align::Left);
  for (const auto i : order) {
    const auto& r = rows[i];
    std::string note = r.error;
    if (r.feasible && !r.meets_constraints) note = "below the throughput constraint";
    std::vector<std::string> cells{clipped(r.mix, 30, options.wide),
                                   std::to_string(r.gpus),
                                   fixed(r.cost_per_hour, 2),
                                   r.feasible ? fixed(r.samples_per_s, 2) : "-",
                                   r.feasible ? mega(r.tokens_per_dollar) : "-",
                                   r.pareto ? "*" : ""};
    if (options.wide)
      cells.insert(
          cells.end(),
          {r.predicted_samples_per_s > 0 ? fixed(r.predicted_samples_per_s, 2) : "-",
           r.feasible ? fixed(r.samples_per_dollar, 0) : "-", format_seconds(r.planning_s)});
    cells.push_back(clipped(note, 20, options.wide));
    t.add_row(cells);
  }
  return t.render();
}

std::string render_sweep_start(const SweepInput& input, int processes) {
  return "sweep " + input.spec.name + ": " + std::to_string(input.mixes.size()) +
         " mixes, strategy " + input.spec.strategy +
         (processes > 1 ? ", " + std::to_string(processes) + " MPI ranks" : "") + "\n";
}

std::string render_sweep_progress(std::size_t done, std::size_t total, const SweepRow& row,
                                  int rank, int processes) {
  return "sweep" + (processes > 1 ? " [rank " + std::to_string(rank) + "]" : std::string()) + " " +
         std::to_string(done) + "/" + std::to_string(total) + ": " + row.mix + ": " +
         (row.feasible ? fixed(row.samples_per_s, 2) + " samples/s" : "infeasible") + "\n";
}

std::string render_sweep_legend(const SweepSpec& spec) {
  return "* on the Pareto frontier of $/hour vs simulated samples/s (strategy " + spec.strategy +
         ")\n";
}

}  // namespace cephalo::planner

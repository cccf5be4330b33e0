// What-if sweeps over cluster mixes; see sweep.hpp.
#include "cephalo/planner/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/core/schedule.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/strategies.hpp"
#include "sweep_internal.hpp"

namespace cephalo::planner {

namespace {

Json row_json(const SweepRow& r, std::size_t index) {
  return {{"index", index},
          {"counts", r.counts},
          {"mix", r.mix},
          {"network", r.network},
          {"network_name", r.network_name},
          {"gpus", r.gpus},
          {"nodes", r.nodes},
          {"cost_per_hour", r.cost_per_hour},
          {"family", r.family},
          {"plan", r.plan},
          {"feasible", r.feasible},
          {"meets_constraints", r.meets_constraints},
          {"samples_per_s", r.samples_per_s},
          {"tokens_per_s", r.tokens_per_s},
          {"predicted_samples_per_s", r.predicted_samples_per_s},
          {"samples_per_dollar", r.samples_per_dollar},
          {"tokens_per_dollar", r.tokens_per_dollar},
          {"pareto", r.pareto},
          {"planning_s", r.planning_s},
          {"error", r.error}};
}

SweepRow row_from_json(const Json& j) {
  SweepRow r;
  r.counts = j.at("counts").get<std::vector<int>>();
  r.mix = j.at("mix").get<std::string>();
  r.network = j.at("network").get<int>();
  r.network_name = j.at("network_name").get<std::string>();
  r.gpus = j.at("gpus").get<int>();
  r.nodes = j.at("nodes").get<int>();
  r.cost_per_hour = j.at("cost_per_hour").get<double>();
  r.family = j.at("family").get<std::string>();
  r.plan = j.at("plan").get<std::string>();
  r.feasible = j.at("feasible").get<bool>();
  r.meets_constraints = j.at("meets_constraints").get<bool>();
  r.samples_per_s = j.at("samples_per_s").get<double>();
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  r.predicted_samples_per_s = j.at("predicted_samples_per_s").get<double>();
  r.samples_per_dollar = j.at("samples_per_dollar").get<double>();
  r.tokens_per_dollar = j.at("tokens_per_dollar").get<double>();
  r.planning_s = j.at("planning_s").get<double>();
  r.error = j.at("error").get<std::string>();
  return r;
}

}  // namespace

namespace detail {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// What `cephalo plan` would be asked for each row: the spec's keys as its flags.
PlanRequest plan_request(const SweepSpec& spec) {
  PlanRequest r;
  r.options.options_source = spec.file.string();  // the options are the spec's keys
  if (!spec.strategy.empty()) {
    r.options.strategy = spec.strategy;
    r.given.push_back("strategy");
  }
  r.sharding = spec.sharding;
  r.parallelism = spec.parallelism;
  r.split_finalists = spec.split_finalists;
  r.split_max_stages = spec.split_max_stages;
  r.use_all = true;  // the sweep's own mixes are the subsets; each row plans its GPUs
  return r;
}

}  // namespace detail

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

int mix_nodes(const SweepSpec& spec, const std::vector<int>& counts) {
  int nodes = 0;
  for (std::size_t i = 0; i < spec.pool.size(); ++i) {
    const int per =
        spec.pool[i].gpus_per_node > 0 ? spec.pool[i].gpus_per_node : spec.gpus_per_node;
    nodes += (counts[i] + per - 1) / per;
  }
  return nodes;
}

double mix_cost_per_hour(const SweepSpec& spec, const std::vector<int>& counts, int network) {
  double cost = 0;
  int gpus = 0;
  for (std::size_t i = 0; i < spec.pool.size(); ++i) {
    cost += counts[i] * spec.pool[i].price_per_hour;
    gpus += counts[i];
  }
  const SweepNetwork& n = spec.networks.at(static_cast<std::size_t>(network));
  return cost + gpus * n.price_per_gpu_hour + mix_nodes(spec, counts) * n.price_per_node_hour;
}

std::vector<SweepPoint> sweep_points(const SweepSpec& spec,
                                     const std::vector<std::vector<int>>& mixes) {
  std::vector<SweepPoint> out;
  out.reserve(mixes.size() * spec.networks.size());
  for (const auto& counts : mixes)
    for (std::size_t n = 0; n < spec.networks.size(); ++n)
      if (spec.max_cost_per_hour < 0 ||
          mix_cost_per_hour(spec, counts, static_cast<int>(n)) <= spec.max_cost_per_hour + 1e-9)
        out.push_back({counts, static_cast<int>(n)});
  return out;
}

Scenario mix_scenario(const SweepSpec& spec, const std::vector<int>& counts, int network) {
  const Json& nic = spec.networks.at(static_cast<std::size_t>(network)).nic;
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
                   {"nic", nic}};
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
  if (spec.networks.size() > 1)
    name += " on " + spec.networks[static_cast<std::size_t>(network)].name;
  Json doc = {{"name", spec.name + ": " + name},
              {"cluster", {{"name", name}, {"nodes", nodes}}},
              {"job", spec.job}};
  JsonReader reader(doc, spec.file.string() + " (mix " + name + ")");
  return parse_scenario(reader, costmodels::CatalogLookup::builtin(), spec.file.parent_path());
}

SweepRow evaluate_mix(const SweepSpec& spec, const std::vector<int>& counts, int network) {
  SweepRow row;
  row.counts = counts;
  row.network = network;
  row.network_name = spec.networks.at(static_cast<std::size_t>(network)).name;
  for (std::size_t i = 0; i < spec.pool.size(); ++i) {
    row.gpus += counts[i];
    if (counts[i] > 0) {
      row.mix += row.mix.empty() ? "" : " + ";
      row.mix += std::to_string(counts[i]) + "x " + spec.pool[i].spec.name;
    }
  }
  row.nodes = mix_nodes(spec, counts);
  row.cost_per_hour = mix_cost_per_hour(spec, counts, network);
  try {
    const Scenario s = mix_scenario(spec, counts, network);
    const PlanResult answer = answer_plan(s, detail::plan_request(spec));
    row.planning_s = answer.planning_s;
    row.family = to_string(answer.family());
    const std::string summary = plan_summary(answer);
    row.plan = summary.substr(0, summary.find('\n'));
    // Either family's prediction is the replay of its plan; its model time, the fast model's
    // (FSDP) or the estimate's (split).
    const double iteration_s = answer.predicted_iteration_s;
    const double estimate_s = answer.model_iteration_s;
    const bool oom = answer.simulated_oom;
    const std::string& oom_detail = answer.simulated_oom_detail;
    row.predicted_samples_per_s = estimate_s > 0 ? s.job.global_batch / estimate_s : 0.0;
    if (oom) {
      row.error = "simulated out of memory: " + oom_detail;
    } else {
      row.feasible = true;
      row.samples_per_s = s.job.global_batch / iteration_s;
      row.tokens_per_s = row.samples_per_s * s.job.sequence_length;
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

std::vector<SweepRow> evaluate_mixes(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                                     const SweepProgress& progress) {
  std::vector<SweepRow> rows;
  rows.reserve(points.size());
  for (const auto& p : points) {
    rows.push_back(evaluate_mix(spec, p.counts, p.network));
    if (progress) progress(rows.size(), points.size(), rows.back());
  }
  return rows;
}

SweepInput load_sweep(const std::filesystem::path& spec_file, const std::string& stack_file,
                      std::uint64_t max_mixes) {
  SweepInput in{load_sweep_spec(spec_file), {}, {}};
  if (!stack_file.empty()) set_stack(in.spec, stack_file);
  in.mixes = enumerate_mixes(in.spec, max_mixes);
  in.points = sweep_points(in.spec, in.mixes);
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
  const auto mine = dealt_mixes(input.points.size(), share.rank, share.size);
  std::vector<SweepPoint> my_points;
  for (auto i : mine) my_points.push_back(input.points[i]);
  const auto my_rows = evaluate_mixes(input.spec, my_points, progress);
  std::vector<SweepRow> rows;
  if (!share.gather && share.size == 1) {
    rows = my_rows;
  } else {
    const std::string text = rows_to_json(my_rows, mine).dump();
    const auto parts = share.gather ? share.gather(text) : std::vector<std::string>{text};
    if (share.rank != 0) return {};
    rows.resize(input.points.size());
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
  out << "mix,network,gpus,nodes,cost_per_hour,family,feasible,meets_constraints,samples_per_s,"
         "tokens_per_s,predicted_samples_per_s,samples_per_dollar,tokens_per_dollar,pareto,"
         "planning_s,plan,error\n";
  const auto quoted = [](std::string text) {
    std::replace(text.begin(), text.end(), '"', '\'');
    return '"' + text + '"';
  };
  for (const auto& r : rows) {
    out << quoted(r.mix) << ',' << quoted(r.network_name) << ',' << r.gpus << ',' << r.nodes << ','
        << r.cost_per_hour << ',' << r.family << ',' << r.feasible << ',' << r.meets_constraints
        << ',' << r.samples_per_s << ',' << r.tokens_per_s << ',' << r.predicted_samples_per_s
        << ',' << r.samples_per_dollar << ',' << r.tokens_per_dollar << ',' << r.pareto << ','
        << r.planning_s << ',' << quoted(r.plan) << ',' << quoted(r.error) << "\n";
  }
  return out.str();
}

Json sweep_json(const SweepSpec& spec, const std::vector<SweepRow>& rows) {
  Json networks = Json::array();
  for (const auto& n : spec.networks)
    networks.push_back({{"name", n.name},
                        {"nic", n.nic},
                        {"price_per_gpu_hour", n.price_per_gpu_hour},
                        {"price_per_node_hour", n.price_per_node_hour}});
  Json out = {
      {"sweep", spec.name},
      {"parallelism", spec.parallelism.empty() ? "open" : spec.parallelism},
      {"strategy", spec.strategy.empty() ? "open" : spec.strategy},
      {"sharding", spec.sharding.empty() ? "open" : spec.sharding},
      {"split_search",
       {{"finalists", spec.split_finalists}, {"max_pipeline_stages", spec.split_max_stages}}},
      {"networks", networks}};
  Json list = Json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) list.push_back(row_json(rows[i], i));
  out["mixes"] = list;
  return out;
}

namespace {

// ".csv", ".json" or "" (another ending): the format a sweep file's name asks for.
std::string sweep_file_format(const std::string& file) {
  std::string ext = std::filesystem::path(file).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".csv" || ext == ".json" ? ext : "";
}

}  // namespace

void check_sweep_file_name(const std::string& file, const std::string& source,
                           const std::string& option) {
  if (sweep_file_format(file).empty())
    throw ValidationError(source, option, file,
                          "a file name ending in .csv or .json: the ending picks the format "
                          "the rows are written in");
}

void write_sweep_file(const std::string& file, const SweepSpec& spec,
                      const std::vector<SweepRow>& rows) {
  check_sweep_file_name(file, "arguments", "output");
  const bool csv = sweep_file_format(file) == ".csv";
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
    throw ValidationError("command line", "--sort", options.sort,
                          "one of " + detail::join_names(keys));
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

  // The network column only when the sweep has more than one network option.
  bool networks = false;
  for (const auto& r : rows) networks = networks || r.network != rows.front().network;
  std::vector<std::string> head{"mix"};
  if (networks) head.push_back("network");
  head.insert(head.end(), {"gpus", "$/hour", "tokens/s", "Mtokens/$", "plan", "pareto"});
  if (options.wide)
    head.insert(head.end(), {"samples/s", "planner est.", "samples/$", "planned in"});
  const auto note_of = [&](const SweepRow& r) {
    std::string note = r.error;
    if (r.feasible && !r.meets_constraints) note = "below the throughput constraint";
    if (options.wide && note.empty()) note = r.plan;
    return note;
  };
  // The note column only when a row has one: a column empty on every row is one to read past.
  bool notes = false;
  for (const auto& r : rows) notes = notes || !note_of(r).empty();
  if (notes) head.push_back("note");
  TextTable t(head);
  t.set_align(0, TextTable::Align::Left);
  if (notes) t.set_align(head.size() - 1, TextTable::Align::Left);
  for (const auto i : order) {
    const auto& r = rows[i];
    // The mix and the network are whole in every table: they say which row is which, and
    // clipped ones read alike ("1x A100-80GB + 2x RTX-A60..." for every mix that begins so).
    // Only the note is clipped to keep the narrow table near 100 columns.
    std::vector<std::string> cells{r.mix};
    if (networks) cells.push_back(r.network_name);
    cells.insert(cells.end(), {std::to_string(r.gpus), fixed(r.cost_per_hour, 2),
                               r.feasible ? fixed(r.tokens_per_s, 0) : "-",
                               r.feasible ? mega(r.tokens_per_dollar) : "-",
                               r.family.empty() ? "-" : r.family, r.pareto ? "*" : ""});
    if (options.wide)
      cells.insert(
          cells.end(),
          {r.feasible ? fixed(r.samples_per_s, 2) : "-",
           r.predicted_samples_per_s > 0 ? fixed(r.predicted_samples_per_s, 2) : "-",
           r.feasible ? fixed(r.samples_per_dollar, 0) : "-", format_seconds(r.planning_s)});
    if (notes) cells.push_back(clipped(note_of(r), networks ? 16 : 18, options.wide));
    t.add_row(cells);
  }
  return t.render();
}

namespace {

// "parallelism open, strategy optimal": the plan options every row was planned with.
std::string plan_options_text(const SweepSpec& spec) {
  return "parallelism " + (spec.parallelism.empty() ? std::string("open") : spec.parallelism) +
         (spec.strategy.empty() ? std::string() : ", strategy " + spec.strategy) +
         (spec.sharding.empty() ? std::string() : ", sharding " + spec.sharding);
}

}  // namespace

std::string render_sweep_start(const SweepInput& input, int processes) {
  const std::size_t networks = input.spec.networks.size();
  return "sweep " + input.spec.name + ": " + std::to_string(input.mixes.size()) + " mixes" +
         (networks > 1 ? " x " + std::to_string(networks) + " networks = " +
                             std::to_string(input.points.size()) + " rows within the budget"
                       : std::string()) +
         ", " + plan_options_text(input.spec) + "; per row the split search goes to " +
         std::to_string(input.spec.split_max_stages) + " stages and replays its best " +
         std::to_string(input.spec.split_finalists) +
         (processes > 1 ? ", " + std::to_string(processes) + " MPI ranks" : "") + "\n";
}

std::string render_sweep_progress(std::size_t done, std::size_t total, const SweepRow& row,
                                  int rank, int processes) {
  return "sweep" + (processes > 1 ? " [rank " + std::to_string(rank) + "]" : std::string()) + " " +
         std::to_string(done) + "/" + std::to_string(total) + ": " + row.mix + ": " +
         (row.feasible ? fixed(row.samples_per_s, 2) + " samples/s" : "infeasible") + "\n";
}

std::string render_sweep_legend(const SweepSpec& spec) {
  return "* on the Pareto frontier of $/hour vs simulated throughput; plan: the family each row's "
         "plan chose (fsdp, or 3d: a split), as `cephalo plan` with " +
         plan_options_text(spec) + "\n";
}

}  // namespace cephalo::planner

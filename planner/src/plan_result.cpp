// The shared prediction of a plan, its table and its JSON; see plan_result.hpp.
#include "cephalo/planner/plan_result.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "cephalo/core/plan_nodes.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "plan_support.hpp"
#include "sharding_choice.hpp"
#include "split_plan.hpp"

namespace cephalo::planner {

using namespace detail;

bool PlanResult::fits() const {
  for (const auto& r : ranks)
    if (r.memory_bytes > r.usable_bytes) return false;
  return true;
}

void predict(const Scenario& s, const costmodels::CostModels& models, PlanResult& res) {
  ScenarioModel sm(s, models, res.plan.activation_checkpointing);
  res.ranks.clear();
  double tau = 0, sigma = 0;
  const double params = costmodels::total_parameters(s.job.model);
  double opt = 0;
  // Ranks alike (device, slowdown, plan row) predict alike: each distinct one is computed once
  // (predict_memory walks every unit; at 100k ranks that was most of planning).
  using Key = std::tuple<std::string, double, int, int, int, double>;
  struct Alike {
    RankPrediction p;
    double optimizer_s = 0;
  };
  std::map<Key, Alike> alike;
  for (const auto& r : res.plan.ranks) {
    const auto& d = sm.devices[r.rank];
    Key key{d.slot->spec.name, d.slot->slowdown, r.batch,
            r.micro_batch,     r.micro_batches,  r.state_share};
    auto [it, fresh] = alike.emplace(std::move(key), Alike{});
    RankPrediction& p = it->second.p;
    if (fresh) {
      p.gpu = d.slot->spec.name;
      const auto mem = costmodels::predict_memory(s.job, res.plan, r, d.slot->spec,
                                                  static_cast<int>(sm.devices.size()));
      p.memory_bytes = mem.total;
      p.usable_bytes = mem.usable;
      auto& table = sm.table(d);
      for (int size : r.micro_batch_sizes()) {
        p.compute_s += table.micro_batch(size);
        p.compute_per_layer_s += table.layer(size);
      }
      // The step over the rank's own share, as the simulator times it (optimal_solver.hpp).
      it->second.optimizer_s =
          models.compute->optimizer_time(d.slot->spec, s.job, params * r.state_share).seconds *
          d.slot->slowdown;
    }
    tau = std::max(tau, p.compute_s);
    sigma = std::max(sigma, r.state_share);
    opt = std::max(opt, it->second.optimizer_s);
    res.ranks.push_back(p);
    res.ranks.back().rank = r.rank;
  }
  // Communication as the plan will run it: even collectives, or its uneven variant (hybrid
  // plans below: their groups' collectives, never these over every rank).
  const int n = static_cast<int>(sm.devices.size());
  double comm = 0;
  if (n > 1 && !res.plan.sharding.hybrid()) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    const auto& job = s.job;
    const int units = costmodels::num_units(job.model);
    for (int u = 0; u < units; ++u) {
      if (u > 1 && u < units - 1) continue;  // layers are identical: count unit 1 L times
      const double count = (u == 1) ? job.model.num_layers : 1;
      const double pu = costmodels::phase_parameters(job.model, u);  // tied head: + embedding
      if (pu <= 0) continue;
      costmodels::CollectiveRequest ag;
      ag.kind = costmodels::CollectiveKind::AllGather;
      ag.training_state = true;
      ag.ranks = all;
      ag.uneven = res.plan.uneven_collective;
      costmodels::CollectiveRequest rs = ag;
      rs.kind = costmodels::CollectiveKind::ReduceScatter;
      for (const auto& r : res.plan.ranks) {
        ag.shard_bytes.push_back(r.state_share * pu * bytes_per_element(job.precision.compute));
        rs.shard_bytes.push_back(r.state_share * pu * bytes_per_element(job.precision.reduce));
      }
      comm += count * (2 * models.comm->collective(s.cluster, ag).seconds +
                       models.comm->collective(s.cluster, rs).seconds);
    }
  }
  // Hybrid: the slowest group's collectives plus the cross-group reductions.
  if (res.plan.sharding.hybrid()) comm = hybrid_comm_seconds(s, models, res.plan);
  res.predicted_comm_s = comm;
  res.predicted_optimizer_s = opt;
  res.predicted_iteration_s = std::max(comm, tau) + opt;
  res.model_iteration_s = res.predicted_iteration_s;
  res.rate = traces::throughput(s, res.plan, res.predicted_iteration_s);
  res.plan.predicted = Json::object();
  res.plan.predicted["iteration_time_s"] = res.predicted_iteration_s;
  res.plan.predicted["samples_per_s"] = s.job.global_batch / res.predicted_iteration_s;
  res.plan.predicted["comm_s"] = comm;
  res.plan.predicted["optimizer_s"] = opt;
  res.plan.predicted["model"] = "planner: max(comm, max compute) + optimizer step";
}

std::string runner_up_text(const std::string& label, double runner_s, double best_s) {
  const double slower = best_s > 0 ? runner_s / best_s - 1 : 0;
  return label + " simulated at " + format_seconds(runner_s) + ", " +
         (slower > 0.0005 ? fixed(100.0 * slower, 1) + " % slower"
                          : std::string("as fast; the first found is kept"));
}

namespace {

// Rank i's row prints as rank j's but for the rank number (plan row and prediction).
bool same_row(const PlanResult& res, int i, int j) {
  const auto& a = res.plan.ranks[static_cast<std::size_t>(i)];
  const auto& b = res.plan.ranks[static_cast<std::size_t>(j)];
  const auto& p = res.ranks[static_cast<std::size_t>(i)];
  const auto& q = res.ranks[static_cast<std::size_t>(j)];
  // Equal as printed (the numbers compared first; their text only when they differ).
  auto seconds = [](double u, double v) {
    return u == v || format_seconds(u) == format_seconds(v);
  };
  auto bytes = [](double u, double v) { return u == v || format_bytes(u) == format_bytes(v); };
  return a.gpu == b.gpu && a.batch == b.batch && a.micro_batch == b.micro_batch &&
         a.micro_batches == b.micro_batches &&
         (a.state_share == b.state_share || fixed(a.state_share, 4) == fixed(b.state_share, 4)) &&
         p.gpu == q.gpu && bytes(p.memory_bytes, q.memory_bytes) &&
         bytes(p.usable_bytes, q.usable_bytes) &&
         (p.memory_bytes > p.usable_bytes) == (q.memory_bytes > q.usable_bytes) &&
         seconds(p.compute_s, q.compute_s) && seconds(p.compute_per_layer_s, q.compute_per_layer_s);
}

bool compact_form(const Plan& plan, PlanForm form) {
  return form == PlanForm::Compact ||
         (form == PlanForm::Auto &&
          plan.ranks.size() > static_cast<std::size_t>(kCompactPlanAbove));
}

// An FSDP plan's text: the scenario's line, `table` (render_table) and, when the memory model
// finds a rank over capacity (PlanResult::fits), a warning.
std::string render_plan_text(const Scenario& scenario, const std::string& table, bool fits) {
  std::ostringstream out;
  out << "scenario " << scenario.name << ": " << scenario.job.model_name << ", sequence "
      << scenario.job.sequence_length << ", global batch " << scenario.job.global_batch << ", "
      << scenario.cluster.num_ranks() << " device(s)" << stack_label(scenario.job.implementation)
      << "\n";
  if (const std::string idle = idle_line(scenario.cluster); !idle.empty()) out << idle << "\n";
  out << table;
  if (!fits) out << "warning: the memory model finds this plan over capacity on some rank\n";
  return out.str();
}

// An FSDP plan's table: one row per run of consecutive ranks with equal rows (their rank
// range), or with `per_rank` one row per rank.
std::string render_table(const PlanResult& res, bool per_rank) {
  TextTable t({per_rank ? "rank" : "ranks", "gpu", "batch", "micro-batches x size", "state share",
               "memory / usable", "compute/layer", "compute"});
  const auto runs = equal_runs(static_cast<int>(res.plan.ranks.size()),
                               [&](int i, int j) { return !per_rank && same_row(res, i, j); });
  for (const auto& [begin, end] : runs) {
    const auto& r = res.plan.ranks[static_cast<std::size_t>(begin)];
    const auto& p = res.ranks[static_cast<std::size_t>(begin)];
    t.add_row({format_rank_range(r.rank, res.plan.ranks[static_cast<std::size_t>(end - 1)].rank),
               p.gpu, std::to_string(r.batch),
               std::to_string(r.micro_batches) + " x " + std::to_string(r.micro_batch),
               fixed(r.state_share, 4),
               format_bytes(p.memory_bytes) + " / " + format_bytes(p.usable_bytes) +
                   (p.memory_bytes > p.usable_bytes ? " OOM" : ""),
               format_seconds(p.compute_per_layer_s), format_seconds(p.compute_s)});
  }
  std::ostringstream out;
  out << t.render();
  // What the iteration adds to the rows (`cephalo simulate` of the plan shows each per rank).
  out << "compute: the rank's forward, recompute and backward (compute/layer: one layer's)\n"
         "a rank's iteration = compute + optimizer step + exposed communication + idle (waiting "
         "for slower ranks; `simulate` shows each)\n";
  out << "strategy " << res.plan.strategy << ": predicted iteration "
      << format_seconds(res.predicted_iteration_s) << " (" << traces::render_throughput(res.rate)
      << (res.simulated_iteration_s ? ", simulated" : "") << "; planner model "
      << format_seconds(res.model_iteration_s) << ": comm " << format_seconds(res.predicted_comm_s)
      << ", optimizer step " << format_seconds(res.predicted_optimizer_s) << "), "
      << to_string(res.plan.accumulation) << " accumulation, activation checkpointing "
      << to_string(res.plan.activation_checkpointing) << ", offload " << to_string(res.plan.offload)
      << (res.plan.even_shares()
              ? ", even shares"
              : ", uneven shares (" + to_string(res.plan.uneven_collective) + ")")
      << ", sharding " << describe(res.plan.sharding);
  if (res.simulated_oom) out << "\nthe simulator finds this plan out of memory";
  if (res.simulated_candidates > 0)
    out << "\nbest of " << res.simulated_candidates << " simulated candidates";
  out << "\n";
  return out.str();
}

// The prediction an FSDP plan's record carries as its "predicted": per-rank predictions as
// "ranks" or, compact, "rank_classes", and the iteration's figures.
Json prediction_json(const PlanResult& res, PlanForm form) {
  Json j;
  // Each rank's object filled key by key: at 100k ranks an initializer list per rank (a
  // temporary [key, value] array per member) and a copy of the array cost more than planning.
  const bool compact = compact_form(res.plan, form);
  const int n = static_cast<int>(res.ranks.size());
  const auto runs = equal_runs(n, [&](int a, int b) {
    if (!compact) return false;
    const auto& p = res.ranks[static_cast<std::size_t>(a)];
    const auto& q = res.ranks[static_cast<std::size_t>(b)];
    return p.gpu == q.gpu && p.memory_bytes == q.memory_bytes && p.usable_bytes == q.usable_bytes &&
           p.compute_s == q.compute_s && p.compute_per_layer_s == q.compute_per_layer_s;
  });
  Json ranks = Json::array();
  ranks.get_ref<Json::array_t&>().reserve(runs.size());
  for (const auto& [begin, end] : runs) {
    const auto& p = res.ranks[static_cast<std::size_t>(begin)];
    Json& r = ranks.emplace_back(Json::value_t::object);
    if (compact)
      r["ranks"] = Json::array({p.rank, res.ranks[static_cast<std::size_t>(end - 1)].rank});
    else
      r["rank"] = p.rank;
    r["gpu"] = p.gpu;
    r["memory_bytes"] = p.memory_bytes;
    r["usable_bytes"] = p.usable_bytes;
    r["compute_s"] = p.compute_s;
    r["compute_per_layer_s"] = p.compute_per_layer_s;
  }
  j[compact ? "rank_classes" : "ranks"] = std::move(ranks);
  j["predicted_iteration_s"] = res.predicted_iteration_s;
  traces::add_predicted_throughput(j, res.rate);
  j["model_iteration_s"] = res.model_iteration_s;
  j["predicted_comm_s"] = res.predicted_comm_s;
  j["predicted_optimizer_s"] = res.predicted_optimizer_s;
  j["planning_s"] = res.planning_s;
  j["simulated_iteration_s"] =
      res.simulated_iteration_s ? Json(*res.simulated_iteration_s) : Json(nullptr);
  j["simulated_candidates"] = res.simulated_candidates;
  j["fits"] = res.fits();
  j["simulated_oom"] = res.simulated_oom;
  // The search's log (res.note) is the record's "explanation" (plan_explanation), once.
  j["runner_up"] = res.runner_up;
  j["warnings"] = res.warnings;
  return j;
}

// An FSDP plan's record: the Plan with prediction_json as its "predicted".
Json fsdp_plan_record(const PlanResult& res, PlanForm form) {
  Json predicted = prediction_json(res, form);
  Json record = cephalo::to_json(res.plan, form);
  record["predicted"] = std::move(predicted);
  return record;
}

}  // namespace

std::string to_string(PlanFamily family) { return family == PlanFamily::Split ? "3d" : "fsdp"; }

namespace {

// "left idle: ...": which nodes the plan leaves out, both times, and how to force them in.
std::string idle_advice_line(const IdleAdvice& w) {
  std::string nodes;
  constexpr std::size_t kNamed = 4;
  for (std::size_t i = 0; i < w.nodes.size() && i < kNamed; ++i)
    nodes += (i ? ", " : "") + w.nodes[i];
  if (w.nodes.size() > kNamed) nodes += ", ... (" + std::to_string(w.nodes.size()) + " nodes)";
  return "left idle: " + w.gpus + " (ranks " + format_index_ranges(w.ranks) + ", nodes " + nodes +
         "): this plan of the other nodes simulates at " + format_seconds(w.without_s) +
         " against " + format_seconds(w.with_all_s) +
         " for the best plan of every GPU (its \"nodes\" " + format_index_ranges(w.used_nodes) +
         "); --use-all plans every GPU";
}

}  // namespace

std::string render_plan(const Scenario& scenario, const PlanResult& res, bool per_rank) {
  if (res.split) return render_split_plan(res);
  return render_plan_text(scenario, render_table(res, per_rank), res.fits());
}

std::string plan_summary(const PlanResult& r) {
  std::ostringstream out;
  out << "chosen: ";
  if (r.split)
    out << "the split " << r.split->search.estimate.split;
  else
    out << "the FSDP plan of strategy " << r.plan.strategy << " (" << to_string(r.plan.accumulation)
        << " / " << to_string(r.plan.activation_checkpointing) << " / offload "
        << to_string(r.plan.offload) << ", sharding " << describe(r.plan.sharding) << ")";
  out << ", iteration " << format_seconds(r.predicted_iteration_s)
      << (r.simulated_iteration_s ? " simulated" : " modelled") << " ("
      << traces::render_throughput(r.rate) << ")\n";
  const std::string& runner_up = !r.why.empty() ? r.why : r.runner_up;
  out << "runner-up: " << (runner_up.empty() ? "none (no other candidate was compared)" : runner_up)
      << "\n";
  if (r.faster_without) out << idle_advice_line(*r.faster_without) << "\n";
  out << "planned in " << format_seconds(r.planning_s)
      << "; the full search log: --explain (or the JSON record's predicted.explanation)\n";
  return out.str();
}

std::string plan_explanation(const PlanResult& r) {
  std::ostringstream out;
  out << (r.note.empty() ? "strategy " + r.plan.strategy + ": one candidate" : r.note);
  if (!r.why.empty()) out << "; " << r.why;
  if (!r.subsets.empty()) out << "; " << r.subsets;
  return out.str();
}

Json plan_record(const PlanResult& r, PlanForm form) {
  Json record = r.split ? split_plan_record(r, form) : fsdp_plan_record(r, form);
  record["predicted"]["explanation"] = plan_explanation(r);
  record["predicted"]["planning_s"] = r.planning_s;
  if (const auto& w = r.faster_without)
    record["predicted"]["faster_without"] = {
        {"idle_nodes", w->nodes},     {"idle_ranks", w->ranks},
        {"idle_gpus", w->gpus},       {"with_all_s", w->with_all_s},
        {"without_s", w->without_s},  {"without_plan", w->without_plan},
        {"why", idle_advice_line(*w)}};
  return record;
}

}  // namespace cephalo::planner

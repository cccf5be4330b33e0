// The planner's answer is the simulator's: on every shipped scenario, for every strategy and a
// sample of the schedule flags (--micro-batch, --accumulation, --activation-checkpointing,
// --sharding, --group-size, --offload), the prediction `cephalo plan` writes equals an
// independent replay of the written plan (parsed back from its JSON, every rank's ops replayed,
// as `cephalo simulate --ops` does), and `optimal` simulates no slower than `even` or
// `proportional` on the same flags. And the default `optimal` plan (no schedule flag) is within
// 1 % of the best plan found by fixing the flags one combination at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/memory_model.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/sim/replay.hpp"
#include "cephalo/traces/training_graph.hpp"

namespace cephalo::planner {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(CEPHALO_SOURCE_DIR) / "scenarios"))
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// One combination of the schedule flags, as the CLI takes them ("" / 0: not given).
struct Flags {
  int micro_batch = 0;
  std::string accumulation, checkpointing, sharding, offload = "auto";
  int group_size = 0;
  std::string label() const {
    std::string l;
    auto add = [&l](const std::string& s) { l += (l.empty() ? "" : " ") + s; };
    if (micro_batch) add("--micro-batch " + std::to_string(micro_batch));
    if (!accumulation.empty()) add("--accumulation " + accumulation);
    if (!checkpointing.empty()) add("--activation-checkpointing " + checkpointing);
    if (!sharding.empty()) add("--sharding " + sharding);
    if (group_size) add("--group-size " + std::to_string(group_size));
    if (offload != "auto") add("--offload " + offload);
    return l.empty() ? "(defaults)" : l;
  }
};

PlannerOptions options_of(const std::string& strategy, const Flags& f) {
  PlannerOptions o;
  o.strategy = strategy;
  o.micro_batch = f.micro_batch;
  o.sharding = f.sharding;
  o.group_nodes = f.group_size;
  o.offload = f.offload;
  set_schedule_text(o, f.accumulation, f.checkpointing);
  return o;
}

// The sample of the flag space: every dimension alone, the examples (micro-batches
// with standard and no_sync), and pairs that interact (checkpointing with accumulation, offload
// with micro-batches, hybrid groups with a fixed schedule).
Flags flags(int micro_batch, std::string accumulation, std::string checkpointing,
            std::string sharding = "", std::string offload = "auto", int group_size = 0) {
  Flags f;
  f.micro_batch = micro_batch;
  f.accumulation = std::move(accumulation);
  f.checkpointing = std::move(checkpointing);
  f.sharding = std::move(sharding);
  f.offload = std::move(offload);
  f.group_size = group_size;
  return f;
}

std::vector<Flags> flag_sample(const Scenario& s) {
  std::vector<Flags> out;
  out.push_back({});
  out.push_back(flags(1, "standard", ""));
  out.push_back(flags(2, "standard", ""));
  out.push_back(flags(1, "no_sync", ""));
  out.push_back(flags(0, "layered", ""));
  out.push_back(flags(0, "", "none"));
  out.push_back(flags(0, "standard", "every:2"));
  out.push_back(flags(1, "", "full", "", "host"));
  out.push_back(flags(0, "", "auto", "", "none"));
  if (s.cluster.nodes.size() > 1) {
    out.push_back(flags(0, "", "", "hybrid", "auto", 1));
    out.push_back(flags(0, "layered", "full", "auto"));
    out.push_back(flags(1, "standard", "", "full"));
  }
  return out;
}

// `cephalo simulate --ops` of the plan `cephalo plan -o` writes: the record parsed back and
// every rank's ops replayed (no class replay).
double simulate_written(const Scenario& s, const PlanResult& res) {
  const Json record = plan_record(res);
  const Json text = parse_json_text(record.dump(2), "<written plan>");
  JsonReader reader(text, "<written plan>");
  const Plan plan = parse_plan(reader);
  validate_plan_for(plan, s, "<written plan>");
  const auto models = costmodels::make_cost_models(s);
  const auto graph = traces::build_training_graph(plan, s);
  sim::SimOptions opt;
  return sim::simulate(graph, s, plan, *models.compute, *models.comm, opt).report.iteration_time_s;
}

TEST(PlanAnswer, ThePredictionIsTheSimulationOfTheWrittenPlan) {
  int checked = 0, refused = 0;
  double worst = 0;
  std::string worst_label;
  for (const auto& file : shipped_scenarios()) {
    const Scenario s = costmodels::load_scenario(file);
    for (const Flags& f : flag_sample(s)) {
      std::map<std::string, double> simulated;  // strategy -> replay of its plan
      std::map<std::string, Offload> offload;   // strategy -> its plan's offload
      for (const std::string& strategy : strategy_names()) {
        const std::string label =
            fs::path(file).filename().string() + " --strategy " + strategy + " " + f.label();
        std::optional<PlanResult> res;
        try {
          res = make_plan(s, options_of(strategy, f));
        } catch (const InfeasibleError&) {
          ++refused;
          continue;
        } catch (const ValidationError&) {  // e.g. cephalo with auto checkpointing
          ++refused;
          continue;
        }
        ASSERT_TRUE(res->simulated_iteration_s) << label;
        const double sim = simulate_written(s, *res);
        const double rel = std::abs(res->predicted_iteration_s - sim) / sim;
        if (rel > worst) {
          worst = rel;
          worst_label = label;
        }
        // The replay of the written plan is the prediction (the class replay equals the full
        // one; link sharing is on in both, so the tighter bound holds here).
        EXPECT_LE(rel, 0.005) << label << ": predicted " << res->predicted_iteration_s
                              << " s, simulated " << sim << " s";
        if (!res->simulated_oom) {
          simulated[strategy] = sim;
          offload[strategy] = res->plan.offload;
        }
        ++checked;
      }
      if (simulated.count("optimal")) {
        for (const char* other : {"even", "proportional"}) {
          // even and proportional never offload (`--offload` is optimal's and search's): with
          // --offload host their plans are not under the same flags.
          if (!simulated.count(other) || offload[other] != offload["optimal"]) continue;
          EXPECT_LE(simulated["optimal"], simulated[other] * (1 + 1e-9))
              << fs::path(file).filename().string() << " " << f.label() << ": optimal "
              << simulated["optimal"] << " s, " << other << " " << simulated[other] << " s";
        }
      }
    }
  }
  std::cout << checked << " plans checked, " << refused << " refused (infeasible or invalid); "
            << "worst |predicted - simulated| / simulated " << worst << " (" << worst_label
            << ")\n";
  EXPECT_GT(checked, 100);
}

TEST(PlanAnswer, TheDefaultOptimalPlanIsWithinOnePercentOfTheBestFixedFlags) {
  for (const auto& file : shipped_scenarios()) {
    const Scenario s = costmodels::load_scenario(file);
    const std::string name = fs::path(file).filename().string();
    const PlanResult def = make_plan(s, options_of("optimal", {}));
    ASSERT_FALSE(def.simulated_oom) << name;
    // The cost model chooses each uneven collective's variant (auto); optimal adds no choice.
    EXPECT_EQ(def.plan.uneven_collective, UnevenCollective::Auto) << name;
    double best = def.predicted_iteration_s;
    std::string best_label = "(defaults)";
    std::vector<std::string> shardings = {"full"};
    if (s.cluster.nodes.size() > 1) shardings.push_back("auto");
    for (const char* acc : {"layered", "standard", "no_sync"})
      for (const char* ckpt : {"none", "every:4", "every:3", "every:2", "full"})
        for (const std::string& sharding : shardings)
          for (const char* offload : {"none", "host"}) {
            if (std::string(offload) == "host" && std::string(ckpt) != "full") continue;
            const Flags f = flags(0, acc, ckpt, sharding, offload);
            try {
              const PlanResult r = make_plan(s, options_of("optimal", f));
              if (!r.simulated_oom && r.predicted_iteration_s < best) {
                best = r.predicted_iteration_s;
                best_label = f.label();
              }
            } catch (const InfeasibleError&) {
            }
          }
    std::cout << name << ": default " << def.predicted_iteration_s << " s ("
              << to_string(def.plan.accumulation) << ", "
              << to_string(def.plan.activation_checkpointing) << ", offload "
              << to_string(def.plan.offload) << ", sharding " << describe(def.plan.sharding)
              << "), best fixed " << best << " s (" << best_label << ")\n";
    EXPECT_LE(def.predicted_iteration_s, best * 1.01) << name << ": best " << best_label;
  }
}

// `auto` checkpointing searches periods, not just every:2: even and proportional take the least
// recompute that fits (none, else selective, else the largest period k with which every rank
// fits, else full), and optimal solves and replays none, selective, that period, 4, 3, 2 and
// full.
TEST(PlanAnswer, AutoCheckpointingSearchesThePeriodsAndTheOneAtWhichMemoryJustFits) {
  // GPT-2.7B with equal shares over H100s, A100s and L4s: no checkpointing does not fit the L4s.
  const Scenario mix = costmodels::load_scenario(std::string(CEPHALO_SOURCE_DIR) +
                                                 "/scenarios/modern-mix-gpt2.7b.json");
  const int layers = mix.job.model.num_layers;
  const PlanResult even = make_plan(mix, options_of("even", flags(0, "", "auto")));
  const auto& ck = even.plan.activation_checkpointing;
  ASSERT_EQ(ck.kind, ActivationCheckpointing::Kind::Every) << to_string(ck);
  EXPECT_GT(ck.every, 2);  // more than every:2 fits here
  EXPECT_NO_THROW(make_plan(mix, options_of("even", flags(0, "", to_string(ck)))));
  // The largest period that fits: one more does not (k = L checkpoints layer 1 alone).
  if (ck.every < layers) {
    EXPECT_THROW(
        make_plan(mix, options_of("even", flags(0, "", "every:" + std::to_string(ck.every + 1)))),
        InfeasibleError);
  }
  // optimal on default.json (GPT-2.7B over L4s and P40s, layered): the periods are candidates.
  const Scenario s =
      costmodels::load_scenario(std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json");
  const PlanResult opt = make_plan(s, options_of("optimal", flags(0, "layered", "")));
  for (const std::string k : {"none", "selective", "every:4", "every:3", "every:2", "full"})
    EXPECT_NE(opt.note.find("layered / " + k + " / offload none"), std::string::npos)
        << k << ": " << opt.note;
}

// A CPU rank runs no CUDA context, no NCCL and no caching allocator: the planners judge its fit
// with the memory predict_memory reports for it, not with a GPU's reserves. The CPU ranks here
// get just the memory the even plan needs (plus the planners' headroom), which would not hold a
// GPU runtime's reserves on top: every strategy must still plan it, within that memory.
TEST(PlanAnswer, ACpuRankFitsWithTheMemoryPredictMemoryReportsForIt) {
  Scenario s =
      costmodels::load_scenario(std::string(CEPHALO_SOURCE_DIR) + "/scenarios/cpu-2rank.json");
  const int n = s.cluster.num_ranks();
  const PlanResult roomy = make_plan(s, options_of("even", {}));
  double need = 0;
  for (const auto& r : roomy.plan.ranks) {
    const auto& spec = s.cluster.ranks()[r.rank].slot->spec;
    ASSERT_FALSE(costmodels::runs_gpu_runtime(spec));
    const auto mem = costmodels::predict_memory(s.job, roomy.plan, r, spec, n);
    EXPECT_EQ(mem.term("cuda_context"), 0.0);
    EXPECT_EQ(mem.term("nccl_reserve"), 0.0);
    EXPECT_EQ(mem.term("fragmentation"), 0.0);
    need = std::max(need, mem.total);
  }
  // The planners keep 128 MiB of headroom below usable; 64 MiB more is far less than a GPU
  // runtime's reserves, so a fit judged with them fails.
  const double tight = need + 192.0 * 1024 * 1024;
  ASSERT_GT(need + costmodels::runtime_reserve_bytes(true, n), tight);
  s.cluster.nodes.edit([&](std::vector<Node>& nodes) {
    for (auto& node : nodes)
      for (auto& slot : node.devices) slot.spec.memory_bytes = tight;
  });
  for (const std::string strategy : {"even", "proportional", "optimal"}) {
    SCOPED_TRACE(strategy);
    const PlanResult res = make_plan(s, options_of(strategy, {}));
    EXPECT_FALSE(res.simulated_oom);
    ASSERT_EQ(res.ranks.size(), res.plan.ranks.size());
    for (std::size_t i = 0; i < res.plan.ranks.size(); ++i) {
      const auto& r = res.plan.ranks[i];
      const auto& spec = s.cluster.ranks()[r.rank].slot->spec;
      const auto mem = costmodels::predict_memory(s.job, res.plan, r, spec, n);
      EXPECT_DOUBLE_EQ(res.ranks[i].memory_bytes, mem.total) << "rank " << r.rank;
      EXPECT_LE(mem.total, mem.usable) << "rank " << r.rank;
    }
    // even keeps the roomy plan's micro-batches: the tight memory is what they need.
    if (strategy == "even") {
      for (std::size_t i = 0; i < res.plan.ranks.size(); ++i)
        EXPECT_EQ(res.plan.ranks[i].micro_batch, roomy.plan.ranks[i].micro_batch);
    }
  }
}

}  // namespace
}  // namespace cephalo::planner

// Reading a sweep spec (the keys: scenarios/README.md, "Sweep spec keys"); see sweep.hpp.
#include <algorithm>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/planner/plan_request.hpp"
#include "cephalo/planner/strategies.hpp"
#include "cephalo/planner/sweep.hpp"
#include "sweep_internal.hpp"

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

std::vector<SweepNetwork> read_networks(JsonReader list) {
  if (!list.is_array() || list.size() == 0)
    list.fail("a non-empty array of network options {\"name\", \"nic\", \"price_per_node_hour\"}");
  std::vector<SweepNetwork> out;
  for (auto& e : list.elements()) {
    SweepNetwork n;
    n.name = e.name("name");
    for (const auto& other : out)
      if (other.name == n.name)
        e.child("name").fail_value("\"" + n.name + "\"", "a name no other network option has");
    n.nic = link_json(e.child("nic"));
    // One price basis per option: a NIC is bought per node, a network tier per GPU-hour.
    if (e.has("price_per_gpu_hour") && e.has("price_per_node_hour"))
      e.child("price_per_node_hour")
          .fail("no price_per_node_hour beside price_per_gpu_hour (one price basis per option)");
    for (const char* key : {"price_per_gpu_hour", "price_per_node_hour"})
      if (auto v = e.optional_child(key); v && !(v->as_number() >= 0))
        v->fail("a price >= 0 in USD per hour");
    n.price_per_gpu_hour = e.number_or("price_per_gpu_hour", 0);
    n.price_per_node_hour = e.number_or("price_per_node_hour", 0);
    e.finish();
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace

SweepSpec load_sweep_spec(const std::filesystem::path& file) {
  const Json doc = read_json_file(file);
  JsonReader root(doc, file.string());
  if (!root.is_object()) root.fail("a sweep spec object with \"pool\", \"node\" and \"job\"");
  SweepSpec spec;
  spec.file = file;
  spec.name = root.name_or("name", file.stem().string());
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
    // The counts swept are min_count, min_count + step, ... up to max_count: a step that skips
    // max_count would drop the count the spec names as its largest without a word.
    if (const int span = p.max_count - p.min_count; span % p.step != 0)
      e.child("step").fail("a step dividing max_count - min_count (" + std::to_string(span) +
                           "), so that the counts " + std::to_string(p.min_count) + ", " +
                           std::to_string(p.min_count) + " + step, ... reach max_count " +
                           std::to_string(p.max_count) + " (with this step the largest is " +
                           std::to_string(p.min_count + span / p.step * p.step) + ")");
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
  // The network: one NIC for every row (node.nic), or options swept with their prices.
  auto networks = root.optional_child("networks");
  if (networks && node.has("nic"))
    node.child("nic").fail("no node.nic beside \"networks\" (give each option's nic there)");
  if (networks) {
    spec.networks = read_networks(*networks);
  } else {
    SweepNetwork one;
    one.nic = link_json(node.child("nic"));
    one.name = one.nic.contains("bandwidth") && one.nic["bandwidth"].is_string()
                   ? one.nic["bandwidth"].get<std::string>()
                   : "nic";
    spec.networks.push_back(std::move(one));
  }
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
  if (root.has("strategy")) {
    spec.strategy = root.string("strategy");
    const auto& names = strategy_names();
    if (std::find(names.begin(), names.end(), spec.strategy) == names.end())
      root.child("strategy")
          .fail_value("\"" + spec.strategy + "\"", "one of " + detail::join_names(names));
  }
  if (root.has("parallelism"))
    spec.parallelism = root.child("parallelism").as_enum({"fsdp", "3d", "auto"});
  if (root.has("sharding"))
    spec.sharding = root.child("sharding").as_enum({"full", "hybrid", "auto", "optimizer", "none"});
  if (auto search = root.optional_child("split_search")) {
    // The row's split search, bounded by default (sweep.hpp); plan's own is 8 and 64.
    spec.split_finalists =
        static_cast<int>(search->integer_or("finalists", kSweepSplitFinalists, 1, 64));
    spec.split_max_stages =
        static_cast<int>(search->integer_or("max_pipeline_stages", kSweepSplitMaxStages, 1, 1024));
    search->finish();
  }
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
  for (std::size_t n = 0; n < spec.networks.size(); ++n) {
    try {
      mix_scenario(spec, one, static_cast<int>(n));
    } catch (const ValidationError& e) {
      const std::string nic = root.has("networks") ? "$.networks[" + std::to_string(n) + "].nic"
                                                   : std::string("$.node");
      throw ValidationError(file.string(),
                            nic + " / $.pool[*].intra_link / $.job (" + e.json_path() + ")",
                            e.value(), e.expected());
    }
  }
  // The plan options as `cephalo plan` checks them (an FSDP strategy with parallelism 3d,
  // a split's sharding with FSDP plans), once here rather than in every row.
  const PlanRequest request = detail::plan_request(spec);
  check_request(request);
  if (request.parallelism == "fsdp") fsdp_options(request);
  if (request.parallelism == "3d") split_options(request);
  return spec;
}

}  // namespace cephalo::planner
